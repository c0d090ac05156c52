"""Would a 256-sequence decode step gain from running two halves of its batch at once, one half's
memory-bound paged attention beside the other's compute-bound FP8 GEMMs (SGLang's two-batch
overlap, NanoFlow's nano-batches)? Qwen3-8B's layer with block-wise FP8 weights (36 layers'
distinct weights, the package's `scaled_mm`, norms, SiLU and `paged_decode`), contexts as a
throughput run's mid-decode steps have them, one CUDA graph a variant:
- `one_batch`: the engine today, 256 rows a kernel;
- `halves_in_turn`: two halves of 128, one after the other on one stream (what halving costs);
- `two_streams`: each half on its own stream, free to interleave;
- `ping_pong`: two streams in lockstep, one half's attention beside the other's MLP.
Reports ms a step (36 layers, no lm_head) and whether each variant gives halves_in_turn's bits.
Usage: python overlap.py OUT.json [fp8]   (`fp8`: the K/V pool in FP8)

Measured on an H100 (2026-12-06, `docs/benchmarks/h100-2026-12-06-overlap/`, mean context 866), ms
a step: bf16 pool: one_batch 16.99, halves_in_turn 20.73, two_streams 18.17, ping_pong 18.62; FP8
pool: 12.73, 16.58, 13.91, 14.52. Halving the GEMMs' rows costs more (+22-30 %) than running the
halves side by side wins back: not built into the engine."""

import json
import random
import sys
import torch
from graph_timing import captured, paged_batch
from metainfer.kernels.triton_decode import paged_decode
from metainfer.kernels.triton_linear import scaled_mm
from metainfer.kernels.triton_norms import add_rms_norm, rms_norm
from metainfer.kernels.triton_silu import silu_and_mul
from metainfer.layers.attention import to_cache
from metainfer.layers.fp8 import Fp8Weight, expand_scale, quantize_fp8

dev, BF, LAYERS = torch.device("cuda"), torch.bfloat16, 36
H, Hk, D, HID, INTER = 32, 8, 128, 4096, 12288
SHAPES = {"qkv": (6144, HID), "o": (HID, HID), "gate_up": (2 * INTER, HID), "down": (HID, INTER)}
torch.manual_seed(0)
rng = random.Random(0)


def fp8_weight(N: int, K: int) -> Fp8Weight:
    q, grid = quantize_fp8(torch.randn(N, K, device=dev) * 0.02, (128, 128))
    w = Fp8Weight(q, expand_scale(grid, 128, N), 128)
    w.scale_columns  # noqa: B018 (made before capture)
    return w


layers = [{k: fp8_weight(*s) for k, s in SHAPES.items()} for _ in range(LAYERS)]
norm_w = torch.ones(HID, device=dev, dtype=BF)
B = 256
ctx = [rng.randint(100, 1024) + 300 for _ in range(B)]
kc, vc, meta, *_ = paged_batch(ctx, dev, H, Hk, D, 16)
if sys.argv[2:] == ["fp8"]:
    kc, vc = (to_cache(x, torch.float8_e4m3fn) for x in (kc, vc))


def half_meta(lo: int, hi: int):
    from dataclasses import replace

    return replace(
        meta,
        block_tables=meta.block_tables[lo:hi],
        context_lens=meta.context_lens[lo:hi],
        slot_mapping=meta.slot_mapping[lo:hi],
    )


metas = {(0, B): meta, (0, B // 2): half_meta(0, B // 2), (B // 2, B): half_meta(B // 2, B)}


def attention_part(i: int, x: torch.Tensor, rows: tuple[int, int]):
    "norm, qkv, paged attention, o: the half of a layer that reads K/V."
    M, w = x.shape[0], layers[i]
    qkv = scaled_mm(rms_norm(x, norm_w, 1e-6), w["qkv"], BF)
    q, k, v = qkv.split([H * D, Hk * D, Hk * D], -1)
    q, k, v = q.view(M, H, D), k.reshape(M, Hk, D), v.reshape(M, Hk, D)
    a = paged_decode(q, k, v, kc, vc, metas[rows], D**-0.5)
    return scaled_mm(a.view(M, H * D), w["o"], BF), x


def mlp_part(i: int, o: torch.Tensor, residual: torch.Tensor):
    "add + norm, gate_up, SiLU, down: the half of a layer that is all GEMM."
    n, residual = add_rms_norm(o, residual, norm_w, 1e-6)
    up = scaled_mm(n, layers[i]["gate_up"], BF)
    return scaled_mm(silu_and_mul(up), layers[i]["down"], BF) + residual


def layer(i, x, rows):
    return mlp_part(i, *attention_part(i, x, rows))


x0 = torch.randn(B, HID, device=dev, dtype=BF) * 0.1
halves = ((0, B // 2), (B // 2, B))
x_halves = [x0[lo:hi].clone() for lo, hi in halves]
out = {}
side = torch.cuda.Stream()


def one_batch():
    x = x0
    for i in range(LAYERS):
        x = layer(i, x, (0, B))
    out["y"] = x


def halves_in_turn():
    xs = list(x_halves)
    for i in range(LAYERS):
        xs = [layer(i, x, r) for x, r in zip(xs, halves)]
    out["y"] = torch.cat(xs)


def two_streams():
    main = torch.cuda.current_stream()
    side.wait_stream(main)
    ys = [None, None]
    for j, s in ((1, side), (0, main)):
        with torch.cuda.stream(s):
            x = x_halves[j]
            for i in range(LAYERS):
                x = layer(i, x, halves[j])
            ys[j] = x
    main.wait_stream(side)
    out["y"] = torch.cat(ys)


def ping_pong():
    """Slot t runs half A's part t beside half B's part t - 1 (parts: attention, MLP, in turn);
    both streams meet between slots."""
    main = torch.cuda.current_stream()
    streams, state = (main, side), [(x_halves[0],), (x_halves[1],)]
    parts = [(i, p) for i in range(LAYERS) for p in (0, 1)]
    for t in range(len(parts) + 1):
        side.wait_stream(main)
        for j in (0, 1):
            k = t - j
            if not 0 <= k < len(parts):
                continue
            i, p = parts[k]
            with torch.cuda.stream(streams[j]):
                state[j] = (
                    attention_part(i, state[j][0], halves[j]) if p == 0 else
                    (mlp_part(i, *state[j]),)
                )  # fmt: skip
        main.wait_stream(side)
    out["y"] = torch.cat([state[0][0], state[1][0]])


def step_ms(fn) -> tuple[float, torch.Tensor]:
    g = captured(fn, warmups=1)
    y = out["y"].clone()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record()
        for _ in range(10):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 10)
    del g
    return sorted(ts)[2], y


res = dict(command="python tools/decode_probes/overlap.py " + " ".join(sys.argv[1:]),
           gpu=torch.cuda.get_device_name(), torch=torch.__version__, B=B,
           mean_ctx=sum(ctx) / B, pool=str(kc.dtype), rows=[])  # fmt: skip
ref = None  # halves_in_turn's output: the streams must not change a bit of it
for fn in (halves_in_turn, one_batch, two_streams, ping_pong):
    ms, y = step_ms(fn)
    ref = y if ref is None else ref
    same = torch.equal(y, ref)
    err = ((y.float() - ref.float()).norm() / ref.float().norm()).item()
    res["rows"].append(dict(variant=fn.__name__, ms=round(ms, 3), same_bits=same, err=err))
    print(f"{fn.__name__:15s} {ms:7.3f} ms a step  same bits as halves_in_turn: {same} ({err:.1e})",
          flush=True)  # fmt: skip
json.dump(res, open(sys.argv[1], "w"), indent=1)
