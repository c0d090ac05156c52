"""A/B of the served concurrency sweep (16 and 64 streams, 256 tokens in, 128 out) of Qwen3-8B at
the defaults: an older package against the working tree, alternated twice, with the working tree's
client for all four runs (so only the server differs).

Usage (GPU, from the repo root; the older package made here by
`mkdir -p .ab/REV && git archive REV metainfer ':!metainfer/assets/tokenizers' | tar -x -C .ab/REV`
and carried with `.ab`):  python3 tools/serve_ab.py .ab/REV
Writes $OUT/serve-ab-{old,new}-{0..3}.json (the bench's own JSON, with its command).
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

OUT, PY, CKPT = os.environ.get("OUT", "/tmp"), sys.executable, "/tmp/ckpt/Qwen3-8B"


def env_for(package: str) -> dict:
    "The environment that imports metainfer from `package` (and the carried wheels)."
    return {**os.environ, "PYTHONPATH": f"{os.path.abspath(package)}:/tmp/site"}


def start_server(package: str, log_path: str) -> tuple[subprocess.Popen, str]:
    "`metainfer serve` of `package` on a free port, waited for until healthy."
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [PY, "-m", "metainfer", "serve", CKPT, "--port", str(port)]
    log = open(log_path, "w")
    server = subprocess.Popen(cmd, env=env_for(package), stdout=log, stderr=log, cwd="/tmp")
    url, t = f"http://127.0.0.1:{port}", time.time()
    while server.poll() is None and time.time() - t < 150:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1)
            break
        except Exception:
            time.sleep(0.5)
    print(f"{package}: healthy after {time.time() - t:.1f} s", flush=True)
    return server, url


def main() -> None:
    old = sys.argv[1]
    if not os.path.exists(f"{CKPT}/config.json"):
        write = "from metainfer.testing import write_random_checkpoint as w; import torch; "
        write += f"w('{CKPT}', 'Qwen3-8B', dtype=torch.bfloat16, device='cuda')"
        subprocess.run([PY, "-c", write], check=True, env=env_for("."))
    for i, (label, package) in enumerate([("old", old), ("new", "."), ("old", old), ("new", ".")]):
        server, url = start_server(package, f"{OUT}/server-{label}-{i}.log")
        name = f"serve-ab-{label}-{i}"
        bench = [PY, "-m", "metainfer", "bench", "serve", "--base-url", url, "--concurrency"]
        bench += ["16,64", "--input-len", "256", "--output-len", "128", "--out", OUT]
        subprocess.run([*bench, "--name", name], env=env_for("."), timeout=120)
        server.terminate()
        server.wait(60)
        runs = json.load(open(f"{OUT}/{name}.json"))["runs"]
        print(label, i, json.dumps(runs)[:300], flush=True)


if __name__ == "__main__":
    main()
