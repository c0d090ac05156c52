"""Host µs per launch of what an eager decode step is made of, and of a cached Triton launcher (an experiment).

Usage (GPU):  python tools/launch_overhead.py --out results/launch-overhead-h200.json
Eager Qwen3-8B decode is host-bound (run7: 16.1 ms a step for 4.7 ms of GPU work; ~253 Triton launches, 145 GEMMs,
~330 tensor allocations, ~400 module calls a step). This times, back to back without synchronizing, at decode sizes
(one token, hidden 4096):
- `F.linear` (M=1, 4096 x 4096), `torch.empty`, an `nn.Module` call that does nothing;
- `rms_norm` through Triton's JIT launch (`kernel[grid](...)`, what the package does);
- the same compiled kernel through `CompiledKernel.run` with the arguments already bound: what a launcher that caches
  the compiled kernel per call site could reach. Its output is checked against the JIT launch's.
The JSON has µs per call for each, the count per step of each (from run7's profile) and the exact command.
"""
import argparse, json, sys, time
import torch
import torch.nn.functional as F
from metainfer.triton_kernels import _rms_norm_kernel, triton

PER_STEP = {"F.linear": 145, "triton launch": 253, "torch.empty": 326, "module call": 401}  # run7 host profile


def per_call_us(fn, calls: int) -> float:
    for _ in range(50): fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls): fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / calls * 1e6


def main() -> None:
    p = argparse.ArgumentParser(); p.add_argument("--out", required=True); p.add_argument("--calls", type=int, default=5000)
    args = p.parse_args()
    dev, bf = torch.device("cuda"), torch.bfloat16
    x, w = torch.randn(1, 4096, device=dev, dtype=bf), torch.randn(4096, device=dev, dtype=bf)
    wl = torch.randn(4096, 4096, device=dev, dtype=bf)
    out, out_fast = torch.empty_like(x), torch.empty_like(x)
    N, eps = 4096, 1e-6
    BLOCK_N = triton.next_power_of_2(N)
    jit_args = (x, None, w, out, None, 1, 1, N, N, N, eps)
    jit_opts = dict(HAS_RESIDUAL=False, ROWS=1, BLOCK_N=BLOCK_N, PDL=False, num_warps=4)  # as `rms_norm` launches it
    jit = lambda: _rms_norm_kernel[(1,)](*jit_args, **jit_opts)
    compiled = jit()  # Triton returns the compiled kernel it launched
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream().cuda_stream
    bound = (x, None, w, out_fast, None, 1, 1, N, N, N, eps, False, 1, BLOCK_N, False)  # every parameter, constexprs too
    fast = lambda: compiled.run(1, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *bound)
    fast(); torch.cuda.synchronize()
    module = torch.nn.Identity()
    res = {"command": " ".join(["python", *sys.argv]), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "cached launch output equals JIT launch output": torch.equal(out, out_fast),
           "us_per_call": {"F.linear": per_call_us(lambda: F.linear(x, wl), args.calls),
                           "torch.empty": per_call_us(lambda: torch.empty(1, 4096, device=dev, dtype=bf), args.calls),
                           "module call": per_call_us(lambda: module(x), args.calls),
                           "triton launch": per_call_us(jit, args.calls),
                           "triton cached launch": per_call_us(fast, args.calls)},
           "per_step": PER_STEP}
    us = res["us_per_call"]
    res["ms_per_step"] = {k: us[k] * n / 1e3 for k, n in PER_STEP.items()} | {
        "triton launch, cached": us["triton cached launch"] * PER_STEP["triton launch"] / 1e3}
    print(json.dumps(res, indent=1))
    with open(args.out, "w") as f: json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
