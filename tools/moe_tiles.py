"""Time the grouped-GEMM tile candidates of `fused_moe` on a GPU, at DeepSeek-V2-Lite's expert
shapes.

Usage (GPU):  python tools/moe_tiles.py --out results/moe-tiles-h200.json
For each batch (tokens), every candidate of `moe_tiles` is checked against the torch reference and
timed (`triton.testing.do_bench`, median); the JSON lists all timings with the bytes of expert
weights touched, the best candidate per batch, and the exact command. The defaults in
`metainfer.kernels.triton_moe.moe_tiles` are then set from it.
"""

import argparse
import itertools
import json
import sys
import time
import torch
import metainfer.kernels.triton_moe as tm
from metainfer.layers.moe import fused_moe_ref
from sweep import time_candidates

D, I, E, K = (
    2048,
    1408,
    64,
    6,
)  # DeepSeek-V2-Lite: hidden, expert intermediate, routed experts, experts per token


def candidates(tokens: int) -> list[dict]:
    if (
        tokens * K <= 512
    ):  # decode: memory-bound, few rows; the same kernels for every such batch (compiled once)
        grid = [
            *itertools.product([16], [32, 64, 128], [64, 128, 256], [4], [3, 4]),
            (16, 64, 256, 8, 3),
            (16, 128, 128, 8, 3),
            (16, 128, 256, 8, 3),
        ]
    else:
        grid = itertools.product([64], [64, 128], [32, 64], [4, 8], [3, 4])
    return [
        dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, num_warps=w, num_stages=s) for m, n, k, w, s in grid
    ]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", default="1,64,128,256")
    args = p.parse_args()
    default = tm.moe_tiles
    res = {
        "command": " ".join(["python", *sys.argv]),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "shapes": {"D": D, "I": I, "E": E, "K": K},
        "device": torch.cuda.get_device_name(),
        "batches": {},
    }
    for T in map(int, args.tokens.split(",")):
        g = torch.Generator("cuda").manual_seed(T)
        x = torch.randn(T, D, generator=g, device="cuda").bfloat16()
        gate_up = (torch.randn(E, 2 * I, D, generator=g, device="cuda") / D**0.5).bfloat16()
        down = (torch.randn(E, D, I, generator=g, device="cuda") / I**0.5).bfloat16()
        w, ids = torch.rand(T, E, generator=g, device="cuda").topk(K, dim=-1)
        ref = fused_moe_ref(x.float(), gate_up.float(), down.float(), w, ids)
        touched = ids.unique().numel() * 3 * D * I * 2

        def run(**tiles):  # fused_moe with these tiles for every batch
            tm.moe_tiles = lambda *args, **kwargs: dict(tiles)
            return tm.fused_moe(x, gate_up, down, w, ids)

        try:
            rows, best = time_candidates(
                run, ref, [default(T * K, 2, T == 1)] + candidates(T), touched
            )
        finally:
            tm.moe_tiles = default
        res["batches"][T] = {"default": rows[0], "best": best, "all": rows}
        print(
            f"T={T}: default {rows[0].get('us', float('nan')):.1f} us, best {best['us']:.1f} us "
            f"({best['GBps']:.0f} GB/s of expert weights) with {best['options']}",
            flush=True,
        )
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
