"""Where a `bench greedy` run of an MoE model parted from HF: replay that prompt, compare routing.

    python tools/tiny_models/replay_routes.py RESULT.json MODEL_DIR PROMPT OUT.json

RESULT.json is a CPU `bench greedy` result (its dtype is reused). For prompt PROMPT it records:
(1) the context up to the first divergence given in one prefill: the log-probabilities metainfer
and HF give HF's token and ours there; (2) the prompt decoded greedily a token at a time by both,
with hooks on every MoE router: each (step, layer) where the experts chosen for the new token
differ, with HF's router scores for the experts in question.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from metainfer import LLM, SamplingParams
from metainfer.testing import hf_generate, hf_model


@torch.no_grad()
def main(result: str, model_dir: str, prompt: str, out: str) -> None:
    res, i = json.loads(Path(result).read_text()), int(prompt)
    dtype = getattr(torch, res["hf"]["dtype"].removeprefix("torch."))
    div = next(d for d in res["metainfer"]["runs"][0]["divergences"] if d["prompt"] == i)
    ids = AutoTokenizer.from_pretrained(model_dir).encode(res["prompts"][i])
    llm = LLM(model_dir, dtype=str(dtype).removeprefix("torch."), device="cpu", num_kv_blocks=256)
    ours_routes, hf_routes = [], []
    for layer in llm.engine.runner.model.model.layers:
        if hasattr(layer.mlp, "gate"):  # (weights, expert ids) of every token of the step
            layer.mlp.gate.register_forward_hook(lambda m, a, o: ours_routes.append(o[1][-1]))
    ctx = ids + res["hf"]["tokens"][i][: div["position"]]
    one = SamplingParams(temperature=0, max_tokens=1, logprobs=8)
    lp = llm.generate([ctx], one, use_tqdm=False)[0].outputs[0].logprobs[0]
    hf = hf_model(model_dir, dtype)
    ref = hf(torch.tensor([ctx])).logits[0, -1].float().log_softmax(-1)
    prefill = {
        who: {tok: got for tok, got in pairs}
        for who, pairs in (
            ("metainfer", [(t, lp[t].logprob) for t in (div["hf"], div["ours"]) if t in lp]),
            ("hf", [(t, ref[t].item()) for t in (div["hf"], div["ours"])]),
        )
    }
    ours_routes.clear()
    greedy = SamplingParams(temperature=0, max_tokens=div["position"] + 1, ignore_eos=True)
    llm.generate([ids], greedy, use_tqdm=False)
    for layer in hf.model.layers:
        if hasattr(layer.mlp, "gate"):  # (router scores [T, E], weights, expert ids)
            layer.mlp.gate.register_forward_hook(lambda m, a, o: hf_routes.append(o))
    hf_generate(hf, ids, div["position"] + 1)
    moe_layers = len(hf_routes) // (div["position"] + 1)
    parted = []
    for call, (o, h) in enumerate(zip(ours_routes, hf_routes)):
        mine, theirs = sorted(o.tolist()), sorted(h[2][-1].tolist())
        if mine != theirs:
            scores = h[0][-1].float()
            experts = sorted(set(mine) ^ set(theirs))
            step, layer = divmod(call, moe_layers)
            parted.append(
                dict(step=step, moe_layer=layer, ours=mine, hf=theirs,
                     hf_scores={e: round(scores[e].item(), 4) for e in experts})
            )  # fmt: skip
    cmd = "python " + " ".join(["tools/tiny_models/replay_routes.py", *sys.argv[1:]])
    record = dict(command=cmd, divergence=div, prefill_logprobs=prefill, routes_parted=parted)
    Path(out).write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
