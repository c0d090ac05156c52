"""Time the paged decode attention kernel's launch options on a GPU, at Qwen3-8B's attention shape.

Usage (GPU):  python tools/decode_tiles.py --out results/decode-tiles-h200.json
For each case (batch, contexts), every candidate (`block_n`, `num_warps`, `num_stages`) of
`paged_decode` is checked against the torch reference and timed (`triton.testing.do_bench`, median);
the JSON lists all timings with the KV bytes read and the resulting bandwidth, the best candidate
per case, and the exact command. The split count is the engine's (`decode_splits`, from
`max_seqlen_k` = the max model length, as in the CUDA graphs).
"""

import argparse
import itertools
import json
import random
import sys
import time
import torch
from metainfer.layers.attention import make_metadata, TorchAttention
from metainfer.kernels.triton_decode import paged_decode
from sweep import time_candidates

H, HK, D, PAGE, MAX_LEN = (
    32,
    8,
    128,
    16,
    4096,
)  # Qwen3-8B: query heads, KV heads, head dim; block size; max_model_len
CASES = {
    "B=1, 4096 tokens": [4096],
    "B=16, 1024 tokens": [1024] * 16,
    "B=256, U[100, 2048] tokens": [random.Random(0).randint(100, 2048) for _ in range(256)],
}
DEV = "cuda"


def case_inputs(ctx: list[int]):
    blocks = [-(-c // PAGE) for c in ctx]
    ids = torch.randperm(sum(blocks) + 1, generator=torch.Generator().manual_seed(0)).tolist()
    tables = [ids[sum(blocks[:i]) : sum(blocks[: i + 1])] for i in range(len(ctx))]
    g = torch.Generator(DEV).manual_seed(0)
    k_cache, v_cache = (
        torch.randn(len(ids), PAGE, HK, D, generator=g, device=DEV).bfloat16() for _ in range(2)
    )
    q = torch.randn(len(ctx), H, D, generator=g, device=DEV).bfloat16()
    _, meta = make_metadata(tables, ctx, [1] * len(ctx), PAGE, False, DEV)
    meta.max_seqlen_k = MAX_LEN
    return q, k_cache, v_cache, meta


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    grid = list(itertools.product([16, 32, 64, 128], [2, 4, 8], [2, 3, 4]))
    res = {
        "command": " ".join(["python", *sys.argv]),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "shape": {"H": H, "Hk": HK, "D": D, "page": PAGE, "max_model_len": MAX_LEN},
        "device": torch.cuda.get_device_name(),
        "cases": {},
    }
    scale = D**-0.5
    for name, ctx in CASES.items():
        q, k_cache, v_cache, meta = case_inputs(ctx)
        k, v = (
            c.flatten(0, 1)[meta.slot_mapping] for c in (k_cache, v_cache)
        )  # the new tokens' K/V, already stored
        ref = TorchAttention.decode(
            q.float(), k.float(), v.float(), k_cache.float(), v_cache.float(), meta, scale
        )
        kv_bytes = sum(ctx) * HK * D * 2 * 2
        options = [
            dict(block_n=bn, num_warps=w, num_stages=s) for bn, w, s in [(32, 4, 2)] + grid
        ]  # default first
        rows, best = time_candidates(
            lambda **o: paged_decode(q, k, v, k_cache, v_cache, meta, scale, **o),
            ref,
            options,
            kv_bytes,
        )
        res["cases"][name] = {"kv_bytes": kv_bytes, "default": rows[0], "best": best, "all": rows}
        print(
            f"{name}: default {rows[0].get('us', float('nan')):.1f} us "
            f"({rows[0].get('GBps', 0):.0f} GB/s of K/V), "
            f"best {best['us']:.1f} us ({best['GBps']:.0f} GB/s) with {best['options']}",
            flush=True,
        )
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
