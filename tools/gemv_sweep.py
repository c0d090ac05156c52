"""Can a plain Triton GEMV stream decode-sized matrix products closer to the copy rate than cuBLAS? (an experiment)

Usage (GPU):  python tools/gemv_sweep.py --out results/gemv-sweep-h200.json
At B=1 Qwen3-8B spends ~80 % of a decode step in GEMMs, and cuBLAS reads the small projections (QKV, O) at ~72 % of
the copy bandwidth and the down projection at ~85 % (run5/run7 profiles). For each of Qwen3-8B's projection shapes
and a few batch sizes this times `F.linear` (cuBLAS) and every candidate tiling of the kernel below (CUDA-core
multiply-and-sum, one program per `BLOCK_N` output features, the whole K loop in the program, float32 accumulation),
checks the kernel against `F.linear`, and saves the timings, the weight bandwidth of each, and the best candidate
per shape. The kernel lives here, not in the package, until a sweep shows it wins somewhere.
"""
import argparse, itertools, json, sys, time
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from sweep import time_candidates

SHAPES = {"qkv": (6144, 4096), "o_proj": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}  # (N, K)


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    "out[m, n] = Σ_k x[m, k] w[n, k] for BLOCK_N features of every row m (M is tiny: all rows in one program)."
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + n[:, None] * stride_wn + k[None, :], mask=(n < N)[:, None] & (k < K)[None, :], other=0.0)
        x = tl.load(x_ptr + m[:, None] * stride_xm + k[None, :], mask=(m < M)[:, None] & (k < K)[None, :], other=0.0)
        acc += tl.sum(x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
    tl.store(out_ptr + m[:, None] * stride_om + n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(m < M)[:, None] & (n < N)[None, :])


def gemv(x: torch.Tensor, w: torch.Tensor, block_n: int, block_k: int, num_warps: int, num_stages: int) -> torch.Tensor:
    "`F.linear(x, w)` for a few rows `x` `[M, K]`, `w` `[N, K]`."
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    _gemv_kernel[(triton.cdiv(N, block_n),)](x, w, out, M, N, K, x.stride(0), w.stride(0), out.stride(0),
                                              BLOCK_M=triton.next_power_of_2(M), BLOCK_N=block_n, BLOCK_K=block_k,
                                              num_warps=num_warps, num_stages=num_stages)
    return out


def main() -> None:
    from triton.testing import do_bench
    p = argparse.ArgumentParser(); p.add_argument("--out", required=True); p.add_argument("--batches", default="1,4")
    args = p.parse_args()
    grid = list(itertools.product([4, 8, 16, 32], [256, 512, 1024], [4, 8], [3, 4]))
    res = {"command": " ".join(["python", *sys.argv]), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
           "device": torch.cuda.get_device_name(), "cases": {}}
    for M in map(int, args.batches.split(",")):
        for name, (N, K) in SHAPES.items():
            g = torch.Generator("cuda").manual_seed(0)
            x = torch.randn(M, K, generator=g, device="cuda").bfloat16()
            w = (torch.randn(N, K, generator=g, device="cuda") / K ** .5).bfloat16()
            ref, nbytes = F.linear(x, w), w.numel() * w.element_size()
            cublas_us = do_bench(lambda: F.linear(x, w), warmup=5, rep=25, return_mode="median") * 1e3
            options = [dict(block_n=bn, block_k=bk, num_warps=w, num_stages=s) for bn, bk, w, s in grid
                       if bn * bk * triton.next_power_of_2(M) <= 4096 * w]  # the product tile stays in registers
            rows, best = time_candidates(lambda **o: gemv(x, w, **o), ref, options, nbytes)
            res["cases"][f"{name} M={M}"] = {"N": N, "K": K, "M": M, "weight_bytes": nbytes,
                                             "cublas": {"us": cublas_us, "GBps": nbytes / cublas_us / 1e3},
                                             "best": best, "all": rows}
            print(f"{name} M={M}: cuBLAS {cublas_us:.1f} us ({nbytes / cublas_us / 1e3:.0f} GB/s); "
                  + (f"best GEMV {best['us']:.1f} us ({best['GBps']:.0f} GB/s) {best['options']}" if best else "no GEMV"),
                  flush=True)
    with open(args.out, "w") as f: json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
