"""One device call: checks and benchmarks on an H200 machine, results into $OUT/results.tar.gz.

Usage (on the device machine, from the repo root):  python3 tools/gpu_session.py STAGE [STAGE ...]
Stages: env, smoke, smoke-tp2, tp2-twice, nbtest, tiny, qwen8b, hf-compile-peer, qwen-agreement,
latency-peers, latency-eager, throughput, graphs-identity, pdl-modes, tp2-eager, tp2, tp2-latency,
allreduce, serve, deepseek, deepseek-latency, deepseek-throughput, deepseek-agreement, deepseek-tp2,
deepseek-tp2-latency, agreement-b16, latency-ab, throughput-ab, eager-ab, tp2-latency-ab,
deepseek-tp2-latency-ab, structured; on 4 GPUs (issue 7) tp4, tp4-eager, deepseek-tp4,
deepseek-tp4-throughput; tiny-train, greedy, greedy-control (issue 29); contradictions; fp8-qwen,
fp8-qwen-throughput, fp8-qwen-throughput-ab2, fp8-deepseek-b1,
fp8-deepseek-throughput, fp8-qwen-channel, fp8-tiny, fp8-agreement (issue 30); fp8-kv,
fp8-kv-throughput, fp8-kv-ab, fp8-kv-deepseek (`--kv-cache-dtype fp8` beside the default); fp8-gemv;
fp8-gemv-ab; fp8-gemv-scales; fp8-row-sums; fp8-launch-floor; fp8-persistent-chain;
fp8-step-tiles; fp8-norm-epilogue;
throughput-peer;
free-ckpt: one call (570 s) holds about two of them.

The device image lacks fastcore (every stage: the package imports it), nbdev/execnb/ipython (for
`nbtest`) and fastapi/uvicorn/pydantic (for `serve`): carry them as wheels in the git-ignored
`.whl/` (the device README's recipe), e.g. from this repo's root:
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl \
    nbdev==2.4.14 fastcore==1.14.5 execnb==0.1.18 ipython==9.18.1 ipython-pygments-lexers jedi \
    parso matplotlib-inline pexpect ptyprocess prompt_toolkit wcwidth stack_data executing \
    asttokens pure_eval traitlets astunparse fastgit ghapi fastspec watchdog decorator fastapi \
    starlette pydantic pydantic-core uvicorn annotated-types typing-inspection annotated-doc \
    opentelemetry-api
The device copies the whole working tree, at most 64 MiB with what is carried: the tracked
tree is ~56 MiB since the trained tiny models (45 MB) are in it, so carry only the wheels a call
needs, fastcore always: the serve set (fastapi starlette pydantic pydantic-core uvicorn
annotated-types typing-inspection annotated-doc h11 click anyio sniffio idna llguidance
prometheus_client, 6.3 MiB) or the nbtest set (the nbdev ones above without jedi, 2.8 MiB),
e.g. in .whl-serve/, carried as [".whl-serve"] and installed from `.whl-serve/*.whl` below.
Then start the device command with
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  export PYTHONPATH=$PWD:/tmp/site
Each stage's JSON/PNG files land under $OUT/results/ (tarred at the end, so any number of files come
back), and a line per stage is printed last.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "/tmp/out"))
RES = OUT / "results"
RES.mkdir(parents=True, exist_ok=True)
CKPT = Path("/tmp/ckpt")
KEEP = Path("/tmp/keep")
KEEP.mkdir(exist_ok=True)  # results kept on a warm machine for the next call
PY = sys.executable
summary = []
BENCH_FLAGS = (
    ""  # extra flags for every bench (stage smoke turns async scheduling off if it misbehaves)
)


T0, DEADLINE = (
    time.time(),
    float(os.environ.get("DEADLINE", 570)),
)  # seconds this call may take in all


def sh(cmd: str, timeout: float = 580) -> int:
    """Run `cmd`; past `timeout`, every process of it prints its Python stacks (SIGUSR1:
    faulthandler) and is killed."""
    print(f"\n$ {cmd}", flush=True)
    t = time.time()
    timeout = min(timeout, DEADLINE - (t - T0))
    if timeout < 20:
        summary.append(f"SKIP (no time left)  {cmd[:150]}")
        return "SKIPPED"
    p = subprocess.Popen(cmd, shell=True, start_new_session=True)
    try:
        rc = p.wait(timeout)
    except subprocess.TimeoutExpired:
        print(f"\n!!! timeout after {timeout:.0f}s: stacks of every process follow", flush=True)
        os.killpg(p.pid, signal.SIGUSR1)
        time.sleep(5)
        os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
        rc = "TIMEOUT"
    summary.append(
        f"{'ok ' if rc == 0 else 'FAIL' if rc != 'TIMEOUT' else 'HUNG'} {time.time() - t:6.1f}s  "
        f"{cmd[:150]}"
    )
    return rc


def keep() -> None:
    """Results so far into $OUT/results.tar.gz (so they survive a kill) and /tmp/keep (for a later
    call on this machine)."""
    for f in RES.glob("*"):
        shutil.copy(f, KEEP / f.name)
    with tarfile.open(OUT / "results.tar.gz", "w:gz") as tar:
        tar.add(KEEP, arcname="results")


def bench(args: str, timeout: float = 300, at: Path | None = None) -> int:
    """`metainfer bench ARGS`; `at`: a folder holding another `metainfer/`, run from there (`-m`
    puts the cwd first)."""
    rc = sh(
        f"{f'cd {at} && ' if at else ''}{PY} -m metainfer bench {args}{BENCH_FLAGS} --out "
        f"{RES.resolve()}",
        timeout,
    )
    keep()
    return rc


def older_packages() -> list[Path]:
    """The folders `.ab/REV` holding an older package (carried; made by `git archive REV metainfer |
    tar -x -C .ab/REV`)."""
    return [p.parent for p in sorted(Path(".ab").glob("*/metainfer"))]


def checkpoint(name: str) -> Path:
    path = CKPT / name
    if not (path / "config.json").exists():
        sh(
            f"""{PY} -c "import torch; """
            """from metainfer.testing import write_random_checkpoint as w; """
            f"""w('{path}', '{name}', dtype=torch.bfloat16, device='cuda', """
            """max_shard_size='5GB')" """
        )
    return path


def stage_env():
    sh("nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv")
    sh(
        f'{PY} -c "import torch, triton, transformers; print(torch.__version__, '
        'triton.__version__, transformers.__version__, torch.cuda.device_count())"'
    )


def stage_smoke():
    """Tiny Qwen3 and DeepSeek on the GPU: graphs/eager x async/sync scheduling give the same greedy
    tokens."""
    global BENCH_FLAGS
    for preset in ("qwen3-tiny", "deepseek-v2-tiny"):
        path, out = CKPT / preset, RES / f"smoke-{preset}.json"
        if not (path / "config.json").exists():
            sh(
                f"""{PY} -c "import torch; """
                """from metainfer.testing import write_random_checkpoint as w; """
                f"""w('{path}', '{preset}', dtype=torch.bfloat16)" """
            )
        rc = sh(
            f"{PY} tools/graphs_identity.py {path} --tokens 64 --modes "
            f"graphs,graphs-sync,eager,eager-sync --out {out}",
            150,
        )
        if rc != 0 or not json.loads(out.read_text())["identical"]:
            BENCH_FLAGS = " --no-async-scheduling"
            summary.append(
                f"!!! {preset}: async scheduling smoke test failed: benches run with{BENCH_FLAGS}"
            )
    keep()


def stage_smoke_tp2():
    """Tiny Qwen3 and DeepSeek at TP=2: graphs / graphs with NCCL-only all-reduces (no fused
    all-reduce + norm) / eager give the same tokens."""
    for preset in os.environ.get("SMOKE_PRESETS", "qwen3-tiny deepseek-v2-tiny").split():
        path = CKPT / preset
        if not (path / "config.json").exists():
            sh(
                f"""{PY} -c "import torch; """
                """from metainfer.testing import write_random_checkpoint as w; """
                f"""w('{path}', '{preset}', dtype=torch.bfloat16)" """
            )
        sh(
            f"{PY} tools/graphs_identity.py {path} -tp 2 --tokens 64 --modes "
            "graphs,graphs-nccl,eager "
            f"--out {RES}/smoke-tp2-{preset}.json",
            240,
        )
    keep()


def stage_tp2_twice():
    """Two TP=2 engines one after the other in one process: the second must start (NCCL all-reduces,
    a warning), not hang."""
    path = CKPT / "qwen3-tiny"
    if not (path / "config.json").exists():
        sh(
            f"""{PY} -c "import torch; """
            """from metainfer.testing import write_random_checkpoint as w; """
            f"""w('{path}', 'qwen3-tiny', dtype=torch.bfloat16)" """
        )
    script = (
        KEEP.parent / "tp2_twice.py"
    )  # a file: spawned workers re-import the main module (no `python -`)
    script.write_text(f"""from metainfer import LLM, SamplingParams

if __name__ == "__main__":
    outs = []
    for _ in range(2):
        with LLM("{path}", tensor_parallel_size=2, gpu_memory_utilization=0.3) as llm:
            p = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
            outs.append(llm.generate([[1, 2, 3]], p, use_tqdm=False)[0].outputs[0].token_ids)
    print("tp2-twice tokens", outs)
    assert outs[0] == outs[1]
""")
    sh(f"{PY} {script}", 180)


def stage_nbtest():
    "The notebooks' tests with their `#| cuda` cells, compiled on the GPU (not the interpreter)."
    nbs = os.environ.get(
        "NBS",
        "kernels/03a_triton_launch kernels/07f_triton_attention kernels/09e_triton_moe "
        "kernels/09g_triton_mla engine/12c_cuda_graphs engine/13_runner",
    )
    for nb in (
        nbs.split()
    ):  # as `nbdev_test --flags cuda`, printing what the cells print (errors, timings)
        sh(f"{PY} tools/nb_outputs.py nbs/{nb}.ipynb")


def stage_tiny():
    sh(
        f"{PY} -m pytest -q -x tests/gpu -p no:cacheprovider"
        if Path("tests/gpu").exists()
        else "true"
    )


def stage_qwen8b():
    m = checkpoint("Qwen3-8B")
    bench(f"agreement {m} {AGREE_B1} --control --name agreement-qwen3-8b-b1")
    bench(
        f"agreement {m} --batch-size 16 --input-len 64 --output-len 256 --gpu-memory-utilization "
        "0.5 --name agreement-qwen3-8b-b16"
    )
    bench(f"latency {m} --batch-size 1 --name latency-qwen3-8b-b1-graphs --profile --peer hf")
    bench(f"latency {m} --batch-size 1 --enforce-eager --name latency-qwen3-8b-b1-eager --profile")
    bench(f"throughput {m} --name throughput-qwen3-8b")


def stage_latency_peers():
    m = checkpoint("Qwen3-8B")
    bench(
        f"latency {m} --batch-size 1 --name latency-qwen3-8b-b1-graphs --profile --peer hf "
        f"--peer-modes {os.environ.get('PEER_MODES', 'eager')}",
        300,
    )


def stage_pdl_modes():
    "B=1 decode with graphs without PDL (`--no-pdl`), beside stage latency-peers' default."
    m = checkpoint("Qwen3-8B")  # the JSON's engine.kernel_backend then lacks "+pdl"
    bench(
        f"latency {m} --batch-size 1 --no-pdl --name latency-qwen3-8b-b1-graphs-pdl-0 --profile",
        120,
    )


def stage_hf_compile_peer():
    """HF transformers with a static cache + torch.compile in the same run as ours (one compiled
    one-token step; the `generate`-based version compiled two graphs and took > 160 s in run3)."""
    bench(
        f"latency {checkpoint('Qwen3-8B')} --batch-size 1 --name "
        "latency-qwen3-8b-b1-vs-hf-compile --peer hf --peer-modes eager,compile",
        540,
    )


# every B=1 agreement run
AGREE_B1 = "--batch-size 1 --input-len 64 --output-len 256 --gpu-memory-utilization 0.5"


def tp1_reference(stem: str, make) -> Path:
    """The TP=1 agreement run that TP=N runs compare with: kept on this machine (same code, same
    weights), else made now."""
    ref = KEEP / f"{stem}.json"
    if not ref.exists():
        make()
    return ref


def stage_qwen_agreement():
    """TP=1 teacher-forced agreement with HF bf16 (B=1), keeping our top-2 gaps: the TP=N runs'
    reference."""
    bench(f"agreement {checkpoint('Qwen3-8B')} {AGREE_B1} --name agreement-qwen3-8b-b1", 150)


def stage_latency_eager():
    bench(
        f"latency {checkpoint('Qwen3-8B')} --batch-size 1 --enforce-eager --output-len 128 "
        "--repeat 3 --name latency-qwen3-8b-b1-eager --profile --host-profile",
        90,
    )


def stage_throughput():
    bench(f"throughput {checkpoint('Qwen3-8B')} --name throughput-qwen3-8b --profile", 120)


def stage_throughput_ab():
    """Stage throughput with each `older_packages()`, in the same call as the current one, so both
    see the same GPU."""
    for at in older_packages():
        bench(
            f"throughput {checkpoint('Qwen3-8B')} --name throughput-qwen3-8b-at-{at.name} "
            "--profile",
            120,
            at,
        )


def throughput_ab2(model: Path, name: str, timeout: float, profile_first: bool = False) -> None:
    """Offline throughput of `model` twice with the current package and twice with each
    `older_packages()`, alternating in one call (runs vary by about 2 %: one pair shows no gain);
    `profile_first`: the current package's first run with `--profile`."""
    for i in (1, 2):
        profile = " --profile" if profile_first and i == 1 else ""
        bench(f"throughput {model} --name {name}-{i}{profile}", timeout)
        for at in older_packages():
            bench(f"throughput {model} --name {name}-at-{at.name}-{i}", timeout, at)


def stage_throughput_ab2():
    "`throughput_ab2` of Qwen3-8B in bf16."
    throughput_ab2(checkpoint("Qwen3-8B"), "throughput-qwen3-8b", 120)


def stage_latency_ab():
    "Stage latency-peers' B=1 run (no peer) with each `older_packages()`, as stage throughput-ab."
    for at in older_packages():
        bench(
            f"latency {checkpoint('Qwen3-8B')} --batch-size 1 --name "
            f"latency-qwen3-8b-b1-graphs-at-{at.name} --profile",
            120,
            at,
        )


def stage_eager_ab():
    """Stage latency-eager's B=1 run (no profiles) with each `older_packages()`, then the current
    one, in the same call. Eager figures follow the host, which varied up to 1.8x within a call
    (run41, run42): the current package measures three times (`--repeat`, a host probe after each),
    as does an older package that has the option (else once)."""
    for at in [*older_packages(), None]:
        name = f"latency-qwen3-8b-b1-eager{f'-at-{at.name}' if at else ''}"
        src = at / "metainfer" / "bench.py" if at else None  # older packages: one bench module
        repeat = (
            " --repeat 3"
            if src is None or not src.exists() or "--repeat" in src.read_text()
            else ""
        )
        bench(
            f"latency {checkpoint('Qwen3-8B')} --batch-size 1 --enforce-eager --output-len "
            f"128{repeat} --name {name}",
            90,
            at,
        )


def stage_tp2():
    "TP=2 with CUDA graphs: agreement with TP=1 (`tp1_reference`), then B=1 speed."
    m, ref = checkpoint("Qwen3-8B"), tp1_reference("agreement-qwen3-8b-b1", stage_qwen_agreement)
    os.environ["METAINFER_STACKS_AFTER"] = (
        "110"  # every rank prints its stacks if a TP run takes this long
    )
    agree = f"agreement {m} -tp 2 {AGREE_B1} --against {ref}"
    rc = bench(f"{agree} --name agreement-qwen3-8b-tp2-vs-tp1", 150)
    if rc == "TIMEOUT":  # bisect: the same with NCCL for every all-reduce
        rc = bench(
            f"{agree} --disable-custom-all-reduce --name agreement-qwen3-8b-tp2-vs-tp1-nccl", 120
        )
    os.environ.pop("METAINFER_STACKS_AFTER")
    if rc == 0:
        stage_tp2_latency()


def stage_agreement_b16():
    """B=16 (4,096 positions): TP=1 against HF bf16 (keeping our gaps), then TP=2 against that TP=1
    run."""
    m, ref = checkpoint("Qwen3-8B"), KEEP / "agreement-qwen3-8b-b16.json"
    common = "--batch-size 16 --input-len 64 --output-len 256 --gpu-memory-utilization 0.5"
    if bench(f"agreement {m} {common} --name {ref.stem}", 180) == 0:
        bench(
            f"agreement {m} -tp 2 {common} --against {ref} --name "
            "agreement-qwen3-8b-b16-tp2-vs-tp1",
            150,
        )


def stage_tp2_latency():
    "TP=2 B=1 decode with CUDA graphs (the speed half of stage tp2)."
    bench(
        f"latency {checkpoint('Qwen3-8B')} -tp 2 --batch-size 1 --name latency-qwen3-8b-b1-tp2 "
        "--profile --host-profile",
        150,
    )


def bench_ab(args: str, name: str, timeout: float) -> None:
    """`metainfer bench ARGS` with each `older_packages()` (`--name NAME-at-REV`), then the current
    one (`NAME-ab`)."""
    for at in [*older_packages(), None]:
        bench(f"{args} --name {name}-{f'at-{at.name}' if at else 'ab'}", timeout, at)


def stage_tp2_latency_ab():
    """Stage tp2-latency's run (no profiles) with each `older_packages()`, then the current one, in
    the same call."""
    bench_ab(
        f"latency {checkpoint('Qwen3-8B')} -tp 2 --batch-size 1", "latency-qwen3-8b-b1-tp2", 150
    )


def stage_tp4():
    """Issue 7 on nvidia-h200-x4: Qwen3-8B TP=4 against TP=1, then B=1 decode with graphs (profile:
    the all-reduce share)."""
    m, ref = checkpoint("Qwen3-8B"), tp1_reference("agreement-qwen3-8b-b1", stage_qwen_agreement)
    bench(
        f"agreement {m} -tp 4 {AGREE_B1} --against {ref} --name agreement-qwen3-8b-tp4-vs-tp1", 180
    )
    bench(
        f"latency {m} -tp 4 --batch-size 1 --name latency-qwen3-8b-b1-tp4 --profile --host-profile",
        150,
    )


def stage_tp4_eager():
    """Issue 7: Qwen3-8B TP=4 B=1 eager (the seed's bottom line: >= 54 tok/s), and the 4-GPU
    all-reduce table."""
    bench(
        f"latency {checkpoint('Qwen3-8B')} -tp 4 --enforce-eager --batch-size 1 --output-len 64 "
        f"--name latency-qwen3-8b-b1-tp4-eager --profile",
        150,
    )
    bench("allreduce -tp 4 --name allreduce-4xh200", 90)


def stage_deepseek_tp4():
    "Issue 7's extension: DeepSeek-V2-Lite TP=4 / EP=4 against TP=1, then B=1 decode."
    m, ref = (
        checkpoint("DeepSeek-V2-Lite"),
        tp1_reference("agreement-dsv2lite-b1", stage_deepseek_agreement),
    )
    bench(
        f"agreement {m} -tp 4 {AGREE_B1} --against {ref} --name agreement-dsv2lite-tp4-vs-tp1", 180
    )
    bench(
        f"latency {m} -tp 4 --batch-size 1 --output-len 128 --name latency-dsv2lite-b1-tp4 "
        "--profile",
        150,
    )


def stage_deepseek_tp4_throughput():
    bench(
        f"throughput {checkpoint('DeepSeek-V2-Lite')} -tp 4 --name throughput-dsv2lite-tp4 "
        "--profile",
        200,
    )


def stage_graphs_identity():
    "Greedy tokens with and without CUDA graphs, B=1 and B=16 (issue 4's first acceptance check)."
    sh(
        f"{PY} tools/graphs_identity.py {checkpoint('Qwen3-8B')} --modes graphs,eager,graphs-sync "
        f"--out {RES}/graphs-identity-qwen3-8b.json",
        240,
    )
    keep()


def stage_tp2_eager():
    """TP=2 without CUDA graphs: separates graph capture from communication (the graphs run hung on
    2026-11-29)."""
    m = checkpoint("Qwen3-8B")
    bench(
        f"latency {m} -tp 2 --enforce-eager --batch-size 1 --output-len 64 --name "
        "latency-qwen3-8b-b1-tp2-eager",
        120,
    )


def stage_allreduce():
    bench("allreduce -tp 2 --name allreduce-2xh200", 90)


def start_server(model: Path, *flags: str):
    """`metainfer serve MODEL FLAGS` on a free port, waited for until healthy; (process, base URL,
    seconds to healthy). Its log goes to $OUT/results/server-*.log."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    name = "-".join(["server", model.name, *[f.strip("-") for f in flags]])
    log = open(RES / f"{name}.log", "w")
    t = time.time()
    cmd = [PY, "-m", "metainfer", "serve", str(model), "--port", str(port), *flags]
    print("\n$", " ".join(cmd), flush=True)
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    while time.time() - T0 < DEADLINE - 60 and server.poll() is None:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            break
        except Exception:
            time.sleep(0.5)
    healthy = time.time() - t
    state = f"healthy after {healthy:.1f} s" if server.poll() is None else "DIED (see its log)"
    summary.append(f"server {' '.join(flags) or '(defaults)'}: {state}")
    return server, f"http://127.0.0.1:{port}", healthy


def stop_server(server) -> None:
    server.terminate()
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
    keep()


def serve_mixed(url: str, name: str) -> None:
    "Issue 23's mixed workload: 16 streams of 512 tokens, one 32,768-token prompt among them."
    sh(
        f"{PY} -m metainfer bench serve --base-url {url} --mixed --input-len 256 "
        f"--out {RES} --name {name}",
        150,
    )


def stage_serve():
    """Qwen3-8B served at the defaults: a cached-prefix request on the fresh server, the mixed
    workload, the concurrency sweep; then the mixed workload at each of $MIXED_BUDGETS."""
    m = checkpoint("Qwen3-8B")
    server, url, _ = start_server(m)
    try:
        sh(f"{PY} tools/prefix_hit.py --base-url {url} --out {RES}/prefix-hit-qwen3-8b.json", 60)
        serve_mixed(url, "serve-mixed-qwen3-8b")
        sh(
            f"{PY} -m metainfer bench serve --base-url {url} --concurrency 1,16,64 --input-len 256 "
            f"--output-len 128 --out {RES} --name serve-qwen3-8b-h200",
            150,
        )
    finally:
        stop_server(server)
    for budget in os.environ.get("MIXED_BUDGETS", "").split():
        server, url, _ = start_server(m, "--max-num-batched-tokens", budget)
        try:
            serve_mixed(url, f"serve-mixed-qwen3-8b-budget-{budget}")
        finally:
            stop_server(server)


def stage_deepseek():
    """DeepSeek-V2-Lite on one GPU: agreement with HF, B=1 decode with the HF eager peer (HF's MoE
    is slow: 128 tokens)."""
    stage_deepseek_agreement()
    stage_deepseek_latency()


def stage_deepseek_agreement():
    """DeepSeek-V2-Lite teacher-forced top-1 agreement with HF bf16 on the same weights, B=1, 256
    positions."""
    bench(
        f"agreement {checkpoint('DeepSeek-V2-Lite')} {AGREE_B1} --name agreement-dsv2lite-b1", 180
    )


def stage_deepseek_latency():
    bench(
        f"latency {checkpoint('DeepSeek-V2-Lite')} --batch-size 1 --output-len 128 --name "
        "latency-dsv2lite-b1 --profile "
        f"--peer hf --peer-modes eager",
        180,
    )


def stage_deepseek_throughput():
    bench(f"throughput {checkpoint('DeepSeek-V2-Lite')} --name throughput-dsv2lite --profile", 200)


def stage_deepseek_tp2_latency():
    "DeepSeek-V2-Lite TP=2 / EP=2 B=1 decode (the speed half of stage deepseek-tp2)."
    bench(
        f"latency {checkpoint('DeepSeek-V2-Lite')} -tp 2 --batch-size 1 --output-len 128 --name "
        "latency-dsv2lite-b1-tp2 --profile",
        150,
    )


def stage_deepseek_tp2_latency_ab():
    """Stage deepseek-tp2-latency's run (no profile) with each `older_packages()`, then the current
    one, in the same call."""
    bench_ab(
        f"latency {checkpoint('DeepSeek-V2-Lite')} -tp 2 --batch-size 1 --output-len 128",
        "latency-dsv2lite-b1-tp2",
        150,
    )


def stage_deepseek_tp2():
    "DeepSeek-V2-Lite with TP=2 and EP=2 against TP=1 (`tp1_reference`), then B=1 speed."
    m, ref = (
        checkpoint("DeepSeek-V2-Lite"),
        tp1_reference("agreement-dsv2lite-b1", stage_deepseek_agreement),
    )
    rc = bench(
        f"agreement {m} -tp 2 {AGREE_B1} --against {ref} --name agreement-dsv2lite-tp2-vs-tp1", 150
    )
    if rc == 0:
        stage_deepseek_tp2_latency()


def stage_structured():
    """Issue 24: Qwen3-8B TPOT with and without a JSON-schema constraint at B=1 and B=64, and a
    50-field schema's compile time."""
    rc = sh(f"{PY} tools/structured_overhead.py {checkpoint('Qwen3-8B')} --out {RES}", 300)
    summary.append(f"structured: rc {rc}")
    keep()


TINY_MODELS = Path("/tmp/tiny-models")  # stage tiny-train's checkpoints
TRAINED = ("metainfer-tiny-qwen3", "metainfer-tiny-deepseek-v2")


def sh_together(cmds: list[str], timeout: float) -> list:
    "`sh` for several commands at once (each its own process group); their return codes."
    t = time.time()
    timeout = min(timeout, DEADLINE - (t - T0))
    procs = []
    for i, cmd in enumerate(cmds):
        print(f"\n$ [{i}] {cmd}", flush=True)
        procs.append(subprocess.Popen(cmd, shell=True, start_new_session=True))
    rcs = []
    for p, cmd in zip(procs, cmds):
        try:
            rc = p.wait(max(1.0, timeout - (time.time() - t)))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            rc = p.wait() and "TIMEOUT"
        rcs.append(rc)
        summary.append(f"{'ok ' if rc == 0 else 'FAIL'} {time.time() - t:6.1f}s  {cmd[:150]}")
    return rcs


def stage_tiny_train():
    """Issue 29: train the two tiny models on build/tiny_data (carried; made by
    tools/tiny_models/tokenizer.py), or on $TINY_DATA; the checkpoints come back as
    $OUT/models.tar.part-*. With TRAIN_VARIANTS="FLAGS;FLAGS..." (train.py flags, e.g. "--steps
    2700 --keep last"; TRAIN_MODELS="qwen3" trains only that one; TRAIN_TIMEOUT seconds,
    400): each variant trains into TINY_MODELS/v<i>/, all at once (these models leave the GPU
    mostly idle), then `bench greedy` compares each with HF (GREEDY_AT_ONCE at a time:
    `greedy_alongside`); per model, the variant with the most identical completions in its worst
    run comes back."""
    variants = [v.strip() for v in os.environ.get("TRAIN_VARIANTS", "").split(";") if v.strip()]
    outs = [TINY_MODELS / f"v{i}" for i in range(len(variants))] if variants else [TINY_MODELS]
    data = os.environ.get("TINY_DATA", "build/tiny_data")  # e.g. build/tiny_data_wide
    cmds = [
        f"{PY} tools/tiny_models/train.py {data} {out} {name} {flags} "
        f"> {RES}/train-{out.name}-{name}.log 2>&1"
        for out, flags in zip(outs, variants or [""])
        for name in os.environ.get("TRAIN_MODELS", "qwen3 deepseek-v2").split()
    ]
    sh_together(cmds, float(os.environ.get("TRAIN_TIMEOUT", 400)))
    for out in outs:
        for name in TRAINED:
            if (out / name / "training.json").exists():
                shutil.copy(out / name / "training.json", RES / f"training-{name}-{out.name}.json")
    keep()
    if not variants:
        return sh(f"tar cf - -C {TINY_MODELS} . | split -b 15M - {OUT}/models.tar.part-")
    at_once = int(os.environ.get("GREEDY_AT_ONCE", "4"))
    benches = [
        greedy_alongside(out / name, f"greedy-{name}-{out.name}")
        for out in outs
        for name in TRAINED
        if (out / name / "config.json").exists()  # (TRAIN_MODELS: maybe not every one)
    ]
    for i in range(0, len(benches), at_once):
        sh_together(benches[i : i + at_once], 300)
        keep()
    kept = TINY_MODELS / "kept"
    shutil.rmtree(kept, ignore_errors=True)  # (a warm machine's earlier call left its own)
    for name in TRAINED:
        trained = [out for out in outs if (out / name / "config.json").exists()]
        if not trained:
            continue
        best = max(trained, key=lambda out: worst_identical(name, out.name))
        summary.append(f"{name}: kept {best.name}, {worst_identical(name, best.name)} at worst")
        shutil.copytree(best / name, kept / name)
    sh(f"tar cf - -C {kept} . | split -b 15M - {OUT}/models.tar.part-")


def worst_identical(name: str, variant: str) -> int:
    "The fewest identical completions of any greedy run on model `name` of `variant`."
    f = KEEP / f"greedy-{name}-{variant}.json"
    runs = json.loads(f.read_text())["metainfer"]["runs"] if f.exists() else []
    return min(run["identical"] for run in runs) if len(runs) == 4 else -1


def greedy_on(root: Path) -> None:
    "`bench greedy` on both trained models under `root`, in turn, into greedy-<name>.json."
    for name in TRAINED:
        bench(f"greedy {root / name} --name greedy-{name}", 240)


def greedy_alongside(model: Path, name: str, flags: str = "") -> str:
    """The command of a `bench greedy` that runs beside others (`sh_together`): a fixed KV pool of
    2,048 blocks, since engines started together cannot share the free memory; its log to RES."""
    return (
        f"{PY} -m metainfer bench greedy {model} {flags} --num-kv-blocks 2048 --name {name} "
        f"--out {RES.resolve()} > {RES}/{name}.log 2>&1"
    )


def stage_contradictions():
    """Contradictory constraints end with finish reason "error", their neighbours untouched, with
    graphs and eagerly (tools/contradiction_check.py on the embedded tiny Qwen3, bf16)."""
    model = Path("metainfer/assets/models") / TRAINED[0]
    summary.append(f"contradictions: rc {sh(f'{PY} tools/contradiction_check.py {model}', 200)}")


def stage_greedy_control():
    """Issue 29: `bench greedy --control` on both embedded tiny models at once: HF in float32 and HF
    with eager attention beside HF's sdpa, the two floors."""
    root = Path("metainfer/assets/models")
    sh_together(
        [greedy_alongside(root / n, f"greedy-control-{n}", "--control") for n in TRAINED], 400
    )
    keep()


def stage_greedy():
    """Issue 29: `bench greedy` on both trained models (stage tiny-train's if this machine has
    them, else the embedded ones)."""
    trained_here = (TINY_MODELS / TRAINED[0]).exists()
    greedy_on(TINY_MODELS if trained_here else Path("metainfer/assets/models"))


def fp8_checkpoint(name: str, block=(128, 128)) -> Path:
    "`checkpoint(name)` in block-wise FP8, quantized on the GPU by transformers' `Fp8Quantize`."
    path = CKPT / f"{name}-FP8"
    if not (path / "config.json").exists():
        sh(
            f"""{PY} -c "from metainfer.testing_fp8 import write_block_fp8 as w; """
            f"""w('{checkpoint(name)}', '{path}', {tuple(block)}, device='cuda')" """
        )
    return path


def stage_fp8_qwen():
    """Issue 30: Qwen3-8B block-wise FP8 against bf16 at defaults: B=1 decode (graphs; the same
    greedy tokens graphs, eager and sync)."""
    bf16, fp8 = checkpoint("Qwen3-8B"), fp8_checkpoint("Qwen3-8B")
    out = RES / "graphs-identity-qwen3-8b-fp8.json"
    modes = "graphs,eager,graphs-sync"
    sh(f"{PY} tools/graphs_identity.py {fp8} --tokens 64 --modes {modes} --out {out}")
    bench(f"latency {fp8} --batch-size 1 --name latency-qwen3-8b-fp8-b1 --profile")
    bench(f"latency {bf16} --batch-size 1 --name latency-qwen3-8b-bf16-b1")


def stage_fp8_tiny():
    """Issue 30: the trained tiny models in both FP8 layouts on the GPU, graphs and eager, against
    their dequantized twins (tools/fp8_gpu_check.py)."""
    rc = sh(f"{PY} tools/fp8_gpu_check.py {RES / 'fp8-gpu.json'}", 240)
    summary.append(f"fp8-tiny: rc {rc}")
    keep()


def stage_fp8_agreement():
    """Issue 30: Qwen3-8B block-wise FP8, teacher-forced top-1 of metainfer's and of HF's own FP8
    path against HF bf16 on the dequantized weights (tools/fp8_agreement.py; the HF kernel carried
    in the git-ignored `.hf-fp8/`, accelerate in `.whl-hf/`)."""
    env = "FINEGRAINED_AUTOTUNE_TRIALS=4 HF_HUB_OFFLINE=1 TRANSFORMERS_DISABLE_DEEPGEMM_LINEAR=1"
    out, fp8 = RES / "agreement-qwen3-8b-fp8-vs-hf.json", fp8_checkpoint("Qwen3-8B")
    batch = os.environ.get("FP8_AGREE_BATCH", "8")  # sequences of 256 forced tokens
    sh(f"{env} {PY} tools/fp8_agreement.py {fp8} --kernel .hf-fp8 --batch {batch} --out {out}")
    keep()


def stage_fp8_qwen_throughput():
    """Issue 30: Qwen3-8B offline throughput (256 prompts, U[100, 1024]), FP8 then bf16, at
    defaults; the FP8 run profiled (where its decode and prefill steps spend their time)."""
    bf16, fp8 = checkpoint("Qwen3-8B"), fp8_checkpoint("Qwen3-8B")
    bench(f"throughput {fp8} --name throughput-qwen3-8b-fp8 --profile")
    bench(f"throughput {bf16} --name throughput-qwen3-8b-bf16")


def stage_throughput_peer():
    """Qwen3-8B bf16 offline throughput at defaults but 64 prompts, and HF `generate` on the same
    workload in the same run (`--peer hf`, one batch of 64: 155 s on an H100, 12-07; 256 prompts
    took HF ~7 minutes, past a call's time with the rest)."""
    name = "throughput-qwen3-8b-bf16-64-peer"
    bench(f"throughput {checkpoint('Qwen3-8B')} --num-seqs 64 --name {name} --peer hf", 300)


def stage_fp8_qwen_throughput_ab2():
    "Issue 30: `throughput_ab2` of Qwen3-8B in block-wise FP8, at defaults, the first run profiled."
    throughput_ab2(fp8_checkpoint("Qwen3-8B"), "throughput-qwen3-8b-fp8", 150, profile_first=True)


def stage_free_ckpt():
    "Removes every checkpoint this machine wrote (the disk holds Qwen3-8B's pair or DeepSeek's)."
    shutil.rmtree(CKPT, ignore_errors=True)


def stage_fp8_deepseek_b1():
    """Issue 30: DeepSeek-V2-Lite block-wise FP8 against bf16, B=1 decode, defaults (experts in FP8
    since the Triton MoE kernel takes them, 2026-12-05; the 12-03 rows ran them dense), each with
    its kernel profile (the H200 read FP8 7-10 % slower twice, the H100 4 % faster)."""
    bf16, fp8 = checkpoint("DeepSeek-V2-Lite"), fp8_checkpoint("DeepSeek-V2-Lite")
    for name, ckpt in (("fp8", fp8), ("bf16", bf16)):
        bench(f"latency {ckpt} --batch-size 1 --name latency-deepseek-v2-lite-{name}-b1 --profile")


def stage_fp8_deepseek_throughput():
    """Issue 30: DeepSeek-V2-Lite offline throughput, block-wise FP8 (experts in FP8 since
    2026-12-05; dense in the 12-03 rows) then bf16, at defaults."""
    bf16, fp8 = checkpoint("DeepSeek-V2-Lite"), fp8_checkpoint("DeepSeek-V2-Lite")
    bench(f"throughput {fp8} --name throughput-deepseek-v2-lite-fp8")
    bench(f"throughput {bf16} --name throughput-deepseek-v2-lite-bf16")


def stage_fp8_qwen_channel():
    """Issue 30 (acceptance 4): Qwen3-8B as compressed-tensors per-channel `FP8_DYNAMIC` (written on
    the CPU by compressed-tensors itself: ~16 GB of RAM), B=1 decode and offline throughput at
    defaults, and bf16 B=1 in the same call as the reference. The disk (64 GiB) cannot hold them
    beside DeepSeek-V2-Lite's pair (47 GB): other checkpoints are removed first."""
    bf16, fp8 = checkpoint("Qwen3-8B"), CKPT / "Qwen3-8B-FP8-dynamic"
    for p in CKPT.iterdir():
        if p.name not in (bf16.name, fp8.name):
            shutil.rmtree(p)
    if not (fp8 / "config.json").exists():
        part = CKPT / f"{fp8.name}.part"  # renamed once whole: a failed write leaves no checkpoint
        rc = sh(
            f"""{PY} -c "from metainfer.testing_fp8 import write_channel_fp8 as w; """
            f"""w('{bf16}', '{part}')" """
        )
        if rc == 0:
            part.rename(fp8)
    bench(f"throughput {fp8} --name throughput-qwen3-8b-fp8-channel")
    bench(f"latency {fp8} --batch-size 1 --name latency-qwen3-8b-fp8-channel-b1")
    bench(f"latency {bf16} --batch-size 1 --name latency-qwen3-8b-bf16-b1-ch")


def stage_fp8_kv_throughput(profile: str = ""):
    """`--kv-cache-dtype fp8` (not a default: reported beside it) on Qwen3-8B block-wise FP8:
    offline throughput, where 54 % of a 256-sequence decode step read K/V (H100 profile, 12-05),
    then the default pool in the same call."""
    fp8 = fp8_checkpoint("Qwen3-8B")
    bench(f"throughput {fp8} --name throughput-qwen3-8b-fp8-kvfp8 --kv-cache-dtype fp8{profile}")
    bench(f"throughput {fp8} --name throughput-qwen3-8b-fp8")


def stage_fp8_kv():
    "`stage_fp8_kv_throughput` (the FP8-pool run profiled), then B=1 with each pool."
    fp8, kv = fp8_checkpoint("Qwen3-8B"), "--kv-cache-dtype fp8"
    stage_fp8_kv_throughput(" --profile")
    bench(f"latency {fp8} --batch-size 1 --name latency-qwen3-8b-fp8-kvfp8-b1 {kv}")
    bench(f"latency {fp8} --batch-size 1 --name latency-qwen3-8b-fp8-b1")


def stage_fp8_kv_ab():
    "Stage fp8-kv-throughput's `--kv-cache-dtype fp8` run with each `older_packages()`."
    fp8, kv = fp8_checkpoint("Qwen3-8B"), "--kv-cache-dtype fp8"
    for at in older_packages():
        bench(f"throughput {fp8} --name throughput-qwen3-8b-fp8-kvfp8-at-{at.name} {kv}", 150, at)


def stage_fp8_kv_deepseek():
    "`stage_fp8_kv` for DeepSeek-V2-Lite block-wise FP8 (its latent cache in FP8), a run each."
    fp8 = fp8_checkpoint("DeepSeek-V2-Lite")
    bench(f"throughput {fp8} --name throughput-deepseek-v2-lite-fp8-kvfp8 --kv-cache-dtype fp8")
    bench(f"throughput {fp8} --name throughput-deepseek-v2-lite-fp8")


def stage_fp8_gemv_ab():
    """Issue 30: the GEMV's tiles and double-buffered loads in a whole B=1 step of Qwen3-8B's shapes
    (tools/fp8_probes/gemv_prefetch.py), then Qwen3-8B block-wise FP8 at B=1 with each
    `older_packages()` and with the current package, alternated, `AB_ROUNDS` times (2)."""
    sh(f"{PY} tools/fp8_probes/gemv_prefetch.py {RES / 'gemv-tiles.json'} fp8 tiles", 200)
    keep()
    fp8 = fp8_checkpoint("Qwen3-8B")
    for rnd in range(1, int(os.environ.get("AB_ROUNDS", 2)) + 1):
        for at in older_packages():
            name = f"latency-qwen3-8b-fp8-b1-at-{at.name}-{rnd}"
            bench(f"latency {fp8} --batch-size 1 --name {name}", 120, at)
        bench(f"latency {fp8} --batch-size 1 --name latency-qwen3-8b-fp8-b1-{rnd}", 120)


def stage_fp8_gemv_scales():
    """Issue 30: how the block-wise FP8 GEMV applies its scales (tools/fp8_probes/gemv_scales.py:
    the package's per-group reshape, scales per column, the input pre-scaled, one group a chunk,
    none), in a whole B=1 step of Qwen3-8B's shapes in one graph."""
    sh(f"{PY} tools/fp8_probes/gemv_scales.py {RES / 'gemv-scales.json'}", 200)
    keep()


def stage_fp8_row_sums():
    """Issue 30: whether 1-byte loads stream at the copy rate (tools/fp8_probes/row_sums.py: a B=1
    step's weights summed per row as FP8, uint8, int32 and bf16 at several tiles, with registers
    a thread, beside the package's GEMV in FP8 and bf16)."""
    sh(f"{PY} tools/fp8_probes/row_sums.py {RES / 'row-sums.json'}", 240)
    keep()


def stage_fp8_launch_floor():
    """Issue 30: what a launch's boundary costs (tools/fp8_probes/row_sums.py `launches`: a B=1
    step's FP8 weights summed by its 144 launches, with and without PDL, and by two)."""
    sh(f"{PY} tools/fp8_probes/row_sums.py {RES / 'launch-floor.json'} launches", 200)
    keep()


def stage_fp8_persistent_chain():
    """Issue 30: a B=1 step's 144 FP8 GEMVs chained in one persistent launch with grid barriers
    (and the next GEMV's first weights loaded before each), against the package's 144 launches
    (tools/fp8_probes/persistent_chain.py). A barrier that hangs ends at the timeout."""
    sh(f"{PY} tools/fp8_probes/persistent_chain.py {RES / 'persistent-chain.json'}", 240)
    keep()


def stage_fp8_step_tiles():
    """Issue 30: the package's GEMV over a B=1 step at each tile policy (tools/fp8_probes/
    step_tiles.py), then Qwen3-8B block-wise FP8 at B=1 with the fastest patched in, beside the
    package's default on the same card."""
    out, fp8 = RES / "step-tiles.json", fp8_checkpoint("Qwen3-8B")
    sh(f"{PY} tools/fp8_probes/step_tiles.py step {out}", 200)
    keep()
    sh(f"{PY} tools/fp8_probes/step_tiles.py model {out} {fp8} {RES.resolve()}", 200)
    keep()
    bench(f"latency {fp8} --batch-size 1 --name latency-qwen3-8b-fp8-b1")


def stage_fp8_norm_epilogue():
    """Issue 30: a B=1 step's add + RMSNorm as a kernel (the package in graphs), in the next GEMV's
    prologue, or at the end of the GEMV before it (tools/fp8_probes/norm_epilogue.py)."""
    sh(f"{PY} tools/fp8_probes/norm_epilogue.py {RES / 'norm-epilogue.json'}", 200)
    keep()


def stage_fp8_gemv():
    """Issue 30: the FP8 GEMV on the tensor cores, a candidate (tools/fp8_probes/gemv_mma.py: tiles
    per shape, then a B=1 step's GEMVs in one graph, against the package's GEMV), then Qwen3-8B
    block-wise FP8 at B=1 with the package, on the same card."""
    sh(f"{PY} tools/fp8_probes/gemv_mma.py {RES / 'gemv-mma.json'}", 300)
    keep()
    bench(f"latency {fp8_checkpoint('Qwen3-8B')} --batch-size 1 --name latency-qwen3-8b-fp8-b1")


if __name__ == "__main__":
    t0 = time.time()
    try:
        for stage in sys.argv[1:]:
            globals()[f"stage_{stage.replace('-', '_')}"]()
    finally:
        with tarfile.open(OUT / "results.tar.gz", "w:gz") as tar:
            tar.add(KEEP, arcname="results")
        shutil.rmtree(RES)
        print("\n==== summary ====", *summary, f"total {time.time() - t0:.0f}s", sep="\n")
