"""How much of the gap between dependent kernels programmatic dependent launch (PDL) hides, inside a CUDA graph.

Usage (GPU):  python tools/pdl_probe.py --out results/pdl-probe-h200.json
Why: a Qwen3-8B decode step at B=1 replays ~480 kernels from a CUDA graph; ~340 are small and the GPU idles ~0.5 ms
of a 5.1 ms step in ~1 µs gaps between them (run17). With PDL (Hopper and later) a kernel launched with
`launch_pdl=True` may start while its predecessor finishes, and waits for the predecessor's results at
`tl.extra.cuda.gdc_wait()`; whatever it does before the wait (loading weights, address math) overlaps.

Each chain below is captured in one CUDA graph and timed by `triton.testing.do_bench_cudagraph`; the JSON has µs
per link, for the chain launched plainly and with PDL, and whether both give the same output:
- `triton`: N dependent launches of a small Triton kernel on a [1, 4096] bf16 row (`y = x * w + 1`, the weight
  loaded before the wait), the shape of a decode step's norms, rotary and activation;
- `triton+gemm`: the same with a cuBLAS GEMV (`F.linear`, [1, 4096] x [4096, 4096]) after each launch, as in a
  decode layer, where PDL can only help the Triton kernel that follows the GEMV.
"""
import argparse, json, sys, time
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph


@triton.jit
def _link_kernel(x_ptr, w_ptr, y_ptr, N, BLOCK: tl.constexpr, PDL: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    w = tl.load(w_ptr + i, mask=i < N, other=0.0).to(tl.float32)   # independent of the predecessor: before the wait
    if PDL: tl.extra.cuda.gdc_wait()
    x = tl.load(x_ptr + i, mask=i < N, other=0.0).to(tl.float32)
    if PDL: tl.extra.cuda.gdc_launch_dependents()
    tl.store(y_ptr + i, (x * w + 1.0).to(y_ptr.dtype.element_ty), mask=i < N)


def chain(x: torch.Tensor, w: torch.Tensor, links: int, pdl: bool, gemm: torch.Tensor | None) -> torch.Tensor:
    N, BLOCK = x.numel(), 1024
    for _ in range(links):
        y = torch.empty_like(x)
        _link_kernel[(triton.cdiv(N, BLOCK),)](x, w, y, N, BLOCK=BLOCK, PDL=pdl, launch_pdl=pdl, num_warps=4)
        x = y if gemm is None else F.linear(y, gemm)
    return x


def main() -> None:
    p = argparse.ArgumentParser(); p.add_argument("--out", required=True); p.add_argument("--links", type=int, default=200)
    args = p.parse_args()
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(dev).manual_seed(0)
    x, w = (torch.rand(1, 4096, generator=g, device=dev) * 0.1).to(bf), (torch.rand(4096, generator=g, device=dev) * 0.5).to(bf)
    W = (torch.randn(4096, 4096, generator=g, device=dev) / 64).to(bf)
    res = {"command": " ".join(["python", *sys.argv]), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "links": args.links, "us_per_link": {}, "same_output": {}}
    for name, gemm in (("triton", None), ("triton+gemm", W)):
        outs = {}
        for pdl in (False, True):
            key = f"{name}, {'pdl' if pdl else 'plain'}"
            try:
                outs[pdl] = chain(x, w, args.links, pdl, gemm)
                ms = do_bench_cudagraph(lambda: chain(x, w, args.links, pdl, gemm), rep=200)
                res["us_per_link"][key] = ms * 1e3 / args.links
            except Exception as e:  # e.g. a Triton without `launch_pdl`: recorded, not raised
                res["us_per_link"][key] = f"{type(e).__name__}: {e}"[:300]
        if len(outs) == 2: res["same_output"][name] = torch.equal(outs[False], outs[True])
    print(json.dumps(res, indent=1))
    with open(args.out, "w") as f: json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
