"""Where the block-wise FP8 GEMV loses against bf16's per byte (H200, 12-06: a whole B=1 step's
weights at 3.08 TB/s in FP8 against 3.78 in bf16, `gemv_prefetch.py`): how it applies the scales.

The package's GEMV sums each row's chunk per 128-column group (`tl.reshape` to
[rows, groups, 128]), then times the group's scale. Variants, in the same whole-step graph:
- `reshape`: a copy of the package's (the baseline, same tile);
- `gather`: each column's scale loaded beside it ([rows, columns], L1 hits), one product a weight;
- `xscaled`: the input chunk times the tile's row block's scales (rows of one 128-row block
  share them, as block-wise checkpoints store them; the interleaved gate/up rows of the engine
  would need two such vectors), so a row sums `w · (x · s)` with no reshape;
- `group-nR`: chunks of one group (128 columns), R rows: a sum, then its scale;
- `noscale`: no scales at all: wrong sums, the cost of the dequantization's arithmetic alone.
Sums differ from the package's in rounding only (not `noscale`): `rel_err` is the largest
difference over the largest logit.

H100, 12-07 (docs/benchmarks/h100-2026-12-07-peer/gemv-scales.json): the package 3,314 us a step
(its copy `reshape` 3,346: runs differ by ~1 %), `xscaled` 3,279, `noscale` 3,258, `gather`
11,069, `group-n16` 7,429: the scales cost about 2 % of the step, near the noise, so the gap to
the copy rate is elsewhere; nothing changed.

Usage: python tools/fp8_probes/gemv_scales.py OUT.json"""

import json
import sys
import time
import torch
from metainfer.kernels import triton_gemv as tg
from metainfer.kernels.triton_launch import cdiv, jit, pdl_sync, tl
from metainfer.kernels.triton_silu import silu_mul_pairs

sys.path.insert(0, "tools/fp8_probes")
from gemv_prefetch import build, package, step_fn, timed  # noqa: E402


@jit
def _scaled_sum(
    w,
    x,
    s_rows,
    s_block,
    kk,
    kb0,
    valid,
    K,
    MODE: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    "A chunk's weights `w` times `x` (its columns `kk`), summed per row, the scales applied."
    wf = w.to(tl.float32)
    if MODE == 0:  # the package's
        kb = kb0 + tl.arange(0, BLOCK_K // GROUP)
        s = tl.load(
            s_rows + kb[None, :], mask=valid[:, None] & (kb * GROUP < K)[None, :], other=0.0
        )
        y = tl.sum(
            tl.sum(tl.reshape(wf * x[None, :], [BLOCK_N, BLOCK_K // GROUP, GROUP]), 2) * s, 1
        )
    elif MODE == 1:  # each column's scale
        s = tl.load(
            s_rows + (kk // GROUP)[None, :], mask=valid[:, None] & (kk < K)[None, :], other=0.0
        )
        y = tl.sum(wf * x[None, :] * s, 1)
    elif MODE == 2:  # the input times the row block's scales
        s = tl.load(s_block + kk // GROUP, mask=kk < K, other=0.0)
        y = tl.sum(wf * (x * s)[None, :], 1)
    elif MODE == 3:  # one group: its sum times its scale
        s = tl.load(s_rows + kb0, mask=valid[:, None], other=0.0)  # [BLOCK_N, 1]
        y = tl.sum(tl.sum(wf * x[None, :], 1)[:, None] * s, 1)
    else:  # no scales
        y = tl.sum(wf * x[None, :], 1)
    return y


@jit
def _gemv_sc(
    x_ptr,
    w_ptr,
    out_ptr,
    s_ptr,
    N,
    K,
    stride_wn,
    stride_sn,
    MODE: tl.constexpr,
    GROUP: tl.constexpr,
    SILU_MUL: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    valid = n < N
    k = tl.arange(0, BLOCK_K)
    rows = w_ptr + n[:, None].to(tl.int64) * stride_wn
    w = tl.load(rows + k[None, :], mask=valid[:, None] & (k < K)[None, :], other=0.0)
    pdl_sync(PDL)
    s_rows = s_ptr + n[:, None].to(tl.int64) * stride_sn
    s_block = s_ptr + (tl.program_id(0) * BLOCK_N).to(tl.int64) * stride_sn  # its first row's
    x = tl.load(x_ptr + k, mask=k < K, other=0.0).to(tl.float32)
    acc = _scaled_sum(w, x, s_rows, s_block, k, 0, valid, K, MODE, GROUP, BLOCK_N, BLOCK_K)
    for c in range(1, tl.cdiv(K, BLOCK_K)):
        kk = c * BLOCK_K + k
        w = tl.load(rows + kk[None, :], mask=valid[:, None] & (kk < K)[None, :], other=0.0)
        x = tl.load(x_ptr + kk, mask=kk < K, other=0.0).to(tl.float32)
        kb0 = c * (BLOCK_K // GROUP)
        acc += _scaled_sum(w, x, s_rows, s_block, kk, kb0, valid, K, MODE, GROUP, BLOCK_N, BLOCK_K)
    y = acc.to(out_ptr.dtype.element_ty)
    if SILU_MUL:
        out = tl.program_id(0) * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        tl.store(out_ptr + out, silu_mul_pairs(tl.reshape(y, [BLOCK_N // 2, 2])), mask=out < N // 2)
    else:
        tl.store(out_ptr + n, y, mask=valid)


def gemv_sc(x, weight, act=None, mode=0, tiles=None):
    "`x Wᵀ` of a block-wise `Fp8Weight` by `_gemv_sc` (bf16 weights: the package's GEMV)."
    if not tg.fp8(weight):
        return tg.gemv(x, weight, act=act)
    w, K, N = weight.data, x.shape[-1], weight.data.shape[0]
    out = torch.empty(N // 2 if act else N, dtype=x.dtype, device=x.device)
    t = tg.gemv_tiles(N, K, x.device, 1)
    if tiles:
        t = dict(t, BLOCK_N=tiles[0], BLOCK_K=min(tiles[1], tg.next_pow2(K)), num_warps=tiles[2])
    _gemv_sc[(cdiv(N, t["BLOCK_N"]),)](
        x.reshape(K), w, out, weight.scale, N, K, w.stride(0), weight.scale.stride(0),
        MODE=mode, GROUP=weight.group, SILU_MUL=act is not None, BLOCK_N=t["BLOCK_N"],
        BLOCK_K=t["BLOCK_K"], num_warps=t["num_warps"], num_stages=t["num_stages"],
        PDL=x.is_cuda, **({"launch_pdl": True} if x.is_cuda else {}),
    )  # fmt: skip
    return out


VARIANTS = {  # name: (mode, tile (rows, columns, warps) or None: the package's)
    "reshape": (0, None),
    "gather": (1, None),
    "xscaled": (2, None),
    "xscaled-t4x2048w4": (2, (4, 2048, 4)),
    "xscaled-t8x4096w8": (2, (8, 4096, 8)),
    "group-n16": (3, (16, 128, 4)),
    "group-n32": (3, (32, 128, 4)),
    "group-n64": (3, (64, 128, 4)),
    "noscale": (4, None),
    "noscale-t8x4096w8": (4, (8, 4096, 8)),
}


def main():
    out_path, result = sys.argv[1], dict(variants=VARIANTS, rows=[])
    layers, lm_head = build("fp8")
    nbytes = sum(ly[k].data.numel() for ly in layers for k in ("qkv", "o", "gu", "down"))
    nbytes += lm_head.numel() * 2
    us, ref = timed(step_fn(layers, lm_head, 512, package))
    rows = [dict(variant="package", step_us=us, tok_s=1e6 / us, weight_TBps=nbytes / us / 1e6)]
    print(rows[0], flush=True)
    for name, (mode, tiles) in VARIANTS.items():
        t0 = time.time()
        mm = lambda x, w, act=None, mode=mode, tiles=tiles: gemv_sc(x, w, act, mode, tiles)  # noqa: E731
        try:
            us, out = timed(step_fn(layers, lm_head, 512, mm))
        except Exception as e:  # a variant that does not compile here
            rows.append(dict(variant=name, error=f"{type(e).__name__}: {e}"[:400]))
            print(rows[-1], flush=True)
            continue
        err = ((out - ref).abs().max() / ref.abs().max()).item()
        rows.append(dict(variant=name, step_us=us, tok_s=1e6 / us, weight_TBps=nbytes / us / 1e6,
                         rel_err=err, wall_s=time.time() - t0))  # fmt: skip
        print(rows[-1], flush=True)
        result["rows"] = rows
        json.dump(result, open(out_path, "w"), indent=1)
    result["rows"] = rows
    json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
