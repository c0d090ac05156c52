"""Contradictory constraints on a GPU, with CUDA graphs and eagerly: each of four requests whose
grammar, allowed ids, bad words and min_tokens leave no token runs beside a plain greedy one; it
must end with finish reason "error" and its neighbour's tokens must equal the plain request's alone.

Usage: python tools/contradiction_check.py MODEL [dtype=bfloat16 ...]  (LLM keywords after the
model); writes $OUT/results/contradictions-gpu.json. (`tests/test_structured_outputs.py` runs the
same cases on the CPU.)"""

import json
import os
import sys
from metainfer import LLM, SamplingParams, StructuredOutputsParams


def run(llm):
    tok = llm.get_tokenizer()
    eos = tok.eos_token_id
    yes_no = StructuredOutputsParams(choice=["yes", "no"])
    greedy = lambda **kw: SamplingParams(temperature=0, max_tokens=8, **kw)
    cases = {
        "choice+allowed": greedy(structured_outputs=yes_no, allowed_token_ids=tok.encode(" the")),
        "choice+min_tokens": greedy(structured_outputs=yes_no, min_tokens=5),
        "eos-only+min_tokens": greedy(allowed_token_ids=[eos], min_tokens=2),
        "seeded eos-only": SamplingParams(
            seed=3, max_tokens=8, allowed_token_ids=[eos], min_tokens=2
        ),
    }
    alone = llm.generate("Answer:", greedy(), use_tqdm=False)[0].outputs[0]
    rows = {}
    for name, params in cases.items():
        bad, good = llm.generate(["Answer:"] * 2, [params, greedy()], use_tqdm=False)
        rows[name] = dict(
            finish=bad.outputs[0].finish_reason,
            text=bad.outputs[0].text,
            neighbour_same=good.outputs[0].token_ids == alone.token_ids,
        )
    ok = all(r["finish"] == "error" and r["neighbour_same"] for r in rows.values())
    return dict(ok=ok, cases=rows, alone=alone.text)


path, kw = sys.argv[1], dict(a.split("=") for a in sys.argv[2:])
res = {}
for eager in (False, True):
    with LLM(path, enforce_eager=eager, **kw) as llm:
        res["eager" if eager else "graphs"] = r = run(llm)
        print("eager" if eager else "graphs", r, flush=True)
out = os.path.join(os.environ.get("OUT", "/tmp"), "results", "contradictions-gpu.json")
os.makedirs(os.path.dirname(out), exist_ok=True)
json.dump(res, open(out, "w"), indent=1)
sys.exit(0 if all(r["ok"] for r in res.values()) else 1)
