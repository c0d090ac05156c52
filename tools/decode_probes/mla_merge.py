"""Decode attention probes on the GPU. First MLA decode + merge at a batch of one, 27 calls
captured in one graph: this package's merge against an older copy, `old_mla.py` beside this file,
made by `git show 2c25b2a:metainfer/kernels/triton_mla_decode.py` with its relative imports made
absolute (`from metainfer.`...). Then paged K/V decode variants at Qwen3-8B's shapes (tile,
stages, pieces), timed by `triton.testing.do_bench` one call at a time (so host launch costs count
at small batches). Writes $OUT/probe.json (docs/benchmarks/h200-2026-12-03-defaults/
decode-probe.json)."""

import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(__file__))
import torch
from triton.testing import do_bench
from graph_timing import graph_us
from metainfer.layers.attention import make_metadata
import metainfer.kernels.triton_mla_decode as new_mla
import old_mla
from metainfer.kernels.triton_decode import paged_decode
from metainfer.kernels.triton_split_kv import decode_splits

dev = torch.device("cuda")
res = {}


def mla_case(ctx, B=1, H=16, r=512, dr=64, bs=16):
    n_blocks = [-(-c // bs) for c in ctx]
    ids = torch.randperm(sum(n_blocks) + 8).tolist()
    tables = [ids[sum(n_blocks[:i]) : sum(n_blocks[: i + 1])] for i in range(len(ctx))]
    cache = torch.randn(len(ids), bs, 1, r + dr, device=dev, dtype=torch.bfloat16)
    _, meta = make_metadata(tables, list(ctx), [1] * len(ctx), bs, False, dev)
    q = torch.randn(len(ctx), H, r, device=dev, dtype=torch.bfloat16)
    q_pe = torch.randn(len(ctx), H, dr, device=dev, dtype=torch.bfloat16)
    return q, q_pe, cache, meta


rows = []
for ctx in (128, 256, 400, 640, 2048):
    q, q_pe, cache, meta = mla_case([ctx])
    for max_len in (163840, 4096):
        meta.max_seqlen_k = max_len
        ref = old_mla.mla_decode_latent(q, q_pe, cache, meta, 0.1)
        for name, mod, tile in (
            ("old", old_mla, None),
            ("new8k", new_mla, 8192),
            ("new4k", new_mla, 4096),
            ("new16k", new_mla, 16384),
        ):
            if tile:
                mod._MERGE_TILE = tile
            out = mod.mla_decode_latent(q, q_pe, cache, meta, 0.1)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            us = graph_us(lambda: mod.mla_decode_latent(q, q_pe, cache, meta, 0.1), 27, 30)
            rows.append(dict(ctx=ctx, max_len=max_len, variant=name, us=us, err=err))
            print(
                f"MLA ctx {ctx:5d} max_len {max_len:6d} {name:6s} {us:6.2f} us/layer err {err:.1e}",
                flush=True,
            )
new_mla._MERGE_TILE = 8192
res["mla_b1"] = rows

# GQA decode at big batches, Qwen3-8B shapes
rows = []
rng = random.Random(0)
for B, phase in ((256, 0.0), (256, 0.5), (128, 0.8), (32, 0.9)):
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
    S0 = decode_splits(B, Hk, 40960, dev)
    ref = paged_decode(q, k, v, kc, vc, meta, 0.08)
    variants = {
        "default": {},
        "bn64": dict(block_n=64),
        "st3": dict(num_stages=3),
        "bn64st3": dict(block_n=64, num_stages=3),
        "w8bn64": dict(num_warps=8, block_n=64),
        "bn16st4": dict(block_n=16, num_stages=4),
    }
    for S, ms in ((2, 512), (4, 256), (4, 512), (8, 256), (8, 128), (16, 128)):
        variants[f"S{S}m{ms}"] = dict(num_splits=max(S, S0), min_split=ms)
        variants[f"S{S}m{ms}bn64"] = dict(num_splits=max(S, S0), min_split=ms, block_n=64)
    for name, kw in variants.items():
        try:
            out = paged_decode(q, k, v, kc, vc, meta, 0.08, **kw)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            us = (
                do_bench(
                    lambda: paged_decode(q, k, v, kc, vc, meta, 0.08, **kw),
                    warmup=50,
                    rep=300,
                    return_mode="median",
                )
                * 1e3
            )
        except Exception as e:
            print("FAIL", name, repr(e)[:200])
            continue
        rows.append(
            dict(
                B=B,
                phase=phase,
                variant=name,
                us=us,
                TBps=kv_bytes / us / 1e6,
                err=err,
                sum_ctx=sum(ctx),
                max_ctx=max(ctx),
            )
        )
        print(
            f"GQA B {B} phase {phase} S0 {S0} {name:12s} {us:8.1f} us "
            f"{kv_bytes / us / 1e6:5.2f} TB/s err {err:.1e}",
            flush=True,
        )
res["gqa"] = rows
out = os.environ.get("OUT", "/tmp")
json.dump(res, open(f"{out}/probe.json", "w"), indent=1)
