"""Issue 27 (CPU, gloo): two "nodes" as separate process trees on 127.0.0.1: TP=4 over them equals
TP=1; a node that never joins is named; a node killed mid-request is reported by node 0."""

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from metainfer import LLM
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
