"""Tool calls and reasoning through the server, with the official `openai` client.

The served model is the real tiny engine whose logits are overridden step by step to write a chosen
text (a "scripted" model): the tokens then go through the real scheduler, detokenizer, stop
handling,
streaming and parsing."""

import json
import httpx
import openai
import pytest
import torch
from metainfer.entrypoints.openai.engine_loop import AsyncLLMEngine
from metainfer.entrypoints.openai.api_server import ServerThread, build_app

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "now",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
ANSWER = (
    '<think>\nThe user wants the weather.\n</think>\n\nLet me look.\n<tool_call>\n{"name": '
    '"get_weather", '
    '"arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "now", "arguments": '
    "{}}\n</tool_call>"
)
CALLS = [("get_weather", {"city": "Paris"}), ("now", {})]


class Script:
    """Wraps a model's `compute_logits` so that its next calls pick the given token ids, one per
    call (one request at a time)."""

    def __init__(self, model):
        self.compute, self.ids = model.compute_logits, []
        model.compute_logits = self

    def __call__(self, hidden):
        logits = self.compute(hidden)
        if self.ids:
            logits = torch.full_like(logits, -30.0)
            logits[:, self.ids.pop(0)] = 0.0
        return logits


@pytest.fixture(scope="module")
def served(checkpoints):
    engine = AsyncLLMEngine.from_engine_args(
        str(checkpoints("qwen3-tiny")),
        dtype="float32",
        device="cpu",
        num_kv_blocks=256,
        max_model_len=512,
    )
    script = Script(engine.engine.runner.model)
    with ServerThread(build_app(engine, ["tiny"], reasoning_parser="qwen3")) as srv:
        yield srv, script, engine.tokenizer
    engine.shutdown()


@pytest.fixture
def client(served):
    return openai.OpenAI(base_url=f"{served[0].url}/v1", api_key="none", max_retries=0)


def will_write(served, text: str) -> None:
    _, script, tok = served
    script.ids = tok(text, add_special_tokens=False).input_ids + [
        tok.convert_tokens_to_ids("<|im_end|>")
    ]


def calls_of(tool_calls) -> list:
    return [(c.function.name, json.loads(c.function.arguments)) for c in tool_calls]


def streamed_calls(chunks) -> tuple[list, list[int]]:
    """The calls of a streamed chat, put back together as a client does (a call's first delta
    has its id and name, the next ones more of its arguments), and their indices."""
    calls = {}
    for t in (t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []):
        if t.id:
            calls[t.index] = [t.function.name, t.function.arguments or ""]
        else:
            calls[t.index][1] += t.function.arguments
    return [(name, json.loads(args)) for name, args in calls.values()], list(calls)


def test_tool_calls_and_reasoning(served, client):
    will_write(served, ANSWER)
    r = client.chat.completions.create(
        model="tiny", messages=ASK, tools=TOOLS, temperature=0, max_tokens=100
    )
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content == "Let me look."
    assert c.message.model_extra["reasoning_content"] == "\nThe user wants the weather.\n"
    assert calls_of(c.message.tool_calls) == CALLS
    assert all(t.type == "function" and t.id.startswith("call_") for t in c.message.tool_calls)


def test_streamed_tool_calls_equal_whole(served, client):
    will_write(served, ANSWER)
    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=ASK, tools=TOOLS, temperature=0, max_tokens=100, stream=True
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    content = "".join(d.content or "" for d in deltas)
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    parts = [t for d in deltas for t in d.tool_calls or []]
    assert (content, reasoning) == ("Let me look.", "\nThe user wants the weather.\n")
    assert streamed_calls(chunks) == (CALLS, [0, 1]) and len(parts) > 2  # (arguments in pieces)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not any(
        "<tool_call>" in (d.content or "") or "think>" in (d.content or "") for d in deltas
    )


def test_parallel_tool_calls_false_keeps_the_first_call(served, client):
    """As vLLM: the calls after the first are dropped, whole and streamed (where only index 0
    comes), and in the Responses API."""
    ask = dict(model="tiny", messages=ASK, tools=TOOLS, max_tokens=100, parallel_tool_calls=False)
    will_write(served, ANSWER)
    c = client.chat.completions.create(**ask).choices[0]
    assert (calls_of(c.message.tool_calls), c.finish_reason) == ([CALLS[0]], "tool_calls")
    will_write(served, ANSWER)
    chunks = list(client.chat.completions.create(**ask, stream=True))
    assert streamed_calls(chunks) == ([CALLS[0]], [0])
    will_write(served, ANSWER)
    r = client.responses.create(
        model="tiny", input="Weather in Paris?", tools=RESPONSE_TOOLS, parallel_tool_calls=False
    )
    assert [(i.name, json.loads(i.arguments)) for i in r.output if i.type == "function_call"] == [
        CALLS[0]
    ]


def test_tool_call_arguments_are_always_json(served, client):
    "Arguments the model wrote as a JSON string come back as JSON text (vLLM's `json.dumps`)."
    will_write(served, '<tool_call>\n{"name": "get_weather", "arguments": "Paris"}\n</tool_call>')
    r = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, max_tokens=60)
    assert calls_of(r.choices[0].message.tool_calls) == [("get_weather", "Paris")]


def test_reasoning_under_both_of_vllms_names(served, client):
    """The reasoning comes as `reasoning` (current vLLM's name) and `reasoning_content` (older
    vLLM's), whole and streamed; an assistant message sent back may carry it under either."""
    thought = "\nThe user wants the weather.\n"
    will_write(served, ANSWER)
    m = client.chat.completions.create(model="tiny", messages=ASK, max_tokens=100).choices[0]
    assert (m.message.model_dump()["reasoning"], m.message.model_dump()["reasoning_content"]) == (
        thought,
        thought,
    )
    will_write(served, ANSWER)
    chunks = client.chat.completions.create(model="tiny", messages=ASK, max_tokens=100, stream=True)
    deltas = [c.choices[0].delta.model_dump() for c in chunks if c.choices]
    assert all(d.get("reasoning") == d.get("reasoning_content") for d in deltas)
    assert "".join(d.get("reasoning") or "" for d in deltas) == thought
    call = {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}

    def prompt(key: str | None) -> list[int]:  # a second turn, the reasoning under `key`
        said = {"role": "assistant", "content": "", "tool_calls": [call]}
        said |= {key: thought} if key else {}
        turn = [*ASK, said, {"role": "tool", "tool_call_id": "c1", "content": "noon"}]
        body = {"messages": turn, "tools": TOOLS}
        return httpx.post(f"{served[0].url}/tokenize", json=body).json()["tokens"]

    assert prompt("reasoning") == prompt("reasoning_content") != prompt(None)


def test_tool_choice_none_and_no_tools_leave_the_text(served, client):
    for extra in ({"tools": TOOLS, "tool_choice": "none"}, {}):
        will_write(served, ANSWER)
        r = client.chat.completions.create(
            model="tiny", messages=ASK, temperature=0, max_tokens=100, **extra
        )
        c = r.choices[0]
        assert (c.finish_reason, c.message.tool_calls) == ("stop", None)
        assert c.message.content == ANSWER.split("</think>\n\n")[1]


def raw_calls(chunks) -> list[tuple[str, str]]:
    "A streamed chat's calls joined as a client joins them, arguments as text."
    calls = {}
    for t in (t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []):
        name, args = calls.get(t.index, (t.function.name, ""))
        calls[t.index] = (name, args + (t.function.arguments or ""))
    return list(calls.values())


def test_a_call_whose_arguments_are_cut_or_not_json_is_still_a_call(served, client):
    """Once its name is written a call is a call, streamed or not (a streamed one can't be taken
    back): arguments that are not JSON, or cut off by max_tokens, come as written. A body that
    names no function stays in the content."""
    ask = dict(model="tiny", messages=ASK, tools=TOOLS, temperature=0)
    bad = 'Sure. <tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>'
    named = {"type": "function", "function": {"name": "get_weather"}}
    long = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "' + "Paris " * 40
    for text, kw, finish in [(bad, {}, "tool_calls"), (long, {"tool_choice": named}, "length")]:
        will_write(served, text)
        c = client.chat.completions.create(**ask, **kw, max_tokens=30).choices[0]
        whole = [(t.function.name, t.function.arguments) for t in c.message.tool_calls]
        assert whole[0][0] == "get_weather" and whole[0][1].startswith('{"city":')
        assert (c.message.content or "", c.finish_reason) == ("Sure." if kw == {} else "", finish)
        will_write(served, text)
        chunks = list(client.chat.completions.create(**ask, **kw, max_tokens=30, stream=True))
        assert raw_calls(chunks) == whole
    with pytest.raises(json.JSONDecodeError):  # (cut off: not JSON)
        json.loads(whole[0][1])
    text = "Sure. <tool_call>not a call</tool_call>"
    will_write(served, text)
    c = client.chat.completions.create(**ask, max_tokens=30).choices[0]
    assert (c.message.content, c.message.tool_calls, c.finish_reason) == (text, None, "stop")


def test_tool_results_are_rendered_by_the_template(served, client):
    """A second turn sends the calls and their results back: the prompt is the template's rendering
    of those messages."""
    _, _, tok = served
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    messages = ASK + [
        {"role": "assistant", "content": "Let me look.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ]
    will_write(served, "It is 21 degrees.")
    r = client.chat.completions.create(
        model="tiny",
        messages=messages,
        tools=TOOLS,
        temperature=0,
        max_tokens=100,
        extra_body={"return_token_ids": True},
    )
    as_template_takes_them = messages[:1] + [
        messages[1]
        | {
            "tool_calls": [
                calls[0] | {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
            ]
        },
        messages[2],
    ]
    text = tok.apply_chat_template(
        as_template_takes_them, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert (
        '<tool_response>\n{"temperature": 21}\n</tool_response>' in text
        and '"name": "get_weather"' in text
    )
    assert r.model_extra["prompt_token_ids"] == tok(text, add_special_tokens=False).input_ids
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (
        "It is 21 degrees.",
        "stop",
    )


def test_reasoning_cut_off_by_max_tokens(served, client):
    will_write(served, "<think>\nA long thought that never ends")
    r = client.chat.completions.create(model="tiny", messages=ASK, temperature=0, max_tokens=5)
    m = r.choices[0].message
    assert (
        r.choices[0].finish_reason == "length"
        and m.content == ""
        and m.model_extra["reasoning_content"].startswith("\nA long")
    )


def test_a_tag_in_the_question_is_no_reasoning(served, client):
    """Only a prompt that ends by opening <think> starts the output inside the reasoning; a user may
    write the tag."""
    will_write(served, "It is a tag.")
    r = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "What is <think>"}], max_tokens=20
    )
    assert (
        r.choices[0].message.content,
        r.choices[0].message.model_extra["reasoning_content"],
    ) == ("It is a tag.", None)


def test_tool_choice_required_or_named_forces_the_call(served, client):
    """A named function (or `required`) makes the reply that call (or one of the calls): the
    model writes it in its own format, under a grammar; the prompt is the one `auto` gets."""
    _, _, tok = served
    call = lambda name, args: (
        f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'
    )
    will_write(served, call("get_weather", '{"city": "Paris"}'))
    r = client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        extra_body={"return_token_ids": True},
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    assert (calls_of(r.choices[0].message.tool_calls), r.choices[0].finish_reason) == (
        [CALLS[0]],
        "stop",  # (a call of the function named: not one the model chose, as in vLLM and OpenAI)
    )
    assert tok.decode(r.model_extra["prompt_token_ids"]).endswith("<|im_start|>assistant\n")
    will_write(served, call("now", "{}"))
    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=ASK, tools=TOOLS, tool_choice="required", stream=True
        )
    )
    assert streamed_calls(chunks)[0] == [CALLS[1]]
    # the model "wants" to call get_weather with no arguments, but only `now` is allowed: the
    # grammar turns it into a call of `now`, whose arguments parse
    will_write(served, call("get_weather", "{}"))
    r = client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        max_tokens=40,
        tool_choice={"type": "function", "function": {"name": "now"}},
    )
    assert calls_of(r.choices[0].message.tool_calls) == [("now", {})]
    with pytest.raises(openai.BadRequestError, match="not one of the tools"):
        client.chat.completions.create(
            model="tiny",
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "f"}},
        )
    with pytest.raises(openai.BadRequestError, match="tool_choice needs tools"):
        client.chat.completions.create(model="tiny", messages=ASK, tool_choice="auto")


RESPONSE_TOOLS = [
    {"type": "function", **t["function"]} for t in TOOLS
]  # (the Responses API spells them flat)


def test_responses_api_items(served, client):
    """/v1/responses: reasoning, message and function_call items, streamed (events in order) and
    not, alike."""
    will_write(served, ANSWER)
    r = client.responses.create(
        model="tiny", input="Weather in Paris?", tools=RESPONSE_TOOLS, max_output_tokens=100
    )
    assert [o.type for o in r.output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ] and r.id.startswith("resp_")
    assert (r.status, r.output_text, r.output[0].content[0].text) == (
        "completed",
        "Let me look.",
        "\nThe user wants the weather.\n",
    )
    assert [
        (o.name, json.loads(o.arguments)) for o in r.output[2:]
    ] == CALLS and r.usage.output_tokens > 10
    will_write(served, ANSWER)
    events = list(
        client.responses.create(
            model="tiny",
            input="Weather in Paris?",
            tools=RESPONSE_TOOLS,
            max_output_tokens=100,
            stream=True,
        )
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert (events[0].type, events[-1].type) == ("response.created", "response.completed")
    same = lambda items: [o.model_dump(exclude={"id", "call_id"}) for o in items]
    assert same(events[-1].response.output) == same(r.output)
    assert (
        "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Let me look."
    )
    assert (
        "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
        == "\nThe user wants the weather.\n"
    )
    for cut in (
        100,
        5,
    ):  # the SDK's own stream helper checks the events' order and builds the response from them
        will_write(served, ANSWER)
        with client.responses.stream(
            model="tiny", input="Weather in Paris?", tools=RESPONSE_TOOLS, max_output_tokens=cut
        ) as s:
            final = s.get_final_response()
        assert final.status == ("completed" if cut == 100 else "incomplete")
        if cut == 100:  # (the helper's own types add a `parsed` field)
            assert ([o.type for o in final.output], final.output_text) == (
                [o.type for o in r.output],
                r.output_text,
            )
            assert [(o.name, o.arguments) for o in final.output[2:]] == [
                (o.name, o.arguments) for o in r.output[2:]
            ]


def test_responses_api_second_turn_and_limits(served, client):
    """Earlier calls and their outputs go back as input items: the prompt is the chat's;
    max_output_tokens marks it incomplete."""
    _, _, tok = served
    first = [
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": '{"temperature": 21}'},
    ]
    will_write(served, "It is 21 degrees.")
    r = client.responses.create(
        model="tiny",
        input=[{"role": "user", "content": "Weather in Paris?"}, *first],
        instructions="Be terse.",
        tools=RESPONSE_TOOLS,
    )
    messages = [
        {"role": "system", "content": "Be terse."},
        *ASK,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temperature": 21}'},
    ]
    text = tok.apply_chat_template(
        messages, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert (
        r.usage.input_tokens == len(tok(text, add_special_tokens=False).input_ids)
        and r.output_text == "It is 21 degrees."
    )
    will_write(
        served, ANSWER
    )  # a previous response's output sent back as it is, reasoning included
    done = client.responses.create(model="tiny", input="Weather in Paris?", tools=RESPONSE_TOOLS)
    will_write(served, "It is 21 degrees.")
    back = [o.model_dump(exclude_none=True) for o in done.output]
    r = client.responses.create(
        model="tiny",
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            *back,
            *[
                {"type": "function_call_output", "call_id": o.call_id, "output": "ok"}
                for o in done.output[2:]
            ],
        ],
        tools=RESPONSE_TOOLS,
    )
    calls = [
        {
            "id": o.call_id,
            "type": "function",
            "function": {"name": o.name, "arguments": json.loads(o.arguments)},
        }
        for o in done.output[2:]
    ]
    messages = [
        *ASK,
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "\nThe user wants the weather.\n",
            "tool_calls": calls,
        },
        *[{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls],
    ]
    text = tok.apply_chat_template(
        messages, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert "<think>\nThe user wants the weather.\n</think>" in text
    assert r.usage.input_tokens == len(tok(text, add_special_tokens=False).input_ids)
    will_write(served, "<think>\nA long thought that never ends")
    cut = client.responses.create(model="tiny", input="Hi", max_output_tokens=4)
    assert (cut.status, cut.incomplete_details.reason, cut.usage.output_tokens) == (
        "incomplete",
        "max_output_tokens",
        4,
    )
    will_write(served, '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>')
    forced = client.responses.create(
        model="tiny",
        input="Weather?",
        tools=RESPONSE_TOOLS,
        tool_choice={"type": "function", "name": "get_weather"},
    )
    assert [(o.type, getattr(o, "name", None)) for o in forced.output] == [
        ("function_call", "get_weather")
    ]
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
    cut_at = len(tok(call, add_special_tokens=False).input_ids) - 4  # (inside the arguments)
    ask = dict(model="tiny", input="Weather?", tools=RESPONSE_TOOLS, max_output_tokens=cut_at)
    will_write(served, call + "\n</tool_call>")
    with client.responses.stream(**ask) as s:
        streamed = s.get_final_response()
    will_write(served, call + "\n</tool_call>")
    for r in (client.responses.create(**ask), streamed):  # the item the cut ended is incomplete
        assert r.status == "incomplete" and r.output[-1].type == "function_call"
        assert r.output[-1].status == "incomplete"
        assert r.output[-1].arguments.startswith('{"city": "Paris"')
    with pytest.raises(openai.BadRequestError, match="stores no responses"):
        client.responses.create(model="tiny", input="Hi", previous_response_id="resp_1")
    for field, value in [("conversation", "conv_1"), ("prompt", {"id": "pmpt_1"})]:
        with pytest.raises(openai.BadRequestError, match=f"{field}: this server stores nothing"):
            client.responses.create(model="tiny", input="Hi", **{field: value})
    with pytest.raises(openai.BadRequestError, match="tool_choice needs tools"):
        client.responses.create(model="tiny", input="Hi", tool_choice="required")
    # errors name the field as this API spells it (the chat's names underneath)
    for kw, param in [
        ({"max_output_tokens": 10_000}, "max_output_tokens"),
        ({"input": []}, "input"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(model="tiny", **{"input": "Hi"} | kw)
        assert e.value.param == param
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=ASK, max_completion_tokens=10_000)
    assert e.value.param == "max_completion_tokens"


def test_responses_usage_counts_cached_and_reasoning_tokens(served, client):
    """`input_tokens_details.cached_tokens`: a long input sent again finds its full blocks in the
    prefix cache; `output_tokens_details.reasoning_tokens`: the tokens between `<think>` and
    `</think>`; streamed as whole."""
    _, _, tok = served
    thought = len(tok("\nThe user wants the weather.\n", add_special_tokens=False).input_ids)
    ask = dict(model="tiny", input="What is the weather like in Paris? " * 8, max_output_tokens=100)
    usages = []
    for stream in (False, False, True):
        will_write(served, ANSWER)
        if stream:
            usages.append(list(client.responses.create(**ask, stream=True))[-1].response.usage)
        else:
            usages.append(client.responses.create(**ask).usage)
    first, again, streamed = usages
    assert first.input_tokens == again.input_tokens > 64
    cached = again.input_tokens_details.cached_tokens
    assert first.input_tokens_details.cached_tokens < cached and cached % 16 == 0
    assert again.input_tokens - 16 <= cached < again.input_tokens
    assert streamed.input_tokens_details.cached_tokens == cached
    assert {u.output_tokens_details.reasoning_tokens for u in usages} == {thought}


def test_deepseek_v3_tool_call_parser(checkpoints):
    """`--tool-call-parser deepseek_v3`: calls in DeepSeek-V3's format come back as tool calls,
    and a forced `tool_choice` makes the reply such a call (here the tags are text: this tokenizer
    is Qwen's)."""
    engine = AsyncLLMEngine.from_engine_args(
        str(checkpoints("qwen3-tiny")), dtype="float32", device="cpu", num_kv_blocks=256
    )
    script, tok = Script(engine.engine.runner.model), engine.tokenizer
    call = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    with ServerThread(build_app(engine, ["tiny"], tool_call_parser="deepseek_v3")) as srv:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        for choice in ("auto", "required"):
            text = ("Sure." if choice == "auto" else "") + call  # (forced: no text before it)
            script.ids = tok(text, add_special_tokens=False).input_ids
            script.ids.append(tok.convert_tokens_to_ids("<|im_end|>"))
            r = client.chat.completions.create(
                model="tiny", messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=80
            )
            m = r.choices[0].message
            assert calls_of(m.tool_calls) == [CALLS[0]], (choice, m)
            assert m.content == ("Sure." if choice == "auto" else None)
    engine.shutdown()
