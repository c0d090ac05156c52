"""Which block-scale layouts torch._scaled_mm takes on this GPU, for which row counts and shapes,
and how fast it is against our Triton FP8 GEMM, cuBLAS bf16 and dequantize + bf16 (a probe).

Usage: python3 tools/fp8_probes/scaled_mm_limits.py OUT.json
Layouts tried: activations 1 x 128 (outer-dim-major) with weights 1 x 128 (one scale per row
and 128 columns: `Fp8Weight`'s own form) or 128 x 128; per-token x per-channel (rowwise).
"""

import json
import sys

import torch

from timing import eager_us  # this folder (the script's own) is on sys.path

from metainfer.kernels import triton_linear as tl_
from metainfer.layers.fp8 import Fp8Weight, expand_scale, quantize_fp8

SHAPES = {  # (N, K) of Qwen3-8B's and DeepSeek-V2-Lite's linears at TP=1
    "qwen-qkv": (6144, 4096),
    "qwen-o": (4096, 4096),
    "qwen-gate-up": (24576, 4096),
    "qwen-down": (4096, 12288),
    "ds-q": (3072, 2048),
    "ds-kv-a": (576, 2048),
    "ds-dense-down": (2048, 10944),
    "ds-shared-down": (2048, 2816),
}
ROWS = (1, 2, 3, 8, 15, 16, 17, 33, 64, 100, 128, 200, 256, 384, 511, 512, 1000, 2048, 8192)
TIMED = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()


def layouts(w_rows, w_grid):
    "Candidate (name, scale_b) pairs for `_scaled_mm(qa, qw.T, scale_a, scale_b)`."
    return {
        "1x128:rows(N,G)strides(1,N)": w_rows.t().contiguous().t(),
        "1x128:rows(G,N)contig": w_rows.t().contiguous(),
        "128x128:grid.t()": w_grid.t(),
    }


def probe_shape(N: int, K: int) -> dict:
    torch.manual_seed(0)
    w = torch.randn(N, K, device="cuda") * 0.02
    qw, grid = quantize_fp8(w, (128, 128))  # grid [N/128, K/128]
    rows = expand_scale(grid, 128, N)  # [N, G]: Fp8Weight's form
    fw = Fp8Weight(qw, rows, 128)
    wd = fw.dequantize(torch.bfloat16)
    qc, sc = quantize_fp8(w, (1, K))  # per channel, [N, 1]
    out = {"support": {}, "time_us": {}}
    for M in sorted(set(ROWS) | set(TIMED)):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        qa, sa = tl_.quantize_activations(x, 128, outer_major=True)
        ref = (qa.float() * sa.repeat_interleave(128, 1)[:, :K]) @ fw.dequantize().T
        row, times = {}, {}
        for name, sb in layouts(rows, grid).items():
            try:
                y = torch._scaled_mm(qa, qw.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
                row[name] = round(rel_err(y, ref), 5)
                if M in TIMED:

                    def f(sb=sb):
                        q, s = tl_.quantize_activations(x, 128, outer_major=True)
                        return torch._scaled_mm(
                            q, qw.T, scale_a=s, scale_b=sb, out_dtype=torch.bfloat16
                        )

                    times[name] = round(eager_us(f), 1)
            except Exception as ex:  # noqa: BLE001 (a probe: record what refused)
                row[name] = f"{type(ex).__name__}: {str(ex)[:120]}"
        try:
            qt, st = tl_.quantize_activations(x, K)
            refc = (qt.float() * st) @ (qc.float() * sc).T
            y = torch._scaled_mm(qt, qc.T, scale_a=st, scale_b=sc.T, out_dtype=torch.bfloat16)
            row["rowwise"] = round(rel_err(y, refc), 5)
            if M in TIMED:

                def g():
                    q, s = tl_.quantize_activations(x, K)
                    return torch._scaled_mm(
                        q, qc.T, scale_a=s, scale_b=sc.T, out_dtype=torch.bfloat16
                    )

                times["rowwise"] = round(eager_us(g), 1)
        except Exception as ex:  # noqa: BLE001
            row["rowwise"] = f"{type(ex).__name__}: {str(ex)[:120]}"
        if M in TIMED:
            times["bf16"] = round(eager_us(lambda: x @ wd.T), 1)
            times["triton_fp8"] = round(eager_us(lambda: tl_.fp8_gemm(x, fw)), 1)
            times["dequant_bf16"] = round(eager_us(lambda: x @ fw.dequantize(torch.bfloat16).T), 1)
            out["time_us"][M] = times
        out["support"][M] = row
    return out


def graph_check() -> dict:
    "Can `_scaled_mm` (1 x 128 both sides) be captured in a CUDA graph and replayed?"
    N, K, M = 6144, 4096, 64
    w = torch.randn(N, K, device="cuda") * 0.02
    qw, grid = quantize_fp8(w, (128, 128))
    sb = expand_scale(grid, 128, N).t().contiguous()  # [G, N]: the layout it takes
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)

    def f():
        q, s = tl_.quantize_activations(x, 128, outer_major=True)
        return torch._scaled_mm(q, qw.T, scale_a=s, scale_b=sb, out_dtype=torch.bfloat16)

    try:
        eager = f()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            f()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = f()
        g.replay()
        torch.cuda.synchronize()
        return {"captured": True, "equal_to_eager": bool(torch.equal(y, eager))}
    except Exception as ex:  # noqa: BLE001
        return {"captured": False, "error": f"{type(ex).__name__}: {str(ex)[:200]}"}


if __name__ == "__main__":
    res = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "graph": graph_check(),
    }
    print(res, flush=True)
    for name, (N, K) in SHAPES.items():
        res[name] = probe_shape(N, K)
        print(name, json.dumps(res[name]["time_us"]), flush=True)
        json.dump(res, open(sys.argv[1], "w"), indent=1, default=str)
