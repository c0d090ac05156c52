"""Structured outputs on a tiny random-weight Qwen3 (which never writes JSON on its own), sampled at
temperature 1.0: every output matches its grammar, offline and through the server (streamed and
not, with the official `openai` client and LangChain), forced tool calls parse and validate, and
TP=2 gives the same tokens as TP=1."""

import json
import re
from typing import Literal
import httpx
import jsonschema
import openai
import pytest
import torch
from pydantic import BaseModel, Field
from metainfer import LLM, SamplingParams, StructuredOutputsParams
from metainfer.engine.admission import bad_word_ids
from metainfer.entrypoints.openai.api_server import ServerThread, build_app
from metainfer.entrypoints.openai.engine_loop import AsyncLLMEngine

N = 100  # samples of each grammar
SCHEMA = {  # nested objects, arrays, enums, required fields, bounded numbers and strings
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "score": {"type": "number", "minimum": -1, "maximum": 1},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {
                "city": {"enum": ["Paris", "Rome"]},
                "zip": {"type": "integer", "minimum": 10000, "maximum": 99999},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "score", "role", "tags", "address"],
    "additionalProperties": False,
}
REGEX = r"[A-Z][a-z]{2,5}-[0-9]{3}(\.[0-9]{1,2})?"
CHOICE = ["red", "green", "blue", "dark magenta"]
GRAMMAR = """start: greeting " " name ("," " " name){0,2} "!"
greeting: "hello" | "hi" | "hey"
name: /[A-Z][a-z]{1,6}/
"""
GRAMMAR_RE = re.compile(r"(hello|hi|hey) [A-Z][a-z]{1,6}(, [A-Z][a-z]{1,6}){0,2}!")
CASES = {  # kind -> (structured outputs, whether a text is valid)
    "json": (
        {"json": SCHEMA, "disable_any_whitespace": True},
        lambda t: jsonschema.validate(json.loads(t), SCHEMA) is None,
    ),
    "regex": ({"regex": REGEX}, lambda t: re.fullmatch(REGEX, t) is not None),
    "choice": ({"choice": CHOICE}, lambda t: t in CHOICE),
    "grammar": ({"grammar": GRAMMAR}, lambda t: GRAMMAR_RE.fullmatch(t) is not None),
}


def valid(check, text: str) -> bool:
    try:
        return bool(check(text))
    except (ValueError, jsonschema.ValidationError):
        return False


@pytest.fixture(scope="module")
def llm(checkpoints):
    with LLM(str(checkpoints("qwen3-tiny")), dtype="float32", device="cpu") as llm:
        yield llm


@pytest.mark.parametrize("kind", CASES)
def test_offline_outputs_match_their_grammar(llm, kind):
    so, check = CASES[kind]
    params = SamplingParams(
        temperature=1.0, max_tokens=120, structured_outputs=StructuredOutputsParams(**so)
    )
    outs = llm.generate(["Answer:"] * N, params, use_tqdm=False)
    texts = [o.outputs[0].text for o in outs]
    assert sum(valid(check, t) for t in texts) == N, [t for t in texts if not valid(check, t)]
    assert all(o.outputs[0].finish_reason == "stop" for o in outs)
    assert len(set(texts)) > 1  # sampled, not one fixed answer


def test_constraints_keep_sampling_options_working(llm):
    """Seeds, penalties, logprobs and n work under a grammar; logprobs describe the constrained
    distribution (every alternative reported is an allowed token)."""
    so = StructuredOutputsParams(choice=["yes", "no", "maybe"])
    p = SamplingParams(
        temperature=1.0, seed=7, n=3, logprobs=5, presence_penalty=0.5, structured_outputs=so
    )
    a, b = (llm.generate("Well?", p, use_tqdm=False)[0].outputs for _ in range(2))
    assert [o.text for o in a] == [o.text for o in b] and all(o.text in so.choice for o in a)
    tok = llm.get_tokenizer()
    for o in a:
        first = o.logprobs[0]
        allowed = [t for t, lp in first.items() if lp.logprob > float("-inf")]
        assert all(any(c.startswith(tok.decode([t])) for c in so.choice) for t in allowed)


def test_min_p_allowed_token_ids_and_bad_words(llm):
    tok = llm.get_tokenizer()
    allowed = tok(" red green blue", add_special_tokens=False).input_ids
    outs = llm.generate(
        "x", SamplingParams(temperature=1.0, max_tokens=20, allowed_token_ids=allowed, seed=1)
    )
    assert set(outs[0].outputs[0].token_ids) <= set(allowed)
    # min_p=1 keeps only the likeliest token: sampling at any temperature is greedy
    greedy = llm.generate("x", SamplingParams(temperature=0, max_tokens=12))[0].outputs[0]
    top = llm.generate("x", SamplingParams(temperature=2.0, min_p=1.0, max_tokens=12))[0]
    assert top.outputs[0].token_ids == greedy.token_ids
    banned = tok.decode(greedy.token_ids[2:4])
    out = llm.generate("x", SamplingParams(temperature=0, max_tokens=12, bad_words=[banned]))[0]
    ids = out.outputs[0].token_ids
    for w in bad_word_ids(tok, [banned]):  # no variant of the word appears
        assert not any(ids[i : i + len(w)] == w for i in range(len(ids))), (w, ids)
    assert ids != greedy.token_ids
    with pytest.raises(ValueError, match="min_p"):
        SamplingParams(min_p=2.5)


def test_a_slow_grammar_holds_up_only_its_own_request(llm, monkeypatch):
    """A sequence starts once its grammar's matcher is built (vLLM's waiting-for-FSM): one whose
    build takes two seconds does not hold up a plain request queued behind it."""
    import time

    engine, grammars = llm.llm_engine, llm.llm_engine.grammars
    build = grammars._build
    monkeypatch.setattr(grammars, "_build", lambda text: (time.sleep(2), build(text))[1])
    so = StructuredOutputsParams(regex="[0-9]{3}")
    grammars.compile(so)  # checked already, as the server checks it before queueing
    engine.add_request("slow", [1, 2, 3], SamplingParams(max_tokens=3, structured_outputs=so))
    engine.add_request("plain", [4, 5, 6], SamplingParams(max_tokens=8, ignore_eos=True))
    start, finished = time.monotonic(), {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                finished[out.request_id] = time.monotonic() - start
    assert finished["plain"] < 1.5 < finished["slow"], finished


def test_tp2_gives_the_same_constrained_tokens(checkpoints, llm):
    so = StructuredOutputsParams(**CASES["json"][0])
    params = SamplingParams(temperature=1.0, max_tokens=120, seed=3, structured_outputs=so)
    prompts = ["a", "Some JSON, please:", "x y z"]
    ref = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    with LLM(
        str(checkpoints("qwen3-tiny")), dtype="float32", device="cpu", tensor_parallel_size=2
    ) as tp2:
        got = [o.outputs[0].token_ids for o in tp2.generate(prompts, params, use_tqdm=False)]
    assert got == ref


@pytest.fixture(scope="module")
def server(checkpoints):
    engine = AsyncLLMEngine.from_engine_args(
        str(checkpoints("qwen3-tiny")), dtype="float32", device="cpu", max_model_len=1024
    )
    with ServerThread(build_app(engine, ["tiny"])) as srv:
        yield srv
    engine.shutdown()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)


FIELDS = {  # kind -> vLLM's request fields for it (the newer and the older spelling)
    "json": [
        {"structured_outputs": CASES["json"][0]},
        {"guided_json": SCHEMA},
    ],
    "regex": [{"structured_outputs": {"regex": REGEX}}, {"guided_regex": REGEX}],
    "choice": [{"structured_outputs": {"choice": CHOICE}}, {"guided_choice": CHOICE}],
    "grammar": [{"structured_outputs": {"grammar": GRAMMAR}}, {"guided_grammar": GRAMMAR}],
}


@pytest.mark.parametrize("kind", CASES)
def test_server_outputs_match_their_grammar(client, kind):
    """Chats streamed with vLLM's `structured_outputs`, completions whole with its `guided_*`."""
    check = CASES[kind][1]
    new, old = FIELDS[kind]
    for fields, endpoint, stream in [(new, "chat", True), (old, "completions", False)]:
        kw = dict(model="tiny", n=N, temperature=1.0, max_tokens=120, extra_body=fields)
        if endpoint == "chat":
            r = client.chat.completions.create(
                messages=[{"role": "user", "content": "Answer."}], stream=stream, **kw
            )
        else:
            r = client.completions.create(prompt="Answer:", stream=stream, **kw)
        texts, reasons = [""] * N, [None] * N
        for chunk in r if stream else [r]:
            for c in chunk.choices:
                if endpoint == "completions":
                    texts[c.index] += c.text
                else:
                    texts[c.index] += (c.delta if stream else c.message).content or ""
                reasons[c.index] = c.finish_reason or reasons[c.index]
        # every output the grammar ended is valid; at temperature 1 a sample may still be writing
        # (a number of a hundred digits) at max_tokens: a few, not a pattern
        bad = [t for t, why in zip(texts, reasons) if why != "length" and not valid(check, t)]
        assert not bad and reasons.count("length") <= N // 20, (endpoint, bad[:3], reasons)


class Weather(BaseModel):
    city: Literal["Paris", "Rome", "Oslo"]
    celsius: int = Field(ge=-40, le=50)
    rain: bool
    note: str = Field(max_length=8)


def test_openai_parse_and_langchain_structured_output(server, client):
    ask = [{"role": "user", "content": "Weather in Paris, as JSON."}]
    for _ in range(5):
        r = client.chat.completions.parse(
            model="tiny", messages=ask, response_format=Weather, temperature=1.0
        )
        assert isinstance(r.choices[0].message.parsed, Weather)
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(base_url=f"{server.url}/v1", api_key="none", model="tiny", temperature=1.0)
    for method in ("json_schema", "function_calling"):
        structured = chat.with_structured_output(Weather, method=method)
        assert all(isinstance(structured.invoke("Weather?"), Weather) for _ in range(3))


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": Weather.model_json_schema() | {"additionalProperties": False},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "book",
            "parameters": {
                "type": "object",
                "properties": {
                    "seats": {"type": "integer", "minimum": 1, "maximum": 9},
                    "class": {"enum": ["economy", "business"]},
                },
                "required": ["seats", "class"],
                "additionalProperties": False,
            },
        },
    },
]


def test_forced_tool_calls_parse_and_validate(client):
    """`required` (calls of the tools) streamed, a named function whole: every call validates,
    but one that `max_tokens` cut off (the last of a choice that ends with "length": at temperature
    1, `required` may go on to call after call until the context is full; a few, not a pattern)."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    named = {"type": "function", "function": {"name": "book"}}
    for choice, stream in [("required", True), (named, False)]:
        r = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Go."}],
            tools=TOOLS,
            tool_choice=choice,
            n=N,
            temperature=1.0,
            stream=stream,
        )
        calls, reasons = [{} for _ in range(N)], [None] * N
        for chunk in r if stream else [r]:
            for c in chunk.choices:
                for t in (c.delta if stream else c.message).tool_calls or []:
                    call = calls[c.index].setdefault(getattr(t, "index", 0), ["", ""])
                    call[0] += t.function.name or ""
                    call[1] += t.function.arguments or ""
                reasons[c.index] = c.finish_reason or reasons[c.index]
        names = set()
        for per_choice, why in zip(calls, reasons):  # (`required`: parallel calls; named: one)
            assert len(per_choice) >= 1 if choice == "required" else len(per_choice) == 1
            whole = list(per_choice.values())[: -1 if why == "length" else None]
            for name, args in whole:
                jsonschema.validate(json.loads(args), schemas[name])
                names.add(name)
        assert reasons.count("length") <= N // 20, reasons
        assert names == ({"get_weather", "book"} if choice == "required" else {"book"})


@pytest.mark.parametrize(
    "fields, what",
    [
        ({"structured_outputs": {"regex": "[0-9"}}, "structured_outputs: the regex grammar"),
        ({"guided_json": {"type": "object", "properties": 3}}, "guided_json"),
        ({"response_format": {"type": "json_schema", "json_schema": 5}}, "response_format"),
        ({"response_format": {"type": "yaml"}}, "'yaml' is not one of"),
        ({"guided_regex": "a", "guided_choice": ["a"]}, "both constrain"),
        ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "exactly one"),
        ({"structured_outputs": {"jsn": {}}}, "structured_outputs: unknown field 'jsn'; known: "),
        ({"guided_decoding_backend": "outlines"}, "guided_decoding_backend"),
        ({"min_p": 2.5}, "min_p"),
        ({"temperature": 3}, "temperature"),
        ({"guided_json": '{"a":' * 50_000 + "1" + "}" * 50_000}, "schema is nested too deeply"),
    ],
)
def test_bad_structured_requests_are_400s(client, fields, what):
    with pytest.raises(openai.BadRequestError, match=re.escape(what)):
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], extra_body=fields
        )


def test_a_grammar_that_crashes_llguidance_is_a_400(client):
    """A schema whose `$ref`s chain through 20,000 definitions overflows llguidance's stack: the
    grammar checker's process dies (not the server), the request is a 400, the next one compiles."""
    chain = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(20_000)}
    schema = {"$defs": chain | {"d20000": {"type": "integer"}}, "$ref": "#/$defs/d0"}
    fmt = {"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}
    chat = dict(model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="crashed the grammar compiler"):
        client.chat.completions.create(**chat, response_format=fmt)
    out = client.chat.completions.create(**chat, extra_body={"guided_choice": ["yes", "no"]})
    assert out.choices[0].message.content in ("yes", "no")


def test_structural_tag_and_responses_text_format(llm, client):
    """A structural tag constrains only the tagged part; the Responses API's `text.format` is the
    chat's `response_format`."""
    tag = {
        "structures": [{"begin": "<answer>", "schema": {"enum": [1, 2, 3]}, "end": "</answer>"}],
        "triggers": ["<answer>"],
    }
    so = StructuredOutputsParams(structural_tag=tag)
    tok, grammars = llm.get_tokenizer(), llm.engine.grammars
    m = grammars.matcher(so)
    row = torch.zeros((llm.engine.model_config.vocab_size + 31) // 32, dtype=torch.int32)
    m.fill(row)
    free = int(((row[:, None] >> torch.arange(32)) & 1).sum())
    assert free > 100_000  # free text: (nearly) anything
    m.advance(tok("Some text <answer>", add_special_tokens=False).input_ids)
    m.fill(row)
    allowed = ((row[:, None] >> torch.arange(32)) & 1).flatten().nonzero().flatten().tolist()
    assert allowed and all(tok.decode([t]).strip() in ("1", "2", "3", "") for t in allowed)
    outs = llm.generate(
        ["x"] * 10, SamplingParams(temperature=1.0, max_tokens=30, structured_outputs=so)
    )
    assert all(o.outputs[0].finish_reason in ("stop", "length") for o in outs)
    fmt = {"type": "json_schema", "name": "w", "schema": SCHEMA}
    r = client.responses.create(model="tiny", input="JSON?", text={"format": fmt}, temperature=1.0)
    jsonschema.validate(json.loads(r.output_text), SCHEMA)
    assert r.text.format.type == "json_schema"


def test_forced_tool_call_arguments_take_no_extra_keys():
    """As vLLM's xgrammar in strict mode: a forced call's arguments take no keys beyond the
    function's `properties` unless its schema allows them (an unsure model adds keys forever)."""
    from transformers import AutoTokenizer
    from metainfer.entrypoints.openai.protocol import ChatCompletionRequest
    from metainfer.entrypoints.openai.structured_outputs import tool_call_grammar
    from metainfer.testing import default_model_dir

    open_ = {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "additionalProperties": True,
    }
    tools = [
        {
            "type": "function",
            "function": {"name": "Weather", "parameters": Weather.model_json_schema()},
        },
        {"type": "function", "function": {"name": "Open", "parameters": open_}},
    ]
    req = ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": "hi"}], tools=tools, tool_choice="required"
    )
    grammar = tool_call_grammar(req, AutoTokenizer.from_pretrained(default_model_dir())).grammar
    schemas = [
        json.loads(line.split("%json ", 1)[1]) for line in grammar.splitlines() if "%json" in line
    ]
    assert [s.get("additionalProperties") for s in schemas] == [False, True]


def test_contradictory_constraints_end_with_an_error(llm):
    """A grammar that `allowed_token_ids` or `min_tokens` leave no way through ends where no token
    is left, with finish reason "error" (it wrote tokens the grammar refused before); a request
    beside it in the same batch is untouched, and the engine goes on."""
    tok = llm.get_tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    yes_no = StructuredOutputsParams(choice=["yes", "no"])
    greedy = lambda **kw: SamplingParams(temperature=0, max_tokens=8, **kw)
    cases = [
        (greedy(structured_outputs=yes_no, allowed_token_ids=tok.encode(" the")), [""]),
        (greedy(structured_outputs=yes_no, min_tokens=5), ["yes", "no"]),  # (no end allowed)
        (greedy(allowed_token_ids=[eos], min_tokens=2), [""]),
        (SamplingParams(seed=3, max_tokens=8, allowed_token_ids=[eos], min_tokens=2), [""]),
    ]
    alone = llm.generate("Answer:", greedy(), use_tqdm=False)[0].outputs[0]
    for params, texts in cases:
        bad, good = llm.generate(["Answer:"] * 2, [params, greedy()], use_tqdm=False)
        assert bad.outputs[0].finish_reason == "error" and bad.outputs[0].text in texts
        assert good.outputs[0].token_ids == alone.token_ids


def test_contradictory_constraints_are_a_400_or_a_last_error_event(server, client):
    fields = {"guided_choice": ["yes", "no"], "min_tokens": 5}
    with pytest.raises(openai.BadRequestError, match="no token satisfies"):
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], extra_body=fields
        )
    body = {"model": "tiny", "prompt": "x", "stream": True, "max_tokens": 8} | fields
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert (
        events[-1] == "[DONE]"
        and "no token satisfies" in json.loads(events[-2])["error"]["message"]
    )


def test_a_grammar_that_fails_to_build_ends_alone(llm, monkeypatch):
    """A matcher whose build raised (after the checker passed its grammar) ends its own sequence
    with finish reason "error"; the request beside it in the same batch is untouched."""
    grammars = llm.llm_engine.grammars
    build = grammars._build
    digits = StructuredOutputsParams(regex="[0-9]{5}")
    failing = grammars.compile(digits)

    def build_or_fail(text):
        if text == failing:
            raise MemoryError("no memory for this grammar")
        return build(text)

    monkeypatch.setattr(grammars, "_build", build_or_fail)
    greedy = lambda **kw: SamplingParams(temperature=0, max_tokens=8, **kw)
    alone = llm.generate("Answer:", greedy(), use_tqdm=False)[0].outputs[0]
    bad, good = llm.generate(
        ["Answer:"] * 2, [greedy(structured_outputs=digits), greedy()], use_tqdm=False
    )
    assert (bad.outputs[0].finish_reason, bad.outputs[0].token_ids) == ("error", [])
    assert good.outputs[0].token_ids == alone.token_ids
