"""FP8 experts on the Triton MoE kernel at DeepSeek-V2-Lite's shapes: tiles, and FP8 activations
(W8A8) against FP8 weights alone (W8A16), timed beside the bf16 experts (a probe).

Usage: python3 tools/fp8_probes/moe_tiles.py OUT.json
Each configuration runs the whole `fused_moe` (alignment, quantization, both GEMMs, the sum)
captured in a CUDA graph, as a decode step runs it (the JSON files of 2026-12-05 were timed over one
round of 50 replays; the decode probes' stopwatch, used since, takes the median of five). Its error
is against `fused_moe_ref` on the dequantized weights with 16-bit activations (so W8A8's includes
its activations' rounding).
"""

import json
import sys
from pathlib import Path

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).parents[1] / "decode_probes"))
from graph_timing import graph_us  # noqa: E402 (the decode probes' stopwatch)

from metainfer.kernels import triton_moe as tm
from metainfer.kernels.triton_launch import relative_error
from metainfer.layers.fp8 import Fp8Weight, quantize_fp8
from metainfer.layers.moe import fused_moe_ref

D, IL, E, K = 2048, 1408, 64, 6  # DeepSeek-V2-Lite: hidden, expert width, experts, per token
TOKENS = (1, 4, 16, 64, 256, 1024, 4096)


def inputs(T: int, seed: int = 0):
    g = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(T, D, generator=g, device="cuda").bfloat16()
    gate_up = (torch.randn(E, 2 * IL, D, generator=g, device="cuda") / D**0.5).bfloat16()
    down = (torch.randn(E, D, IL, generator=g, device="cuda") / IL**0.5).bfloat16()
    w, ids = torch.rand(T, E, generator=g, device="cuda").topk(K, dim=-1)
    return x, gate_up, down, w, ids


def variants(T: int) -> list[tuple[str, bool, dict | None]]:
    "(name, FP8 activations, tiles or None for the default) to try at `T` tokens."
    out = [("default", False, None)]
    if T == 1:
        for bn in (32, 64, 128):
            for st in (3, 4, 5):
                out.append(
                    (
                        "w8a16",
                        False,
                        dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=128, num_warps=4, num_stages=st),
                    )
                )
    else:
        for bm in (16, 64) if T * K <= 512 else (64,):
            for bn in (64, 128):
                for st in (3, 4):
                    out.append(
                        (
                            "w8a16",
                            False,
                            dict(
                                BLOCK_M=bm,
                                BLOCK_N=bn,
                                BLOCK_K=128 if bm == 16 else 64,
                                num_warps=4,
                                num_stages=st,
                            ),
                        )
                    )
    if T >= 16:
        a8 = [(16, bn, 4, st) for bn in (64, 128) for st in (3, 4)] if T * K <= 512 else []
        a8 += [(64, bn, wp, st) for bn in (64, 128) for wp in (4, 8) for st in (3, 4)]
        a8 += [(128, bn, 8, 3) for bn in (64, 128)] if T * K > 512 else []
        for bm, bn, wp, st in a8:
            out.append(
                (
                    "w8a8",
                    True,
                    dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, num_warps=wp, num_stages=st),
                )
            )
    return out


def main(path: str) -> None:
    res = dict(
        gpu=torch.cuda.get_device_name(),
        torch=torch.__version__,
        shapes=dict(D=D, Il=IL, E=E, K=K),
        rows=[],
    )
    default_tiles = tm.moe_tiles
    todo = [(T, v) for T in TOKENS for v in variants(T)]
    last_T, bar = None, tqdm(todo)
    for T, (name, a8, tiles) in bar:
        if T != last_T:
            x, gate_up, down, w, ids = inputs(T)
            gu, dn = (Fp8Weight(*quantize_fp8(t, (1, 128)), 128) for t in (gate_up, down))
            ref = fused_moe_ref(x.float(), gu.dequantize(), dn.dequantize(), w, ids)
            tm.moe_tiles = default_tiles
            bf16_us = graph_us(lambda: tm.fused_moe(x, gate_up, down, w, ids), 1, 50)
            res["rows"].append(dict(T=T, name="bf16", us=bf16_us))
            last_T = T
        tm.moe_tiles = default_tiles if tiles is None else (lambda *a, _t=tiles, **k: dict(_t))
        row = dict(T=T, name=name, fp8_activations=a8, tiles=tiles)
        try:
            y = tm.fused_moe(x, gu, dn, w, ids, fp8_activations=a8 if tiles else None)
            row["rel_err"] = relative_error(y, ref)
            row["us"] = graph_us(
                lambda: tm.fused_moe(x, gu, dn, w, ids, fp8_activations=a8 if tiles else None),
                1,
                50,
            )
            row["vs_bf16"] = bf16_us / row["us"]
        except Exception as e:  # noqa: BLE001 (a tile the GPU refuses: recorded, not fatal)
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        res["rows"].append(row)
        bar.set_postfix(T=T, us=row.get("us"))
    tm.moe_tiles = default_tiles
    best = {}
    for r in res["rows"]:
        if "us" in r and r["name"] != "bf16" and r.get("rel_err", 1) < 0.1:
            key = (r["T"], r["name"])
            if key not in best or r["us"] < best[key]["us"]:
                best[key] = r
    res["best"] = [
        dict(
            T=T,
            name=n,
            us=r["us"],
            tiles=r["tiles"],
            rel_err=r["rel_err"],
            bf16_us=next(b["us"] for b in res["rows"] if b["T"] == T and b["name"] == "bf16"),
        )
        for (T, n), r in best.items()
    ]
    for b in res["best"]:
        print(
            f"T={b['T']:5d} {b['name']:8s} {b['us']:8.1f} us (bf16 {b['bf16_us']:8.1f})"
            f" err {b['rel_err']:.1e} {b['tiles']}"
        )
    json.dump(res, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
