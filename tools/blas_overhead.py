"""Host cost of one decode-sized GEMM call (`F.linear`, M=1, Qwen3-8B's o_proj shape) under each cuBLAS backend.

Usage (GPU):  python tools/blas_overhead.py --out results/blas-overhead-h200.json
Eager decode launches ~145 GEMMs a step and is host-bound (run7: 16.1 ms a step for 4.7 ms of GPU work); this times
back-to-back calls without synchronizing (host µs per call) and the GPU time per call, for
`torch.backends.cuda.preferred_blas_library` "cublaslt" and "cublas".
"""
import argparse, json, sys, time
import torch
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser(); p.add_argument("--out", required=True); p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args()
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    res = {"command": " ".join(["python", *sys.argv]), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "backends": {}}
    for lib in ("cublaslt", "cublas"):
        torch.backends.cuda.preferred_blas_library(lib)
        for _ in range(50): F.linear(x, w)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.calls): F.linear(x, w)
        host = time.perf_counter() - start
        torch.cuda.synchronize()
        total = time.perf_counter() - start
        res["backends"][lib] = {"host_us_per_call": host / args.calls * 1e6, "wall_us_per_call": total / args.calls * 1e6}
        print(lib, res["backends"][lib], flush=True)
    with open(args.out, "w") as f: json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
