"""What a JSON-schema constraint costs a decode step, measured with the real engine at its
defaults: TPOT with and without the constraint at B=1 and B=64, in one run, and how long a
50-field schema takes to compile (issue 24's GPU check).

  python3 tools/structured_overhead.py MODEL_DIR --out DIR [--output-len 128] [--batch-sizes 1 64]

TPOT is `(time of max_tokens=N - time of max_tokens=1) / (N - 1)`: the prefill cancels out. Every
sampled token of the constrained run is under the grammar: its 50 fields take ~300 tokens, more
than N, so no row reaches the end of the grammar. Writes `structured-overhead.json`.
"""

import argparse
import json
import shlex
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from metainfer.engine import llm_engine
from metainfer import LLM, SamplingParams, StructuredOutputsParams


def fifty_fields() -> dict:
    "A 50-field object: strings, bounded integers, numbers, enums and booleans, all required."
    kinds = [
        {"type": "string", "maxLength": 12},
        {"type": "integer", "minimum": 0, "maximum": 10**6},
        {"type": "number", "minimum": -1e3, "maximum": 1e3},
        {"enum": ["low", "medium", "high", "unknown"]},
        {"type": "boolean"},
    ]
    props = {f"field_{i:02d}": kinds[i % len(kinds)] for i in range(50)}
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def timed(llm: LLM, prompts: list[str], params: SamplingParams) -> tuple[float, list]:
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    return time.perf_counter() - t, outs


PHASES = {  # what a step spends its host time on: where each is looked up
    "schedule": ("scheduler", "schedule"),
    "launch (forward + sample)": ("runner", "launch"),
    "forward": ("runner", "forward"),
    "sample": ("runner", "sample"),
    "read back": ("engine", "_resolve"),
    "outputs": ("engine", "_outputs"),
}


@contextmanager
def phases(llm: LLM, into: dict):
    "Add each phase's host milliseconds per step to `into` while inside."
    engine, wrapped = llm.engine, []
    owners = {"engine": engine, "scheduler": engine.scheduler, "runner": engine.runner}
    totals = {k: 0.0 for k in [*PHASES, "token masks", "step"]}

    def wrap(name, fn):
        def timed_fn(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                totals[name] += time.perf_counter() - t

        return timed_fn

    for name, (owner, attr) in PHASES.items():
        obj = owners[owner]
        wrapped.append((obj, attr))
        setattr(obj, attr, wrap(name, getattr(obj, attr)))
    wrapped.append((engine, "step"))
    engine.step = wrap("step", engine.step)
    masks = llm_engine.step_bitmask
    llm_engine.step_bitmask = wrap("token masks", masks)
    steps0 = engine.stats["steps"]
    try:
        yield
    finally:
        llm_engine.step_bitmask = masks
        for obj, attr in wrapped:
            delattr(obj, attr)
        n = max(1, engine.stats["steps"] - steps0)
        into.update({k: round(v / n * 1e3, 3) for k, v in totals.items()})


def tpot(llm: LLM, prompts: list[str], n: int, **kw) -> dict:
    """Seconds per output token (best of 3), the tokens each row made, and the host time per step
    of each phase (one more run)."""
    p = lambda k: SamplingParams(temperature=1.0, max_tokens=k, ignore_eos=True, **kw)
    timed(llm, prompts, p(8))  # warm (the grammar is compiled and cached here)
    short = min(timed(llm, prompts, p(1))[0] for _ in range(3))
    runs = [timed(llm, prompts, p(n)) for _ in range(3)]
    best, outs = min(runs, key=lambda r: r[0])
    host_ms = {}
    with phases(llm, host_ms):
        timed(llm, prompts, p(n))
    return {
        "tpot_ms": (best - short) / (n - 1) * 1e3,
        "tokens_per_row": sorted({len(o.outputs[0].token_ids) for o in outs}),
        "host_ms_per_step": host_ms,
        "sample": outs[0].outputs[0].text[:200],
    }


SMALL = {  # a schema a random-weight model finishes in ~20 tokens
    "type": "object",
    "properties": {
        "level": {"enum": ["low", "high"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
    },
    "required": ["level", "count", "ok"],
    "additionalProperties": False,
}


def valid_outputs(llm: LLM, n: int = 64) -> dict:
    "`n` samples at temperature 1.0 under `SMALL`: how many parse and follow it."
    so = StructuredOutputsParams(json=SMALL)
    outs = llm.generate(
        ["As JSON:"] * n, SamplingParams(temperature=1.0, max_tokens=64, structured_outputs=so)
    )

    def ok(text: str) -> bool:
        try:
            d = json.loads(text)
        except ValueError:
            return False
        return (
            set(d) == {"level", "count", "ok"}
            and d["level"] in ("low", "high")
            and type(d["count"]) is int
            and 0 <= d["count"] <= 99
            and type(d["ok"]) is bool
        )

    texts = [o.outputs[0].text for o in outs]
    return {"samples": n, "valid": sum(map(ok, texts)), "examples": texts[:3]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    args = ap.parse_args()
    schema = fifty_fields()
    so = StructuredOutputsParams(json=schema)
    with LLM(args.model) as llm:  # the engine's defaults
        grammars = llm.engine.grammars
        t = time.perf_counter()
        grammars.lltokenizer  # the tokenizer as llguidance sees it: once per engine
        tokenizer_s = time.perf_counter() - t
        t = time.perf_counter()
        grammars.compile(so)
        compile_s = time.perf_counter() - t
        validity = valid_outputs(llm)
        print(f"valid JSON: {validity['valid']}/{validity['samples']}", flush=True)
        results = {}
        for b in args.batch_sizes:
            prompts = [f"Record {i} as JSON:" for i in range(b)]
            free = tpot(llm, prompts, args.output_len)
            constrained = tpot(llm, prompts, args.output_len, structured_outputs=so)
            results[f"B={b}"] = {
                "unconstrained": free,
                "json_schema": constrained,
                "overhead_pct": 100 * (constrained["tpot_ms"] / free["tpot_ms"] - 1),
            }
            print(
                f"B={b}: TPOT {free['tpot_ms']:.2f} ms free, {constrained['tpot_ms']:.2f} ms "
                f"with the schema ({results[f'B={b}']['overhead_pct']:+.1f} %)",
                flush=True,
            )
            for mode in ("unconstrained", "json_schema"):
                print(f"  {mode} host ms per step: {results[f'B={b}'][mode]['host_ms_per_step']}")
    out = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "model": args.model,
        "output_len": args.output_len,
        "schema_fields": 50,
        "llguidance_tokenizer_s": tokenizer_s,
        "compile_50_fields_s": compile_s,
        "validity": validity,
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "structured-overhead.json").write_text(json.dumps(out, indent=1))
    print(f"compile of a 50-field schema: {compile_s * 1e3:.1f} ms; tokenizer {tokenizer_s:.1f} s")


if __name__ == "__main__":
    main()
