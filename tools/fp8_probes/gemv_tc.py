"""FP8 weights times up to 16 rows on the FP8 tensor cores, rows quantized in the kernel (a probe).

The package's FP8 GEMV converts each weight to float32 on the CUDA cores (4.8 instructions a
weight, issue-bound on an H200: 74 % of the roofline at B=1 against the bf16 GEMV's 88 %). Here the
weight tile is the MMA's A operand as it lies in memory (`[BLOCK_N, BLOCK_K]`, K contiguous: "swap
AB"), the rows are quantized to FP8 per 128 columns in the kernel (as the batched path quantizes
them, so no extra launch) and are the B operand; no instruction touches a weight but its load.
Sweeps tiles per Qwen3-8B shape and format, then the four GEMVs of 36 layers (distinct weights) in
one CUDA graph against the package's GEMV. Usage: python gemv_tc.py OUT.json
"""

import json
import sys
import time

import torch
import triton
import triton.language as tl

from metainfer.kernels.triton_launch import cdiv
from metainfer.layers.fp8 import quantize_fp8
from gemv_mma import DEV, SHAPES, gemv_launcher, graph_us, weights  # the first probe's helpers


@triton.jit
def gemv_tc_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_sn,
    stride_om,
    SCALE: tl.constexpr,  # 1: a scale per row and GROUP columns; 2: per row
    GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ONE_ROW: tl.constexpr,
    PDL: tl.constexpr,
):
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    valid = n < N
    k = tl.arange(0, BLOCK_K)
    m = tl.arange(0, 16)
    w_tile = w_ptr + n[:, None].to(tl.int64) * stride_wn + k[None, :]
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros([BLOCK_N, 16], tl.float32)
    for c in range(0, tl.cdiv(K, BLOCK_K)):
        kk = c * BLOCK_K + k
        w = tl.load(w_tile, mask=valid[:, None] & (kk < K)[None, :], other=0.0)
        if ONE_ROW:
            x = tl.load(x_ptr + kk, mask=kk < K, other=0.0).to(tl.float32)
            xs = tl.maximum(tl.max(tl.abs(x), 0) / 448.0, 1e-12)
            xq = (x / xs).to(w_ptr.dtype.element_ty)
            xq = tl.where((m == 0)[:, None], xq[None, :], 0.0).to(w_ptr.dtype.element_ty)
            d = tl.dot(w, tl.trans(xq)) * xs
        else:
            x = tl.load(
                x_ptr + m[:, None] * stride_xm + kk[None, :],
                mask=(m < M)[:, None] & (kk < K)[None, :],
                other=0.0,
            ).to(tl.float32)
            xs = tl.maximum(tl.max(tl.abs(x), 1) / 448.0, 1e-12)
            xq = (x / xs[:, None]).to(w_ptr.dtype.element_ty)
            d = tl.dot(w, tl.trans(xq)) * xs[None, :]
        if SCALE == 1:
            s = tl.load(s_ptr + n * stride_sn + (c * BLOCK_K) // GROUP, mask=valid, other=0.0)
            d = d * s[:, None]
        acc += d
        w_tile += BLOCK_K
    if SCALE == 2:
        acc *= tl.load(s_ptr + n * stride_sn, mask=valid, other=0.0)[:, None]
    o = out_ptr + m[None, :] * stride_om + n[:, None]
    tl.store(o, acc.to(out_ptr.dtype.element_ty), mask=valid[:, None] & (m < M)[None, :])


def tc_launcher(x, fw, out, tiles, pdl, one_row):
    pdl = pdl and DEV == "cuda"
    (N, K), (M, _) = fw.data.shape, x.shape
    block = fw.group < K
    grid = (cdiv(N, tiles["BLOCK_N"]),)

    def go(w, s):
        gemv_tc_kernel[grid](
            x,
            w,
            s,
            out,
            M,
            N,
            K,
            x.stride(0),
            w.stride(0),
            s.stride(0),
            out.stride(0),
            SCALE=1 if block else 2,
            GROUP=fw.group if block else 1,
            BLOCK_N=tiles["BLOCK_N"],
            BLOCK_K=128,
            ONE_ROW=one_row and M == 1,
            PDL=pdl,
            num_warps=tiles["num_warps"],
            num_stages=tiles["num_stages"],
            launch_pdl=pdl,
        )

    return go


TILES = [
    dict(BLOCK_N=bn, num_warps=nw, num_stages=ns)
    for bn, nw, ns in (
        (16, 4, 4),
        (32, 4, 3),
        (32, 4, 4),
        (32, 4, 6),
        (64, 4, 4),
        (64, 4, 6),
        (64, 8, 4),
    )
]
if DEV == "cpu":
    TILES = TILES[:2]


def reference(x, fw):
    "Rows quantized per 128 columns, as the kernel does, times the dequantized weight."
    xq, xs = quantize_fp8(x.float(), (1, 128))
    xd = (xq.float().view(x.shape[0], -1, 128) * xs[..., None]).view(x.shape)
    return xd @ fw.dequantize(torch.float32).T


def tag(t, one_row):
    return f"tc {t['BLOCK_N']}n w{t['num_warps']} s{t['num_stages']}{' row' if one_row else ''}"


def main(out_path):
    res = {
        "gpu": DEV == "cuda" and torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "shapes": {},
        "chain": {},
    }
    t0, best = time.time(), {}
    for name, (N, K) in SHAPES.items():
        for block in (True, False):
            key = f"{name} {'block' if block else 'channel'}"
            fw, ws = weights(N, K, block, copies=max(4, 2 * 128 * 2**20 // (N * K)))
            row = {}
            for M in (1, 4):
                x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
                ref = reference(x, fw)
                out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
                if M == 1:
                    cur = gemv_launcher(x, fw, True)
                    row["gemv"] = graph_us([lambda w=w, s=s: cur(w, s) for w, s in ws])
                for t in TILES if M == 1 else TILES[2:3]:
                    for one_row in (True, False) if M == 1 else (False,):
                        tg = tag(t, one_row) + ("" if M == 1 else f" M{M}")
                        try:
                            go = tc_launcher(x, fw, out, t, True, one_row)
                            row[tg] = graph_us([lambda w=w, s=s: go(w, s) for w, s in ws])
                            e = (out.float() - ref).abs().max().item() / ref.abs().max().item()
                            row[tg + " err"] = e
                            if e > 5e-2:  # x in FP8: ~1 %; a wrong kernel: ~100 %
                                row[tg] = f"bad {e:.3g}"
                        except Exception as ex:  # a tile that does not compile or fit
                            row[tg] = f"{type(ex).__name__}: {str(ex)[:100]}"
            nbytes = N * K + fw.scale.numel() * 4
            us = {
                k: v
                for k, v in row.items()
                if isinstance(v, float) and "err" not in k and " M" not in k
            }
            ranked = sorted(us.items(), key=lambda kv: kv[1])
            res["shapes"][key] = {
                "bytes": nbytes,
                "us": row,
                "TBps": {k: nbytes / v / 1e6 for k, v in ranked[:6]},
            }
            best[key] = next((t for t, _ in ranked if t.startswith("tc")), None)
            print(
                key,
                "gemv %.2f TB/s" % (nbytes / row["gemv"] / 1e6),
                "best",
                ranked[0][0],
                "%.2f TB/s" % (nbytes / ranked[0][1] / 1e6),
                f"({time.time() - t0:.0f} s)",
                flush=True,
            )
            del ws
            if DEV == "cuda":
                torch.cuda.empty_cache()
    res["best"] = best
    json.dump(res, open(out_path, "w"), indent=1)
    for block in (True, False):
        fmt = "block" if block else "channel"
        layers = {name: weights(N, K, block, copies=36) for name, (N, K) in SHAPES.items()}
        xs = {
            n: torch.randn(1, K, device=DEV, dtype=torch.bfloat16) for n, (N, K) in SHAPES.items()
        }
        outs = {
            n: torch.empty(1, N, device=DEV, dtype=torch.bfloat16) for n, (N, K) in SHAPES.items()
        }
        nbytes = 36 * sum(N * K + layers[n][0].scale.numel() * 4 for n, (N, K) in SHAPES.items())
        for variant in ("gemv", "tc-best"):
            calls = []
            for i in range(36):
                for name, (N, K) in SHAPES.items():
                    fw, ws = layers[name]
                    if variant == "gemv":
                        go = gemv_launcher(xs[name], fw, True)
                    else:
                        b = best[f"{name} {fmt}"] or "tc 32n w4 s4"
                        bn, nw, ns = (int(p.strip("nws")) for p in b.split()[1:4])
                        t = dict(BLOCK_N=bn, num_warps=nw, num_stages=ns)
                        go = tc_launcher(xs[name], fw, outs[name], t, True, b.endswith("row"))
                    calls.append(lambda go=go, w=ws[i][0], s=ws[i][1]: go(w, s))
            us = graph_us(calls) * len(calls)
            res["chain"][f"{fmt} {variant}"] = {"us_per_step": us, "TBps": nbytes / us / 1e6}
            print(
                "chain", fmt, variant, f"{us:.0f} us/step {nbytes / us / 1e6:.2f} TB/s", flush=True
            )
        del layers
        if DEV == "cuda":
            torch.cuda.empty_cache()
        json.dump(res, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
