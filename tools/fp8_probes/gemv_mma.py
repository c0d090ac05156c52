"""FP8 weights times one row on tensor cores against the FP8 GEMV, at Qwen3-8B's shapes (a probe).

The package's FP8 GEMV converts each weight to float32 and multiplies on the CUDA cores: 4.8 PTX
instructions a weight in its loop (sm_90; 1.6x the bf16 GEMV's per byte). The candidate here sends
each weight tile through shared memory (cp.async, pipelined) into `mma.sync` as bfloat16 (fp8 ->
bf16 is exact), the row padded to the MMA's 16; `PEEL` loads the first tile before the PDL wait.
Tiles are swept per Qwen3-8B shape; then the four GEMVs of 36 layers (distinct weights, none read
from L2) run in one CUDA graph with each kernel. On an H100 (12-06,
docs/benchmarks/h100-2026-12-06-fp8): 2x slower than the package's GEMV, and the peeled kernel's
sums are wrong on sm_90 (see gemv_mma_debug.py); not kept.
Usage: [PROBE_QUICK=1] python gemv_mma.py OUT.json
"""

import json
import os
import sys
import time
import torch
import triton
import triton.language as tl
from metainfer.kernels import triton_gemv as old  # the package's FP8 GEMV (CUDA cores)

from metainfer.kernels.triton_launch import cdiv
from metainfer.layers.fp8 import Fp8Weight, expand_scale, quantize_fp8


@triton.jit
def _mma_chunk(
    x_ptr,
    cols,
    s_ptr,
    n,
    valid,
    m,
    k,
    c,
    K,
    stride_sn,
    w,
    SCALE: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    kk = c * BLOCK_K + k
    x = tl.load(
        x_ptr + m[:, None] * 0 + kk[None, :], mask=(m[:, None] == 0) & (kk < K)[None, :], other=0.0
    )
    if DOT_F32:  # Triton's interpreter multiplies bfloat16 tiles wrongly
        d = tl.dot(x.to(tl.float32), w.to(tl.float32))
    else:
        d = tl.dot(x, w.to(tl.bfloat16))
    if SCALE == 1:
        s = tl.load(s_ptr + n * stride_sn + (c * BLOCK_K) // GROUP, mask=valid, other=0.0)
        d = d * s[None, :]
    return d


@triton.jit
def gemv_mma_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    out_ptr,
    N,
    K,
    stride_wn,
    stride_sn,
    SCALE: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PEEL: tl.constexpr,
    PDL: tl.constexpr,
    DOT_F32: tl.constexpr = False,
):
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    valid = n < N
    k = tl.arange(0, BLOCK_K)
    m = tl.arange(0, 16)
    cols = w_ptr + n[None, :].to(tl.int64) * stride_wn
    if PEEL:  # the first tile before the wait; its product after the loop
        w0 = tl.load(cols + k[:, None], mask=valid[None, :] & (k < K)[:, None], other=0.0)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros([16, BLOCK_N], tl.float32)
    for c in range(PEEL, tl.cdiv(K, BLOCK_K)):
        kk = c * BLOCK_K + k
        w = tl.load(cols + kk[:, None], mask=valid[None, :] & (kk < K)[:, None], other=0.0)
        acc += _mma_chunk(
            x_ptr, cols, s_ptr, n, valid, m, k, c, K, stride_sn, w, SCALE, GROUP, BLOCK_K, DOT_F32
        )
    if PEEL:
        acc += _mma_chunk(
            x_ptr, cols, s_ptr, n, valid, m, k, 0, K, stride_sn, w0, SCALE, GROUP, BLOCK_K, DOT_F32
        )
    y = tl.sum(acc, 0)
    if SCALE == 2:
        y *= tl.load(s_ptr + n * stride_sn, mask=valid, other=0.0)
    tl.store(out_ptr + n, y.to(out_ptr.dtype.element_ty), mask=valid)


def mma_launcher(x, fw, out, tiles, pdl, peel):
    pdl = pdl and DEV == "cuda"
    N, K = fw.data.shape
    block = fw.group < K
    bk = 128 if block else tiles["BLOCK_K"]
    grid = (cdiv(N, tiles["BLOCK_N"]),)

    def go(w, s):
        gemv_mma_kernel[grid](
            x,
            w,
            s,
            out,
            N,
            K,
            w.stride(0),
            s.stride(0),
            SCALE=1 if block else 2,
            GROUP=fw.group if block else 1,
            BLOCK_N=tiles["BLOCK_N"],
            BLOCK_K=bk,
            PEEL=peel,
            PDL=pdl,
            DOT_F32=not x.is_cuda,
            num_warps=tiles["num_warps"],
            num_stages=tiles["num_stages"],
            launch_pdl=pdl,
        )

    return go


def gemv_launcher(x, fw, pdl):
    "The package's FP8 GEMV as the engine calls it (`gemv`, its own tiles); each call's output."
    pdl = pdl and DEV == "cuda"
    return lambda w, s: old.gemv(x, Fp8Weight(w, s, fw.group), use_pdl=pdl)


def graph_us(calls, reps=3):
    """µs per launch of `calls` (a list of thunks) captured in one CUDA graph, best of `reps`."""
    if DEV == "cpu":
        for c in calls[:2]:
            c()
        return 1.0
    for c in calls[:2]:
        c()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    best = 1e9
    for _ in range(reps):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        best = min(best, s.elapsed_time(e) * 1e3 / len(calls))
    return best


SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}
NT = 99 if torch.cuda.is_available() else 2
QUICK = int(os.environ.get("PROBE_QUICK", "0"))  # 1: no peeled kernels (wrong on sm_90, 12-06)
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run on the interpreter
if DEV == "cpu":
    SHAPES = {k: (n // 64, k_ // 32) for k, (n, k_) in SHAPES.items()}


def weights(N, K, block, copies):
    w = torch.randn(N, K, device=DEV) * 0.02
    q, s = quantize_fp8(w, (128, 128) if block else (1, K))
    fw = Fp8Weight(q, expand_scale(s, 128 if block else 1, N), 128 if block else K)
    return fw, [(fw.data.clone(), fw.scale.clone()) for _ in range(copies)]


def main(out_path):
    res = {
        "gpu": DEV == "cuda" and torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "shapes": {},
        "chain": {},
    }
    t0 = time.time()
    mma_tiles = [
        dict(BLOCK_N=bn, num_warps=nw, num_stages=ns, BLOCK_K=128)
        for bn in (16, 32, 64)
        for nw in (2, 4)
        for ns in (3, 5)
    ][:NT]
    best = {}
    for name, (N, K) in SHAPES.items():
        for block in (True, False):
            key = f"{name} {'block' if block else 'channel'}"
            fw, ws = weights(N, K, block, copies=max(4, 2 * 128 * 2**20 // (N * K)))
            x = torch.randn(1, K, device=DEV, dtype=torch.bfloat16)
            ref = x.float() @ fw.dequantize(torch.float32).T
            out = torch.empty(1, N, device=DEV, dtype=torch.bfloat16)
            nbytes = N * K + fw.scale.numel() * 4
            row = {}
            for pdl in (False, True):
                cur = gemv_launcher(x, fw, pdl)
                row[f"gemv pdl={int(pdl)}"] = graph_us([lambda w=w, s=s: cur(w, s) for w, s in ws])
                y = cur(*ws[0])
                err = (y.float() - ref).abs().max().item() / ref.abs().max().item()
                row[f"gemv pdl={int(pdl)} err"] = err
                for t in mma_tiles if pdl else ():
                    for wil in (False, True) if not QUICK else (False,):  # peel
                        tag = (
                            f"mma {t['BLOCK_N']}n w{t['num_warps']} s{t['num_stages']}"
                            f" pdl={int(pdl)}{' peel' if wil else ''}"
                        )
                        try:
                            go = mma_launcher(x, fw, out, t, pdl, wil)
                            row[tag] = graph_us([lambda w=w, s=s: go(w, s) for w, s in ws])
                            e = (out.float() - ref).abs().max().item() / ref.abs().max().item()
                            if e > 1e-2:
                                row[tag] = f"bad {e:.3g}"
                        except Exception as ex:  # a tile that does not compile or fit
                            row[tag] = f"{type(ex).__name__}: {str(ex)[:80]}"
            us = {k: v for k, v in row.items() if isinstance(v, float) and "err" not in k}
            ranked = sorted(us.items(), key=lambda kv: kv[1])
            res["shapes"][key] = {
                "bytes": nbytes,
                "us": row,
                "TBps": {k: nbytes / v / 1e6 for k, v in ranked[:8]},
                "gemv TBps": {k: nbytes / row[k] / 1e6 for k in ("gemv pdl=0", "gemv pdl=1")},
            }
            best[key] = next((t for t, _ in ranked if t.startswith("mma")), "mma 16n w4 s5")
            print(
                key,
                "gemv pdl1 %.2f TB/s" % (nbytes / row["gemv pdl=1"] / 1e6),
                "best",
                ranked[0][0],
                "%.2f TB/s" % (nbytes / ranked[0][1] / 1e6),
                f"({time.time() - t0:.0f} s)",
                flush=True,
            )
            del ws
            torch.cuda.empty_cache()
    res["best"] = best
    json.dump(res, open(out_path, "w"), indent=1)
    # the four GEMVs of 36 layers, distinct weights, in one graph: the B=1 step's linear layers
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
        for variant in ("gemv", "mma-best", "mma-best-peel"):
            if QUICK and variant == "mma-best-peel":
                continue
            calls = []
            for i in range(36):
                for name, (N, K) in SHAPES.items():
                    fw, ws = layers[name]
                    if variant == "gemv":
                        go = gemv_launcher(xs[name], fw, True)
                    else:
                        tag = best[f"{name} {fmt}"]
                        if not tag.startswith("mma"):
                            tag = "mma 16n w4 s5 pdl=1"
                        bn, nw, ns = (
                            int(p[:-1] if p.endswith("n") else p[1:]) for p in tag.split()[1:4]
                        )
                        go = mma_launcher(
                            xs[name],
                            fw,
                            outs[name],
                            dict(BLOCK_N=bn, num_warps=nw, num_stages=ns, BLOCK_K=128),
                            True,
                            variant.endswith("peel"),
                        )
                    calls.append(lambda go=go, w=ws[i][0], s=ws[i][1]: go(w, s))
            us = graph_us(calls) * len(calls)
            res["chain"][f"{fmt} {variant}"] = {"us_per_step": us, "TBps": nbytes / us / 1e6}
            print(
                "chain", fmt, variant, f"{us:.0f} us/step {nbytes / us / 1e6:.2f} TB/s", flush=True
            )
        del layers
        torch.cuda.empty_cache()
        json.dump(res, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
