"""Paged decode tiles per pool dtype: the engine's choice (`paged_decode`'s defaults) against
every K/V tile length, warp count and pipeline depth, from a bf16 pool and an FP8 one, at
Qwen3-8B's shapes, 36 calls in one CUDA graph, at the batches of a throughput run's decode
steps (64 and 256 sequences, contexts U[100, 1024] plus what decoding adds). Reports µs a layer
and K/V TB/s; appends to $OUT/decode-pool-tiles.json. Usage: python pool_tiles.py LABEL [fp8]
(`fp8`: the FP8 pool alone, at 1 to 256 sequences, against the tiles the engine might pick)."""

import itertools
import json
import os
import random
import sys
import torch
from graph_timing import graph_us, paged_batch
from metainfer.layers.attention import to_cache
from metainfer.kernels.triton_decode import paged_decode

dev, label = torch.device("cuda"), sys.argv[1]
path = f"{os.environ.get('OUT', '/tmp')}/decode-pool-tiles.json"
rows = json.load(open(path)) if os.path.exists(path) else []
rng = random.Random(0)
H, Hk, D, bs = 32, 8, 128, 16
FP8_ONLY = sys.argv[2:] == ["fp8"]
TILES = [("engine", {})] + [
    (f"n{n} w{w} s{s}", dict(block_n=n, num_warps=w, num_stages=s))
    for n, w, s in itertools.product((32, 64, 128), (4,) if FP8_ONLY else (4, 8), (2, 3))
]
BATCHES = (
    ((1, 300), (16, 300), (32, 300), (64, 300), (256, 0))
    if FP8_ONLY
    else ((64, 300), (256, 0), (256, 500))
)
for B, grown in BATCHES:
    ctx = [rng.randint(100, 1024) + grown for _ in range(B)]
    kc, vc, meta, q, k, v = paged_batch(ctx, dev, H, Hk, D, bs)
    for pool in ("fp8",) if FP8_ONLY else ("bf16", "fp8"):
        kz, vz = (x if pool == "bf16" else to_cache(x, torch.float8_e4m3fn) for x in (kc, vc))
        ref = paged_decode(q, k, v, kz.clone(), vz.clone(), meta, 0.08).float()
        kv_bytes = sum(ctx) * Hk * D * 2 * kz.element_size()
        for name, kw in TILES:
            try:
                out = paged_decode(q, k, v, kz.clone(), vz.clone(), meta, 0.08, **kw).float()
                us = graph_us(lambda: paged_decode(q, k, v, kz, vz, meta, 0.08, **kw), 36, 20)
            except Exception as e:  # a tile past the shared memory
                print(B, pool, name, "failed", repr(e)[:80], flush=True)
                continue
            err = ((out - ref).norm() / ref.norm()).item()
            rows.append(
                dict(package=label, B=B, mean_ctx=sum(ctx) / B, pool=pool, tiles=name, **kw,
                     us=us, TBps=kv_bytes / us / 1e6, err=err)
            )  # fmt: skip
        mine = [r for r in rows if r["package"] == label and r["B"] == B and r["pool"] == pool]
        mine = [r for r in mine if abs(r["mean_ctx"] - sum(ctx) / B) < 1e-6]
        eng = next(r for r in mine if r["tiles"] == "engine")
        best = sorted(mine, key=lambda r: r["us"])[:4]
        print(
            f"{label} B {B} ctx {sum(ctx) / B:.0f} {pool}: engine {eng['us']:.1f} us "
            f"({eng['TBps']:.2f} TB/s); best",
            [(r["tiles"], round(r["us"], 1), f"{r['err']:.0e}") for r in best],
            flush=True,
        )
json.dump(rows, open(path, "w"), indent=1)
