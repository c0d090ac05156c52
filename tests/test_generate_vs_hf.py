"""Acceptance (issue 2): greedy output of tiny Qwen3/Qwen2 equals HF transformers token for token
(fp32, CPU)."""

import random
import pytest
import torch
from metainfer import LLM, SamplingParams
from metainfer.testing import hf_greedy, write_random_checkpoint

PRESETS = [
    "qwen3-tiny",
    "qwen3-tiny-mqa",
    "qwen2-tiny",
]  # head_dim != hidden/heads + tied; 1 KV head; qkv bias
GREEDY = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)


def random_prompts(
    n: int, seed: int, vocab: int = 151643, lo: int = 1, hi: int = 70
) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


@pytest.mark.parametrize("preset", PRESETS)
def test_batched_greedy_equals_hf(preset, checkpoints, hf_models):
    ckpt = checkpoints(preset)
    prompts = random_prompts(10, seed=1)
    llm = LLM(ckpt, dtype="float32", device="cpu")
    outs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert [o.prompt_token_ids for o in outs] == prompts
    assert [o.outputs[0].token_ids for o in outs] == hf_greedy(hf_models(ckpt), prompts, 64)
    assert {o.outputs[0].finish_reason for o in outs} == {"length"}


@pytest.mark.parametrize("preset", PRESETS)
def test_prefix_cache_hits_give_same_tokens(preset, checkpoints, hf_models):
    """Prompts share a 40-token prefix (> two 16-token blocks): later prefills reuse its blocks."""
    ckpt = checkpoints(preset)
    shared = random_prompts(1, seed=2, lo=40, hi=40)[0]
    prompts = [shared + tail for tail in random_prompts(8, seed=3, lo=1, hi=20)]
    llm = LLM(ckpt, dtype="float32", device="cpu", block_size=16)
    first = llm.generate(prompts, GREEDY, use_tqdm=False)  # hits within one batch
    second = llm.generate(
        prompts[::-1], GREEDY, use_tqdm=False
    )  # hits on blocks cached by the first call
    bm = llm.engine.block_manager
    assert bm.num_cache_hit_tokens >= (7 + 8) * 32
    ref = hf_greedy(hf_models(ckpt), prompts, 64)
    assert [o.outputs[0].token_ids for o in first] == ref
    assert [o.outputs[0].token_ids for o in second] == ref[::-1]
    assert bm.num_free_blocks == llm.engine.runner.num_kv_blocks


def test_text_prompts_and_tokenizer(checkpoints, hf_models):
    ckpt = checkpoints("qwen3-tiny")
    llm = LLM(ckpt, dtype="float32", device="cpu")
    tok = llm.get_tokenizer()
    prompts = ["The path of a token", "Hello, world!", "日本語", "def main():\n    return 0"]
    outs = llm.generate(
        prompts, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False
    )
    ref = hf_greedy(hf_models(ckpt), [tok(p).input_ids for p in prompts], 16)
    assert [o.outputs[0].token_ids for o in outs] == ref
    assert [o.outputs[0].text for o in outs] == [
        tok.decode(r, skip_special_tokens=True) for r in ref
    ]
    assert [o.prompt for o in outs] == prompts


def rank_agrees(rank: int, ref: torch.Tensor, t: int, tol: float = 1e-5) -> bool:
    """Whether `rank` counts the tokens at least as likely as `t` in `ref`, up to ties within `tol`
    (rounding)."""
    return int((ref > ref[t] + tol).sum()) < rank <= int((ref >= ref[t] - tol).sum())


def test_logprobs_equal_hf(checkpoints, hf_models, monkeypatch):
    """Asked-for logprobs are HF's log-softmax at each new token's place (teacher-forced on the same
    tokens): the chosen token's logprob and rank, and the likeliest tokens, for greedy and seeded
    sampled requests alike; prompt logprobs too, scored a few rows at a time (a one-token prompt has
    nothing to score)."""
    import metainfer.engine.logits_processing

    # several chunks a prompt, and chunks across prompts
    monkeypatch.setattr(metainfer.engine.logits_processing, "SCORE_CHUNK", 7)
    ckpt = checkpoints("qwen3-tiny")
    prompts = random_prompts(6, seed=5)
    prompts[2] = prompts[2][:1]
    params = [
        SamplingParams(
            temperature=0, max_tokens=12, ignore_eos=True, logprobs=3, prompt_logprobs=2
        ),
        SamplingParams(
            temperature=1.0, top_k=40, seed=9, max_tokens=12, ignore_eos=True, logprobs=0
        ),
        SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, prompt_logprobs=1),
    ] * 2
    llm = LLM(ckpt, dtype="float32", device="cpu")
    outs = llm.generate(prompts, params, use_tqdm=False)
    hf = hf_models(ckpt)
    assert outs[2].prompt_logprobs == [None]  # a one-token prompt
    greedy = [i for i, p in enumerate(params) if p.temperature == 0]
    assert [outs[i].outputs[0].token_ids for i in greedy] == hf_greedy(
        hf, [prompts[i] for i in greedy], 12
    )
    for prompt, p, out in zip(prompts, params, outs):
        c = out.outputs[0]
        if p.prompt_logprobs is None:
            assert out.prompt_logprobs is None
        else:  # the prompt's tokens after the first, scored by the rows before them
            with torch.no_grad():
                ref = hf(torch.tensor([prompt])).logits[0, :-1].log_softmax(-1)
            assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(prompt)
            for t, e, r in zip(prompt[1:], out.prompt_logprobs[1:], ref):
                assert e[t].logprob == pytest.approx(r[t].item(), abs=1e-5) and rank_agrees(
                    e[t].rank, r, t
                )
                assert set(e) == {t, *r.topk(p.prompt_logprobs).indices.tolist()}
        if p.logprobs is None:
            assert c.logprobs is None and c.cumulative_logprob is None
            continue
        with torch.no_grad():
            ref = (
                hf(torch.tensor([prompt + c.token_ids]))
                .logits[0, len(prompt) - 1 : -1]
                .log_softmax(-1)
            )
        assert len(c.logprobs) == len(c.token_ids) == 12
        for t, e, r in zip(c.token_ids, c.logprobs, ref):
            assert e[t].logprob == pytest.approx(r[t].item(), abs=1e-5) and rank_agrees(
                e[t].rank, r, t
            )
            top = r.topk(p.logprobs)
            assert set(e) == {t, *top.indices.tolist()}
            for rank, (i, v) in enumerate(zip(top.indices.tolist(), top.values.tolist()), 1):
                assert e[i].logprob == pytest.approx(v, abs=1e-5) and e[i].rank == (
                    e[t].rank if i == t else rank
                )
        assert p.temperature > 0 or all(e[t].rank == 1 for t, e in zip(c.token_ids, c.logprobs))
        assert c.cumulative_logprob == pytest.approx(
            sum(e[t].logprob for t, e in zip(c.token_ids, c.logprobs))
        )
        assert c.logprobs[0][c.token_ids[0]].decoded_token == llm.get_tokenizer().decode(
            [c.token_ids[0]]
        )


def test_prompt_logprobs_skip_cache_hits(checkpoints, hf_models):
    """A request for prompt logprobs computes its whole prompt even when its blocks are cached (a
    hit would skip the rows that score them); the greedy tokens stay HF's, and a request without
    them still hits the cache."""
    ckpt = checkpoints("qwen3-tiny")
    prompt = random_prompts(1, seed=6, lo=40, hi=40)[0]
    llm = LLM(ckpt, dtype="float32", device="cpu", block_size=16)
    bm = llm.engine.block_manager
    first = llm.generate([prompt], GREEDY, use_tqdm=False)[0]
    hits = bm.num_cache_hit_tokens
    scored = llm.generate(
        [prompt],
        SamplingParams(temperature=0, max_tokens=64, ignore_eos=True, prompt_logprobs=0),
        use_tqdm=False,
    )[0]
    assert bm.num_cache_hit_tokens == hits and len(scored.prompt_logprobs) == 40
    assert (
        scored.outputs[0].token_ids
        == first.outputs[0].token_ids
        == hf_greedy(hf_models(ckpt), [prompt], 64)[0]
    )
    llm.generate([prompt], GREEDY, use_tqdm=False)
    assert bm.num_cache_hit_tokens == hits + 32


def test_penalties_bias_and_min_tokens(checkpoints, hf_models):
    """In one batch with plain requests: the repetition penalty, a logit bias and `min_tokens` give
    the greedy tokens of HF `generate` with its own logits processors; presence and frequency
    penalties (HF has none) take at each step the argmax of HF's logits (teacher-forced) minus the
    penalties of the tokens before it, the one still in flight under async scheduling included."""
    ckpt = checkpoints("qwen3-tiny")
    hf, prompts = hf_models(ckpt), random_prompts(5, seed=8)
    first = [t[0] for t in hf_greedy(hf, prompts, 1)]
    params = [
        SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, repetition_penalty=1.4),
        SamplingParams(
            temperature=0, max_tokens=16, ignore_eos=True, logit_bias={777: 4.0, first[1]: -50.0}
        ),
        SamplingParams(temperature=0, max_tokens=16, stop_token_ids=[first[2]], min_tokens=5),
        SamplingParams(
            temperature=0,
            max_tokens=16,
            ignore_eos=True,
            presence_penalty=0.3,
            frequency_penalty=0.5,
        ),
        GREEDY,
    ]
    outs = [
        o.outputs[0]
        for o in LLM(ckpt, dtype="float32", device="cpu").generate(prompts, params, use_tqdm=False)
    ]

    def hf_generate(prompt, **kw):
        x = torch.tensor([prompt])
        y = hf.generate(
            x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=16,
            do_sample=False,
            pad_token_id=0,
            **kw,
        )
        return y[0, len(prompt) :].tolist()

    assert outs[0].token_ids == hf_generate(
        prompts[0], repetition_penalty=1.4, eos_token_id=None, min_new_tokens=0
    )
    assert outs[1].token_ids == hf_generate(
        prompts[1],
        sequence_bias={(777,): 4.0, (first[1],): -50.0},
        eos_token_id=None,
        min_new_tokens=0,
    )
    assert outs[2].token_ids == hf_generate(prompts[2], min_new_tokens=5, eos_token_id=first[2])
    assert first[2] not in outs[2].token_ids[:5]
    assert outs[4].token_ids == hf_greedy(hf, prompts[4:], 64)[0]
    ids = outs[3].token_ids
    with torch.no_grad():
        logits = hf(torch.tensor([prompts[3] + ids])).logits[0, len(prompts[3]) - 1 : -1]
    for k, (row, t) in enumerate(zip(logits, ids)):
        counts = torch.bincount(
            torch.tensor(ids[:k], dtype=torch.long), minlength=row.numel()
        ).float()
        adjusted = row - 0.5 * counts - 0.3 * (counts > 0)
        assert adjusted[t] >= adjusted.max() - 1e-5
    assert ids != hf_greedy(hf, prompts[3:4], 16)[0]  # (the penalties change the plain greedy path)


def test_qwen_with_yarn_equals_hf(tmp_path, hf_models):
    """A Qwen3 whose config asks for YaRN (Qwen's route to 128K: `factor` 4 over the original
    positions) decodes as HF does past the original positions and past the config's own
    `max_position_embeddings`, up to the original ones times the factor (vLLM's limit)."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    ckpt = write_random_checkpoint(
        tmp_path, "qwen3-tiny", rope_scaling=yarn, max_position_embeddings=128
    )
    prompts = random_prompts(4, seed=5, lo=90, hi=150)
    llm = LLM(ckpt, dtype="float32", device="cpu")
    assert llm.engine.max_model_len == 256
    outs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == hf_greedy(hf_models(ckpt), prompts, 64)
