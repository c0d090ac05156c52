"""Acceptance (issue 6, part 1): the official `openai` client against `metainfer serve` on loopback.

Greedy results of both endpoints, streaming and not, equal `LLM.generate` for the same request; a
key is enforced; the `serve` and `bench serve` commands work end to end."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
import httpx
import openai
import pytest
from tokenizers.processors import TemplateProcessing
from metainfer import LLM, SamplingParams
from metainfer.entrypoints.openai.engine_loop import AsyncLLMEngine
from metainfer.entrypoints.openai.api_server import ServerThread, build_app
from metainfer.entrypoints.openai.serving_status import parse_metrics

KEY = "sk-metainfer-test"
MAX_MODEL_LEN = 512
PROMPTS = [
    "The path of a token",
    "Hello, my name is",
    "日本語のテキスト and emoji 🤖",
    "def f(x):\n    return",
]
CHAT = [
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name three colours."},
        {"role": "assistant", "content": "Red, green, blue."},
        {"role": "user", "content": "Three more?"},
    ],
]
NO_THINKING = {"enable_thinking": False}


@pytest.fixture(scope="module")
def ckpt(checkpoints):
    return checkpoints("qwen3-tiny")


@pytest.fixture(scope="module")
def llm(ckpt):
    return LLM(ckpt, dtype="float32", device="cpu", num_kv_blocks=512, max_model_len=MAX_MODEL_LEN)


@pytest.fixture(scope="module")
def server(ckpt):
    engine = AsyncLLMEngine.from_engine_args(
        str(ckpt), dtype="float32", device="cpu", num_kv_blocks=512, max_model_len=MAX_MODEL_LEN
    )
    with ServerThread(build_app(engine, ["tiny"], api_key=KEY)) as srv:
        yield srv
    engine.shutdown()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)


def greedy(n, **kw):
    return SamplingParams(temperature=0, max_tokens=n, **kw)


def chat_text(llm, messages):
    return llm.get_tokenizer().apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **NO_THINKING
    )


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}


def test_completions_equal_llm_generate(llm, client):
    refs = llm.generate(PROMPTS, greedy(12, ignore_eos=True), use_tqdm=False)
    for prompt, ref in zip(PROMPTS, refs):
        r = client.completions.create(
            model="tiny",
            prompt=prompt,
            max_tokens=12,
            temperature=0,
            extra_body={"ignore_eos": True, "return_token_ids": True},
        )
        c = r.choices[0]
        assert (c.text, c.token_ids, c.finish_reason) == (
            ref.outputs[0].text,
            ref.outputs[0].token_ids,
            "length",
        )
        assert c.prompt_token_ids == ref.prompt_token_ids  # (per choice, as vLLM's completions)
        assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ref.prompt_token_ids), 12)


def test_completions_stream_equal_llm_generate(llm, client):
    refs = llm.generate(PROMPTS, greedy(12, ignore_eos=True), use_tqdm=False)
    for prompt, ref in zip(PROMPTS, refs):
        chunks = list(
            client.completions.create(
                model="tiny",
                prompt=prompt,
                max_tokens=12,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True, "return_token_ids": True},
            )
        )
        body = [c for c in chunks if c.choices]
        assert "".join(c.choices[0].text for c in body) == ref.outputs[0].text
        assert [t for c in body for t in c.choices[0].token_ids] == ref.outputs[0].token_ids
        assert body[-1].choices[0].finish_reason == "length"
        assert chunks[-1].usage.completion_tokens == 12 and chunks[-1].usage.prompt_tokens == len(
            ref.prompt_token_ids
        )


def test_token_id_prompt(llm, client):
    ids = llm.get_tokenizer()(PROMPTS[0]).input_ids
    ref = llm.generate([ids], greedy(6, ignore_eos=True), use_tqdm=False)[0]
    r = client.completions.create(
        model="tiny", prompt=ids, max_tokens=6, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.choices[0].text == ref.outputs[0].text


def test_chat_equal_llm_generate(llm, client):
    for messages in CHAT:
        ref = llm.generate(chat_text(llm, messages), greedy(10, ignore_eos=True), use_tqdm=False)[0]
        r = client.chat.completions.create(
            model="tiny",
            messages=messages,
            max_completion_tokens=10,
            temperature=0,
            extra_body={
                "ignore_eos": True,
                "return_token_ids": True,
                "chat_template_kwargs": NO_THINKING,
            },
        )
        c = r.choices[0]
        assert (c.message.role, c.message.content, c.token_ids) == (
            "assistant",
            ref.outputs[0].text,
            ref.outputs[0].token_ids,
        )
        assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ref.prompt_token_ids), 10)


def test_chat_stream_equal_llm_generate(llm, client):
    for messages in CHAT:
        ref = llm.generate(chat_text(llm, messages), greedy(10, ignore_eos=True), use_tqdm=False)[0]
        chunks = list(
            client.chat.completions.create(
                model="tiny",
                messages=messages,
                max_tokens=10,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True, "chat_template_kwargs": NO_THINKING},
            )
        )
        body = [c for c in chunks if c.choices]
        assert body[0].choices[0].delta.role == "assistant"
        assert "".join(c.choices[0].delta.content or "" for c in body) == ref.outputs[0].text
        assert (
            body[-1].choices[0].finish_reason == "length"
            and chunks[-1].usage.completion_tokens == 10
        )


def test_completions_logprobs_equal_llm_generate(llm, client):
    """Each token's logprob and the likeliest alternatives, streamed and not, equal
    `LLM.generate(logprobs=3)`'s."""
    tok = llm.get_tokenizer()
    for prompt in PROMPTS[:2]:
        ref = llm.generate(prompt, greedy(8, ignore_eos=True, logprobs=3), use_tqdm=False)[
            0
        ].outputs[0]
        kw = dict(
            model="tiny",
            prompt=prompt,
            max_tokens=8,
            temperature=0,
            logprobs=3,
            extra_body={"ignore_eos": True},
        )
        lp = client.completions.create(**kw).choices[0].logprobs
        assert lp.tokens == [tok.decode([t]) for t in ref.token_ids]
        assert lp.token_logprobs == pytest.approx(
            [e[t].logprob for t, e in zip(ref.token_ids, ref.logprobs)], abs=1e-5
        )
        assert [len(top) for top in lp.top_logprobs] == [
            len({tok.decode([i]) for i in e}) for e in ref.logprobs
        ]
        for top, e in zip(lp.top_logprobs, ref.logprobs):
            assert top == pytest.approx(
                {tok.decode([i]): v.logprob for i, v in e.items()}, abs=1e-5
            )
        assert lp.text_offset == [
            sum(len(tok.decode([t])) for t in ref.token_ids[:i]) for i in range(8)
        ]
        chunks = [
            c.choices[0].logprobs
            for c in client.completions.create(**kw, stream=True)
            if c.choices[0].logprobs
        ]
        assert [t for c in chunks for t in c.tokens] == lp.tokens
        assert [x for c in chunks for x in c.token_logprobs] == lp.token_logprobs
        assert [x for c in chunks for x in c.text_offset] == lp.text_offset


def test_echo_with_logprobs_scores_the_prompt(llm, client):
    """`echo` puts the prompt before the completion; with `logprobs`, the prompt's tokens are scored
    too (the first: null)."""
    tok, prompt = llm.get_tokenizer(), PROMPTS[1]
    ref = llm.generate(
        prompt, greedy(4, ignore_eos=True, logprobs=1, prompt_logprobs=1), use_tqdm=False
    )[0]
    n = len(ref.prompt_token_ids)
    kw = dict(
        model="tiny",
        prompt=prompt,
        max_tokens=4,
        temperature=0,
        echo=True,
        logprobs=1,
        extra_body={"ignore_eos": True},
    )
    c = client.completions.create(**kw).choices[0]
    assert c.text == prompt + ref.outputs[0].text
    ids = ref.prompt_token_ids + ref.outputs[0].token_ids
    entries = ref.prompt_logprobs + ref.outputs[0].logprobs
    assert c.logprobs.tokens == [tok.decode([t]) for t in ids]
    assert c.logprobs.token_logprobs[0] is None and c.logprobs.top_logprobs[0] is None
    assert c.logprobs.token_logprobs[1:] == pytest.approx(
        [e[t].logprob for t, e in zip(ids[1:], entries[1:])], abs=1e-5
    )
    assert c.logprobs.text_offset == [
        sum(len(tok.decode([t])) for t in ids[:i]) for i in range(n + 4)
    ]
    chunks = [ch.choices[0] for ch in client.completions.create(**kw, stream=True)]
    assert "".join(ch.text for ch in chunks) == c.text and chunks[0].text.startswith(prompt)
    assert [t for ch in chunks if ch.logprobs for t in ch.logprobs.tokens] == c.logprobs.tokens
    assert [
        x for ch in chunks if ch.logprobs for x in ch.logprobs.text_offset
    ] == c.logprobs.text_offset
    ids_prompt = client.completions.create(
        model="tiny", prompt=ref.prompt_token_ids, max_tokens=2, echo=True
    )
    assert (
        ids_prompt.choices[0].text.startswith(tok.decode(ref.prompt_token_ids))
        and ids_prompt.choices[0].logprobs is None
    )


def test_echo_without_generation_scores_the_prompt_alone(llm, client):
    """`echo` with `max_tokens: 0` (OpenAI's old way to score a text, served by vLLM): the prompt
    alone, its logprobs as `LLM.generate`'s `prompt_logprobs`, no completion tokens; streamed
    alike."""
    prompt = PROMPTS[0]
    ref = llm.generate(prompt, greedy(1, prompt_logprobs=1), use_tqdm=False)[0]
    kw = dict(model="tiny", prompt=prompt, max_tokens=0, echo=True, logprobs=1)
    r = client.completions.create(**kw)
    c = r.choices[0]
    assert (c.text, c.finish_reason) == (prompt, "length")
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ref.prompt_token_ids), 0)
    ids = ref.prompt_token_ids
    assert c.logprobs.token_logprobs[0] is None
    assert c.logprobs.token_logprobs[1:] == pytest.approx(
        [e[t].logprob for t, e in zip(ids[1:], ref.prompt_logprobs[1:])], abs=1e-5
    )
    chunks = [ch.choices[0] for ch in client.completions.create(**kw, stream=True)]
    assert "".join(ch.text for ch in chunks) == prompt and chunks[-1].finish_reason == "length"
    assert [t for ch in chunks if ch.logprobs for t in ch.logprobs.tokens] == c.logprobs.tokens
    with pytest.raises(openai.BadRequestError, match="0 only with echo"):
        client.completions.create(model="tiny", prompt=prompt, max_tokens=0)


def test_several_prompts_and_n_choices(llm, client):
    """A list of prompts and `n` give choice `i·n + j` for prompt `i`: greedy ones equal
    `LLM.generate`; seeded samples use seed + j, so the `n` differ; usage counts each prompt once;
    streamed choices add up alike."""
    refs = llm.generate(PROMPTS[:2], greedy(6, ignore_eos=True), use_tqdm=False)
    kw = dict(
        model="tiny",
        prompt=PROMPTS[:2],
        max_tokens=6,
        temperature=0,
        n=2,
        extra_body={"ignore_eos": True},
    )
    r = client.completions.create(**kw)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert [c.text for c in r.choices] == [ref.outputs[0].text for ref in refs for _ in range(2)]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (
        sum(len(x.prompt_token_ids) for x in refs),
        24,
    )
    texts, usages = {}, []
    for ch in client.completions.create(**kw, stream=True, stream_options={"include_usage": True}):
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
        if ch.usage:
            usages.append((ch.usage.prompt_tokens, ch.usage.completion_tokens))
    assert texts == {c.index: c.text for c in r.choices} and usages == [(r.usage.prompt_tokens, 24)]
    seeded = dict(
        model="tiny",
        prompt=PROMPTS[1],
        max_tokens=8,
        temperature=1.0,
        seed=77,
        extra_body={"ignore_eos": True},
    )
    three = [c.text for c in client.completions.create(**seeded, n=3).choices]
    alone = [
        llm.generate(
            PROMPTS[1],
            SamplingParams(temperature=1.0, seed=77 + j, max_tokens=8, ignore_eos=True),
            use_tqdm=False,
        )[0]
        .outputs[0]
        .text
        for j in range(3)
    ]
    assert three == alone and len(set(three)) == 3
    top = client.completions.create(
        **(seeded | {"seed": 2**63 - 1}), n=2
    )  # seed + 1 still a valid seed
    assert len({c.text for c in top.choices}) == 2
    with pytest.raises(openai.BadRequestError, match="more than 1024 completions"):
        client.completions.create(model="tiny", prompt=[[1]] * 9, n=128, max_tokens=1)
    chat = client.chat.completions.create(
        model="tiny",
        messages=CHAT[0],
        max_tokens=4,
        temperature=1.0,
        seed=5,
        n=2,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    roles = [c.index for ch in chat for c in ch.choices if c.delta.role == "assistant"]
    assert sorted(roles) == [0, 1]


def test_best_of_keeps_the_likeliest_per_token(llm, client):
    """`best_of=4, n=2`: each prompt's 4 seeded samples (seed + j, as with `n`) are made, and the 2
    with the highest mean logprob come back, best first; usage counts all 8 completions; no logprobs
    unless asked for."""
    kw = dict(
        model="tiny", prompt=PROMPTS[:2], max_tokens=8, temperature=1.0, seed=11, n=2, best_of=4
    )
    made = [
        [
            llm.generate(
                p,
                SamplingParams(temperature=1.0, seed=11 + j, max_tokens=8, logprobs=0),
                use_tqdm=False,
            )[0].outputs[0]
            for j in range(4)
        ]
        for p in PROMPTS[:2]
    ]
    best = [sorted(m, key=lambda o: -o.cumulative_logprob / len(o.token_ids))[:2] for m in made]
    r = client.completions.create(**kw)
    assert [c.text for c in r.choices] == [o.text for b in best for o in b] and [
        c.index for c in r.choices
    ] == [0, 1, 2, 3]
    assert (
        len({o.cumulative_logprob / len(o.token_ids) for m in made for o in m}) == 8
    )  # no ties: the order is meant
    assert r.usage.completion_tokens == sum(len(o.token_ids) for m in made for o in m)
    assert all(c.logprobs is None for c in r.choices)
    lp = client.completions.create(**kw, logprobs=1).choices[0].logprobs
    assert lp.token_logprobs == pytest.approx(
        [e[t].logprob for t, e in zip(best[0][0].token_ids, best[0][0].logprobs)], abs=1e-5
    )
    same = client.completions.create(
        **(kw | {"best_of": 2})
    )  # best_of = n: the n samples, in order
    assert [c.text for c in same.choices] == [m[j].text for m in made for j in range(2)]
    for bad, match in [
        ({"best_of": 1}, "must be at least n=2"),
        ({"stream": True}, "can't stream"),
    ]:
        with pytest.raises(openai.BadRequestError, match=match):
            client.completions.create(**(kw | bad))


def test_chat_logprobs(llm, client):
    """Chat logprobs: each token's text, logprob and bytes, and its `top_logprobs` likeliest tokens,
    streamed and not."""
    ref = llm.generate(
        chat_text(llm, CHAT[0]), greedy(6, ignore_eos=True, logprobs=2), use_tqdm=False
    )[0].outputs[0]
    kw = dict(
        model="tiny",
        messages=CHAT[0],
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        extra_body={"ignore_eos": True, "chat_template_kwargs": NO_THINKING},
    )
    content = client.chat.completions.create(**kw).choices[0].logprobs.content
    tok = llm.get_tokenizer()
    assert [c.token for c in content] == [tok.decode([t]) for t in ref.token_ids]
    assert [c.bytes for c in content] == [list(c.token.encode()) for c in content]
    assert [c.logprob for c in content] == pytest.approx(
        [e[t].logprob for t, e in zip(ref.token_ids, ref.logprobs)], abs=1e-5
    )
    for c, e in zip(content, ref.logprobs):  # greedy: the chosen token is the likeliest
        assert [x.token for x in c.top_logprobs] == [
            tok.decode([i]) for i, v in sorted(e.items(), key=lambda kv: -kv[1].logprob)[:2]
        ]
        assert c.top_logprobs[0].logprob == c.logprob and c.top_logprobs[1].logprob <= c.logprob
    streamed = [
        x
        for ch in client.chat.completions.create(**kw, stream=True)
        if ch.choices and ch.choices[0].logprobs
        for x in ch.choices[0].logprobs.content
    ]
    assert [x.model_dump() for x in streamed] == [
        x.model_dump() for x in content
    ]  # top_logprobs included
    plain = client.chat.completions.create(**(kw | {"logprobs": None, "top_logprobs": None}))
    assert plain.choices[0].logprobs is None


def test_thinking_toggle_reaches_the_template(llm, client):
    """Qwen3's `enable_thinking` changes the prompt: the prompt token counts differ by the empty
    think block."""
    kw = dict(model="tiny", messages=CHAT[0], max_tokens=1, temperature=0)
    on = client.chat.completions.create(**kw).usage.prompt_tokens
    off = client.chat.completions.create(
        **kw, extra_body={"chat_template_kwargs": NO_THINKING}
    ).usage.prompt_tokens
    assert off == len(llm.get_tokenizer()(chat_text(llm, CHAT[0])).input_ids) and off > on


def test_stop_strings_stream_and_not(llm, client):
    text = llm.generate(PROMPTS[0], greedy(24, ignore_eos=True), use_tqdm=False)[0].outputs[0].text
    stop = text[6:9]
    ref = llm.generate(
        PROMPTS[0], greedy(24, ignore_eos=True, stop=[stop, "@@@@@"]), use_tqdm=False
    )[0].outputs[0]
    kw = dict(
        model="tiny",
        prompt=PROMPTS[0],
        max_tokens=24,
        temperature=0,
        stop=[stop, "@@@@@"],
        extra_body={"ignore_eos": True},
    )
    r = client.completions.create(**kw)
    assert (r.choices[0].text, r.choices[0].finish_reason) == (
        ref.text,
        "stop",
    ) and stop not in r.choices[0].text
    streamed = list(client.completions.create(**kw, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == ref.text
    assert (
        r.choices[0].model_extra["stop_reason"],
        streamed[-1].choices[0].model_extra["stop_reason"],
    ) == (stop, stop)
    kept = client.completions.create(
        **(kw | {"extra_body": {"ignore_eos": True, "include_stop_str_in_output": True}})
    )
    assert kept.choices[0].text == ref.text + stop
    ids = (
        llm.generate(chat_text(llm, CHAT[0]), greedy(24, ignore_eos=True), use_tqdm=False)[0]
        .outputs[0]
        .token_ids
    )
    at = next(
        i for i in range(24) if ids[i] not in ids[:i]
    )  # (the tiny model may repeat one token)
    chat = client.chat.completions.create(
        model="tiny",
        messages=CHAT[0],
        max_tokens=24,
        temperature=0,
        stop=["@@@@@"],
        extra_body={
            "ignore_eos": True,
            "stop_token_ids": [ids[at]],
            "return_token_ids": True,
            "chat_template_kwargs": NO_THINKING,
        },
    )
    c = chat.choices[0]
    assert (c.finish_reason, c.model_extra["stop_reason"], c.model_extra["token_ids"]) == (
        "stop",
        ids[at],
        ids[: at + 1],
    )


def test_continue_final_message(llm, server, client):
    """vLLM's `continue_final_message`: the last (assistant) message is continued, not closed; the
    prompt shows it."""
    messages = CHAT[0] + [{"role": "assistant", "content": "Sure, the answer is"}]
    r = client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=2,
        temperature=0,
        extra_body={
            "add_generation_prompt": False,
            "continue_final_message": True,
            "return_token_ids": True,
            "chat_template_kwargs": NO_THINKING,
        },
    )
    text = llm.get_tokenizer().apply_chat_template(
        messages, tokenize=False, continue_final_message=True, **NO_THINKING
    )
    assert (
        text.endswith("the answer is")
        and r.model_extra["prompt_token_ids"] == llm.get_tokenizer()(text).input_ids
    )
    with pytest.raises(
        openai.BadRequestError, match="continue_final_message needs add_generation_prompt: false"
    ):
        client.chat.completions.create(
            model="tiny", messages=messages, extra_body={"continue_final_message": True}
        )


def test_seeded_sampling_is_reproducible(client):
    kw = dict(
        model="tiny",
        prompt=PROMPTS[1],
        max_tokens=16,
        temperature=1.0,
        top_p=0.9,
        seed=1234,
        extra_body={"top_k": 50, "ignore_eos": True},
    )
    a, b = client.completions.create(**kw), client.completions.create(**kw)
    assert a.choices[0].text == b.choices[0].text


def test_defaults_and_unknown_fields(server, client):
    r = client.completions.create(
        model="tiny",
        prompt=PROMPTS[0],
        temperature=0,
        extra_body={"ignore_eos": True, "some_future_field": {"x": 1}},
    )
    assert (
        r.usage.completion_tokens == 16
    )  # OpenAI's default for completions; unknown fields ignored
    r = httpx.post(
        f"{server.url}/v1/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"prompt": "hi", "max_tokens": 2, "temperature": None, "stop": None},
    )  # no model, nulls
    assert r.status_code == 200 and r.json()["model"] == "tiny"


def test_api_key_required(server):
    for key in ("", "wrong"):
        c = openai.OpenAI(
            base_url=f"{server.url}/v1",
            api_key=key or "x",
            max_retries=0,
            default_headers={} if key else {"Authorization": ""},
        )
        with pytest.raises(openai.AuthenticationError) as e:
            c.completions.create(model="tiny", prompt="hi", max_tokens=1)
        assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
    r = httpx.get(f"{server.url}/v1/models")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{server.url}/metrics").status_code == 200  # open, like /health


def test_errors_through_the_sdk(client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="other", prompt="hi", max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="suffix='x' is not supported"):
        client.completions.create(model="tiny", prompt="hi", max_tokens=1, suffix="x")
    with pytest.raises(openai.BadRequestError, match="maximum context length is 512"):
        client.chat.completions.create(model="tiny", messages=CHAT[0], max_tokens=600)


def test_tokenize_and_detokenize(llm, server, client):
    """vLLM's /tokenize and /detokenize: a prompt's ids, a chat's as the chat endpoint counts them,
    and back to text."""
    tok, url, auth = llm.get_tokenizer(), server.url, {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(
        f"{url}/tokenize", headers=auth, json={"prompt": PROMPTS[2], "return_token_strs": True}
    ).json()
    assert (r["tokens"], r["count"], r["max_model_len"]) == (
        tok(PROMPTS[2]).input_ids,
        len(tok(PROMPTS[2]).input_ids),
        MAX_MODEL_LEN,
    )
    assert r["token_strs"] == tok.convert_ids_to_tokens(r["tokens"])
    assert httpx.post(f"{url}/detokenize", headers=auth, json={"tokens": r["tokens"]}).json() == {
        "prompt": PROMPTS[2]
    }
    for messages in CHAT:
        chat = httpx.post(
            f"{url}/tokenize",
            headers=auth,
            json={"messages": messages, "chat_template_kwargs": NO_THINKING},
        ).json()
        used = client.chat.completions.create(
            model="tiny",
            messages=messages,
            max_tokens=1,
            extra_body={"chat_template_kwargs": NO_THINKING},
        ).usage.prompt_tokens
        assert (
            chat["tokens"] == tok(chat_text(llm, messages), add_special_tokens=False).input_ids
            and chat["count"] == used
        )
    bare = httpx.post(
        f"{url}/tokenize", headers=auth, json={"messages": CHAT[0], "add_generation_prompt": False}
    ).json()
    assert tok.decode(bare["tokens"]).endswith("Hello!<|im_end|>\n")
    for path, body, match in [
        ("/tokenize", {}, "either a prompt or messages"),
        ("/tokenize", {"prompt": "a", "messages": CHAT[0]}, "either"),
        ("/detokenize", {"tokens": [10**6]}, "outside the vocabulary"),  # (past the model's)
        ("/tokenize", {"prompt": "a", "model": "x"}, "does not exist"),
    ]:
        r = httpx.post(f"{url}{path}", headers=auth, json=body)
        assert r.status_code in (400, 404) and match in r.json()["error"]["message"]
    assert httpx.post(f"{url}/tokenize", json={"prompt": "a"}).status_code == 401  # the key, as /v1
    assert httpx.get(f"{url}/version").json()["version"] == __import__("metainfer").__version__


def test_add_special_tokens_false_leaves_them_out(server, client):
    """vLLM's `add_special_tokens` (default true), of a completion and of /tokenize, reaches the
    tokenizer. Qwen3's adds no special token, so the server's copy writes a BOS for a while."""
    tok = server.server.config.app.state.metainfer.tokenizer
    auth = {"Authorization": f"Bearer {KEY}"}
    bos, plain = ("<|endoftext|>", tok.convert_tokens_to_ids("<|endoftext|>")), tok("Hi").input_ids
    kept = tok._tokenizer.post_processor
    tok._tokenizer.post_processor = TemplateProcessing(single=f"{bos[0]} $A", special_tokens=[bos])
    try:
        for add, ids in ((None, [bos[1], *plain]), (True, [bos[1], *plain]), (False, plain)):
            flag = {} if add is None else {"add_special_tokens": add}
            r = client.completions.create(
                model="tiny",
                prompt="Hi",
                max_tokens=1,
                extra_body={"return_token_ids": True} | flag,
            )
            assert r.choices[0].prompt_token_ids == ids, add
            t = httpx.post(f"{server.url}/tokenize", headers=auth, json={"prompt": "Hi"} | flag)
            assert t.json()["tokens"] == ids, add
    finally:
        tok._tokenizer.post_processor = kept
    chat = {"messages": CHAT[0], "add_special_tokens": False}  # (the template writes a chat's)
    assert httpx.post(f"{server.url}/tokenize", headers=auth, json=chat).status_code == 200


def test_response_id_named_by_the_client(client):
    """vLLM's `request_id` names the response (`cmpl-{id}`, `chatcmpl-{id}`), streamed or not; an
    `X-Request-Id` header wins over it; without either the id is new."""
    r = client.completions.create(
        model="tiny", prompt="hi", max_tokens=1, extra_body={"request_id": "job-7"}
    )
    assert r.id == "cmpl-job-7"
    r = client.chat.completions.create(
        model="tiny",
        messages=CHAT[0],
        max_tokens=1,
        extra_body={"request_id": "job-7"},
        extra_headers={"X-Request-Id": "trace-1"},
    )
    assert r.id == "chatcmpl-trace-1"
    chunks = client.chat.completions.create(
        model="tiny", messages=CHAT[0], max_tokens=2, stream=True, extra_body={"request_id": "j8"}
    )
    assert {c.id for c in chunks} == {"chatcmpl-j8"}
    ids = {client.completions.create(model="tiny", prompt="hi", max_tokens=1).id for _ in "ab"}
    assert len(ids) == 2 and all(i.startswith("cmpl-") and len(i) == 5 + 32 for i in ids)
    with pytest.raises(openai.BadRequestError, match="X-Request-Id: longer than 256"):
        long_id = {"X-Request-Id": "x" * 257}  # (as the body's `request_id`: chunks repeat it)
        client.completions.create(model="tiny", prompt="hi", max_tokens=1, extra_headers=long_id)


def test_vllm_response_flags(ckpt):
    """`--return-tokens-as-token-ids` (a request's `false` wins), `--enable-prompt-tokens-details`
    (a repeated prompt's cached tokens) and `--enable-force-include-usage`, as vLLM's."""
    engine = AsyncLLMEngine.from_engine_args(
        str(ckpt), dtype="float32", device="cpu", num_kv_blocks=128, max_model_len=MAX_MODEL_LEN
    )
    flags = dict(
        return_tokens_as_token_ids=True,
        enable_prompt_tokens_details=True,
        enable_force_include_usage=True,
    )
    try:
        with ServerThread(build_app(engine, ["tiny"], **flags)) as srv:
            c = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none")
            prompt = "The prefix cache keeps full blocks of this prompt for the next request. " * 4
            kw = dict(model="tiny", prompt=prompt, max_tokens=2, logprobs=1)
            r = c.completions.create(**kw)
            assert all(t.startswith("token_id:") for t in r.choices[0].logprobs.tokens)
            mine = c.completions.create(**kw, extra_body={"return_tokens_as_token_ids": False})
            assert not any(t.startswith("token_id:") for t in mine.choices[0].logprobs.tokens)
            assert r.usage.prompt_tokens_details.cached_tokens == 0
            assert mine.usage.prompt_tokens_details.cached_tokens > 0
            chunks = list(c.completions.create(**kw, stream=True))
            assert chunks[-1].usage.completion_tokens == 2 and not chunks[-1].choices
            chat = c.chat.completions.create(
                model="tiny", messages=CHAT[0], max_tokens=1, logprobs=True, top_logprobs=1
            )
            assert chat.choices[0].logprobs.content[0].token.startswith("token_id:")
            assert chat.usage.prompt_tokens_details is not None
    finally:
        engine.shutdown()


def test_continuous_usage_needs_include_usage(client):
    """vLLM's rule: `continuous_usage_stats` puts the usage so far in each chunk only beside
    `include_usage`; alone, it asks for nothing."""
    ask = dict(
        model="tiny", prompt="hi", max_tokens=3, stream=True, extra_body={"ignore_eos": True}
    )
    alone = list(client.completions.create(**ask, stream_options={"continuous_usage_stats": True}))
    assert alone and all(c.usage is None and c.choices for c in alone)
    both = {"include_usage": True, "continuous_usage_stats": True}
    chunks = list(client.completions.create(**ask, stream_options=both))
    so_far = [c.usage.completion_tokens for c in chunks]
    assert so_far == sorted(so_far) and so_far[-1] == 3 and chunks[-1].choices == []
    assert all(c.usage.prompt_tokens == chunks[-1].usage.prompt_tokens for c in chunks)


def test_metrics_after_requests(server, client):
    client.completions.create(
        model="tiny", prompt="hi", max_tokens=3, extra_body={"ignore_eos": True}
    )
    m = parse_metrics(httpx.get(f"{server.url}/metrics").text)
    assert m["num_free_kv_blocks"] == m["num_kv_blocks"] == 512 and m["num_requests_in_engine"] == 0
    assert m["generation_tokens_total"] > 0 and m["prompt_tokens_total"] > 0
    assert m['request_success_total{finished_reason="length"}'] > 0


def test_bench_serve_command(server, tmp_path, capsys):
    """`metainfer bench serve` through the bench's own parsers (`add_bench_parsers`), as the CLI
    registers them."""
    import argparse
    from metainfer.bench import add_bench_parsers

    parser = argparse.ArgumentParser(prog="metainfer")
    add_bench_parsers(
        parser.add_subparsers(dest="command").add_parser("bench").add_subparsers(dest="mode")
    )
    argv = [
        "bench",
        "serve",
        "--base-url",
        server.url,
        "--api-key",
        KEY,
        "--concurrency",
        "1,4",
        "--num-prompts",
        "8",
        "--input-len",
        "24",
        "--output-len",
        "6",
        "--out",
        str(tmp_path),
        "--name",
        "t",
    ]
    args = parser.parse_args(argv)
    args.argv = argv
    args.func(args)
    res = json.loads((tmp_path / "t.json").read_text())
    assert res["command"].startswith("metainfer bench serve --base-url")
    assert [(r["concurrency"], r["completed"], r["failed"]) for r in res["runs"]] == [
        (1, 8, 0),
        (4, 8, 0),
    ]
    assert all(r["ttft_ms"]["p50"] > 0 and r["output_throughput"] > 0 for r in res["runs"])
    assert (
        tmp_path / "t.png"
    ).stat().st_size > 0 and "concurrency=4: 8/8 ok" in capsys.readouterr().out


def test_serve_command(ckpt):
    """`metainfer serve` binds the port the OS picks, takes its key from the environment, and stops
    on SIGINT."""
    exe = Path(sys.executable).parent / "metainfer"
    env = os.environ | {"METAINFER_API_KEY": "env-key", "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(
        [
            str(exe),
            "serve",
            str(ckpt),
            "--port",
            "0",
            "--device",
            "cpu",
            "--num-kv-blocks",
            "64",
            "--max-model-len",
            "256",
            "--served-model-name",
            "tiny",
            "--log-level",
            "warning",
            "--reasoning-parser",
            "qwen3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        line = ""
        deadline = time.monotonic() + 120
        while "serving" not in line and time.monotonic() < deadline and p.poll() is None:
            line = p.stdout.readline()
        url = line.split(" on ")[1].split()[0]
        auth = {"Authorization": "Bearer env-key"}
        for _ in range(100):
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert httpx.get(f"{url}/v1/models").status_code == 401
        assert httpx.get(f"{url}/v1/models", headers=auth).json()["data"][0]["max_model_len"] == 256
        r = httpx.post(
            f"{url}/v1/completions",
            headers=auth,
            json={"model": "tiny", "prompt": "hi", "max_tokens": 3},
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 3
        r = httpx.post(
            f"{url}/v1/chat/completions",
            headers=auth,
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        )
        assert "reasoning_content" in r.json()["choices"][0]["message"]  # the flag reached the app
    finally:
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 0
