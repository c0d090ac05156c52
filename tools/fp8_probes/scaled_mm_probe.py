"""Does torch._scaled_mm take 1x128 / 128x128 block scales on this GPU? (a probe)"""

import json
import sys
import torch

from metainfer.kernels import triton_linear as tl_
from metainfer.layers.fp8 import quantize_fp8

print(torch.__version__, torch.version.cuda)


def bench(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters * 1e3


res = {}
for M, N, K in ((256, 6144, 4096), (4096, 6144, 4096), (4096, 24576, 4096), (256, 4096, 12288)):
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda")
    row = {"bf16": bench(lambda: x @ w.bfloat16().T)}
    wb = w.bfloat16()
    row["bf16"] = bench(lambda: x @ wb.T)
    # rowwise
    qw, sw = quantize_fp8(w, (1, K))  # sw [N, 1]
    qa, sa = tl_.quantize_activations(x, K)  # sa [M, 1]
    ref = (qa.float() * sa) @ (qw.float() * sw).T
    try:
        f = lambda: torch._scaled_mm(qa, qw.T, scale_a=sa, scale_b=sw.T, out_dtype=torch.bfloat16)
        y = f()
        row["rowwise_err"] = ((y.float() - ref).abs().max() / ref.abs().max()).item()
        row["rowwise"] = bench(f)
    except Exception as ex:
        row["rowwise"] = str(ex)[:200]
    # blockwise 1x128 x 128x128
    qw, sw = quantize_fp8(w, (128, 128))  # sw [N/128, K/128]
    qa, sa = tl_.quantize_activations(x, 128)  # sa [M, K/128]
    ref = (qa.float() * sa.repeat_interleave(128, 1)) @ (
        qw.float() * sw.repeat_interleave(128, 0).repeat_interleave(128, 1)
    ).T
    for name, a_s, b_s in (
        ("blk_a_outer_b_T", sa.t().contiguous().t(), sw.t()),
        ("blk_a_outer_b_Tc", sa.t().contiguous().t(), sw.t().contiguous()),
        ("blk_a_rowmaj_b_T", sa.contiguous(), sw.t()),
        ("blk_a_outer_b", sa.t().contiguous().t(), sw),
    ):
        try:
            f = lambda: torch._scaled_mm(
                qa, qw.T, scale_a=a_s, scale_b=b_s, out_dtype=torch.bfloat16
            )
            y = f()
            row[name + "_err"] = ((y.float() - ref).abs().max() / ref.abs().max()).item()
            row[name] = bench(f)
        except Exception as ex:
            row[name] = str(ex)[:160]
    row["quant128"] = bench(lambda: tl_.quantize_activations(x, 128))
    res[f"{M}x{N}x{K}"] = row
    print(f"{M}x{N}x{K}", row, flush=True)
json.dump(res, open(sys.argv[1], "w"), indent=1, default=str)
