"""Greedy tokens with and without CUDA graphs, on one checkpoint: are they identical? (issue 4, acceptance 1)

Usage (GPU):  python tools/graphs_identity.py MODEL_DIR --out results/graphs-identity.json
Random-token prompts (B=1 and B=16, 16-64 tokens), 128 greedy tokens each, EOS ignored; the JSON lists, per prompt,
the first position where the two runs differ (null: identical), and the exact command.
"""
import argparse, gc, json, random, sys, time
import torch
from metainfer import LLM, SamplingParams


def greedy(model: str, enforce_eager: bool, batches: dict[str, list[list[int]]], tokens: int) -> dict[str, list[list[int]]]:
    llm = LLM(model, enforce_eager=enforce_eager, max_model_len=4096, gpu_memory_utilization=0.5)
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    out = {name: [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
           for name, prompts in batches.items()}
    llm.shutdown(); del llm; gc.collect(); torch.cuda.empty_cache()
    return out


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model"); p.add_argument("--tokens", type=int, default=128); p.add_argument("--out", required=True)
    args = p.parse_args()
    rng = random.Random(0)
    vocab = json.load(open(f"{args.model}/config.json"))["vocab_size"]
    batches = {f"B={b}": [[rng.randrange(vocab) for _ in range(rng.randint(16, 64))] for _ in range(b)] for b in (1, 16)}
    start = time.time()
    graphs, eager = greedy(args.model, False, batches, args.tokens), greedy(args.model, True, batches, args.tokens)
    res = {"command": " ".join(["python", *sys.argv]), "tokens": args.tokens, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
           "first_difference": {k: [first_difference(a, b) for a, b in zip(graphs[k], eager[k])] for k in batches}}
    res["identical"] = all(d is None for ds in res["first_difference"].values() for d in ds)
    res["elapsed_s"] = time.time() - start
    with open(args.out, "w") as f: json.dump(res, f, indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
