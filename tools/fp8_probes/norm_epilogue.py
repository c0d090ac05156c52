"""Whether a layer's add + RMSNorm can end the GEMV before it instead of taking a launch (and a
launch boundary) of its own: the last program of the O and down projections to finish (an acq_rel
count, as the split decode's merge) adds the residual and normalizes the whole row with the norm
kernel's arithmetic. A B=1 step's 36 layers of Qwen3-8B's FP8 GEMVs in one CUDA graph, attention
stood in for by the QKV output's first 4,096 values, as
- `kernel`: the package in a graph (GEMV, `add_rms_norm` kernel, GEMV, GEMV, `add_rms_norm`);
- `prologue`: the norm in the next GEMV's prologue (the package's eager path, `gemv(norm=...)`);
- `epilogue`: the norm at the end of the GEMV before it (72 launches fewer than `kernel`).
Each variant's last residual and normalized row are compared bit for bit with `kernel`'s, once
eagerly and once after the timed graph replays; each variant runs twice, interleaved.

The 12-07 H100 runs put a launch boundary at ~2.8 us with PDL (docs/benchmarks/h100-2026-12-07-
launch/); the graph's 72 norm launches would then cost ~200 us of a ~3,370 us FP8 step.

H100, 12-07 (docs/benchmarks/h100-2026-12-07-norm/norm-epilogue.json), two rounds: `kernel` 2,686 /
2,706 us, `prologue` 2,801 / 2,816, `epilogue` 2,784 / 2,784; the same bits everywhere, eagerly and
after the replays. The 72 norm kernels cost ~100 us beside the GEMVs alone (2,585): with PDL they
overlap the next GEMV's first loads. Neither fold pays for itself.

Usage: python tools/fp8_probes/norm_epilogue.py OUT.json"""

import sys
import torch
from metainfer.kernels import triton_gemv as tg
from metainfer.kernels.triton_launch import cdiv, jit, next_pow2, pdl, pdl_sync, tl
from metainfer.kernels.triton_norms import _inv_rms, _normed, add_rms_norm
from metainfer.layers.fp8 import FP8, Fp8Weight

sys.path[:0] = ["tools/decode_probes", "tools/fp8_probes"]
from graph_timing import graph_us  # noqa: E402
from row_sums import FF, HID, L, save_row  # noqa: E402

EPS, GROUP = 1e-6, 128


@jit
def _gemv_norm_kernel(x_ptr, w_ptr, s_ptr, out_ptr, res_ptr, nw_ptr, normed_ptr, res_out_ptr,
                      counter_ptr, N, K, stride_wn, stride_sn, eps, GROUP: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_X: tl.constexpr,
                      PDL: tl.constexpr):  # fmt: skip
    """The package's block-scaled FP8 GEMV (its tile, its sums), then in the last program to
    finish: `res_out = out + res` and `normed = RMSNorm(res_out)` as `add_rms_norm` computes
    them (one [1, BLOCK_X] tile, four warps), and the count set back to zero."""
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    valid = n < N
    k = tl.arange(0, BLOCK_K)
    rows = w_ptr + n[:, None].to(tl.int64) * stride_wn
    w = tl.load(rows + k[None, :], mask=valid[:, None] & (k < K)[None, :], other=0.0)
    pdl_sync(PDL)
    s_rows, G = s_ptr + n[:, None].to(tl.int64) * stride_sn, tl.cdiv(K, GROUP)
    x = tl.load(x_ptr + k, mask=k < K, other=0.0).to(tl.float32)
    acc = tg._chunk_dot(w, x, s_rows, 0, valid, G, 1, GROUP, BLOCK_N, BLOCK_K)
    for c in range(1, tl.cdiv(K, BLOCK_K)):
        kk = c * BLOCK_K + k
        w = tl.load(rows + kk[None, :], mask=valid[:, None] & (kk < K)[None, :], other=0.0)
        x = tl.load(x_ptr + kk, mask=kk < K, other=0.0).to(tl.float32)
        kb0 = c * (BLOCK_K // GROUP)
        acc += tg._chunk_dot(w, x, s_rows, kb0, valid, G, 1, GROUP, BLOCK_N, BLOCK_K)
    tl.store(out_ptr + n, acc.to(out_ptr.dtype.element_ty), mask=valid)
    tl.debug_barrier()  # every thread's stores before the count says this program is done
    done = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu")
    if done == tl.num_programs(0) - 1:
        kx = tl.arange(0, BLOCK_X)[None, :]
        m = kx < N
        y = tl.load(out_ptr + kx, mask=m, other=0.0, cache_modifier=".cg")
        r = tl.load(res_ptr + kx, mask=m, other=0.0)
        xr = (y.to(tl.float32) + r.to(tl.float32)).to(y.dtype)
        tl.store(res_out_ptr + kx, xr, mask=m)
        xf = xr.to(tl.float32)
        nw = tl.load(nw_ptr + kx, mask=m, other=0.0).to(tl.float32)
        tl.store(normed_ptr + kx, _normed(xf, _inv_rms(xf, N, eps)[:, None], nw, y.dtype), mask=m)
        tl.atomic_xchg(counter_ptr, 0)


def gemv_add_norm(x, w: Fp8Weight, residual, norm_weight, counter):
    "`(normed, residual)` of `add_rms_norm(x Wᵀ, residual)`, in the GEMV's launch."
    N, K = w.data.shape
    assert tg.prologue_norms_alike(N), "the norm kernel's tile: 1 x N, 4 warps"
    out, normed, res_out = (torch.empty(1, N, dtype=x.dtype, device=x.device) for _ in range(3))
    tiles = tg.gemv_tiles(N, K, x.device, 1)
    on = pdl()
    _gemv_norm_kernel[(cdiv(N, tiles["BLOCK_N"]),)](
        x, w.data, w.scale, out, residual, norm_weight, normed, res_out, counter, N, K,
        w.data.stride(0), w.scale.stride(0), EPS, GROUP=w.group, BLOCK_X=next_pow2(N), PDL=on,
        launch_pdl=on, **tiles)  # fmt: skip
    return normed, res_out


def layers(dev):
    "36 layers' FP8 weights (qkv, o, gate/up, down) and norm weights (input, post-attention)."
    out = []
    for _ in range(L):
        ws = []
        for N, K in ((HID + HID // 2, HID), (HID, HID), (2 * FF, HID), (HID, FF)):  # Qwen3-8B's
            data = (torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.5).to(FP8)
            ws.append(Fp8Weight(data, torch.rand(N, K // GROUP, device=dev) * 2 / K**0.5, GROUP))
        norms = [1 + 0.1 * torch.randn(HID, device=dev, dtype=torch.bfloat16) for _ in range(2)]
        out.append((ws, norms))
    return out


def chain(variant: str, ls, h0, res0, counters):
    "The step as `variant` does it: `(last normalized row, last residual)`."
    normed, res, d = h0, res0, None  # d: the last down projection's output (prologue)
    for i, ((wqkv, wo, wgu, wd), (n_in, n_post)) in enumerate(ls):
        n_next = ls[(i + 1) % len(ls)][1][0]
        if variant == "prologue" and d is not None:
            new = torch.empty_like(res)
            qkv = tg.gemv(d, wqkv, norm=(res, n_in, EPS), residual_out=new)
            res = new
        else:
            qkv = tg.gemv(normed, wqkv)
        attn = qkv[:, :HID]
        if variant == "epilogue":
            normed, res = gemv_add_norm(attn, wo, res, n_post, counters[2 * i])
            act = tg.gemv(normed, wgu, act="silu_and_mul")
            normed, res = gemv_add_norm(act, wd, res, n_next, counters[2 * i + 1])
        elif variant == "prologue":
            o, new = tg.gemv(attn, wo), torch.empty_like(res)
            act = tg.gemv(o, wgu, act="silu_and_mul", norm=(res, n_post, EPS), residual_out=new)
            d, res = tg.gemv(act, wd), new
        else:
            normed, res = add_rms_norm(tg.gemv(attn, wo), res, n_post, EPS)
            act = tg.gemv(normed, wgu, act="silu_and_mul")
            normed, res = add_rms_norm(tg.gemv(act, wd), res, n_next, EPS)
    if variant == "prologue":  # (the last down projection's norm: a kernel, as the model's final)
        normed, res = add_rms_norm(d, res, ls[0][1][0], EPS)
    return normed, res


def main():
    out_path, dev = sys.argv[1], torch.device("cuda")
    ls = layers(dev)
    h0 = torch.randn(1, HID, device=dev, dtype=torch.bfloat16)
    res0 = torch.randn(1, HID, device=dev, dtype=torch.bfloat16)
    counters = torch.zeros(2 * L, device=dev, dtype=torch.int32)
    nbytes = sum(w.data.numel() for ws, _ in ls for w in ws)
    result = dict(device=torch.cuda.get_device_name(), step_bytes=nbytes, rows=[])
    ref = [t.clone() for t in chain("kernel", ls, h0, res0, counters)]
    same = lambda got: all(torch.equal(a, b) for a, b in zip(got, ref))  # noqa: E731
    for round_ in (1, 2):  # (each variant twice, interleaved: drift shows as a round's difference)
        for variant in ("kernel", "prologue", "epilogue"):
            row, outs = dict(variant=variant, round=round_), []

            def step():  # (the captured call's outputs: the graph's, after its replays)
                outs[:] = chain(variant, ls, h0, res0, counters)

            try:
                got = chain(variant, ls, h0, res0, counters)
                row["same_bits"] = same(got)
                row["rel_err"] = max(((a.float() - b.float()).abs().max() / b.float().abs().max())
                                     .item() for a, b in zip(got, ref))  # fmt: skip
                us = graph_us(step, 1, 20)
                row.update(step_us=us, TBps=nbytes / us / 1e6, same_bits_replayed=same(outs))
            except Exception as e:  # a variant that does not compile or run here
                row["error"] = f"{type(e).__name__}: {e}"[:300]
            save_row(result, out_path, row)


if __name__ == "__main__":
    main()
