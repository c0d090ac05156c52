"""FP8 GEMM tiles against cuBLAS bf16 at Qwen3-8B's shapes, in us (a probe, until a bench mode)."""

import json
import sys
import torch

from timing import eager_us  # this folder (the script's own) is on sys.path
from metainfer.kernels import triton_linear as tl_
from metainfer.kernels.triton_launch import cdiv
from metainfer.layers.fp8 import Fp8Weight, expand_scale, quantize_fp8


res = {}
for N, K in ((6144, 4096), (24576, 4096), (4096, 12288)):
    w = torch.randn(N, K, device="cuda")
    q, s = quantize_fp8(w, (128, 128))
    fw = Fp8Weight(q, expand_scale(s, 128, N), 128)
    wb = w.bfloat16()
    for M in (16, 256, 4096):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        row = {
            "bf16_mm": eager_us(lambda: x @ wb.T),
            "quant": eager_us(lambda: tl_.quantize_activations(x, 128)),
        }
        a, a_s = tl_.quantize_activations(x, 128)
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        for bm, bn, bk, nw, ns in (
            (16, 128, 128, 4, 4),
            (64, 128, 128, 4, 4),
            (128, 128, 128, 8, 4),
            (128, 128, 128, 4, 3),
            (64, 64, 128, 4, 4),
            (128, 256, 128, 8, 3),
            (64, 128, 128, 4, 3),
        ):
            if bm > max(16, M):
                continue
            tiles = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=nw, num_stages=ns)
            grid = (cdiv(M, bm) * cdiv(N, bn),)

            def go():
                tl_._fp8_gemm_kernel[grid](
                    a,
                    a_s,
                    fw.data,
                    fw.scale,
                    out,
                    M,
                    N,
                    K,
                    a.stride(0),
                    a_s.stride(0),
                    fw.data.stride(0),
                    fw.scale.stride(0),
                    out.stride(0),
                    PER_ROW=False,
                    GROUP=128,
                    **tiles,
                )

            try:
                row[f"{bm}x{bn}x{bk}w{nw}s{ns}"] = eager_us(go)
            except Exception as ex:
                row[f"{bm}x{bn}x{bk}w{nw}s{ns}"] = type(ex).__name__
        row["fp8_gemm_default"] = eager_us(lambda: tl_.fp8_gemm(x, fw))
        res[f"{M}x{N}x{K}"] = {
            k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()
        }
        print(f"{M}x{N}x{K}", res[f"{M}x{N}x{K}"], flush=True)
k = tl_._fp8_gemm_kernel
try:
    cache = list(k.device_caches[0][0].values()) if hasattr(k, "device_caches") else []
    if cache:
        asm = cache[-1].asm.get("ttgir", "")
        print("wgmma" in asm, "warp_group_dot" in asm, asm.count("tt.dot"))
except Exception as ex:
    print("asm?", ex)
json.dump(res, open(sys.argv[1], "w"), indent=1)
