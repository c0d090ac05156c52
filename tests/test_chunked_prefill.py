"""Issue 23: one token budget per step. Prompts longer than the budget come in chunks, decode rows
and prefill chunks share steps, and greedy tokens still equal HF's (fp32, CPU)."""

import multiprocessing as mp

import pytest
from metainfer import LLM, LLMEngine, SamplingParams
from metainfer.config import load_model_config
from metainfer.engine.scheduler import PROMPT_LOGPROB_ENTRIES
from metainfer.testing import hf_greedy
from test_generate_vs_hf import random_prompts

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def greedy(llm, prompts):
    return [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]


def recorded_batches(engine) -> list:
    "Every batch the engine's scheduler hands out from now on, as (decode rows, prefill rows)."
    seen, schedule = [], engine.scheduler.schedule

    def record():
        batch = schedule()
        if batch is not None:
            seen.append((batch.num_decode, list(batch.query_lens[batch.num_decode :])))
        return batch

    engine.scheduler.schedule = record
    return seen


@pytest.mark.parametrize("preset", ["qwen3-tiny", "deepseek-v2-tiny"])
@pytest.mark.parametrize("budget", [16, 64, 1000])
def test_budgets_give_hf_tokens(preset, budget, checkpoints, hf_models):
    """Prompts of up to 3x the budget (and short ones beside them), with a shared prefix that the
    second call hits: every budget gives HF's greedy tokens, and no step computes more tokens than
    its budget."""
    ckpt = checkpoints(preset)
    long, V = min(3 * budget, 200), load_model_config(ckpt).vocab_size
    shared = random_prompts(1, seed=30, vocab=V, lo=long, hi=long)[0]
    prompts = [shared + t for t in random_prompts(3, seed=31, vocab=V, lo=1, hi=9)]
    prompts += random_prompts(4, seed=32, vocab=V, lo=1, hi=20)
    llm = LLM(ckpt, dtype="float32", device="cpu", max_num_batched_tokens=budget, block_size=4)
    steps = recorded_batches(llm.engine)
    ref = hf_greedy(hf_models(ckpt), prompts, 24)
    assert greedy(llm, prompts) == ref
    assert greedy(llm, prompts[::-1]) == ref[::-1]  # the prefix is cached now
    assert llm.engine.block_manager.num_cache_hit_tokens >= 2 * (long // 4) * 4
    assert max(d + sum(p) for d, p in steps) <= budget
    if budget < long:
        assert any(p and d for d, p in steps), "decode rows and prefill chunks share a step"
    assert llm.engine.block_manager.num_free_blocks == llm.engine.runner.num_kv_blocks


def test_chunks_with_preemption(checkpoints, hf_models):
    """A pool too small for every sequence at once: sequences are preempted (some mid-prompt) and
    recomputed in chunks, and still give HF's tokens."""
    ckpt = checkpoints("qwen3-tiny")
    prompts = random_prompts(6, seed=33, lo=30, hi=60)
    llm = LLM(
        ckpt,
        dtype="float32",
        device="cpu",
        max_num_batched_tokens=16,
        block_size=4,
        num_kv_blocks=40,
    )
    assert greedy(llm, prompts) == hf_greedy(hf_models(ckpt), prompts, 24)
    assert llm.engine.scheduler.num_preemptions > 0
    assert llm.engine.block_manager.num_free_blocks == 40


def test_prompt_logprobs_over_chunks(checkpoints):
    "Prompt logprobs of a prompt scored in 16-token chunks equal those of one whole prefill."
    ckpt = checkpoints("qwen3-tiny")
    prompt = random_prompts(1, seed=34, lo=50, hi=50)[0]
    params = SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=2)
    got = []
    for budget in (16, 1000):
        llm = LLM(ckpt, dtype="float32", device="cpu", max_num_batched_tokens=budget)
        got.append(llm.generate([prompt], params, use_tqdm=False)[0].prompt_logprobs)
    chunked, whole = got
    assert chunked[0] is None and len(chunked) == len(whole) == 50 and None not in chunked[1:]
    for a, b in zip(chunked[1:], whole[1:]):
        assert a.keys() == b.keys()
        assert all(abs(a[t].logprob - b[t].logprob) < 1e-4 for t in a)


def test_prompt_logprobs_bound_a_steps_chunk(checkpoints):
    """A prompt scored with k=20 takes chunks of at most PROMPT_LOGPROB_ENTRIES // 21 tokens (their
    entries are built on the engine's thread), and scores as one whole prefill does."""
    ckpt = checkpoints("qwen3-tiny")
    prompt = random_prompts(1, seed=37, lo=900, hi=900)[0]
    params = SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=20)
    got, cap = [], PROMPT_LOGPROB_ENTRIES // 21
    for chunked in (True, False):
        llm = LLM(ckpt, dtype="float32", device="cpu", enable_chunked_prefill=chunked)
        steps = recorded_batches(llm.engine)
        got.append(llm.generate([prompt], params, use_tqdm=False)[0].prompt_logprobs)
        assert [p for _, p in steps if p] == ([[cap], [900 - cap]] if chunked else [[900]])
    for a, b in zip(*(g[1:] for g in got)):
        assert a.keys() == b.keys() and len(a) >= 20
        assert all(abs(a[t].logprob - b[t].logprob) < 1e-4 for t in a)


def test_decode_rows_keep_going_beside_a_long_prompt(checkpoints):
    """While a prompt of 3x the budget is prefilled, a running sequence gets a token in every step:
    the long prompt takes 3 steps, and each of them also holds the decode row."""
    ckpt = checkpoints("qwen3-tiny")
    engine = LLMEngine.from_engine_args(
        str(ckpt), dtype="float32", device="cpu", max_num_batched_tokens=32
    )
    short, long = random_prompts(1, seed=35, lo=8, hi=8)[0], random_prompts(1, 36, lo=93, hi=93)[0]
    engine.add_request("short", short, SamplingParams(max_tokens=20, ignore_eos=True))
    for _ in range(3):
        engine.step()
    steps = recorded_batches(engine)
    engine.add_request("long", long, SamplingParams(max_tokens=2, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    chunks = [(d, p) for d, p in steps if p]
    assert chunks[:3] == [(1, [31]), (1, [31]), (1, [31])], steps


def test_no_chunked_prefill_runs_prompts_whole(checkpoints, hf_models):
    "`enable_chunked_prefill=False`: a prompt longer than the budget still runs, in one step."
    ckpt = checkpoints("qwen3-tiny")
    prompts = random_prompts(3, seed=37, lo=40, hi=60)
    llm = LLM(
        ckpt, dtype="float32", device="cpu", max_num_batched_tokens=16, enable_chunked_prefill=False
    )
    steps = recorded_batches(llm.engine)
    assert greedy(llm, prompts) == hf_greedy(hf_models(ckpt), prompts, 24)
    assert max(sum(p) for _, p in steps) >= 40


def test_tp2_chunked_equals_tp1(checkpoints):
    "TP=2 over gloo with a 16-token budget gives TP=1's tokens."
    ckpt = checkpoints("qwen3-tiny")
    prompts = random_prompts(4, seed=38, lo=20, hi=50)
    runs = []
    for tp in (1, 2):
        kw = dict(dtype="float32", device="cpu", max_num_batched_tokens=16)
        with LLM(ckpt, tensor_parallel_size=tp, **kw) as llm:
            runs.append(greedy(llm, prompts))
    assert runs[0] == runs[1]
    assert not mp.active_children()
