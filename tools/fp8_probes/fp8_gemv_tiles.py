"""FP8 GEMV tile options at Qwen3-8B's shapes, in GB/s (a probe, until a bench mode)."""

import json
import sys
import torch
from metainfer.kernels import triton_gemv as tg
from metainfer.kernels.triton_launch import cdiv, next_pow2
from metainfer.layers.fp8 import Fp8Weight, expand_scale, quantize_fp8


def run(x, fw, tiles):
    N, K = fw.shape
    out = torch.empty(1, N, dtype=x.dtype, device=x.device)
    scale = fw.scale

    def go():
        tg._gemv_kernel[(cdiv(N, tiles["BLOCK_N"]),)](
            x,
            fw.data,
            None,
            out,
            None,
            None,
            None,
            None,
            None,
            scale,
            N,
            K,
            fw.data.stride(0),
            scale.stride(0),
            0.0,
            SCALE=1 if fw.group < K else 2,
            GROUP=fw.group if fw.group < K else 1,
            HAS_BIAS=False,
            SILU_MUL=False,
            NORM=False,
            HAS_RESIDUAL=False,
            PUSH_WORLD=1,
            PUSH_RANK=0,
            PUSH_BLOCK=0,
            BLOCK_X=1,
            PDL=False,
            **tiles,
        )

    for _ in range(3):
        go()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20):
            go()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    g.replay()
    torch.cuda.synchronize()
    s.record()
    g.replay()
    e.record()
    torch.cuda.synchronize()
    t = s.elapsed_time(e) / 1e3 / 20
    return (N * K + scale.numel() * 4) / t / 1e9, out


res = {}
for N, K in ((6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)):
    for block in ((128, 128), (1, K)):
        w = torch.randn(N, K, device="cuda")
        q, s = quantize_fp8(w, block)
        fw = Fp8Weight(q, expand_scale(s, block[0], N), block[1])
        x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
        ref = x.float() @ fw.dequantize().T
        row = {}
        for bn in (4, 8, 16, 32):
            for bk in (512, 1024, 2048, 4096):
                for nw in (4, 8):
                    if bk > next_pow2(K):
                        continue
                    try:
                        gbs, out = run(
                            x, fw, dict(BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=3)
                        )
                        ok = torch.allclose(out.float(), ref, atol=2e-2 * ref.abs().max().item())
                        row[f"{bn}x{bk}w{nw}"] = round(gbs) if ok else "bad"
                    except Exception as ex:
                        row[f"{bn}x{bk}w{nw}"] = type(ex).__name__
        best = sorted((v, k) for k, v in row.items() if isinstance(v, int))[-4:]
        res[f"{N}x{K} {'block' if block[0] > 1 else 'channel'}"] = {
            "best": best,
            "cur": row.get("8x1024w4"),
            "all": row,
        }
        print(
            f"{N}x{K} {block}",
            best,
            "cur 8x1024w4",
            row.get("8x1024w4"),
            "4x1024w4",
            row.get("4x1024w4"),
            flush=True,
        )
json.dump(res, open(sys.argv[1], "w"), indent=1)
