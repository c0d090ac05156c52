"""Block-wise FP8 GEMMs of a throughput run's decode steps (32 to 256 rows) at Qwen3-8B's shapes,
36 layers' distinct weights captured in one CUDA graph (nothing stays in L2), in µs per call:
cuBLAS bf16; the package's `fp8_gemm` (activations quantized 1 x 128, then cuBLAS's block-scaled
GEMM); the same GEMM with its operands swapped (the weight as A, `(W xᵀ)ᵀ`, so the 4,096 to
24,576 weight rows fill cuBLAS's M tiles); per-token x per-channel (rowwise) both ways; and our
Triton FP8 kernel over its tiles. Each output's error against the dequantized product.
Usage: python gemm_rows_fp8.py OUT.json"""

import itertools
import json
import sys
import os
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "decode_probes"))
from graph_timing import graph_us  # noqa: E402
from metainfer.kernels import triton_linear as tl_  # noqa: E402
from metainfer.kernels.triton_launch import cdiv  # noqa: E402
from metainfer.layers.fp8 import Fp8Weight, expand_scale, quantize_fp8  # noqa: E402

dev, LAYERS, BF = torch.device("cuda"), 36, torch.bfloat16
SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}
ROWS = (32, 64, 128, 256)
TRITON = list(itertools.product((64, 128), (64, 128, 256), (4, 8), (3, 4)))  # BM, BN, warps, stages


def swapped(x, w: Fp8Weight):
    "`x Wᵀ` as `(W xᵀ)ᵀ`: block-wise 1 x 128 on both sides, the weight as A."
    M = x.shape[0]
    pad = -M % 16
    q, s = tl_.quantize_activations(F.pad(x, (0, 0, 0, pad)) if pad else x, 128, outer_major=True)
    out = torch._scaled_mm(w.data, q.T, w.scale_columns.t(), s.t(), out_dtype=BF)
    return out.t()[:M].contiguous()


def rowwise(x, qc, sc):
    q, s = tl_.quantize_activations(x, x.shape[1])
    return torch._scaled_mm(q, qc.T, scale_a=s, scale_b=sc.T, out_dtype=BF)


def rowwise_swapped(x, qc, sc):
    M = x.shape[0]
    pad = -M % 16
    q, s = tl_.quantize_activations(F.pad(x, (0, 0, 0, pad)) if pad else x, x.shape[1])
    out = torch._scaled_mm(qc, q.T, scale_a=sc, scale_b=s.T, out_dtype=BF)
    return out.t()[:M].contiguous()


def triton(x, w: Fp8Weight, bm, bn, warps, stages):
    (M, K), N = x.shape, w.shape[0]
    q, s = tl_.quantize_activations(x, 128)
    out = torch.empty(M, N, dtype=BF, device=dev)
    tl_._fp8_gemm_kernel[(cdiv(M, bm) * cdiv(N, bn),)](
        q, s, w.data, w.scale, out, M, N, K, q.stride(0), s.stride(0), w.data.stride(0),
        w.scale.stride(0), out.stride(0), PER_ROW=False, GROUP=128, BLOCK_M=bm, BLOCK_N=bn,
        BLOCK_K=128, GROUP_M=8, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


def timed(fn, ws, ref, x):
    "(µs a call over the 36 weights, relative error of the first) or the refusal."
    try:
        y = fn(x, ws[0]).float()
        err = None if ref is None else ((y - ref).norm() / ref.norm()).item()
        it = itertools.cycle(ws)
        return dict(us=round(graph_us(lambda: fn(x, next(it)), LAYERS, 10), 2), err=err)
    except Exception as e:  # noqa: BLE001 (a probe: record what refused)
        return dict(error=f"{type(e).__name__}: {str(e)[:160]}")


rows = []
for name, (N, K) in SHAPES.items():
    torch.manual_seed(0)
    fws, cws, bws = [], [], []
    for _ in range(LAYERS):
        w = torch.randn(N, K, device=dev) * 0.02
        qw, grid = quantize_fp8(w, (128, 128))
        fw = Fp8Weight(qw, expand_scale(grid, 128, N), 128)
        fw.scale_columns  # noqa: B018 (made before capture)
        fws.append(fw)
        cws.append(quantize_fp8(w, (1, K)))
        bws.append(w.to(BF))
        del w
    for M in ROWS:
        x = torch.randn(M, K, device=dev, dtype=BF)
        ref = x.float() @ fws[0].dequantize().T
        refc = x.float() @ (cws[0][0].float() * cws[0][1]).T
        row = dict(shape=name, N=N, K=K, M=M)
        row["bf16"] = timed(lambda x, w: F.linear(x, w), bws, x.float() @ bws[0].float().T, x)
        row["package"] = timed(lambda x, w: tl_.fp8_gemm(x, w), fws, ref, x)
        row["swapped"] = timed(swapped, fws, ref, x)
        row["rowwise"] = timed(lambda x, c: rowwise(x, *c), cws, refc, x)
        row["rowwise_swapped"] = timed(lambda x, c: rowwise_swapped(x, *c), cws, refc, x)
        row["quantize"] = timed(lambda x, w: tl_.quantize_activations(x, 128)[0], fws, None, x)
        best = None
        for bm, bn, warps, stages in TRITON:
            if bm > 64 and M < 128:
                continue
            r = timed(lambda x, w: triton(x, w, bm, bn, warps, stages), fws, ref, x)
            if "us" in r and r["err"] < 5e-2 and (best is None or r["us"] < best["us"]):
                best = dict(r, tiles=f"{bm}x{bn}x128 w{warps} s{stages}")
        row["triton_best"] = best
        rows.append(row)
        print(
            f"{name:8s} M {M:3d}",
            {k: v.get("us", v.get("error", "")[:40]) if isinstance(v, dict) else v
             for k, v in row.items() if k not in ("shape", "N", "K", "M")},
            best and best["tiles"],
            flush=True,
        )  # fmt: skip
    del fws, cws, bws
    torch.cuda.empty_cache()
out = dict(command="python tools/fp8_probes/gemm_rows_fp8.py", gpu=torch.cuda.get_device_name(),
           torch=torch.__version__, rows=rows)  # fmt: skip
json.dump(out, open(sys.argv[1], "w"), indent=1)
