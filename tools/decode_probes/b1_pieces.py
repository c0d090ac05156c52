"""Batch-1 paged decode at Qwen3-8B's shapes (32 query heads, 8 K/V heads, 128 dims, bf16), 36
calls in one CUDA graph (a step's layers): the engine's pieces (`decode_splits` from max_model_len,
as the graphs take it, pieces of at least 32 tokens, 32-token tiles) against fewer pieces, longer
pieces and other tiles, at 256 to 8,192 tokens of context. Writes $OUT/decode-b1-qwen3-8b.json."""

import json
import os
import torch
from graph_timing import graph_us
from metainfer.layers.attention import make_metadata
from metainfer.kernels.triton_decode import paged_decode
from metainfer.kernels.triton_split_kv import decode_splits

dev = torch.device("cuda")
H, Hk, D, bs, MAX_LEN = 32, 8, 128, 16, 40960
engine = dict(num_splits=decode_splits(1, Hk, MAX_LEN, dev), min_split=32, block_n=32)
VARIANTS = (
    [("engine", engine)]
    + [
        (f"S{s} min{m} n{n} w{w}", dict(num_splits=s, min_split=m, block_n=n, num_warps=w))
        for s in (4, 8, 16, 32)
        for m in (32, 128)
        for n in (32, 64)
        for w in (4,)
    ]
    + [("S16 min32 n32 w2", dict(num_splits=16, min_split=32, block_n=32, num_warps=2))]
)
rows = []
for ctx in (256, 512, 1024, 2048, 8192):
    n_blocks = -(-ctx // bs)
    kc = torch.randn(n_blocks + 4, bs, Hk, D, device=dev, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    _, meta = make_metadata([list(range(n_blocks))], [ctx], [1], bs, False, dev)
    meta.max_seqlen_k = MAX_LEN
    q = torch.randn(1, H, D, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(1, Hk, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
    ref = paged_decode(q, k, v, kc, vc, meta, 0.08, **engine).float()
    for name, kw in VARIANTS:
        out = paged_decode(q, k, v, kc, vc, meta, 0.08, **kw).float()
        err = ((out - ref).norm() / ref.norm()).item()
        us = graph_us(lambda: paged_decode(q, k, v, kc, vc, meta, 0.08, **kw), 36, 20)
        rows.append(dict(ctx=ctx, variant=name, **kw, us=us, err=err))
    best = sorted((r for r in rows if r["ctx"] == ctx), key=lambda r: r["us"])[:3]
    eng = next(r for r in rows if r["ctx"] == ctx and r["variant"] == "engine")
    print(
        f"ctx {ctx}: engine {eng['us']:.2f} us; best",
        [(r["variant"], round(r["us"], 2)) for r in best],
        flush=True,
    )
json.dump(rows, open(f"{os.environ.get('OUT', '/tmp')}/decode-b1-qwen3-8b.json", "w"), indent=1)
