"""Acceptance (issue 2): a KV pool too small for the demand, overlong prompts, aborts, streaming,
seeds."""

import pytest
from metainfer import LLM, SamplingParams
from test_generate_vs_hf import random_prompts, GREEDY


def test_small_pool_preempts_and_completes(checkpoints):
    ckpt = checkpoints("qwen3-tiny")
    prompts = random_prompts(16, seed=4, lo=10, hi=60)
    demand = sum(-(-(len(p) + 64) // 16) for p in prompts)  # blocks needed if all ran at once
    big = LLM(ckpt, dtype="float32", device="cpu", block_size=16)
    small = LLM(
        ckpt, dtype="float32", device="cpu", block_size=16, num_kv_blocks=24, max_model_len=256
    )
    assert small.engine.runner.num_kv_blocks < demand / 3
    free0 = small.engine.block_manager.num_free_blocks
    params = SamplingParams(
        temperature=0, max_tokens=64, ignore_eos=True, logprobs=1, prompt_logprobs=0
    )
    ref = big.generate(prompts, params, use_tqdm=False)
    outs = small.generate(prompts, params, use_tqdm=False)
    assert small.engine.scheduler.num_preemptions > 0
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in ref]
    for o, r in zip(
        outs, ref
    ):  # recomputed sequences keep one logprob entry per token, the same as uninterrupted
        lp = lambda c: [e[t].logprob for t, e in zip(c.token_ids, c.logprobs)]
        assert lp(o.outputs[0]) == pytest.approx(lp(r.outputs[0]), abs=1e-5)
        assert len(o.prompt_logprobs) == len(
            o.prompt_token_ids
        )  # scored once, not again when recomputed
    assert small.engine.block_manager.num_free_blocks == free0 == 24


def test_overlong_prompt_is_rejected_and_others_unaffected(checkpoints):
    ckpt = checkpoints("qwen3-tiny")
    llm = LLM(ckpt, dtype="float32", device="cpu", max_model_len=128)
    prompts = random_prompts(4, seed=5)
    ref = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]
    engine = llm.engine
    for i, p in enumerate(prompts[:2]):
        engine.add_request(f"ok{i}", p, GREEDY)
    with pytest.raises(ValueError, match="prompt of 200 tokens is too long: max_model_len is 128"):
        engine.add_request("long", [1] * 200, GREEDY)
    for i, p in enumerate(prompts[2:], 2):
        engine.add_request(f"ok{i}", p, GREEDY)
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out.outputs[0]
    assert [done[f"ok{i}"].token_ids for i in range(4)] == [
        r[: 128 - len(p)] for r, p in zip(ref, prompts)
    ]
    with pytest.raises(ValueError, match="prompt 1: prompt of 128 tokens is too long"):
        llm.generate([prompts[0], [1] * 128], GREEDY, use_tqdm=False)
    assert not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == engine.runner.num_kv_blocks


def test_generation_stops_at_max_model_len(checkpoints):
    llm = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu", max_model_len=40)
    out = llm.generate([[5] * 30], GREEDY, use_tqdm=False)[0].outputs[0]
    assert (len(out.token_ids), out.finish_reason) == (10, "length")


def test_bad_requests_fail_with_reasons(checkpoints):
    engine = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu").engine
    with pytest.raises(ValueError, match="empty"):
        engine.add_request("a", [], GREEDY)
    with pytest.raises(ValueError, match=r"must be in \[0, 151936\)"):
        engine.add_request("b", [151936], GREEDY)
    engine.add_request("c", [1, 2], GREEDY)
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("c", [1, 2], GREEDY)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=1.5)
    engine.abort_request("c")
    assert not engine.has_unfinished_requests()


def test_abort_frees_blocks_mid_decode(checkpoints):
    engine = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu").engine
    free0 = engine.block_manager.num_free_blocks
    for i, p in enumerate(random_prompts(6, seed=6)):
        engine.add_request(str(i), p, GREEDY)
    for _ in range(5):
        engine.step()
    for i in range(0, 6, 2):
        engine.abort_request(str(i))
    finished = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.finished:
                finished[o.request_id] = len(o.outputs[0].token_ids)
    assert finished == {"1": 64, "3": 64, "5": 64}
    assert engine.block_manager.num_free_blocks == free0


def test_stream_yields_growing_outputs(checkpoints):
    llm = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu")
    prompts = ["Hello", "The path of a token"]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    seen = {}
    for out in llm.stream(prompts, params):
        prev = seen.get(out.request_id)
        if prev is not None:
            assert out.outputs[0].token_ids[: len(prev)] == prev
        seen[out.request_id] = out.outputs[0].token_ids
    final = llm.generate(prompts, params, use_tqdm=False)
    assert sorted(seen.values()) == sorted(o.outputs[0].token_ids for o in final)


def test_seeded_sampling_is_reproducible_and_batch_independent(checkpoints):
    llm = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu")
    p = random_prompts(3, seed=7)
    seeded = SamplingParams(
        temperature=1.0, top_p=0.9, top_k=50, max_tokens=16, seed=123, ignore_eos=True
    )
    alone = llm.generate([p[0]], seeded, use_tqdm=False)[0].outputs[0].token_ids
    mixed = llm.generate(
        p, [seeded, SamplingParams(temperature=0.7, max_tokens=16), GREEDY], use_tqdm=False
    )
    assert mixed[0].outputs[0].token_ids == alone
    other = llm.generate(
        [p[0]],
        SamplingParams(temperature=1.0, max_tokens=16, seed=124, ignore_eos=True),
        use_tqdm=False,
    )
    assert other[0].outputs[0].token_ids != alone


def test_failed_step_leaves_no_requests_and_no_poisoned_cache(checkpoints):
    """A step that raises (Ctrl-C, OOM) aborts its batch and un-caches blocks whose KV it never
    wrote."""
    llm = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu", block_size=4)
    engine = llm.engine
    prompts = random_prompts(3, seed=8, lo=20, hi=30)
    ref = [
        o.outputs[0].token_ids
        for o in LLM(
            checkpoints("qwen3-tiny"), dtype="float32", device="cpu", block_size=4
        ).generate(prompts, GREEDY, use_tqdm=False)
    ]
    launch, calls = engine.runner.launch, []

    def fail_at(
        n,
    ):  # the n-th launch raises: the first (prefill), or a decode with a step in flight
        def launch_or_fail(batch):
            calls.append(batch)
            if len(calls) == n:
                raise KeyboardInterrupt
            return launch(batch)

        return launch_or_fail

    for n in (1, 6):
        calls.clear()
        engine.runner.launch = fail_at(n)
        with pytest.raises(KeyboardInterrupt):
            llm.generate(prompts, GREEDY, use_tqdm=False)
        engine.runner.launch = launch
        assert not engine.has_unfinished_requests() and not engine.requests
        assert engine.block_manager.num_free_blocks == engine.runner.num_kv_blocks
        assert [
            o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)
        ] == ref


@pytest.mark.parametrize("block_size", [4, 16])
def test_async_scheduling_gives_the_same_outputs(checkpoints, block_size):
    """Launching step N+1 before reading step N back changes nothing a user sees: greedy and seeded
    tokens, stop strings, stop tokens, length limits, the prefix cache (blocks filled by tokens
    still in flight), freed blocks."""
    ckpt = checkpoints("qwen3-tiny")
    kw = dict(
        dtype="float32",
        device="cpu",
        block_size=block_size,
        num_kv_blocks=2048 // block_size,
        max_model_len=160,
    )
    prompts = random_prompts(6, seed=10, lo=5, hi=40)
    results, lps = [], []
    for async_scheduling in (False, True):
        llm = LLM(ckpt, async_scheduling=async_scheduling, **kw)
        bm = llm.engine.block_manager
        ref = llm.generate(prompts, GREEDY, use_tqdm=False)
        stop_id, stop_text = ref[1].outputs[0].token_ids[5], ref[4].outputs[0].text[10:14]
        params = [
            GREEDY,
            SamplingParams(temperature=0, max_tokens=64, stop_token_ids=[stop_id], logprobs=2),
            SamplingParams(temperature=0.8, top_p=0.9, max_tokens=20, seed=3, logprobs=0),
            SamplingParams(temperature=0, max_tokens=1, logprobs=1),
            SamplingParams(temperature=0, max_tokens=64, stop=[stop_text], logprobs=3),
            SamplingParams(temperature=1.0, top_k=20, max_tokens=30, seed=4, ignore_eos=True),
        ]
        outs = llm.generate(prompts, params, use_tqdm=False)
        for o in outs[
            1:5
            # one logprob entry per token kept, also for the sequences that stopped with a step in
            # flight
        ]:
            c = o.outputs[0]
            assert len(c.logprobs) == len(c.token_ids) and all(
                t in e for t, e in zip(c.token_ids, c.logprobs)
            )
        lps.append(
            [
                [e[t].logprob for t, e in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)]
                for o in outs[1:5]
            ]
        )
        again = [
            p + o.outputs[0].token_ids[:20] for p, o in zip(prompts[:2], outs[:2])
        ]  # hits on generated blocks
        hits = bm.num_cache_hit_tokens
        outs += llm.generate(again, GREEDY, use_tqdm=False)
        results.append(
            (
                [o.outputs[0].token_ids for o in ref],
                [
                    (o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].finish_reason)
                    for o in outs
                ],
                bm.num_cache_hit_tokens - hits,
            )
        )
        assert not llm.engine.has_unfinished_requests() and bm.num_free_blocks == 2048 // block_size
        llm.shutdown()
    assert results[0] == results[1]
    assert [x for row in lps[1] for x in row] == pytest.approx(
        [x for row in lps[0] for x in row], abs=1e-5
    )
    _, got, hits = results[1]
    assert [r for _, _, r in got[:6]] == ["length", "stop", "length", "length", "stop", "length"]
    assert len(got[3][0]) == 1 and hits >= len(prompts[0]) + 20 - block_size


def test_async_scheduling_launches_before_reading_back(checkpoints):
    """The order: each step launches its batch, then reads back the one launched before it."""
    engine = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu").engine
    order, launch, read_back = [], engine._launch, engine._read_back
    engine._launch = lambda b, f: order.append("launch") or launch(b, f)
    engine._read_back = lambda s: order.append("read") or read_back(s)
    engine.add_request("a", [1, 2, 3], SamplingParams(temperature=0, max_tokens=3))
    outs = [engine.step() for _ in range(4)]
    assert order == ["launch", "launch", "read", "launch", "read", "read"]
    assert [len(o) for o in outs] == [0, 1, 1, 1] and outs[-1][0].finished
    assert len(outs[-1][0].outputs[0].token_ids) == 3


def test_abandoned_stream_leaves_nothing_queued(checkpoints):
    llm = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu")
    stream = llm.stream(random_prompts(4, seed=9), GREEDY)
    next(stream)
    stream.close()
    assert not llm.engine.has_unfinished_requests() and not llm.engine.requests
    assert llm.engine.block_manager.num_free_blocks == llm.engine.runner.num_kv_blocks


def test_stats_count_kept_tokens_and_no_idle_time(checkpoints):
    """A sequence stopped by a stop token has had one more step launched; that token is not counted,
    and the step is read back before `generate` returns, so time spent idle afterwards is not
    counted as step time."""
    import time

    llm = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu")
    engine, prompt = llm.engine, random_prompts(1, seed=16)[0]
    stop_id = llm.generate([prompt], GREEDY, use_tqdm=False)[0].outputs[0].token_ids[3]
    before = dict(engine.stats)
    out = llm.generate(
        [prompt],
        SamplingParams(temperature=0, max_tokens=64, stop_token_ids=[stop_id]),
        use_tqdm=False,
    )
    assert engine.in_flight is None
    assert engine.stats["generated_tokens"] - before["generated_tokens"] == len(
        out[0].outputs[0].token_ids
    )
    time.sleep(0.5)
    before = dict(engine.stats)
    llm.generate(
        [prompt], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True), use_tqdm=False
    )
    assert engine.stats["step_s"] - before["step_s"] < 0.4


def test_penalties_when_requests_join_mid_decode(checkpoints):
    """A request that joins while another decodes splits the running batch: in the next step some
    sequences have a token in flight and some don't. Penalties count both kinds right: the tokens
    equal a run of the request alone."""
    from metainfer import LLMEngine

    ckpt = checkpoints("qwen3-tiny")
    a, b = random_prompts(2, seed=21)
    pa = SamplingParams(
        temperature=0, max_tokens=24, ignore_eos=True, frequency_penalty=0.7, presence_penalty=0.2
    )
    pb = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, repetition_penalty=1.3)
    alone = [
        LLM(ckpt, dtype="float32", device="cpu")
        .generate([p], s, use_tqdm=False)[0]
        .outputs[0]
        .token_ids
        for p, s in ((a, pa), (b, pb))
    ]
    engine = LLMEngine.from_engine_args(str(ckpt), dtype="float32", device="cpu")
    engine.add_request("a", a, pa)
    done = {}
    for k in range(200):
        if k == 5:
            engine.add_request("b", b, pb)
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out.outputs[0].token_ids
        if not engine.has_unfinished_requests():
            break
    assert [done["a"], done["b"]] == alone


def test_generated_blocks_join_the_prefix_cache_when_steps_mask_tokens(checkpoints):
    """A completion's full blocks are cached for a later prompt that repeats it, also when its
    steps mask tokens (bad words: the step in flight is read back before the next one samples, so
    a block's last token is known only after that step was scheduled)."""
    llm = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu", block_size=16)
    prompt = list(range(100, 140))
    for extra in ({}, {"bad_words": ["zzzqqq"]}):
        llm.reset_prefix_cache()
        params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True, **extra)
        out = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
        again = llm.generate([prompt + out.token_ids], SamplingParams(max_tokens=1), use_tqdm=False)
        assert again[0].num_cached_tokens == 96, extra  # every full block but the last token's


def test_abort_reads_back_the_step_in_flight(checkpoints):
    """Aborting the last request reads back its launched step at once: nothing is left in flight,
    so idle time afterwards never counts as a step's."""
    import time

    engine = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu").engine
    engine.add_request("a", random_prompts(1, seed=7)[0], GREEDY)
    for _ in range(4):
        engine.step()
    assert engine.in_flight is not None
    engine.abort_request("a")
    assert engine.in_flight is None and not engine.has_unfinished_requests()
    time.sleep(0.5)
    before = engine.stats["step_s"]
    engine.add_request("b", random_prompts(1, seed=7)[0], SamplingParams(max_tokens=2))
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.stats["step_s"] - before < 0.4


def test_abort_survives_a_failed_read_back(checkpoints, monkeypatch):
    """The step in flight failing as the abort reads it back: no request is left to fail, so the
    abort returns, nothing stays in flight, and the prefixes it may have cached are forgotten."""
    engine = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu").engine
    engine.add_request("a", random_prompts(1, seed=8)[0], GREEDY)
    for _ in range(4):
        engine.step()
    assert engine.block_manager.cached

    def fails(done):
        raise RuntimeError("the device failed")

    monkeypatch.setattr(engine, "_read_back", fails)
    engine.abort_request("a")
    assert engine.in_flight is None and not engine.block_manager.cached
