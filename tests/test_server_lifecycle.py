"""The server's life as a process (issue 22, items 3 and 9): a dead tensor-parallel worker turns
`/health` to 503 and the server exits non-zero; SIGTERM drains and exits 0. Each test starts the
real `metainfer serve` (the embedded tiny model, on the CPU) on a free loopback port."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import psutil


def start_server(*flags: str) -> tuple[subprocess.Popen, str]:
    "Start `metainfer serve` with `flags`; returns the process and its URL once it is healthy."
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "metainfer", "serve", "--port", "0", "--device", "cpu"]
    cmd += ["--num-kv-blocks", "64", "--max-model-len", "256", "--log-level", "warning", *flags]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    line, deadline = "", time.monotonic() + 120
    while "serving" not in line and time.monotonic() < deadline and p.poll() is None:
        line = p.stdout.readline()
    assert "serving" in line, f"the server did not start (rc {p.poll()})"
    threading.Thread(target=p.stdout.read, daemon=True).start()  # keep the pipe from filling
    return p, line.split(" on ")[1].split()[0]


def stop(p: subprocess.Popen) -> None:
    "Make sure `p` and every process under it are gone."
    try:
        kids = psutil.Process(p.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        kids = []
    for q in [*kids, p]:
        try:
            q.kill()
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    p.wait(timeout=10)
    psutil.wait_procs(kids, timeout=10)


def body(max_tokens: int, stream: bool = False) -> dict:
    return {"prompt": "hello", "max_tokens": max_tokens, "ignore_eos": True, "stream": stream}


def test_dead_worker_stops_the_server():
    "kill -9 of a TP worker mid-request: a 503, `/health` 503, then the process exits non-zero."
    p, url = start_server("-tp", "2")
    try:
        kids = psutil.Process(p.pid).children(recursive=True)
        workers = [k for k in kids if "spawn_main" in " ".join(k.cmdline())]
        assert len(workers) == 1
        assert httpx.post(f"{url}/v1/completions", json=body(2), timeout=60).status_code == 200
        result = {}

        def request():
            result["r"] = httpx.post(f"{url}/v1/completions", json=body(200), timeout=60)

        t = threading.Thread(target=request)
        t.start()
        time.sleep(1.0)  # the request is decoding
        workers[0].kill()
        t.join(timeout=30)
        r = result["r"]
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "engine_unavailable"
        health = []
        deadline = time.monotonic() + 30
        while p.poll() is None and time.monotonic() < deadline:
            try:
                health.append(httpx.get(f"{url}/health", timeout=2).status_code)
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        assert health and set(health) == {503}
        assert p.wait(timeout=30) != 0
        assert not psutil.wait_procs(kids, timeout=10)[1], "a child outlived the server"
    finally:
        stop(p)


def read_stream(url: str, max_tokens: int, out: list) -> None:
    "Read one streamed completion; appends its `data:` payloads (or the error) to `out`."
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json=body(max_tokens, True)) as r:
            out.append(r.status_code)
            for line in r.iter_lines():
                if line.startswith("data: "):
                    out.append(line[6:])
    except httpx.HTTPError as e:
        out.append(e)


def test_sigterm_drains():
    """SIGTERM during streams: new requests get a 503; a short stream finishes, a long one ends with
    an error event and `[DONE]` at the shutdown timeout; the process exits 0 with no child left."""
    p, url = start_server("-tp", "2", "--shutdown-timeout", "3")
    try:
        kids = psutil.Process(p.pid).children(recursive=True)
        outs = [[] for _ in range(3)]
        lens = [4, 8, 250]  # the last cannot finish within the timeout
        threads = [
            threading.Thread(target=read_stream, args=(url, n, o)) for n, o in zip(lens, outs)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while not all(len(o) > 1 for o in outs) and time.monotonic() < deadline:
            time.sleep(0.05)  # every stream has its first chunk
        p.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        r = httpx.post(f"{url}/v1/completions", json=body(2), timeout=10)
        assert r.status_code == 503 and "shutting down" in r.json()["error"]["message"]
        assert httpx.get(f"{url}/health", timeout=10).status_code == 503
        for t in threads:
            t.join(timeout=30)
        assert p.wait(timeout=30) == 0
        for n, o in zip(lens, outs):
            assert o[0] == 200 and o[-1] == "[DONE]", o[-3:]
            chunks = [json.loads(x) for x in o[1:-1]]
            if n < 250:
                assert chunks[-1]["choices"][0]["finish_reason"] == "length"
            else:
                assert chunks[-1]["error"]["code"] == "engine_unavailable"
        assert not psutil.wait_procs(kids, timeout=10)[1], "a child outlived the server"
    finally:
        stop(p)
