"""Issue 30's agreement check, on a GPU: metainfer's FP8 top-1 and HF transformers' own FP8 path's
top-1, teacher-forced over the same positions, against HF's bf16 model on the same checkpoint's
dequantized weights (transformers' `FineGrainedFP8Config(dequantize=True)`).

Usage: python3 tools/fp8_agreement.py FP8_CHECKPOINT --kernel DIR --out OUT.json
`--kernel`: a folder holding the `finegrained_fp8` package (huggingface/kernels-community's Triton
kernel that transformers' FP8Linear calls, normally fetched from the Hub; handed to transformers
here because the GPU machine has no network). Each rule's count of kept positions is reported:
all, and those whose reference top-2 gap exceeds 3 % of its top logit (the issue's rule), plus the
bench's margins.
"""

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import torch

from metainfer import LLM
from metainfer.bench.agreement import MARGINS, agreement, decisive, engine_top1, hf_top1
from metainfer.bench.common import random_prompts
from metainfer.bench.results import free_memory

RULES = {"all": -1.0, "gap>3%": 0.03} | {f"gap>{m:g}": m for m in MARGINS}


def hf_fp8_kernel(folder: str) -> None:
    """Give transformers the finegrained-fp8 kernel it would fetch from the Hub, and take its
    FP8 linear path (not DeepGEMM's)."""
    sys.path.insert(0, folder)
    kernel = importlib.import_module("finegrained_fp8")
    from transformers.integrations import finegrained_fp8, hub_kernels

    hub_kernels._KERNEL_MODULE_MAPPING["finegrained-fp8"] = kernel
    finegrained_fp8.is_kernels_available = lambda: True


def hf_fp8_model(path: str, dequantize: bool):
    "HF's model of the FP8 checkpoint: its FP8 layers, or (`dequantize`) bf16 dequantized."
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config

    qc = FineGrainedFP8Config(dequantize=True) if dequantize else None
    kw = {"quantization_config": qc} if qc else {}
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: a smoke test
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.bfloat16, device_map=device, **kw
    )
    return model.eval()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--kernel", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=256)
    args = p.parse_args()
    res = {"command": " ".join(sys.argv), "model": args.model, "seconds": {}}
    t = time.time()
    llm = LLM(args.model)  # defaults
    vocab = llm.engine.model_config.vocab_size
    prompts = random_prompts(args.batch, 16, args.input_len, vocab, seed=5)
    forced = random_prompts(args.batch, args.output_len, args.output_len, vocab, seed=6)
    top1 = {"metainfer_fp8": engine_top1(llm, prompts, forced)[0]}
    llm.shutdown()
    del llm
    free_memory()
    res["seconds"]["metainfer"] = round(time.time() - t, 1)
    t = time.time()
    model = hf_fp8_model(args.model, dequantize=True)
    ref, gaps = hf_top1(model, prompts, forced)
    del model
    free_memory()
    res["seconds"]["hf_dequantized_bf16"] = round(time.time() - t, 1)
    t = time.time()
    try:
        hf_fp8_kernel(args.kernel)
        model = hf_fp8_model(args.model, dequantize=False)
        kinds = sorted({type(m).__name__ for m in model.modules() if "FP8" in type(m).__name__})
        res["hf_fp8_modules"] = kinds
        top1["hf_fp8"] = hf_top1(model, prompts, forced)[0]
        del model
        free_memory()
    except Exception as ex:  # noqa: BLE001 (reported: the comparison without HF's FP8 path)
        res["hf_fp8_error"] = f"{type(ex).__name__}: {ex}"[:2000]
    res["seconds"]["hf_fp8"] = round(time.time() - t, 1)
    res["agreement_with_dequantized_bf16"] = {
        name: {rule: agreement(ours, ref, decisive(gaps, m)) for rule, m in RULES.items()}
        for name, ours in top1.items()
    }
    if "hf_fp8" in top1:
        res["metainfer_fp8_vs_hf_fp8"] = agreement(top1["metainfer_fp8"], top1["hf_fp8"])
    res["top1"], res["reference"] = top1, {"top1": ref, "gap": gaps}
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k not in ("top1", "reference")}, indent=1))


if __name__ == "__main__":
    main()
