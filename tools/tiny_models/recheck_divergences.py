"""Where a `bench greedy` run parted from HF, ask HF again on the CPU: our token's rank, the gap.

    python tools/tiny_models/recheck_divergences.py RESULT.json MODEL_DIR OUT.json

Runs written before `bench greedy` kept HF's best tokens per step hold only its top-2 logits, not
which tokens they were. This replays each divergence's context (the prompt and HF's tokens before
it) through HF on the CPU, in float32 and bfloat16, and records the rank HF gives our token and
HF's token, and the float32 logit gap between them.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import torch
from transformers import AutoTokenizer

from metainfer.testing import hf_model


@torch.no_grad()
def main(result: str, model_dir: str, out: str) -> None:
    res = json.loads(Path(result).read_text())
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompts = [tok.encode(t) for t in res["prompts"]]
    models = {"float32": hf_model(model_dir), "bfloat16": hf_model(model_dir, torch.bfloat16)}
    rows = []
    for run in res["metainfer"]["runs"]:
        for d in run["divergences"]:
            ctx = prompts[d["prompt"]] + res["hf"]["tokens"][d["prompt"]][: d["position"]]
            row = {"cuda_graphs": run["cuda_graphs"], "batch": run["batch"], **d}
            for name, m in models.items():
                logits = m(torch.tensor([ctx])).logits[0, -1].float()
                order = logits.argsort(descending=True).tolist()
                row[f"{name}_rank_ours"] = order.index(d["ours"]) + 1
                row[f"{name}_rank_hf"] = order.index(d["hf"]) + 1
                row[f"{name}_gap_hf_minus_ours"] = (logits[d["hf"]] - logits[d["ours"]]).item()
            rows.append(row)
    summary = {
        "divergences": len(rows),
        "rank_of_ours_float32": Counter(r["float32_rank_ours"] for r in rows),
        "rank_of_ours_bfloat16": Counter(r["bfloat16_rank_ours"] for r in rows),
        "largest_float32_gap_hf_minus_ours": max(r["float32_gap_hf_minus_ours"] for r in rows),
    }
    cmd = "python " + " ".join(["tools/tiny_models/recheck_divergences.py", *sys.argv[1:]])
    Path(out).write_text(json.dumps({"command": cmd, "summary": summary, "rows": rows}, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main(*sys.argv[1:])
