"""Paged K/V decode at Qwen3-8B's shapes on the GPU, 36 calls captured in one graph (a step's
layers): the engine's piece rule (`decode_splits`' count, pieces of at least one 32-token tile)
against a rule tried on 2026-12-03 and not kept (`tried_pieces`: at least 4 pieces, and pieces of
256 tokens or more once the batch alone fills the GPU). Writes $OUT/decode-pieces-qwen3-8b.json."""

import json
import os
import random
import torch
from graph_timing import graph_us
from metainfer.layers.attention import make_metadata
from metainfer.kernels.triton_decode import paged_decode
from metainfer.kernels.triton_split_kv import decode_splits

dev = torch.device("cuda")


def tried_pieces(batch, kv_heads, max_context, device):
    "(most pieces, fewest tokens a piece) of the tried rule."
    fills = decode_splits(batch, kv_heads, 1 << 30, device) < 4
    pieces = min(max(decode_splits(batch, kv_heads, 1 << 30, device), 4), -(-max_context // 256))
    return max(1, min(pieces, 128)), 256 if fills else 32


rows, rng = [], random.Random(0)
for B, phase in (
    (256, 0.0),
    (256, 0.5),
    (192, 0.6),
    (128, 0.8),
    (96, 0.8),
    (64, 0.9),
    (32, 0.9),
    (16, 1.0),
    (4, 1.0),
    (1, 0.3),
):
    ctx = [rng.randint(100, 1024) + int(phase * rng.randint(100, 1024)) for _ in range(B)]
    H, Hk, D, bs = 32, 8, 128, 16
    n_blocks = [-(-c // bs) for c in ctx]
    ids = torch.randperm(sum(n_blocks) + 8).tolist()
    tables = [ids[sum(n_blocks[:i]) : sum(n_blocks[: i + 1])] for i in range(B)]
    kc = torch.randn(len(ids), bs, Hk, D, device=dev, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    _, meta = make_metadata(tables, ctx, [1] * B, bs, False, dev)
    meta.max_seqlen_k = 40960
    q = torch.randn(B, H, D, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hk, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
    kv_bytes = sum(ctx) * Hk * D * 2 * 2
    old = dict(num_splits=decode_splits(B, Hk, 40960, dev), min_split=32)
    new = dict(zip(("num_splits", "min_split"), tried_pieces(B, Hk, 40960, dev)))
    ref = paged_decode(q, k, v, kc, vc, meta, 0.08, **old)
    for name, kw in (("old", old), ("new", new)):
        out = paged_decode(q, k, v, kc, vc, meta, 0.08, **kw)
        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        us = graph_us(lambda: paged_decode(q, k, v, kc, vc, meta, 0.08, **kw), 36, 20)
        rows.append(
            dict(
                B=B,
                phase=phase,
                rule=name,
                **kw,
                us=us,
                TBps=kv_bytes / us / 1e6,
                err=err,
                mean_ctx=sum(ctx) / B,
                max_ctx=max(ctx),
            )
        )
        print(
            f"B {B:3d} mean ctx {sum(ctx) / B:6.0f} max {max(ctx):5d} {name} {kw} {us:7.1f} us "
            f"{kv_bytes / us / 1e6:5.2f} TB/s err {err:.1e}",
            flush=True,
        )
json.dump(rows, open(f"{os.environ.get('OUT', '/tmp')}/decode-pieces-qwen3-8b.json", "w"), indent=1)
