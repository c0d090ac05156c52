"""FP8 checkpoints on the GPU (issue 30): the trained tiny models in both layouts, bf16, with CUDA
graphs and eagerly (which must give the same tokens), against the same engine on their dequantized
twins (exactly the weights the FP8 path holds). Several rows quantize their activations to FP8 as
well (W8A8), so a twin's tokens agree until a near-tie; `identical_prompts` counts the prompts
whose 64 tokens all agree.

Usage: python3 tools/fp8_gpu_check.py OUT.json   (block-wise needs transformers only; the
per-channel layout needs compressed-tensors, skipped with a note where it does not import: carry
compressed-tensors, loguru, pydantic, pydantic-core, annotated-types, typing-inspection and
typing-extensions as wheels, as tools/gpu_session.py's docstring says for the others)
"""

import json
import sys
import tempfile
import time
from pathlib import Path
from transformers import AutoTokenizer
from metainfer import LLM, SamplingParams
from metainfer.testing import heldout_prompts, trained_model_dir
from metainfer.testing_fp8 import write_block_fp8, write_channel_fp8, write_dequantized

GREEDY = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)


def run(path: Path, ids: list[list[int]], **kw) -> tuple[list[list[int]], dict]:
    t = time.time()
    with LLM(path, dtype="bfloat16", gpu_memory_utilization=0.3, **kw) as llm:
        params = list(llm.engine.runner.model.parameters())
        fp8 = sum(p.numel() * p.element_size() for p in params if p.element_size() == 1)
        outs = llm.generate(ids, GREEDY, use_tqdm=False)
    info = {"fp8_bytes": fp8, "seconds": round(time.time() - t, 1)}
    return [o.outputs[0].token_ids for o in outs], info


def main(out: Path) -> None:
    root, results = Path(tempfile.mkdtemp()), {}
    for arch, block in (("qwen3", (128, 128)), ("deepseek-v2", (32, 32))):
        src = trained_model_dir(arch)
        tok = AutoTokenizer.from_pretrained(src)
        ids = [tok.encode(t) for t in heldout_prompts()[:16]]
        for layout in ("block", "channel"):
            name = f"{arch}-{layout}"
            try:
                dst = root / name
                fp8 = write_block_fp8(src, dst, block) if layout == "block" else None
                fp8 = fp8 or write_channel_fp8(src, dst)
            except ImportError as e:
                results[name] = {"skipped": str(e)}
                continue
            dense = write_dequantized(fp8, root / f"{name}-dense")
            graphs, g = run(fp8, ids)
            eager, e = run(fp8, ids, enforce_eager=True)
            twin, t = run(dense, ids)
            results[name] = {
                "graphs_eq_eager": graphs == eager,
                "fp8_eq_dequantized_twin": graphs == twin,
                "identical_prompts": sum(a == b for a, b in zip(graphs, twin)),
                "prompts": len(ids),
                "graphs": g,
                "eager": e,
                "twin": t,
                "sample": tok.decode(graphs[0]),
            }
            print(name, json.dumps(results[name]), flush=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
