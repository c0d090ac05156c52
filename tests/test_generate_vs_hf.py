"""Acceptance (issue 2): greedy output of tiny Qwen3/Qwen2 equals HF transformers token for token (fp32, CPU)."""
import random
import pytest, torch
from metainfer import LLM, SamplingParams
from metainfer.testing import hf_greedy

PRESETS = ["qwen3-tiny", "qwen3-tiny-mqa", "qwen2-tiny"]  # head_dim != hidden/heads + tied; 1 KV head; qkv bias
GREEDY = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)


def random_prompts(n: int, seed: int, vocab: int = 151643, lo: int = 1, hi: int = 70) -> list[list[int]]:
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
    first = llm.generate(prompts, GREEDY, use_tqdm=False)          # hits within one batch
    second = llm.generate(prompts[::-1], GREEDY, use_tqdm=False)   # hits on blocks cached by the first call
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
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)
    ref = hf_greedy(hf_models(ckpt), [tok(p).input_ids for p in prompts], 16)
    assert [o.outputs[0].token_ids for o in outs] == ref
    assert [o.outputs[0].text for o in outs] == [tok.decode(r, skip_special_tokens=True) for r in ref]
    assert [o.prompt for o in outs] == prompts


def rank_agrees(rank: int, ref: torch.Tensor, t: int, tol: float = 1e-5) -> bool:
    "Whether `rank` counts the tokens at least as likely as `t` in `ref`, up to ties within `tol` (rounding)."
    return int((ref > ref[t] + tol).sum()) < rank <= int((ref >= ref[t] - tol).sum())


def test_logprobs_equal_hf(checkpoints, hf_models):
    """Asked-for logprobs are HF's log-softmax at each new token's place (teacher-forced on the same tokens): the
    chosen token's logprob and rank, and the likeliest tokens, for greedy and seeded sampled requests alike."""
    ckpt = checkpoints("qwen3-tiny")
    prompts = random_prompts(6, seed=5)
    params = [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=3, prompt_logprobs=2),
              SamplingParams(temperature=1.0, top_k=40, seed=9, max_tokens=12, ignore_eos=True, logprobs=0),
              SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)] * 2
    llm = LLM(ckpt, dtype="float32", device="cpu")
    outs = llm.generate(prompts, params, use_tqdm=False)
    hf = hf_models(ckpt)
    greedy = [i for i, p in enumerate(params) if p.temperature == 0]
    assert [outs[i].outputs[0].token_ids for i in greedy] == hf_greedy(hf, [prompts[i] for i in greedy], 12)
    for prompt, p, out in zip(prompts, params, outs):
        c = out.outputs[0]
        if p.prompt_logprobs is None: assert out.prompt_logprobs is None
        else:  # the prompt's tokens after the first, scored by the rows before them
            with torch.no_grad(): ref = hf(torch.tensor([prompt])).logits[0, :-1].log_softmax(-1)
            assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(prompt)
            for t, e, r in zip(prompt[1:], out.prompt_logprobs[1:], ref):
                assert e[t].logprob == pytest.approx(r[t].item(), abs=1e-5) and rank_agrees(e[t].rank, r, t)
                assert set(e) == {t, *r.topk(p.prompt_logprobs).indices.tolist()}
        if p.logprobs is None:
            assert c.logprobs is None and c.cumulative_logprob is None
            continue
        with torch.no_grad(): ref = hf(torch.tensor([prompt + c.token_ids])).logits[0, len(prompt) - 1:-1].log_softmax(-1)
        assert len(c.logprobs) == len(c.token_ids) == 12
        for t, e, r in zip(c.token_ids, c.logprobs, ref):
            assert e[t].logprob == pytest.approx(r[t].item(), abs=1e-5) and rank_agrees(e[t].rank, r, t)
            top = r.topk(p.logprobs)
            assert set(e) == {t, *top.indices.tolist()}
            for rank, (i, v) in enumerate(zip(top.indices.tolist(), top.values.tolist()), 1):
                assert e[i].logprob == pytest.approx(v, abs=1e-5) and e[i].rank == (e[t].rank if i == t else rank)
        assert p.temperature > 0 or all(e[t].rank == 1 for t, e in zip(c.token_ids, c.logprobs))
        assert c.cumulative_logprob == pytest.approx(sum(e[t].logprob for t, e in zip(c.token_ids, c.logprobs)))
        assert c.logprobs[0][c.token_ids[0]].decoded_token == llm.get_tokenizer().decode([c.token_ids[0]])


def test_prompt_logprobs_skip_cache_hits(checkpoints, hf_models):
    """A request for prompt logprobs computes its whole prompt even when its blocks are cached (a hit would skip the
    rows that score them); the greedy tokens stay HF's, and a request without them still hits the cache."""
    ckpt = checkpoints("qwen3-tiny")
    prompt = random_prompts(1, seed=6, lo=40, hi=40)[0]
    llm = LLM(ckpt, dtype="float32", device="cpu", block_size=16)
    bm = llm.engine.block_manager
    first = llm.generate([prompt], GREEDY, use_tqdm=False)[0]
    hits = bm.num_cache_hit_tokens
    scored = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=64, ignore_eos=True, prompt_logprobs=0),
                          use_tqdm=False)[0]
    assert bm.num_cache_hit_tokens == hits and len(scored.prompt_logprobs) == 40
    assert scored.outputs[0].token_ids == first.outputs[0].token_ids == hf_greedy(hf_models(ckpt), [prompt], 64)[0]
    llm.generate([prompt], GREEDY, use_tqdm=False)
    assert bm.num_cache_hit_tokens == hits + 32
