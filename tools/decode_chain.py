"""What paged decode costs inside a batch-1 decode step, for each of its launch options (GPU).

Usage (GPU):  python tools/decode_chain.py --out results/decode-chain-h200.json
Why: in a Qwen3-8B step at B=1 the decode kernel takes ~6.6 µs a layer (run26, `latency --profile`), for a few
hundred KB of K/V. Timed alone (`tools/decode_tiles.py`) it shows neither PDL's overlap with the QKV GEMV before it
nor the O GEMV's wait after it. Here each candidate runs where the engine runs it: 36 layers of
`QKV GEMV -> decode (with Qwen3's q/k norm and rotary) -> O GEMV` at Qwen3-8B's shapes, captured in one CUDA graph
(`triton.testing.do_bench_cudagraph`), against the same chain without the decode (the O GEMV reads the QKV output
directly). `(chain - baseline) / 36` is the decode's cost a layer. Candidates: pieces per context (`num_splits`; the
engine's is `decode_splits(1, 8, 4096)` = 16 at `max_model_len` 4096), `block_n`, `num_warps`. Each candidate's
relative difference from the default's output is recorded: other piece lengths sum in another order, and after 36
layers without norms that grows to a few per cent (run27: 3.6e-2), so `best` (within 1e-2) is only the default's
own piece layouts; the printout ranks all. The JSON lists every timing and the exact command.
"""
import argparse, itertools, json, sys, time
import torch
from triton.testing import do_bench_cudagraph
from metainfer.attention import make_metadata
from metainfer.kernels import Rope, RotaryEmbedding
from metainfer.triton_attention import paged_decode, decode_splits
from metainfer.triton_kernels import linear, relative_error

LAYERS, HIDDEN, H, HK, D, PAGE, MAX_LEN = 36, 4096, 32, 8, 128, 16, 4096  # Qwen3-8B; block size; bench max_model_len
DEV, BF = "cuda", torch.bfloat16


def layer_inputs(ctx: int, g: torch.Generator):
    "One layer's weights, K/V pools holding `ctx - 1` cached tokens, and the step's metadata and rope."
    blocks = -(-ctx // PAGE)
    w_qkv = torch.randn((H + 2 * HK) * D, HIDDEN, generator=g, device=DEV).to(BF) / HIDDEN ** .5
    w_o = torch.randn(HIDDEN, H * D, generator=g, device=DEV).to(BF) / (H * D) ** .5
    kc, vc = (torch.randn(blocks, PAGE, HK, D, generator=g, device=DEV).to(BF) for _ in range(2))
    return w_qkv, w_o, kc, vc


def main() -> None:
    p = argparse.ArgumentParser(); p.add_argument("--out", required=True)
    p.add_argument("--contexts", default="384,2048")
    args = p.parse_args()
    g = torch.Generator(DEV).manual_seed(0)
    default_splits = decode_splits(1, HK, MAX_LEN, torch.device(DEV))
    candidates = [dict(num_splits=default_splits, block_n=32, num_warps=4)]  # the engine's, first
    candidates += [dict(num_splits=s, block_n=bn, num_warps=w) for s, bn, w in itertools.product((4, 8, 16, 32), (16, 32, 64), (2, 4))
                   if dict(num_splits=s, block_n=bn, num_warps=w) != candidates[0]]
    res = {"command": " ".join(["python", *sys.argv]), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
           "device": torch.cuda.get_device_name(), "layers": LAYERS, "cases": {}}
    rot = RotaryEmbedding(D, 40960, 1e6).to(DEV)
    q_w, k_w = (1 + 0.1 * torch.randn(D, generator=g, device=DEV)).to(BF), (1 + 0.1 * torch.randn(D, generator=g, device=DEV)).to(BF)
    for ctx in map(int, args.contexts.split(",")):
        layers = [layer_inputs(ctx, g) for _ in range(LAYERS)]
        tables = [list(range(-(-ctx // PAGE)))]
        positions, meta = make_metadata(tables, [ctx], [1], PAGE, False, DEV)
        meta.max_seqlen_k = MAX_LEN
        rope = Rope(positions, rot.cos_sin_cache, True, q_w, k_w, 1e-6)          # Qwen3: q/k norms, then neox rotary
        x0 = torch.randn(1, HIDDEN, generator=g, device=DEV).to(BF)

        def chain(opts: dict | None) -> torch.Tensor:
            x = x0
            for w_qkv, w_o, kc, vc in layers:
                qkv = linear(x, w_qkv)
                q, k, v = qkv.split([H * D, HK * D, HK * D], -1)
                q, k, v = q.view(1, H, D), k.view(1, HK, D), v.view(1, HK, D)
                o = qkv[:, :H * D] if opts is None else paged_decode(q, k, v, kc, vc, meta, D ** -0.5, rope, **opts).flatten(1)
                x = linear(o, w_o)
            return x

        base_us = do_bench_cudagraph(lambda: chain(None)) * 1e3
        ref = chain(candidates[0])
        rows = []
        for opts in candidates:
            err = relative_error(chain(opts), ref)
            us = do_bench_cudagraph(lambda: chain(opts)) * 1e3
            rows.append({"options": opts, "chain_us": us, "decode_us_per_layer": (us - base_us) / LAYERS, "rel_err": err})
        ok = [r for r in rows if r["rel_err"] < 1e-2]
        best = min(ok, key=lambda r: r["chain_us"])
        res["cases"][f"B=1, {ctx} tokens"] = {"baseline_chain_us": base_us, "default": rows[0], "best": best, "all": rows}
        print(f"ctx {ctx}: chain without decode {base_us:.1f} us; decode a layer: default {rows[0]['decode_us_per_layer']:.2f} us"
              f" {rows[0]['options']}, best {best['decode_us_per_layer']:.2f} us {best['options']}", flush=True)
        for r in sorted(rows, key=lambda r: r["chain_us"])[:6]:
            print(f"   {r['decode_us_per_layer']:6.2f} us  err {r['rel_err']:.1e}  {r['options']}")
    with open(args.out, "w") as f: json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
