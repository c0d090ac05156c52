"""Does any Triton kernel compile after `LLM()` returns? (issue 23: every variant the engine can
launch is compiled by the warm-up, so no request waits for the JIT.)

Usage (GPU):  python tools/jit_after_warmup.py OUT.json [--control] [MODEL_DIR ...]
For each model (default: the two trained tiny models in the package), `LLM(model)` at its defaults,
then a workload of varied shapes: batches of 1 to 64 prompts of 1 to 700 tokens, shared prefixes,
greedy and sampled, logprobs and penalties. Every Triton kernel that compiles during the workload
is listed (name, when); the JSON says how many, and how many variants had compiled by then.
`--control` runs the same with the warm-up of 2026-12-03 (`old_steps`), to show that the check
sees what that one missed.
"""

import gc
import json
import random
import sys
import time
import warnings
from pathlib import Path


def compiled_variants() -> dict[str, int]:
    "Compiled variants of every Triton kernel alive now, by name."
    from triton.runtime.jit import JITFunction

    counts: dict[str, int] = {}
    for o in gc.get_objects():
        if isinstance(o, JITFunction):
            n = sum(len(c[0]) for c in o.device_caches.values())
            counts[o.__name__] = counts.get(o.__name__, 0) + n
    return counts


def workload(vocab: int, rng: random.Random):
    "Batches of varied shapes, each a `generate` call: (what it was, its arguments)."
    from metainfer import SamplingParams

    prefix = [rng.randrange(vocab) for _ in range(300)]
    greedy = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    sampled = SamplingParams(
        temperature=0.8, top_p=0.9, top_k=20, max_tokens=24, ignore_eos=True, logprobs=2,
        presence_penalty=0.5, repetition_penalty=1.1, seed=1,
    )  # fmt: skip
    for batch in (1, 2, 3, 7, 16, 17, 33, 64):
        for lo, hi in ((1, 8), (9, 100), (101, 700)):
            prompts = [
                [rng.randrange(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(batch)
            ]
            yield f"{batch} prompts of {lo}-{hi} tokens", prompts, greedy
        shared = [prefix + [rng.randrange(vocab) for _ in range(rng.randint(1, 40))]]
        yield f"{batch} prompts on a 300-token prefix", shared * batch, sampled


def old_steps(block_size: int, vocab: int) -> list:
    "The warm-up steps before 2026-12-04 (no one-row steps, one prompt of 7 and one of 600)."
    from metainfer.engine.profile_run import dummy_step

    b, steps = block_size, [dummy_step([n], block_size, vocab=vocab) for n in (7, 600)]
    for n in (2 * b, 16 * b):
        steps += [
            dummy_step([9, 7], b, cached=[n - 9, b], vocab=vocab),
            dummy_step([1, 1, 7], b, cached=[n - 1, 3, b], vocab=vocab),
            dummy_step([1, 1], b, cached=[n - 1, 3], vocab=vocab),
        ]
    return steps


def check(model: str, control: bool) -> dict:
    from metainfer import LLM
    from metainfer.engine import profile_run

    if control:
        profile_run.warm_up_steps = old_steps
    t0 = time.perf_counter()
    llm = LLM(model)
    start_s = time.perf_counter() - t0
    vocab = llm.llm_engine.model_config.vocab_size
    before, late, rng = compiled_variants(), [], random.Random(0)
    at_start = sum(before.values())
    for what, prompts, params in workload(vocab, rng):
        t = time.perf_counter()
        llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        now = compiled_variants()
        new = {k: v - before.get(k, 0) for k, v in now.items() if v > before.get(k, 0)}
        if new:
            late.append({"step": what, "kernels": new, "s": time.perf_counter() - t})
            print(f"  compiled during '{what}': {new}", flush=True)
        before = now
    del llm
    gc.collect()
    return {
        "model": model,
        "control": control,
        "start_s": start_s,
        "variants_at_start": at_start,
        "late_compiles": late,
    }


def main() -> None:
    from metainfer.testing import trained_model_dir

    warnings.simplefilter("ignore", FutureWarning)  # gc meets torch's deprecated aliases
    out, control = Path(sys.argv[1]), "--control" in sys.argv
    models = [a for a in sys.argv[2:] if a != "--control"] or [
        str(trained_model_dir("qwen3")),
        str(trained_model_dir("deepseek-v2")),
    ]
    res = {"command": " ".join(["python", *sys.argv]), "models": []}
    for m in models:
        print(m, flush=True)
        r = check(m, control)
        print(
            f"  {r['variants_at_start']} variants at start; "
            f"{len(r['late_compiles'])} workload steps compiled a kernel",
            flush=True,
        )
        res["models"].append(r)
    out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
