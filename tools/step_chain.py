"""A batch-1 Qwen3-8B decode step built from the package's own kernels, timed per launch option (GPU).

Usage (GPU):  python tools/step_chain.py --out results/step-chain-h200.json
Why: the engine's B=1 figure (`metainfer bench latency`) needs a checkpoint, a load and a graph capture for every
option tried (about a minute each). This chain is the step's kernel sequence without the engine: 36 layers of
distinct random weights at Qwen3-8B's shapes, each `add_rms_norm -> QKV GEMV -> paged decode (q/k norms and rotary
inside, 384 tokens of context) -> O GEMV -> add_rms_norm -> gate-up GEMV with the activation -> down GEMV`, then the
final norm and the LM head, captured in one CUDA graph (`triton.testing.do_bench_cudagraph`). Each option is an
environment switch the package reads (`METAINFER_PDL`), or where the MLP's activation runs (the gate-up GEMV's
epilogue, or its own kernel), or where the norms run (kernels of their own, or the next GEMV's prologue: `norm_linear`);
every option must give the first one's output bit for bit (none changes arithmetic; the norms in the GEMV prologues
reduce each row as the norm kernel does), else the exit status is 1. The folded norms, which the engine uses in
eager mode only, took 4.33 against 4.03 ms (run44). "No norms at all" computes another function: it bounds what any
fusion of the norms could save. The weight bytes over the copy bandwidth measured in the same run is the step's roofline.
The JSON has the ms a step, tok/s, the weights' TB/s and the share of the roofline.
`--tp N` builds one rank's step of TP=N instead (heads, MLP width and vocabulary split; no all-reduce: the GEMVs at
a rank's shapes), and `--gemv-tiles '[{"BLOCK_N": 8}, ...]'` adds one option per dict of GEMV tile overrides (over
`gemv_tiles`' defaults); these change summation order, so they are checked against the first option's output to
a relative error of 5e-2 instead of bit for bit (36 layers of random bf16 weights amplify a changed summation order:
`BLOCK_K` 512 gave 3.3e-2 in run39). Measured with it so far
(docs/benchmarks): the GEMV's L2 prefetch (run30, run31) and a wider pre-wait tile (run35), both slower and backed
out; the gate-up weight as [gate | up] against interleaved rows (run32; the package now loads them interleaved).
"""
import argparse, json, os, sys, time
import torch
from triton.testing import do_bench_cudagraph
from metainfer.attention import make_metadata
from metainfer.kernels import Rope, RotaryEmbedding
from metainfer.triton_attention import paged_decode
from metainfer.bench import copy_bandwidth
from metainfer import triton_kernels
from metainfer.kernels import ops, norm_linear_ref
from metainfer.triton_kernels import TritonKernels, add_rms_norm, linear, pdl, relative_error, silu_and_mul

LAYERS, HIDDEN, H_ALL, HK_ALL, D, I_ALL, VOCAB_ALL, PAGE = 36, 4096, 32, 8, 128, 12288, 151936, 16  # Qwen3-8B; KV block
DEV, BF, EPS = "cuda", torch.bfloat16, 1e-6
OPTIONS = {  # name: (environment, the MLP's activation inside the gate-up GEMV, the norms in the next GEMV's prologue)
    "activation in the gate-up GEMV": ({}, True, False),
    "activation as a kernel": ({}, False, False),
    "no pdl": ({"METAINFER_PDL": "0"}, True, False),
    "norms in the GEMV prologues": ({}, True, True),
    "no norms at all (a bound, not a model)": ({}, True, None),
}


def main() -> int:
    p = argparse.ArgumentParser(); p.add_argument("--out", required=True)
    p.add_argument("--context", type=int, default=384); p.add_argument("--layers", type=int, default=LAYERS)
    p.add_argument("--tp", type=int, default=1, help="one rank's step of this tensor-parallel size")
    p.add_argument("--gemv-tiles", default="[]", help="JSON list of dicts: GEMV tile overrides, one option each")
    args = p.parse_args()
    ops.use(TritonKernels())  # the norm + linear reference composes the table's (Triton) ops
    H, HK, I, VOCAB = (n // args.tp for n in (H_ALL, HK_ALL, I_ALL, VOCAB_ALL))  # this rank's heads, width, vocabulary
    options = {name: (env, fused, fold, None) for name, (env, fused, fold) in OPTIONS.items()}
    options.update({f"gemv tiles {o}": ({}, True, False, o) for o in json.loads(args.gemv_tiles)})
    g = torch.Generator(DEV).manual_seed(0)
    rnd = lambda *s: (torch.randn(*s, generator=g, device=DEV) / s[-1] ** .5).to(BF)
    ones = lambda n: (1 + 0.1 * torch.randn(n, generator=g, device=DEV)).to(BF)
    blocks = -(-args.context // PAGE)
    layers = [dict(norm1=ones(HIDDEN), qkv=rnd((H + 2 * HK) * D, HIDDEN), q_norm=ones(D), k_norm=ones(D),
                   o=rnd(HIDDEN, H * D), norm2=ones(HIDDEN), gate_up=rnd(2 * I, HIDDEN), down=rnd(HIDDEN, I),
                   kc=rnd(blocks, PAGE, HK, D), vc=rnd(blocks, PAGE, HK, D)) for _ in range(args.layers)]
    final, lm_head = ones(HIDDEN), rnd(VOCAB, HIDDEN)
    weight_bytes = sum(L[k].numel() * 2 for L in layers for k in ("qkv", "o", "gate_up", "down")) + lm_head.numel() * 2
    copy_Bps = copy_bandwidth(torch.device(DEV))  # as the bench measures it
    positions, meta = make_metadata([list(range(blocks))], [args.context], [1], PAGE, False, DEV)
    meta.max_seqlen_k = 4096  # the bench's max_model_len, which sets decode's pieces a context
    rot = RotaryEmbedding(D, 40960, 1e6).to(DEV)
    x0, res0 = rnd(1, HIDDEN), rnd(1, HIDDEN)

    def folded(x, res, nw, eps, w, act=None):  # the norm in the GEMV's prologue also in a graph (`norm_linear`: eager only)
        res_out = torch.empty_like(x)
        return triton_kernels.gemv(x, w, act=act, norm=(res, nw, eps), residual_out=res_out), res_out

    def skipped(x, res, nw, eps, w, act=None):  # no norm: what a norm costs in this chain, at most
        return linear(x, w, act=act), res

    def step(fused: bool, fold: bool | None) -> torch.Tensor:  # (H, HK, I: this rank's)
        x, res = x0, res0.clone()
        norm_linear = {True: folded, False: norm_linear_ref, None: skipped}[fold]  # the reference: add_rms_norm, then linear
        for L in layers:
            qkv, res = norm_linear(x, res, L["norm1"], EPS, L["qkv"])
            q, k, v = (t.reshape(1, -1, D) for t in qkv.split([H * D, HK * D, HK * D], -1))
            rope = Rope(positions, rot.cos_sin_cache, True, L["q_norm"], L["k_norm"], EPS)
            x = linear(paged_decode(q, k, v, L["kc"], L["vc"], meta, D ** -0.5, rope).flatten(1), L["o"])
            if fused: a, res = norm_linear(x, res, L["norm2"], EPS, L["gate_up"], act="silu_and_mul")
            else: h, res = add_rms_norm(x, res, L["norm2"], EPS); a = silu_and_mul(linear(h, L["gate_up"]))
            x = linear(a, L["down"])
        return linear(add_rms_norm(x, res, final, EPS)[0], lm_head)

    res = {"command": " ".join(["python", *sys.argv]), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
           "device": torch.cuda.get_device_name(), "layers": args.layers, "context": args.context, "tp": args.tp,
           "weight_bytes": weight_bytes, "copy_Bps": copy_Bps, "roofline_ms": weight_bytes / copy_Bps * 1e3,
           "options": {}}
    first, ok = None, True
    default_tiles = triton_kernels.gemv_tiles
    for name, (env, fused, fold, tiles) in options.items():
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env); pdl.cache_clear()
        if tiles: triton_kernels.gemv_tiles = lambda N, K, device, t=tiles: default_tiles(N, K, device) | t
        try:
            out = step(fused, fold)
            first = out if first is None else first
            ms = do_bench_cudagraph(lambda: step(fused, fold), rep=300)
            res["options"][name] = {"env": env, "activation_in_gemv": fused, "norms_in_gemv": fold, "gemv_tiles": tiles,
                                    "ms": ms, "tok_s": 1e3 / ms,
                                    "weights_TBps": weight_bytes / ms / 1e9, "of_roofline": res["roofline_ms"] / ms,
                                    "same_output": torch.equal(out, first), "rel_err": relative_error(out, first)}
            if fold is not None:  # (without norms the output is another number)
                ok &= res["options"][name]["same_output"] if not tiles else res["options"][name]["rel_err"] < 5e-2
        except Exception as e:  # recorded, not raised: the other options still run (the exit status says it)
            res["options"][name], ok = f"{type(e).__name__}: {e}"[:400], False
        finally:
            triton_kernels.gemv_tiles = default_tiles
            for k, v in saved.items():
                if v is None: os.environ.pop(k, None)
                else: os.environ[k] = v
            pdl.cache_clear()
        print(f"{name:40s} {res['options'][name]}", flush=True)
    print(f"roofline {res['roofline_ms']:.3f} ms ({copy_Bps / 1e12:.2f} TB/s copy)")
    with open(args.out, "w") as f: json.dump(res, f, indent=1)
    return 0 if ok else 1  # an option that failed or changed the output (bits; beyond 5e-2 for tile overrides)


if __name__ == "__main__":
    sys.exit(main())
