"""Two levers on a Qwen3-8B decode step at 64-256 rows, timed on the GPU (36 layers in one graph):
1. GEMMs: cuBLAS as the engine calls it, cuBLAS with `preferred_blas_library("cublaslt")`, and
   PyTorch's TunableOp (which benchmarks the BLAS candidates it knows for each shape).
2. Paged decode attention: tile (tokens per K/V tile), warps and stages, with block tables in
   allocation order and shuffled.
Writes $OUT/step-levers-qwen3-8b.json. The committed JSON (docs/benchmarks/h200-2026-12-04-defaults/
decode-ab/) also has `heads_first` rows: they compared the kernel's grid `(B, Hk, splits)` (False)
with `(Hk, B, splits)` (True) through a flag that existed only for that run; the kernel now always
launches `(Hk, B, splits)`, so this script times that order alone."""

import json
import os
import random
import sys
import torch
import torch.nn.functional as F
from graph_timing import graph_us
from metainfer.layers.attention import make_metadata
from metainfer.kernels.triton_decode import paged_decode
from metainfer.kernels.triton_split_kv import decode_splits

dev = torch.device("cuda")
OUT = os.environ.get("OUT", "/tmp")
LAYERS = 36
SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}
ROWS = (128, 136, 160, 192, 224, 256)
res = {"gemm": [], "attention": [], "torch": torch.__version__}


def gemm_times(mode: str) -> None:
    for name, (N, K) in SHAPES.items():
        ws = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(LAYERS)]
        for M in ROWS:
            x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
            for w in ws[:2]:
                F.linear(x, w)  # (TunableOp tunes on first sight, outside the graph)
            i = [0]

            def call():
                i[0] = (i[0] + 1) % LAYERS
                return F.linear(x, ws[i[0]])

            us = graph_us(call, LAYERS, 10)
            res["gemm"].append(dict(mode=mode, shape=name, M=M, us=us))
            print(f"{mode:9s} {name:8s} M {M:3d} {us:7.1f} us", flush=True)


gemm_times("cublas")
try:
    torch.backends.cuda.preferred_blas_library("cublaslt")
    gemm_times("cublaslt")
finally:
    torch.backends.cuda.preferred_blas_library("cublas")
try:
    import torch.cuda.tunable as tunable

    tunable.enable(True)
    tunable.tuning_enable(True)
    tunable.set_filename(f"{OUT}/tunableop-results.csv")
    gemm_times("tunableop")
    res["tunableop_results"] = [list(map(str, r)) for r in tunable.get_results()]
    tunable.enable(False)
except Exception as e:
    res["tunableop_error"] = repr(e)
    print("tunableop", repr(e), file=sys.stderr)

rng = random.Random(0)
H, Hk, D, bs = 32, 8, 128, 16
CONFIGS = [(32, 4, 2), (32, 4, 3), (64, 4, 2), (64, 4, 3), (64, 8, 3), (16, 4, 3)]
# (block_n, num_warps, num_stages)
for B, phase in ((256, 0.0), (256, 0.5), (192, 0.6), (160, 0.7), (128, 0.8), (64, 0.9)):
    ctx = [rng.randint(100, 1024) + int(phase * rng.randint(100, 1024)) for _ in range(B)]
    n_blocks = [-(-c // bs) for c in ctx]
    total = sum(n_blocks) + 8
    kc = torch.randn(total, bs, Hk, D, device=dev, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    q = torch.randn(B, H, D, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hk, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
    kv_bytes = sum(ctx) * Hk * D * 2 * 2
    for layout in ("in order", "shuffled"):
        ids = list(range(total))
        if layout == "shuffled":
            rng.shuffle(ids)
        tables = [ids[sum(n_blocks[:i]) : sum(n_blocks[: i + 1])] for i in range(B)]
        _, meta = make_metadata(tables, ctx, [1] * B, bs, False, dev)
        S = decode_splits(B, Hk, 40960, dev)
        ref = paged_decode(q, k, v, kc, vc, meta, 0.08, num_splits=S)
        for bn, warps, stages in CONFIGS:
            kw = dict(num_splits=S, block_n=bn, num_warps=warps, num_stages=stages)
            try:
                out = paged_decode(q, k, v, kc, vc, meta, 0.08, **kw)
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                us = graph_us(lambda: paged_decode(q, k, v, kc, vc, meta, 0.08, **kw), LAYERS, 20)
            except Exception as e:
                print(B, layout, kw, "failed", repr(e)[:100], flush=True)
                continue
            row = dict(B=B, phase=phase, layout=layout, **kw, us=us, err=err)
            row |= dict(TBps=kv_bytes / us / 1e6, mean_ctx=sum(ctx) / B)
            res["attention"].append(row)
            print(
                f"B {B:3d} ctx {sum(ctx) / B:5.0f} {layout:8s} S {S} tile {bn:2d} w {warps} "
                f"st {stages}: {us:6.1f} us {kv_bytes / us / 1e6:4.2f} TB/s "
                f"err {err:.0e}",
                flush=True,
            )
json.dump(res, open(f"{OUT}/step-levers-qwen3-8b.json", "w"), indent=1)
