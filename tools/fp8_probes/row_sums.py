"""Whether Triton's 1-byte loads stream at the copy rate at all: a B=1 step's weights (Qwen3-8B's
36 layers of GEMV shapes) summed per row, no input and no scales, in one CUDA graph.

The block-wise FP8 GEMV streams a step's weights at ~3.08 TB/s on an H200 against bf16's 3.78
(12-06); its scales (`gemv_scales.py`), tiles, prefetches and double buffering don't explain it.
Here the same bytes are read as
- `fp8`: float8_e4m3fn converted to float32 and summed (the GEMV's conversion, nothing else);
- `u8`: uint8 converted to float32 (an integer conversion instead of FP8's);
- `u8-int`: uint8 summed as int32 (no float conversion at all);
- `i32`: int32 words, 4 bytes a load element, summed as int32;
- `bf16`: bfloat16 pairs, converted to float32 and summed (as the bf16 GEMV loads);
- `fp8-x`: FP8 times a float32 input, summed (the GEMV without scales);
each at a few tiles (rows, columns, warps), with its registers and spills a thread (occupancy),
beside the package's GEMV over the same FP8 weights and over bf16 ones of the same shapes (twice
the bytes), and the copy rate (`copy_bandwidth`, bytes read plus written).

H100, 12-07 (docs/benchmarks/h100-2026-12-07-rowsums/row-sums.json, by a11920a's version: its row
sums loaded every chunk in the loop; copy 3.00 TB/s): the package's GEMV reads the step's FP8
weights at 2.69 TB/s (2,578 us) and bf16 ones of the same shapes at 2.99 (4,644 us); no row sum of
the same bytes does much better: 2.73 at best, FP8 converted to float32 at 2 x 4,096 as fast as
int32 words summed as integers (so neither 1-byte loads nor the conversion hold it back; 2.30 at the
package's 8 x 2,048 tile without the GEMV's input, codegen). The two package steps fit `bytes / 3.36
TB/s + 144 x 3.6 us`: the FP8 GEMVs lose to bf16 per byte because a launch's boundary costs the same
~3.6 us with half the bytes behind it.

`launches`: the same bytes summed by the step's 144 launches (without PDL, and with it as the
package's GEMV launches) and by two over the whole weights (what a launch's boundary costs).

Usage: python tools/fp8_probes/row_sums.py OUT.json [views|launches]"""

import json
import sys
import torch
from metainfer.bench.common import copy_bandwidth
from metainfer.kernels import triton_gemv as tg
from metainfer.kernels.triton_launch import cdiv, jit, pdl_sync, tl
from metainfer.layers.fp8 import FP8, Fp8Weight

sys.path.insert(0, "tools/decode_probes")
from graph_timing import graph_us  # noqa: E402

dev = torch.device("cuda")
HID, FF, L = 4096, 12288, 36
SHAPES = [(4096 + 2 * 1024, HID), (HID, 4096), (2 * FF, HID), (HID, FF)]  # qkv, o, gate/up, down


@jit
def _chunk_sum(w, x_ptr, kk, K, MODE: tl.constexpr):
    "A chunk's rows summed (MODE 0: as float32, 1: as int32, 2: times `x`, float32)."
    if MODE == 1:
        y = tl.sum(w.to(tl.int32), 1)
    elif MODE == 2:
        x = tl.load(x_ptr + kk, mask=kk < K, other=0.0).to(tl.float32)
        y = tl.sum(w.to(tl.float32) * x[None, :], 1)
    else:
        y = tl.sum(w.to(tl.float32), 1)
    return y


@jit
def _row_sum(w_ptr, x_ptr, out_ptr, N, K, stride, MODE: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr, PDL: tl.constexpr):  # fmt: skip
    """Each row of `w` summed; with `PDL` the first chunk loaded before the wait for the kernel
    before (as the package's GEMV does)."""
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    valid = n < N
    rows = w_ptr + n[:, None].to(tl.int64) * stride
    k = tl.arange(0, BLOCK_K)
    w = tl.load(rows + k[None, :], mask=valid[:, None] & (k < K)[None, :], other=0.0)
    pdl_sync(PDL)
    acc = _chunk_sum(w, x_ptr, k, K, MODE)
    for c in range(1, tl.cdiv(K, BLOCK_K)):
        kk = c * BLOCK_K + k
        w = tl.load(rows + kk[None, :], mask=valid[:, None] & (kk < K)[None, :], other=0.0)
        acc += _chunk_sum(w, x_ptr, kk, K, MODE)
    tl.store(out_ptr + n, acc.to(out_ptr.dtype.element_ty), mask=valid)


VIEWS = {  # name: (dtype the bytes are read as, mode)
    "fp8": (FP8, 0),
    "u8": (torch.uint8, 0),
    "u8-int": (torch.uint8, 1),
    "i32": (torch.int32, 1),
    "bf16": (torch.bfloat16, 0),
    "fp8-x": (FP8, 2),
}
TILES = {  # view: tiles (rows, columns in elements, warps)
    "fp8": [(8, 2048, 4), (8, 1024, 4), (4, 2048, 4), (2, 4096, 4), (16, 2048, 8), (8, 4096, 8),
            (4, 4096, 4), (16, 1024, 4), (32, 512, 4)],
    "u8": [(8, 2048, 4), (8, 4096, 8)],
    "u8-int": [(8, 2048, 4), (8, 4096, 8)],
    "i32": [(8, 512, 4), (8, 1024, 8), (4, 1024, 4)],
    "bf16": [(8, 1024, 4), (4, 1024, 4), (8, 2048, 8)],
    "fp8-x": [(8, 2048, 4), (4, 2048, 4)],
}  # fmt: skip


def registers(compiled) -> dict:
    "Registers and spills a thread of a compiled Triton kernel (what bounds its occupancy)."
    return {k: getattr(compiled, k, None) for k in ("n_regs", "n_spills")}


def row_sums(weights, view, mode, tile, pdl=False):
    """A step's launches of `_row_sum` over `weights` (uint8 [N, K]) read as `view`; its
    registers."""
    bn, bk, warps = tile
    x = torch.randn(FF, device=dev)
    launches = []
    for w in weights:
        v = w.view(view)
        N, K = v.shape
        out = torch.empty(N, device=dev, dtype=torch.int32 if mode == 1 else torch.float32)
        launches.append((v, out, N, K))
    info = {}

    def step():
        for v, out, N, K in launches:
            k = _row_sum[(cdiv(N, bn),)](v, x, out, N, K, v.stride(0), MODE=mode, BLOCK_N=bn,
                                        BLOCK_K=min(bk, tg.next_pow2(K)), num_warps=warps,
                                        num_stages=3, PDL=pdl,
                                        **({"launch_pdl": True} if pdl else {}))  # fmt: skip
            info.setdefault("kernel", k)

    return step, info


def package_step(weights):
    "The package's GEMV over each weight, one row of input."
    xs = {K: torch.randn(1, K, device=dev, dtype=torch.bfloat16) for _, K in SHAPES}
    return lambda: [tg.gemv(xs[(w.data if tg.fp8(w) else w).shape[1]], w) for w in weights]


def compiled_gemvs() -> list[dict]:
    "Registers of every compiled specialization of the package's GEMV kernel."
    rows = []
    try:
        for cache in tg._gemv_kernel.device_caches.values():
            for key, k in cache[0].items():
                rows.append(dict(key=str(key)[:300], **registers(k)))
    except Exception as e:  # the cache's layout differs between Triton versions
        rows.append(dict(error=f"{type(e).__name__}: {e}"[:200]))
    return rows


def save_row(result: dict, out_path: str, row: dict) -> None:
    "`row` appended to `result`, printed, and the result so far saved (a later row may hang)."
    result["rows"].append(row)
    print(row, flush=True)
    json.dump(result, open(out_path, "w"), indent=1)


def measure_row(result: dict, out_path: str, row: dict, nbytes: int, *args) -> None:
    "`row_sums(*args)` timed into `row` (or why it failed), appended to `result`, saved."
    try:
        step, info = row_sums(*args)
        us = graph_us(step, 1, 20)
        row.update(step_us=us, TBps=nbytes / us / 1e6, **registers(info["kernel"]))
    except Exception as e:  # a variant that does not compile here
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    save_row(result, out_path, row)


def stacked():
    """A step's weights as two buffers (every `K = 4,096` weight's rows one after another, the
    down projections' likewise) and the step's 144 weights as views of their rows."""
    a = (
        torch.randn(
            L * sum(N for N, K in SHAPES if K == HID), HID, device=dev, dtype=torch.bfloat16
        )
        * 0.5
    ).to(FP8)
    b = (
        torch.randn(L * sum(N for N, K in SHAPES if K == FF), FF, device=dev, dtype=torch.bfloat16)
        * 0.5
    ).to(FP8)
    a, b = a.view(torch.uint8), b.view(torch.uint8)
    views, at = [], dict.fromkeys((HID, FF), 0)
    for _ in range(L):
        for N, K in SHAPES:
            buf = a if K == HID else b
            views.append(buf[at[K] : at[K] + N])
            at[K] += N
    return [a, b], views


def launches(out_path):
    """The same bytes summed by the step's 144 launches (with and without PDL) and by two: what a
    launch's boundary costs."""
    whole, views = stacked()
    nbytes = sum(w.numel() for w in whole)
    result = dict(device=torch.cuda.get_device_name(), step_bytes=nbytes, rows=[],
                  copy_TBps=copy_bandwidth(dev) / 1e12)  # fmt: skip
    fp8w = [Fp8Weight(w.view(FP8), torch.rand(w.shape[0], w.shape[1] // 128, device=dev), 128)
            for w in views]  # fmt: skip
    us = graph_us(package_step(fp8w), 1, 20)
    result["rows"].append(dict(variant="package-fp8", launches=144, step_us=us,
                               TBps=nbytes / us / 1e6))  # fmt: skip
    print(result, flush=True)
    json.dump(result, open(out_path, "w"), indent=1)
    for view, tile in ((FP8, (2, 4096, 4)), (FP8, (8, 2048, 4)), (torch.bfloat16, (4, 1024, 4))):
        for weights, pdl in ((views, False), (views, True), (whole, False)):
            row = dict(variant=str(view).split(".")[-1], tile=tile, launches=len(weights), pdl=pdl)
            measure_row(result, out_path, row, nbytes, weights, view, 0, tile, pdl)


def views(out_path):
    "A step's weights read as each view at each tile, beside the package's GEMV in FP8 and bf16."
    bytes_ = [(N, K) for _ in range(L) for N, K in SHAPES]
    weights = [
        (torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.5).to(FP8).view(torch.uint8)
        for N, K in bytes_
    ]
    nbytes = sum(w.numel() for w in weights)
    result = dict(device=torch.cuda.get_device_name(), step_bytes=nbytes, rows=[],
                  copy_TBps=copy_bandwidth(dev) / 1e12)  # fmt: skip
    print(result, flush=True)

    fp8w = [Fp8Weight(w.view(FP8), torch.rand(w.shape[0], w.shape[1] // 128, device=dev), 128)
            for w in weights]  # fmt: skip
    us = graph_us(package_step(fp8w), 1, 20)
    result["rows"].append(dict(variant="package-fp8", step_us=us, TBps=nbytes / us / 1e6))
    del fp8w
    bf = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) for N, K in bytes_]
    us = graph_us(package_step(bf), 1, 20)
    result["rows"].append(dict(variant="package-bf16", step_us=us, TBps=2 * nbytes / us / 1e6))
    del bf
    result["package_kernels"] = compiled_gemvs()
    print(result["rows"], flush=True)
    json.dump(result, open(out_path, "w"), indent=1)
    for name, (view, mode) in VIEWS.items():
        for tile in TILES[name]:
            measure_row(result, out_path, dict(variant=name, tile=tile), nbytes, weights, view,
                        mode, tile)  # fmt: skip


def main():
    (launches if sys.argv[2:] == ["launches"] else views)(sys.argv[1])


if __name__ == "__main__":
    main()
