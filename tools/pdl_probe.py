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
  decode layer, where PDL can only help the Triton kernel that follows the GEMV;
- `decode_layers`: a whole B=1 decode step's kernel sequence at Qwen3-8B's shapes (36 layers of distinct weights: a
  norm, the QKV GEMV, three small kernels standing in for rotary / KV store / attention, the O GEMV, a norm, gate_up,
  the activation, down; then the LM head), with cuBLAS or a Triton GEMV, each plain or with PDL. With PDL the Triton
  GEMV loads its first weight chunk before `gdc_wait`, so weight streaming overlaps the previous kernel's tail. The
  weight bytes over the copy bandwidth measured here is the step's roofline.
"""
import argparse, json, sys, time
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph
from metainfer.triton_kernels import _gemv_kernel  # the package's GEMV (run19 ran the prototype it came from)


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


# ---- a decode step's shape: 36 Qwen3-8B layers at one token, small Triton kernels between GEMVs ----
@triton.jit
def _norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, N, eps, BLOCK: tl.constexpr, PDL: tl.constexpr):
    "res += x; out = rms_norm(res) * w (one row)."
    i = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + i, mask=i < N, other=0.0).to(tl.float32)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    s = tl.load(x_ptr + i, mask=i < N, other=0.0).to(tl.float32) + tl.load(res_ptr + i, mask=i < N, other=0.0).to(tl.float32)
    tl.store(res_ptr + i, s.to(res_ptr.dtype.element_ty), mask=i < N)
    r = tl.rsqrt(tl.sum(s * s, 0) / N + eps)
    tl.store(out_ptr + i, (s * r * w).to(out_ptr.dtype.element_ty), mask=i < N)


@triton.jit
def _elementwise_kernel(a_ptr, b_ptr, out_ptr, N, B_MOD, MODE: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    "MODE 0: out = a * 0.5 (rotary's place); 1: out = a (KV store's); 2: out = a * 0.5 + b[i % B_MOD] (attention's); 3: silu(a) * a[N + i]."
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    a = tl.load(a_ptr + i, mask=i < N, other=0.0).to(tl.float32)
    if MODE == 0: y = a * 0.5
    elif MODE == 1: y = a
    elif MODE == 2: y = a * 0.5 + tl.load(b_ptr + i % B_MOD, mask=i < N, other=0.0).to(tl.float32)
    else:
        g = tl.load(a_ptr + N + i, mask=i < N, other=0.0).to(tl.float32)
        y = a / (1.0 + tl.exp(-a)) * g
    tl.store(out_ptr + i, y.to(out_ptr.dtype.element_ty), mask=i < N)


GEMV_TILES = {"qkv": (8, 1024, 4, 3), "o": (4, 1024, 4, 4), "gate_up": (8, 1024, 4, 4), "down": (4, 1024, 4, 3),
              "lm_head": (8, 1024, 4, 3)}  # (BLOCK_N, BLOCK_K, warps, stages): run9's GEMV sweep winners


def gemv(x, w, name, pdl):
    bn, bk, warps, stages = GEMV_TILES[name]
    out = torch.empty(w.shape[0], dtype=x.dtype, device=x.device)
    _gemv_kernel[(triton.cdiv(w.shape[0], bn),)](x, w, None, out, w.shape[0], w.shape[1], w.stride(0), HAS_BIAS=False,
                                                  SILU_MUL=0, BLOCK_N=bn, BLOCK_K=bk, PDL=pdl, launch_pdl=pdl, num_warps=warps,
                                                  num_stages=stages)
    return out


def small(mode, a, n, pdl, b=None, b_mod=1):
    out = torch.empty(n, dtype=a.dtype, device=a.device)
    _elementwise_kernel[(triton.cdiv(n, 1024),)](a, a if b is None else b, out, n, b_mod, MODE=mode, BLOCK=1024,
                                                 PDL=pdl, launch_pdl=pdl, num_warps=4)
    return out


def norm(x, res, w, pdl):
    out = torch.empty_like(x)
    _norm_kernel[(1,)](x, res, w, out, x.numel(), 1e-6, BLOCK=triton.next_power_of_2(x.numel()), PDL=pdl,
                       launch_pdl=pdl, num_warps=8)
    return out


def decode_step(x, res, layers, final, lm_head, triton_gemv: bool, pdl: bool):
    "One token through every layer: 6 small kernels and 4 GEMVs a layer, then the final norm and the LM head."
    lin = (lambda v, w, name: gemv(v, w, name, pdl)) if triton_gemv else (lambda v, w, name: F.linear(v[None], w)[0])
    for L in layers:
        h = norm(x, res, L["norm1"], pdl)
        qkv = lin(h, L["qkv"], "qkv")
        q = small(0, qkv, 5120, pdl)                          # "rotary" of q and k
        kv = small(1, qkv[4096:], 2048, pdl)                  # "KV store"
        attn = small(2, q, 4096, pdl, b=kv, b_mod=2048)       # "attention"
        x = lin(attn, L["o"], "o")
        h = norm(x, res, L["norm2"], pdl)
        act = small(3, lin(h, L["gate_up"], "gate_up"), 12288, pdl)
        x = lin(act, L["down"], "down")
    return lin(norm(x, res, final, pdl), lm_head, "lm_head")


def layer_chain(res_out: dict, layers_n: int = 36) -> None:
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(dev).manual_seed(0)
    rnd = lambda *s: (torch.randn(*s, generator=g, device=dev) / s[-1] ** .5).to(bf)
    ones = lambda n: (1 + 0.1 * torch.rand(n, generator=g, device=dev)).to(bf)
    layers = [dict(norm1=ones(4096), qkv=rnd(6144, 4096), o=rnd(4096, 4096), norm2=ones(4096),
                   gate_up=rnd(24576, 4096), down=rnd(4096, 12288)) for _ in range(layers_n)]
    final, lm_head = ones(4096), rnd(151936, 4096)
    weight_bytes = sum(w.numel() * 2 for L in layers for w in L.values()) + lm_head.numel() * 2 + final.numel() * 2
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev); dst = torch.empty_like(src)
    copy_Bps = 2 * src.numel() / (do_bench_cudagraph(lambda: dst.copy_(src), rep=200) * 1e-3)
    x0 = rnd(4096); res0 = torch.zeros(4096, dtype=bf, device=dev)
    out, res = {}, {"layers": layers_n, "weight_bytes": weight_bytes, "copy_Bps": copy_Bps,
                    "roofline_ms": weight_bytes / copy_Bps * 1e3, "variants": {}}
    for name, tg, pdl in (("cublas", False, False), ("cublas, pdl", False, True), ("triton", True, False),
                          ("triton, pdl", True, True)):
        try:
            run = lambda: decode_step(x0, res0.clone(), layers, final, lm_head, tg, pdl)
            out[name] = run()
            ms = do_bench_cudagraph(run, rep=300)
            res["variants"][name] = {"ms": ms, "tok_s": 1e3 / ms, "TBps": weight_bytes / ms / 1e9,
                                     "of_copy": weight_bytes / ms * 1e3 / copy_Bps,
                                     "rel_err_vs_cublas": float((out[name].float() - out["cublas"].float()).norm()
                                                                / out["cublas"].float().norm())}
        except Exception as e:
            res["variants"][name] = f"{type(e).__name__}: {e}"[:300]
        print(name, res["variants"][name], flush=True)
    if "triton" in out and "triton, pdl" in out: res["pdl_bit_identical"] = torch.equal(out["triton"], out["triton, pdl"])
    res_out["decode_layers"] = res


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
    layer_chain(res)
    print(json.dumps(res, indent=1))
    with open(args.out, "w") as f: json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
