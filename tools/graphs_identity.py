"""Greedy tokens with and without CUDA graphs (and async scheduling), on one checkpoint: are they
identical? (issue 4, acceptance 1)

Usage (GPU):  python tools/graphs_identity.py MODEL_DIR --out results/graphs-identity.json [--modes
graphs,eager,graphs-sync] Random-token prompts (B=1 and B=16, 16-64 tokens), 128 greedy tokens each,
EOS ignored, and a batch of 5 that mixes in logprobs, prompt logprobs, penalties, a logit bias and
min_tokens (`B=5+`); the JSON lists, per prompt and per mode, the first position where the mode
differs from the first mode (null: identical), and the exact command. Modes: `graphs` / `eager`
(CUDA graphs on / off), with `-sync` for async scheduling off and `-nccl` for NCCL all-reduces only
(no symmetric-memory one-shot, no fused all-reduce + add + RMSNorm: with `-tp 2` that checks the
fused kernel against the unfused path, bit for bit).
"""

import argparse
import gc
import json
import random
import sys
import time
import torch
from metainfer import LLM, SamplingParams


def greedy(
    model: str, mode: str, batches: dict[str, list[list[int]]], tokens: int, tp: int = 1
) -> dict[str, list[list[int]]]:
    llm = LLM(
        model,
        enforce_eager=mode.startswith("eager"),
        async_scheduling="-sync" not in mode,
        disable_custom_all_reduce="-nccl" in mode,
        tensor_parallel_size=tp,
        gpu_memory_utilization=0.5,
    )
    out = {
        name: [
            o.outputs[0].token_ids
            for o in llm.generate(prompts, batch_params(name, tokens, len(prompts)), use_tqdm=False)
        ]
        for name, prompts in batches.items()
    }
    llm.shutdown()
    del llm
    gc.collect()
    torch.cuda.empty_cache()
    return out


def batch_params(name: str, tokens: int, n: int) -> list[SamplingParams]:
    """Plain greedy requests; the batch named `...+` mixes in logprobs, prompt logprobs, penalties,
    a logit bias, min_tokens."""
    plain = dict(temperature=0, max_tokens=tokens, ignore_eos=True)
    extras = [
        {},
        dict(logprobs=2, prompt_logprobs=1),
        dict(frequency_penalty=0.5, presence_penalty=0.2),
        dict(repetition_penalty=1.3, logit_bias={5: 2.0}),
        dict(min_tokens=8, ignore_eos=False),
    ]
    return [
        SamplingParams(**plain | (extras[i % len(extras)] if name.endswith("+") else {}))
        for i in range(n)
    ]


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b)) if x != y),
        None if len(a) == len(b) else min(len(a), len(b)),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--out", required=True)
    p.add_argument(
        "--modes",
        default="graphs,eager",
        help="comma-separated: graphs or eager, optionally + -sync, -nccl",
    )
    p.add_argument("-tp", "--tensor-parallel-size", type=int, default=1)
    p.add_argument("--one-mode-to", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    rng = random.Random(0)
    vocab = json.load(open(f"{args.model}/config.json"))["vocab_size"]
    batches = {
        f"B={b}": [[rng.randrange(vocab) for _ in range(rng.randint(16, 64))] for _ in range(b)]
        for b in (1, 16)
    }
    batches["B=5+"] = [
        [rng.randrange(vocab) for _ in range(rng.randint(16, 64))] for _ in range(5)
    ]  # (request options)
    start = time.time()
    modes = args.modes.split(",")
    if args.one_mode_to:  # a child of the run below: one mode, tokens to a file
        with open(args.one_mode_to, "w") as f:
            json.dump(
                greedy(args.model, modes[0], batches, args.tokens, args.tensor_parallel_size), f
            )
        return
    if args.tensor_parallel_size == 1:
        runs = {m: greedy(args.model, m, batches, args.tokens) for m in modes}
    # a second TP engine in one process hangs in symmetric-memory rendezvous (run37): one process
    # per mode
    else:
        import subprocess
        import tempfile

        runs = {}
        for m in modes:
            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        args.model,
                        "--tokens",
                        str(args.tokens),
                        "--modes",
                        m,
                        "-tp",
                        str(args.tensor_parallel_size),
                        "--out",
                        tmp.name,
                        "--one-mode-to",
                        tmp.name,
                    ],
                    check=True,
                    timeout=600,
                )
                with open(tmp.name) as f:
                    runs[m] = json.load(f)
    base = runs[modes[0]]
    res = {
        "command": " ".join(["python", *sys.argv]),
        "tokens": args.tokens,
        "tensor_parallel_size": args.tensor_parallel_size,
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "modes": modes,
        "first_difference": {
            m: {k: [first_difference(a, b) for a, b in zip(base[k], runs[m][k])] for k in batches}
            for m in modes[1:]
        },
    }
    res["identical"] = all(
        d is None for per in res["first_difference"].values() for ds in per.values() for d in ds
    )
    res["elapsed_s"] = time.time() - start
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
