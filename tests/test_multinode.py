"""Issue 27 (CPU, gloo): two "nodes" as separate process trees on 127.0.0.1. TP=4 over them equals
TP=1, launched by metainfer (`--headless` on node 1) or by `torchrun` twice; a node that never joins
is named; a node killed mid-request is reported by node 0; the server on node 0 serves the openai
client, and stops cleanly when node 1 dies; node 0 killed ends node 1."""

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from metainfer import LLM, SamplingParams
from metainfer.distributed.parallel import free_port
from metainfer.distributed.workers import WorkerDied
from test_generate_vs_hf import random_prompts, GREEDY


def headless(ckpt, port: int, tp: int = 4) -> subprocess.Popen:
    "Node 1: `metainfer serve --headless`, in its own process tree."
    cmd = [sys.executable, "-m", "metainfer", "serve", str(ckpt), "--headless", "--nnodes", "2"]
    cmd += ["--node-rank", "1", "--dist-init-addr", f"127.0.0.1:{port}", "-tp", str(tp)]
    cmd += ["--device", "cpu"]
    return subprocess.Popen(
        cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def node0(ckpt, port: int, tp: int = 4, **kw) -> LLM:
    return LLM(
        ckpt,
        dtype="float32",
        device="cpu",
        tensor_parallel_size=tp,
        nnodes=2,
        node_rank=0,
        dist_init_addr=f"127.0.0.1:{port}",
        **kw,
    )


def tree_gone(p: subprocess.Popen, timeout: float = 20) -> bool:
    "Whether `p` and its process group end within `timeout` (each killed afterwards if not)."
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        return False
    try:
        os.killpg(p.pid, 0)
    except ProcessLookupError:
        return True
    time.sleep(2)
    alive = [q for q in psutil.process_iter() if _pgid(q) == p.pid]
    return not [q for q in alive if q.status() != psutil.STATUS_ZOMBIE]


def _pgid(q):
    try:
        return os.getpgid(q.pid)
    except (ProcessLookupError, psutil.NoSuchProcess):
        return None


@pytest.mark.parametrize("preset", ["qwen3-tiny", "deepseek-v2-tiny"])
def test_tp4_over_two_nodes_equals_tp1(preset, checkpoints):
    "2 ranks a node (shared memory within node 0, the store to node 1); DeepSeek with EP=4."
    ckpt = checkpoints(preset, **({"perturb_constants": True} if "deepseek" in preset else {}))
    vocab = 1024 if "deepseek" in preset else 151643
    prompts = random_prompts(8, seed=27, vocab=vocab, lo=3, hi=30)
    port = free_port()
    node1 = headless(ckpt, port)
    with node0(ckpt, port) as llm:
        spanned = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]
    assert tree_gone(node1) and node1.returncode == 0, node1.stdout.read()
    with LLM(ckpt, dtype="float32", device="cpu") as llm:
        tp1 = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]
    assert spanned == tp1
    assert not mp.active_children()


def test_a_node_that_never_joins_is_named(checkpoints):
    ckpt = checkpoints("qwen3-tiny")
    start = time.monotonic()
    with pytest.raises(Exception, match=r"node 1 \(ranks 2, 3\) did not join"):
        node0(ckpt, free_port(), dist_timeout=3)
    assert time.monotonic() - start < 30
    assert not mp.active_children()


def test_a_killed_node_is_reported(checkpoints):
    "kill -9 of node 1's process tree mid-request: node 0 names node 1 within 10 s."
    ckpt = checkpoints("qwen3-tiny")
    port = free_port()
    node1 = headless(ckpt, port)
    llm = node0(ckpt, port)
    llm.generate([[1, 2, 3]], GREEDY, use_tqdm=False)
    threading.Timer(1.0, lambda: os.killpg(node1.pid, signal.SIGKILL)).start()
    start = time.monotonic()
    with pytest.raises(WorkerDied, match=r"node 1 \(ranks 2, 3\)"):
        for _ in range(100):
            llm.generate([[4, 5, 6]] * 4, GREEDY, use_tqdm=False)
    assert time.monotonic() - start < 1.0 + 10
    llm.shutdown()
    assert not mp.active_children()
    node1.wait(10)


TORCHRUN_SCRIPT = """
import json, sys
from metainfer import LLM, SamplingParams
prompts = json.load(open(sys.argv[2]))
llm = LLM(sys.argv[1], dtype="float32", device="cpu", tensor_parallel_size=4)
outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True))
json.dump([o.outputs[0].token_ids for o in outs], open(sys.argv[3], "w"))
llm.shutdown()
"""


@pytest.mark.parametrize("preset", ["qwen3-tiny", "deepseek-v2-tiny"])
def test_torchrun_started_twice_equals_tp1(preset, checkpoints, tmp_path):
    "`torchrun --nnodes 2 --nproc-per-node 2` on each of two nodes (its static rendezvous); EP=4."
    ckpt = checkpoints(preset, **({"perturb_constants": True} if "deepseek" in preset else {}))
    vocab = 1024 if "deepseek" in preset else 151643
    prompts = random_prompts(8, seed=28, vocab=vocab, lo=3, hi=30)
    script, inp, out = tmp_path / "run.py", tmp_path / "prompts.json", tmp_path / "out.json"
    script.write_text(TORCHRUN_SCRIPT)
    inp.write_text(json.dumps(prompts))
    port = free_port()

    def torchrun(node: int) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
        cmd += ["--node-rank", str(node), "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
        cmd += ["--master-port", str(port), str(script), str(ckpt), str(inp), str(out)]
        return subprocess.Popen(
            cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    trees = [torchrun(0), torchrun(1)]
    for p in trees:
        assert tree_gone(p, timeout=240) and p.returncode == 0, p.stdout.read()[-3000:]
    with LLM(ckpt, dtype="float32", device="cpu") as llm:
        tp1 = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]
    assert json.loads(out.read_text()) == tp1


def serve_node0(port: int) -> tuple[subprocess.Popen, str]:
    "`metainfer serve` (the embedded tiny Qwen3) as node 0 of two, TP=2; its URL once healthy."
    cmd = [sys.executable, "-m", "metainfer", "serve", "--port", "0", "--device", "cpu"]
    cmd += ["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", f"127.0.0.1:{port}"]
    cmd += ["-tp", "2", "--max-model-len", "256", "--log-level", "warning"]
    p = subprocess.Popen(
        cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    line, deadline = "", time.monotonic() + 180
    while "serving" not in line and time.monotonic() < deadline and p.poll() is None:
        line = p.stdout.readline()
    assert "serving" in line, f"the server did not start (rc {p.poll()})"
    threading.Thread(target=p.stdout.read, daemon=True).start()  # keep the pipe from filling
    return p, line.split(" on ")[1].split()[0]


def headless_default(port: int) -> subprocess.Popen:
    "Node 1 of `serve_node0`'s group: `metainfer serve --headless` (the embedded model)."
    cmd = [sys.executable, "-m", "metainfer", "serve", "--headless", "--nnodes", "2"]
    cmd += ["--node-rank", "1", "--dist-init-addr", f"127.0.0.1:{port}", "-tp", "2"]
    cmd += ["--device", "cpu", "--max-model-len", "256"]
    return subprocess.Popen(
        cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def health_until_exit(server: subprocess.Popen, url: str, since: float) -> list[int]:
    "`/health`'s answers every 50 ms until `server` exits (at most 30 s after `since`)."
    import httpx

    health = []
    while server.poll() is None and time.monotonic() - since < 30:
        try:
            health.append(httpx.get(f"{url}/health", timeout=0.5).status_code)
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    return health


def kill_trees(*procs: subprocess.Popen) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_server_spanning_two_nodes_then_node1_killed():
    """Acceptance 4, then 2 through the server: the openai client gets TP=1's greedy text from
    a server whose TP=4 spans two nodes; kill -9 of node 1 mid-stream ends the stream with an
    error, `/health` says 503 and the server exits non-zero within 10 s; no process is left."""
    import openai
    from metainfer.testing import default_model_dir

    port = free_port()
    node1 = headless_default(port)
    server, url = serve_node0(port)
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=60)
        name = client.models.list().data[0].id
        prompt = "And God said, Let there be light"
        got = client.completions.create(model=name, prompt=prompt, max_tokens=32, temperature=0)
        chat = client.chat.completions.create(
            model=name,
            messages=[{"role": "user", "content": "Who made the heaven?"}],
            max_tokens=16,
            temperature=0,
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in chat if c.choices)
        with LLM(str(default_model_dir()), device="cpu", max_model_len=256) as llm:
            want = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=32))
        assert got.choices[0].text == want[0].outputs[0].text

        stream = client.completions.create(
            model=name,
            prompt=prompt,
            max_tokens=200,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        next(iter(stream))
        os.killpg(node1.pid, signal.SIGKILL)
        killed = time.monotonic()
        with pytest.raises(openai.APIError):
            for _ in stream:
                pass
        health = health_until_exit(server, url, killed)
        assert server.wait(30) != 0 and time.monotonic() - killed < 10
        assert 200 not in health
        assert tree_gone(server, 20) and tree_gone(node1, 20)
    finally:
        kill_trees(server, node1)


def test_node0_killed_ends_node1():
    "kill -9 of the server (node 0's main process): both nodes' other processes end by themselves."
    port = free_port()
    node1 = headless_default(port)
    server, _ = serve_node0(port)
    try:
        kids = psutil.Process(server.pid).children(recursive=True)
        start = time.monotonic()
        server.kill()
        assert tree_gone(node1, 30) and node1.returncode != 0
        assert time.monotonic() - start < 15
        assert not psutil.wait_procs(kids, timeout=10)[1], "a child of node 0 outlived it"
    finally:
        kill_trees(server, node1)


def test_torchrun_serves():
    """`torchrun -m metainfer serve` started twice: only rank 0 listens (every rank is given the
    same port), it answers the openai client, and SIGTERM to node 0's torchrun ends both trees."""
    import httpx
    import openai

    port, http = free_port(), free_port()

    def torchrun(node: int) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank"]
        cmd += [str(node), "--nproc-per-node", "1", "--master-addr", "127.0.0.1"]
        cmd += ["--master-port", str(port), "-m", "metainfer", "serve", "--port", str(http)]
        cmd += ["--device", "cpu", "-tp", "2", "--max-model-len", "256", "--log-level", "warning"]
        return subprocess.Popen(
            cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    trees = [torchrun(0), torchrun(1)]
    try:
        url, deadline = f"http://127.0.0.1:{http}", time.monotonic() + 180
        while time.monotonic() < deadline and all(p.poll() is None for p in trees):
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=60)
        name = client.models.list().data[0].id
        got = client.completions.create(model=name, prompt="In the beginning", max_tokens=8)
        assert got.usage.completion_tokens == 8 or got.choices[0].finish_reason == "stop"
        os.kill(trees[0].pid, signal.SIGTERM)
        for p in trees:
            assert tree_gone(p, 30), p.stdout.read()[-3000:]
        assert trees[1].returncode == 0, trees[1].stdout.read()[-3000:]
    finally:
        kill_trees(*trees)


def test_a_frozen_node_stops_the_server():
    """SIGSTOP of node 1's tree mid-stream (a hung machine: its sockets stay open, so rank 0's
    collective blocks): `/health` turns 503 and the server exits 1 within 10 s anyway, without
    waiting for the blocked step; node 1, once continued, finds node 0 gone and exits."""
    import openai

    port = free_port()
    node1 = headless_default(port)
    server, url = serve_node0(port)
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=60, max_retries=0)
        name = client.models.list().data[0].id
        stream = client.completions.create(
            model=name,
            prompt="In the beginning",
            max_tokens=200,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        next(iter(stream))
        ended = []

        def read_rest():
            try:
                ended.append(list(stream))
            except openai.APIError as e:
                ended.append(e)

        reader = threading.Thread(target=read_rest, daemon=True)
        reader.start()
        os.killpg(node1.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        health = health_until_exit(server, url, stopped)
        assert server.wait(30) != 0 and time.monotonic() - stopped < 10
        print(f"frozen node: server exit {time.monotonic() - stopped:.1f} s after SIGSTOP")
        reader.join(10)
        assert 503 in health and isinstance(ended[0], openai.APIError)  # cut, not finished
        os.killpg(node1.pid, signal.SIGCONT)
        assert tree_gone(node1, 20) and tree_gone(server, 20)
    finally:
        kill_trees(server, node1)
