"""One launch of gemv_mma's kernel per process (a config that faults cannot poison the others).
Usage: python gemv_mma_debug.py  -> one line per config: ok/err and the relative error."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

CONFIGS = [
    (bn, nw, ns, peel, pdl, block)
    for bn in (16, 64)
    for nw in (1, 4)
    for ns in (3,)
    for peel in (0, 1)
    for pdl in (0, 1)
    for block in (1,)
] + [(32, 2, 5, 1, 1, 0), (32, 4, 5, 0, 0, 0)]

ONE = """
import sys, torch
sys.path.insert(0, 'tools/fp8_probes')
import gemv_mma as g
bn, nw, ns, peel, pdl, block = map(int, sys.argv[1:])
N, K = 6144, 4096
fw, ws = g.weights(N, K, bool(block), 1)
x = torch.randn(1, K, device='cuda', dtype=torch.bfloat16)
ref = x.float() @ fw.dequantize(torch.float32).T
out = torch.empty(1, N, device='cuda', dtype=torch.bfloat16)
go = g.mma_launcher(x, fw, out, dict(BLOCK_N=bn, num_warps=nw, num_stages=ns, BLOCK_K=128),
                    bool(pdl), bool(peel))
go(*ws[0]); torch.cuda.synchronize()
print('ok rel err %.3g' % ((out.float() - ref).abs().max() / ref.abs().max()).item())
"""


def run(c):
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    p = subprocess.run(
        [sys.executable, "-c", ONE, *map(str, c)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    last = (p.stdout.strip().splitlines() or [""])[-1]
    err = [l for l in p.stderr.splitlines() if "Error" in l or "error" in l][-2:]
    return (
        f"bn{c[0]} w{c[1]} s{c[2]} peel{c[3]} pdl{c[4]} block{c[5]}: rc {p.returncode} {last} {err}"
    )


with ThreadPoolExecutor(8) as ex:
    for line in ex.map(run, CONFIGS):
        print(line, flush=True)
