"""Which GEMV tile makes a launch's boundary cheapest: a B=1 step's 144 GEMVs of Qwen3-8B's shapes
by the package's GEMV (with PDL, in one CUDA graph) at each tile policy, then Qwen3-8B block-wise
FP8 at B=1 through `metainfer bench latency` with the best policy patched in.

`row_sums.py launches` (H100, 12-07, docs/benchmarks/h100-2026-12-07-launch/launch-floor.json):
the same FP8 bytes take 2,171 us by two launches and 2,500 by the step's 144 with PDL at the
package's 8 x 2,048 tile, but 2,406 at 2 x 4,096, where a program of a `K = 4,096` GEMV loads its
whole share before it waits for the kernel before. Here the package's own GEMV runs each policy:
a policy maps a weight's `K` to a tile (rows, columns, warps), for one weight dtype.

H100, 12-07 (docs/benchmarks/h100-2026-12-07-tiles/): no tile beats the package's. The step takes
2,585 us at its 8 x 2,048, 2,597 at 4 x 2,048, 2,722-2,726 at 2 x 2,048 and 2 x 4,096, 2,860 at
8,192-column chunks for `K = 12,288` and 2,917-2,946 at one chunk: the row sums' gain from loading
a program's share before the wait does not carry over to the GEMV, which also reads its input and
scales. Qwen3-8B FP8 B=1 with 4 x 2,048 patched in 299.9 tok/s, the package's default 296.8 in the
same call (one run each; runs differ by about 1 %). bf16: the package's 4,634 us, 2 x 2,048 4,605
(0.6 %, near the noise), others slower.

Usage: python tools/fp8_probes/step_tiles.py step OUT.json
       python tools/fp8_probes/step_tiles.py model STEP.json CKPT OUTDIR  (bench with the best)"""

import json
import sys
import torch
from metainfer.kernels import triton_gemv as tg
from metainfer.layers.fp8 import FP8, Fp8Weight

sys.path[:0] = ["tools/decode_probes", "tools/fp8_probes"]
from graph_timing import graph_us  # noqa: E402
from row_sums import SHAPES, package_step, save_row, stacked  # noqa: E402

dev = torch.device("cuda")
PACKAGE = tg.gemv_tiles

# name: {K: (rows, columns, warps)} (`K` missing: the 4,096 entry; 4 warps there, as a GEMV with a
# norm prologue needs); None: the package's
FP8_POLICIES = {
    "package": None,
    "4x4096": {4096: (4, 4096, 4)},
    "2x4096": {4096: (2, 4096, 4)},
    "2x4096/2x16384w8": {4096: (2, 4096, 4), 12288: (2, 16384, 8)},
    "2x4096/2x8192w8": {4096: (2, 4096, 4), 12288: (2, 8192, 8)},
    "4x4096/4x16384w16": {4096: (4, 4096, 4), 12288: (4, 16384, 16)},
    "2x2048": {4096: (2, 2048, 4)},
    "4x2048": {4096: (4, 2048, 4)},
}
BF16_POLICIES = {
    "package": None,
    "2x2048": {4096: (2, 2048, 4)},
    "1x4096": {4096: (1, 4096, 4)},
    "2x4096/2x16384w16": {4096: (2, 4096, 4), 12288: (2, 16384, 16)},
}  # fmt: skip


def patched(policy: dict | None, itemsize: int = 1):
    "A `gemv_tiles` taking its tiles from `policy` for weights of `itemsize` (the package's else)."
    if policy is None:
        return PACKAGE

    def tiles(N: int, K: int, device: torch.device, size: int = 2) -> dict:
        if size != itemsize:
            return PACKAGE(N, K, device, size)
        bn, bk, warps = policy.get(K, policy[4096])
        return dict(BLOCK_N=bn, BLOCK_K=min(bk, tg.next_pow2(K)), num_warps=warps, num_stages=3)

    return tiles


def timed(result: dict, out_path: str, row: dict, weights, nbytes: int) -> None:
    "The package's step over `weights` with `row`'s policy patched in, timed into `row`, saved."
    tg.gemv_tiles = patched(row.pop("policy"), 1 if row["weights"] == "fp8" else 2)
    try:
        ref = package_step(weights)
        us = graph_us(ref, 1, 20)
        row.update(step_us=us, TBps=nbytes / us / 1e6)
    except Exception as e:  # a tile that does not compile here
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        tg.gemv_tiles = PACKAGE
    save_row(result, out_path, row)


def checked(policy: dict) -> float:
    """Largest error over largest value of the policy's GEMVs (with `silu_and_mul`, and a norm
    prologue) against the package's, at each shape: a tile that computes wrongly is not timed."""
    worst = 0.0
    for N, K in SHAPES:
        w = Fp8Weight((torch.randn(N, K, device=dev) * 0.5).to(FP8),
                      torch.rand(N, K // 128, device=dev), 128)  # fmt: skip
        x = torch.randn(1, K, device=dev, dtype=torch.bfloat16)
        nw = torch.rand(K, device=dev, dtype=torch.bfloat16)
        norm = [dict(norm=(None, nw, 1e-6))] if tg.prologue_norms_alike(K) else []
        for kw in (dict(), dict(act="silu_and_mul"), *norm):
            a = tg.gemv(x, w, **kw).float()
            tg.gemv_tiles = patched(policy)
            try:
                b = tg.gemv(x, w, **kw).float()
            finally:
                tg.gemv_tiles = PACKAGE
            worst = max(worst, ((a - b).abs().max() / a.abs().max()).item())
    return worst


def step(out_path: str) -> None:
    "Every policy's step, FP8 then bf16 (the same shapes, twice the bytes)."
    whole, views = stacked()
    nbytes = sum(w.numel() for w in whole)
    result = dict(device=torch.cuda.get_device_name(), step_bytes=nbytes, rows=[])
    fp8w = [Fp8Weight(w.view(FP8), torch.rand(w.shape[0], w.shape[1] // 128, device=dev), 128)
            for w in views]  # fmt: skip
    for name, policy in FP8_POLICIES.items():
        row = dict(weights="fp8", name=name, policy=policy)
        if policy is not None:
            try:
                row["rel_err"] = checked(policy)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:300]
                result["rows"].append(row | dict(policy=None))
                continue
        timed(result, out_path, row, fp8w, nbytes)
    del fp8w, whole, views
    bf = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) for _ in range(36) for N, K in SHAPES]
    for name, policy in BF16_POLICIES.items():
        timed(result, out_path, dict(weights="bf16", name=name, policy=policy), bf, 2 * nbytes)


def model(step_json: str, ckpt: str, out_dir: str) -> None:
    """`metainfer bench latency CKPT --batch-size 1` with the FP8 policy that timed fastest (and
    computed the package's results) patched in, named after it."""
    rows = json.load(open(step_json))["rows"]
    ok = [r for r in rows if r["weights"] == "fp8" and "step_us" in r and r["name"] != "package"
          and r.get("rel_err", 1) < 1e-2]  # fmt: skip
    best = min(ok, key=lambda r: r["step_us"])
    print("best policy:", best, flush=True)
    tg.gemv_tiles = patched(FP8_POLICIES[best["name"]])
    from metainfer.entrypoints.cli import main

    name = f"latency-qwen3-8b-fp8-b1-tiles-{best['name'].replace('/', '-')}"
    main(["bench", "latency", ckpt, "--batch-size", "1", "--name", name, "--out", out_dir])
    # (its `command` is what the CLI was passed: say how it really ran)
    how = (
        "run in-process by tools/fp8_probes/step_tiles.py model with triton_gemv.gemv_tiles "
        f"patched to {best['name']} tiles for FP8 weights; `command` is what it passed to the CLI"
    )
    path = f"{out_dir}/{name}.json"
    result = {k: v for k, v in json.load(open(path)).items() if k != "probe"}
    json.dump({"probe": how} | result, open(path, "w"), indent=1)


if __name__ == "__main__":
    {"step": step, "model": model}[sys.argv[1]](*sys.argv[2:])
