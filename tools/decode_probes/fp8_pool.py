"""Paged decode at Qwen3-8B's shapes from a bf16 pool and from an FP8 one, 36 calls in one CUDA
graph, at batch 1, 64 and 256 (contexts U[100, 1024] plus what decoding adds): µs a layer, the K/V
bytes read per µs, and the error against torch's decode on the same pools (float32). Appends to
$OUT/decode-fp8-pool.json. Usage: python fp8_pool.py LABEL [old] (`old`: the FP8 pool's tiles
converted as the interpreter converts them, as before 12-06)."""

import json
import os
import random
import sys
import torch
from graph_timing import graph_us, paged_batch
from metainfer.layers.attention import KVScale, TorchAttention, to_cache
from metainfer.kernels.triton_decode import paged_decode
from metainfer.kernels import triton_paged_kv

if sys.argv[2:] == ["old"]:
    triton_paged_kv._NATIVE_FP8 = triton_paged_kv.tl.constexpr(False)

dev, label = torch.device("cuda"), sys.argv[1]
path = f"{os.environ.get('OUT', '/tmp')}/decode-fp8-pool.json"
rows = json.load(open(path)) if os.path.exists(path) else []
rng = random.Random(0)
H, Hk, D, bs = 32, 8, 128, 16
for B, grown in ((1, 300), (64, 300), (256, 0), (256, 500)):
    ctx = [rng.randint(100, 1024) + grown for _ in range(B)]
    kc, vc, meta, q, k, v = paged_batch(ctx, dev, H, Hk, D, bs)
    for pool in ("bf16", "fp8"):
        kz, vz = (x if pool == "bf16" else to_cache(x, torch.float8_e4m3fn) for x in (kc, vc))
        ref = TorchAttention.decode(
            q.float(), k.float(), v.float(), kz.clone(), vz.clone(), meta, 0.08, None, KVScale()
        )
        out = paged_decode(q, k, v, kz.clone(), vz.clone(), meta, 0.08)
        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        us = graph_us(lambda: paged_decode(q, k, v, kz, vz, meta, 0.08), 36, 20)
        kv_bytes = sum(ctx) * Hk * D * 2 * kz.element_size()
        rows.append(
            dict(
                package=label,
                B=B,
                mean_ctx=sum(ctx) / B,
                pool=pool,
                us=us,
                TBps=kv_bytes / us / 1e6,
                err=err,
            )
        )
        print(
            f"{label} B {B:3d} ctx {sum(ctx) / B:5.0f} {pool}: {us:7.1f} us "
            f"{kv_bytes / us / 1e6:5.2f} TB/s err {err:.1e}",
            flush=True,
        )
json.dump(rows, open(path, "w"), indent=1)
