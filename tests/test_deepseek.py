"""Acceptance (issue 5, CPU part): tiny DeepSeek-V2/V3 greedy tokens equal HF; TP=2 (with EP) equals
TP=1."""

import multiprocessing as mp
import pytest
from metainfer import LLM
from metainfer.testing import hf_greedy
from test_generate_vs_hf import random_prompts, GREEDY

# no q LoRA + greedy routing (V2-Lite); q LoRA + group_limited_greedy (V2); sigmoid + noaux_tc +
# norm_topk_prob (V3)
PRESETS = ["deepseek-v2-tiny", "deepseek-v2-tiny-qlora", "deepseek-v3-tiny"]
VOCAB = 1024


def ckpt_of(checkpoints, preset):
    return checkpoints(preset, perturb_constants=True)


def run(ckpt, prompts, tp=1, **kw):
    with LLM(ckpt, dtype="float32", device="cpu", tensor_parallel_size=tp, **kw) as llm:
        return [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]


@pytest.mark.parametrize("preset", PRESETS)
def test_batched_greedy_equals_hf(preset, checkpoints, hf_models):
    ckpt = ckpt_of(checkpoints, preset)
    prompts = random_prompts(10, seed=21, vocab=VOCAB)
    assert len({len(p) for p in prompts}) >= 8
    assert run(ckpt, prompts) == hf_greedy(hf_models(ckpt), prompts, 64)


def test_prefix_cache_hits_read_cached_latents(checkpoints, hf_models):
    """Prompts share a 40-token prefix: later prefills materialize K/V from latents cached by
    earlier ones."""
    ckpt = ckpt_of(checkpoints, "deepseek-v2-tiny-qlora")
    shared = random_prompts(1, seed=22, vocab=VOCAB, lo=40, hi=40)[0]
    prompts = [shared + tail for tail in random_prompts(8, seed=23, vocab=VOCAB, lo=1, hi=20)]
    with LLM(ckpt, dtype="float32", device="cpu", block_size=16) as llm:
        first = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]
        second = [
            o.outputs[0].token_ids for o in llm.generate(prompts[::-1], GREEDY, use_tqdm=False)
        ]
        assert llm.engine.block_manager.num_cache_hit_tokens >= (7 + 8) * 32
    ref = hf_greedy(hf_models(ckpt), prompts, 64)
    assert first == ref and second == ref[::-1]


@pytest.mark.parametrize("preset", ["deepseek-v2-tiny", "deepseek-v3-tiny"])
def test_tp2_with_expert_parallelism_equals_tp1(preset, checkpoints):
    """TP=2 splits heads, shared experts and the dense MLP by width, and the 8 routed experts 4 + 4
    (EP = TP)."""
    ckpt = ckpt_of(checkpoints, preset)
    prompts = random_prompts(8, seed=24, vocab=VOCAB)
    assert run(ckpt, prompts, tp=2) == run(ckpt, prompts, tp=1)
    assert not mp.active_children()


def test_expert_parallel_size_independent_of_tp(checkpoints):
    """At TP=2 over gloo: every expert split by width across both ranks (EP=1) gives TP=1's tokens
    too."""
    ckpt = ckpt_of(checkpoints, "deepseek-v3-tiny")
    prompts = random_prompts(4, seed=25, vocab=VOCAB, lo=3, hi=30)
    assert run(ckpt, prompts, tp=2, expert_parallel_size=1) == run(ckpt, prompts, tp=1)
    assert not mp.active_children()


def test_tp4_with_ep4_equals_tp1(checkpoints):
    """Issue 7's CPU stand-in: 4 gloo ranks, one query head and 2 of the 8 routed experts each
    (EP=4)."""
    ckpt = ckpt_of(checkpoints, "deepseek-v2-tiny")
    prompts = random_prompts(4, seed=26, vocab=VOCAB, lo=3, hi=30)
    assert run(ckpt, prompts, tp=4) == run(ckpt, prompts, tp=1)
    assert not mp.active_children()
