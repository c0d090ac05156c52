"""vLLM's offline API (issue 25, item 3): prompt dicts (`TokensPrompt`, `TextPrompt`),
`SamplingParams(max_tokens=None)`, `truncate_prompt_tokens`, `detokenize=False`, `output_kind`,
`LLM(..., trust_remote_code=True)`, `llm.llm_engine` and `get_default_sampling_params`, each as
vLLM documents it. One tiny CPU engine serves the module."""

import json
import shutil
from dataclasses import replace

import pytest

import metainfer
from metainfer import LLM, RequestOutputKind, SamplingParams
from metainfer.inputs import TextPrompt, TokensPrompt
from metainfer.testing import trained_model_dir

MAX_MODEL_LEN = 64


@pytest.fixture(scope="module")
def llm(checkpoints):
    with LLM(
        str(checkpoints("qwen3-tiny")),
        device="cpu",
        num_kv_blocks=32,
        max_model_len=MAX_MODEL_LEN,
        trust_remote_code=True,  # accepted: no checkpoint code is ever run
    ) as llm:
        yield llm


def greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0, ignore_eos=True, **kw)


def test_prompt_types_mirror_vllm_inputs(llm):
    "A dict prompt, alone or in a list, as text or token ids; the names import as in vLLM."
    assert metainfer.TokensPrompt is TokensPrompt and metainfer.TextPrompt is TextPrompt
    ids = llm.get_tokenizer()("hello there").input_ids
    one = llm.generate({"prompt_token_ids": ids}, greedy(max_tokens=4), use_tqdm=False)
    assert len(one) == 1 and one[0].prompt_token_ids == ids and one[0].prompt is None
    outs = llm.generate(
        [TextPrompt(prompt="hello there"), TokensPrompt(prompt_token_ids=ids), ids, "hello there"],
        greedy(max_tokens=4),
        use_tqdm=False,
    )
    assert [o.prompt for o in outs] == ["hello there", None, None, "hello there"]
    assert len({tuple(o.outputs[0].token_ids) for o in outs}) == 1  # one prompt, four spellings
    with pytest.raises(ValueError, match="not supported"):  # (a key vLLM doesn't have either)
        llm.generate({"text": "hi"}, use_tqdm=False)
    with pytest.raises(ValueError, match="prompt_token_ids"):
        llm.generate({}, use_tqdm=False)


def test_max_tokens_none_runs_to_max_model_len(llm):
    out = llm.generate([1, 2, 3], greedy(max_tokens=None), use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) == MAX_MODEL_LEN - 3
    assert out.outputs[0].finish_reason == "length"


def test_truncate_prompt_tokens_keeps_the_last(llm):
    ids = list(range(10, 50))
    out = llm.generate(ids, greedy(max_tokens=2, truncate_prompt_tokens=8), use_tqdm=False)[0]
    assert out.prompt_token_ids == ids[-8:]
    full = llm.generate(ids, greedy(max_tokens=2, truncate_prompt_tokens=-1), use_tqdm=False)[0]
    assert full.prompt_token_ids == ids  # -1: up to max_model_len
    with pytest.raises(ValueError, match="truncate_prompt_tokens"):
        SamplingParams(truncate_prompt_tokens=0)
    # a prompt longer than the context: -1 leaves room for one token (vLLM's -1 is max_model_len)
    long = list(range(10, 10 + 2 * MAX_MODEL_LEN))
    cut = llm.generate(long, greedy(max_tokens=4, truncate_prompt_tokens=-1), use_tqdm=False)[0]
    assert cut.prompt_token_ids == long[-(MAX_MODEL_LEN - 1) :]
    assert len(cut.outputs[0].token_ids) == 1 and cut.outputs[0].finish_reason == "length"
    with pytest.raises(ValueError, match="more than max_model_len"):
        llm.generate(long, greedy(truncate_prompt_tokens=MAX_MODEL_LEN + 1), use_tqdm=False)


def test_detokenize_false_gives_ids_only(llm):
    with_text = llm.generate("hi", greedy(max_tokens=5), use_tqdm=False)[0].outputs[0]
    ids_only = llm.generate("hi", greedy(max_tokens=5, detokenize=False), use_tqdm=False)
    assert ids_only[0].outputs[0].text == "" and with_text.text
    assert ids_only[0].outputs[0].token_ids == with_text.token_ids

    # logprobs come with each token's text, or none without detokenizing (vLLM's `None`)
    def texts(**p) -> list[str | None]:
        params = greedy(max_tokens=2, logprobs=2, prompt_logprobs=1, **p)
        out = llm.generate("hi there", params, use_tqdm=False)[0]
        entries = out.outputs[0].logprobs + out.prompt_logprobs[1:]
        return [lp.decoded_token for e in entries for lp in e.values()]

    assert all(isinstance(t, str) for t in texts())
    assert set(texts(detokenize=False)) == {None}
    with pytest.raises(ValueError, match="detokenize"):
        SamplingParams(stop=["x"], detokenize=False)


def test_output_kind(llm):
    """`LLM.stream` yields everything so far (CUMULATIVE), what is new (DELTA) or only the end
    (FINAL_ONLY); `generate` returns whole outputs whatever the kind, as vLLM's."""
    kind = RequestOutputKind
    cum = list(llm.stream("hello", greedy(max_tokens=6)))
    delta = list(llm.stream("hello", greedy(max_tokens=6, output_kind=kind.DELTA)))
    final = list(llm.stream("hello", greedy(max_tokens=6, output_kind=kind.FINAL_ONLY)))
    whole = cum[-1].outputs[0]
    assert [len(o.outputs[0].token_ids) for o in cum] == [1, 2, 3, 4, 5, 6]
    assert [t for o in delta for t in o.outputs[0].token_ids] == whole.token_ids
    assert all(len(o.outputs[0].token_ids) == 1 for o in delta)
    assert "".join(o.outputs[0].text for o in delta) == whole.text
    assert (
        len(final) == 1 and final[0].finished and final[0].outputs[0].token_ids == whole.token_ids
    )
    got = llm.generate("hello", greedy(max_tokens=6, output_kind=kind.DELTA), use_tqdm=False)
    assert got[0].outputs[0].token_ids == whole.token_ids


def test_output_kind_with_n_and_in_the_engine(llm):
    """DELTA with `n > 1` gives each completion's finish once (only completions that moved come);
    the engine's own `step` keeps FINAL_ONLY's outputs for the end, and gives DELTA's new tokens."""
    kind = RequestOutputKind
    sampled = SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=6, output_kind=kind.DELTA)
    outs = list(llm.stream("hello", sampled))
    ends = [c.index for o in outs for c in o.outputs if c.finish_reason is not None]
    assert sorted(ends) == [0, 1, 2]
    whole = llm.generate("hello", replace(sampled, output_kind=kind.CUMULATIVE), use_tqdm=False)
    for c in whole[0].outputs:
        assert [t for o in outs for d in o.outputs if d.index == c.index for t in d.token_ids] == (
            c.token_ids
        )
    engine = llm.llm_engine
    engine.add_request("final", "hello", greedy(max_tokens=4, output_kind=kind.FINAL_ONLY))
    got = []
    while engine.has_unfinished_requests():
        got += engine.step()
    assert [(o.request_id, o.finished) for o in got] == [("final", True)]
    engine.add_request("delta", "hello", replace(sampled, output_kind=kind.DELTA, logprobs=1))
    got = []
    while engine.has_unfinished_requests():
        got += engine.step()
    for c in whole[0].outputs:  # (the same seeds: the same completions, cut step by step)
        mine = [d for o in got for d in o.outputs if d.index == c.index]
        assert [len(d.token_ids) for d in mine] == [1] * 6 and len(mine[0].logprobs) == 1
        assert ([t for d in mine for t in d.token_ids], "".join(d.text for d in mine)) == (
            c.token_ids,
            c.text,
        )


def test_params_changed_after_they_were_made(llm):
    """A field set on `SamplingParams` after they were made counts (vLLM's examples do this), as
    in a copy made with the field: stop tokens, logit bias and allowed ids."""
    alone = llm.generate("hello", greedy(max_tokens=6), use_tqdm=False)[0].outputs[0]
    stop_at = alone.token_ids[2]
    for field, value in [
        ("stop_token_ids", [stop_at]),
        ("logit_bias", {stop_at: -float("inf")}),
        ("allowed_token_ids", alone.token_ids[:2]),
    ]:
        changed = greedy(max_tokens=6)
        setattr(changed, field, value)
        made = replace(greedy(max_tokens=6), **{field: value})
        got, want = llm.generate(["hello"] * 2, [changed, made], use_tqdm=False)
        assert got.outputs[0].token_ids == want.outputs[0].token_ids, field


def test_llm_engine_and_seed(llm, checkpoints):
    "`llm.llm_engine` is the engine; the engine's `seed` makes unseeded sampling repeat."
    assert llm.llm_engine is llm.engine
    sampled = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True)

    def first_sample(seed: int) -> list[int]:
        with LLM(str(checkpoints("qwen3-tiny")), device="cpu", num_kv_blocks=16, seed=seed) as x:
            return x.generate([1, 2, 3], sampled, use_tqdm=False)[0].outputs[0].token_ids

    assert first_sample(7) == first_sample(7) != first_sample(8)


def test_generation_config_defaults(checkpoints, tmp_path):
    """`generation_config="auto"` reads the model's generation_config.json sampling fields (vLLM's
    five), a folder reads that folder's, `"vllm"` none; `generate` without params uses them."""
    (tmp_path / "generation_config.json").write_text(
        json.dumps(
            {"temperature": 0.0, "top_p": 0.9, "top_k": 7, "repetition_penalty": 1.1, "min_p": 0.05}
        )
    )
    ckpt = str(checkpoints("qwen3-tiny"))
    with LLM(ckpt, device="cpu", num_kv_blocks=16, generation_config=str(tmp_path)) as llm:
        p = llm.get_default_sampling_params()
        assert (p.temperature, p.top_p, p.top_k, p.repetition_penalty) == (0.0, 0.9, 7, 1.1)
        assert p.min_p == 0.05
        assert llm.engine.generation_defaults["min_p"] == 0.05
        a = llm.generate([1, 2, 3], use_tqdm=False)[0].outputs[0].token_ids
        b = llm.generate([1, 2, 3], use_tqdm=False)[0].outputs[0].token_ids
        assert a == b  # temperature 0 from the file: greedy
    with LLM(ckpt, device="cpu", num_kv_blocks=16, generation_config="vllm") as llm:
        assert llm.get_default_sampling_params() == SamplingParams()
    with pytest.raises(FileNotFoundError, match="generation_config.json"):
        LLM(ckpt, device="cpu", num_kv_blocks=16, generation_config=str(tmp_path / "none"))


def test_dtype_names(checkpoints):
    "vLLM's --dtype names: half and float are float16 and float32; others are refused by name."
    from metainfer.config import EngineConfig

    assert EngineConfig("m", dtype="half").dtype == "float16"
    assert EngineConfig("m", dtype="float").dtype == "float32"
    with pytest.raises(ValueError, match="choose from auto, half"):
        EngineConfig("m", dtype="fp8")


def test_engine_takes_prompt_dicts(llm):
    "`LLMEngine.add_request` takes vLLM's prompt types, as `LLM.generate` does."
    engine, ids = llm.llm_engine, llm.get_tokenizer()("hello there").input_ids
    for rid, prompt in (("t", {"prompt": "hello there"}), ("i", {"prompt_token_ids": ids})):
        engine.add_request(rid, prompt, greedy(max_tokens=2))
    outs = {}
    while engine.has_unfinished_requests():
        outs |= {o.request_id: o for o in engine.step() if o.finished}
    assert outs["t"].prompt_token_ids == outs["i"].prompt_token_ids == ids


def test_streams_never_show_text_a_stop_string_removes():
    """vLLM's stop buffer: a stream's text is held back while a stop string could still begin in
    it, so DELTA chunks add up to the final text and CUMULATIVE ones only grow (on the trained
    model, whose text does not repeat at once)."""
    from metainfer.testing import trained_model_dir

    prompt = "Genesis 50\nAnd Joseph fell"
    with LLM(trained_model_dir("qwen3"), dtype="float32", device="cpu") as llm:
        free = llm.generate(prompt, greedy(max_tokens=24), use_tqdm=False)[0].outputs[0].text
        stop = free[12:20]  # an eight-character stop string the text reaches
        assert free.index(stop) == 12, free
        for kind in (RequestOutputKind.DELTA, RequestOutputKind.CUMULATIVE):
            params = greedy(max_tokens=24, stop=[stop], output_kind=kind)
            texts = [o.outputs[0].text for o in llm.stream([prompt], params)]
            final = texts[-1] if kind == RequestOutputKind.CUMULATIVE else "".join(texts)
            assert final == free[:12], (kind, texts)
            if kind == RequestOutputKind.CUMULATIVE:
                assert all(b.startswith(a) for a, b in zip(texts, texts[1:])), texts


def test_logprobs_are_raw_with_bad_words(llm):
    """vLLM's logprobs are taken before bad words ban a token (its `raw_logprobs`): the banned
    token keeps its logprob and rank; only the draw avoids it."""
    free = llm.generate("hello there", greedy(max_tokens=1, logprobs=3), use_tqdm=False)[0]
    first = free.outputs[0].token_ids[0]
    word = llm.get_tokenizer().decode([first])
    out = llm.generate(
        "hello there", greedy(max_tokens=1, logprobs=3, bad_words=[word]), use_tqdm=False
    )[0].outputs[0]
    assert out.token_ids[0] != first
    ref, got = free.outputs[0].logprobs[0], out.logprobs[0]
    assert got[first].logprob == pytest.approx(ref[first].logprob, abs=1e-5)
    assert got[first].rank == 1


def test_generation_config_eos_ids_end_a_sequence(checkpoints, tmp_path):
    """The EOS ids of generation_config.json end a sequence as config.json's do (vLLM and HF read
    both: Qwen's instruct models end documents with `<|endoftext|>`, listed only there)."""
    src = checkpoints("qwen3-tiny")
    with LLM(str(src), device="cpu", num_kv_blocks=32, max_model_len=MAX_MODEL_LEN) as plain:
        ids = plain.generate("hello", greedy(max_tokens=8), use_tqdm=False)[0].outputs[0].token_ids
    model = tmp_path / "m"
    model.mkdir()
    for f in src.iterdir():
        (model / f.name).symlink_to(f)
    (model / "generation_config.json").unlink(missing_ok=True)
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": [ids[3]]}))
    with LLM(str(model), device="cpu", num_kv_blocks=32, max_model_len=MAX_MODEL_LEN) as llm:
        params = SamplingParams(temperature=0, max_tokens=8)
        out = llm.generate("hello", params, use_tqdm=False)[0].outputs[0]
    assert out.token_ids == ids[: ids.index(ids[3]) + 1] and out.finish_reason == "stop"


def test_num_cached_tokens_reported_on_final_outputs(llm):
    """Each output reports the prompt tokens its request found in the prefix cache at admission,
    the final one included (as vLLM: freeing the blocks used to zero the count first)."""
    ids = list(range(1, 44))  # 43 tokens: two full 16-token blocks a second run can hit
    first, second = (llm.generate([ids], greedy(max_tokens=2), use_tqdm=False)[0] for _ in "ab")
    assert (first.num_cached_tokens, second.num_cached_tokens) == (0, 32)


def test_max_logprobs_is_the_engines(llm, checkpoints):
    """vLLM's `max_logprobs`: 20 by default, checked when a request is added; -1 asks for every
    token, which an engine without a limit (`max_logprobs=-1`) serves."""
    with pytest.raises(ValueError, match="at most 20"):
        llm.generate([[1, 2, 3]], greedy(max_tokens=1, logprobs=21), use_tqdm=False)
    ckpt = str(checkpoints("qwen3-tiny"))
    with LLM(ckpt, device="cpu", num_kv_blocks=32, max_logprobs=-1) as big:
        vocab = big.llm_engine.model_config.vocab_size
        out = big.generate([[1, 2, 3]], greedy(max_tokens=2, logprobs=-1), use_tqdm=False)[0]
    assert [len(d) for d in out.outputs[0].logprobs] == [vocab, vocab]  # (1024 in this model)


def test_vllm_engine_arguments_that_ask_nothing_here(checkpoints):
    """vLLM's `LLM(...)` keywords at values that change nothing here are taken (a vLLM script runs
    unchanged); any other value is a `ValueError` naming the argument, not a `TypeError`."""
    ckpt = str(checkpoints("qwen3-tiny"))
    neutral = dict(load_format="auto", pipeline_parallel_size=1, swap_space=4, task="generate")
    with LLM(ckpt, device="cpu", num_kv_blocks=16, **neutral) as llm:
        assert len(llm.generate("hi", SamplingParams(max_tokens=2))[0].outputs[0].token_ids) == 2
    for kw in ({"load_format": "dummy"}, {"enable_lora": True}, {"tokenizer_mode": "mistral"}):
        with pytest.raises(ValueError, match=f"{next(iter(kw))}="):
            LLM(ckpt, device="cpu", **kw)


def test_max_model_len_left_unset_fits_the_kv_cache_with_a_warning(checkpoints, caplog):
    "A KV cache smaller than the model's context: requests are limited to it, and the log says so."
    with caplog.at_level("WARNING", logger="metainfer"):
        with LLM(str(checkpoints("qwen3-tiny")), device="cpu", num_kv_blocks=4) as small:
            assert small.engine.max_model_len == 4 * 16
    assert "max_model_len is 64, what the KV cache holds" in caplog.text


def test_the_checkpoints_other_eos_ids_report_themselves(tmp_path):
    """As vLLM: the tokenizer's EOS ends a completion with no stop_reason; another EOS id of the
    checkpoint's generation_config (vLLM makes them stop tokens) is its stop_reason."""
    model = tmp_path / "model"
    shutil.copytree(trained_model_dir("qwen3"), model)
    config = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps(config | {"eos_token_id": [0, 2]}))
    with LLM(str(model), device="cpu", num_kv_blocks=16, max_model_len=64) as llm:
        outs = [
            llm.generate("In the", SamplingParams(allowed_token_ids=[t]), use_tqdm=False)[0]
            for t in (0, 2)
        ]
    got = [
        (o.outputs[0].token_ids, o.outputs[0].finish_reason, o.outputs[0].stop_reason) for o in outs
    ]
    assert got == [([0], "stop", None), ([2], "stop", 2)]
