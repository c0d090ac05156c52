"""Acceptance (issue 6, part 3): malformed requests get a 4xx with OpenAI's error JSON, and the
server keeps serving.

Each case is sent raw (bytes, headers, method), then a normal request must still succeed. Unknown
fields are
*ignored* (see the server notebook), so they are not in this list: `test_server.py` checks that they
work."""

import httpx
import pytest
from metainfer.entrypoints.openai.engine_loop import AsyncLLMEngine
from metainfer.entrypoints.openai.api_server import ServerThread, build_app
from metainfer.entrypoints.openai.serving_status import parse_metrics

KEY = "sk-bad-input"
AUTH = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
MAX_MODEL_LEN, MAX_BODY = 256, 64 * 1024
CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
MSG = b'"messages": [{"role": "user", "content": "hi"}]'

# (name, method, path, body, headers, status, code): code None means any code
CASES = [
    ("malformed JSON", "POST", CMPL, b'{"prompt": "x", "max_tokens": 3', AUTH, 400, "invalid_json"),
    ("empty body", "POST", CMPL, b"", AUTH, 400, "invalid_json"),
    ("JSON array body", "POST", CMPL, b'[{"prompt": "x"}]', AUTH, 400, None),
    ("JSON string body", "POST", CMPL, b'"hello"', AUTH, 400, None),
    (
        "invalid UTF-8 in a string",
        "POST",
        CMPL,
        b'{"prompt": "caf\xe9 \xff\xfe"}',
        AUTH,
        400,
        "invalid_json",
    ),
    ("lone surrogate escape", "POST", CMPL, b'{"prompt": "a\\ud800b"}', AUTH, 400, "invalid_json"),
    (
        "nested 5000 deep",
        "POST",
        CMPL,
        b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        AUTH,
        400,
        "invalid_json",
    ),
    ("missing prompt", "POST", CMPL, b'{"max_tokens": 3}', AUTH, 400, None),
    ("prompt of wrong type", "POST", CMPL, b'{"prompt": 123}', AUTH, 400, None),
    (
        "max_tokens as a string",
        "POST",
        CMPL,
        b'{"prompt": "x", "max_tokens": "3"}',
        AUTH,
        400,
        None,
    ),
    ("max_tokens as a float", "POST", CMPL, b'{"prompt": "x", "max_tokens": 3.5}', AUTH, 400, None),
    ("stream as a string", "POST", CMPL, b'{"prompt": "x", "stream": "yes"}', AUTH, 400, None),
    ("negative max_tokens", "POST", CMPL, b'{"prompt": "x", "max_tokens": -1}', AUTH, 400, None),
    ("zero max_tokens", "POST", CMPL, b'{"prompt": "x", "max_tokens": 0}', AUTH, 400, None),
    (
        "huge max_tokens",
        "POST",
        CMPL,
        b'{"prompt": "x", "max_tokens": 1000000000000000000000000}',
        AUTH,
        400,
        "context_length_exceeded",
    ),
    (
        "negative temperature",
        "POST",
        CMPL,
        b'{"prompt": "x", "temperature": -0.5}',
        AUTH,
        400,
        None,
    ),
    ("NaN temperature", "POST", CMPL, b'{"prompt": "x", "temperature": NaN}', AUTH, 400, None),
    ("infinite top_p", "POST", CMPL, b'{"prompt": "x", "top_p": Infinity}', AUTH, 400, None),
    ("top_p above 1", "POST", CMPL, b'{"prompt": "x", "top_p": 1.5}', AUTH, 400, None),
    ("top_p of 0", "POST", CMPL, b'{"prompt": "x", "top_p": 0}', AUTH, 400, None),
    ("top_k below -1", "POST", CMPL, b'{"prompt": "x", "top_k": -5}', AUTH, 400, None),
    (
        "top_k beyond int64",
        "POST",
        CMPL,
        b'{"prompt": "x", "top_k": 100000000000000000000}',
        AUTH,
        400,
        None,
    ),
    (
        "seed beyond int64",
        "POST",
        CMPL,
        b'{"prompt": "x", "seed": 1180591620717411303424}',
        AUTH,
        400,
        None,
    ),
    ("empty prompt", "POST", CMPL, b'{"prompt": ""}', AUTH, 400, None),
    ("empty token list", "POST", CMPL, b'{"prompt": []}', AUTH, 400, None),
    (
        "token id beyond the vocabulary",
        "POST",
        CMPL,
        b'{"prompt": [1, 2, 999999999]}',
        AUTH,
        400,
        None,
    ),
    ("negative token id", "POST", CMPL, b'{"prompt": [-1]}', AUTH, 400, None),
    (
        "token ids longer than max_model_len",
        "POST",
        CMPL,
        b'{"prompt": [' + b"1," * 300 + b"1]}",
        AUTH,
        400,
        "context_length_exceeded",
    ),
    (
        "text longer than max_model_len",
        "POST",
        CMPL,
        b'{"prompt": "' + b"hello " * 400 + b'"}',
        AUTH,
        400,
        "context_length_exceeded",
    ),
    (
        "prompt + max_tokens over max_model_len",
        "POST",
        CMPL,
        b'{"prompt": "hi", "max_tokens": 256}',
        AUTH,
        400,
        "context_length_exceeded",
    ),
    ("several prompts, one empty", "POST", CMPL, b'{"prompt": ["a", ""]}', AUTH, 400, None),
    (
        "several prompts, one too long",
        "POST",
        CMPL,
        b'{"prompt": [[1], [' + b"1," * 300 + b"1]]}",
        AUTH,
        400,
        "context_length_exceeded",
    ),
    ("n = 0", "POST", CMPL, b'{"prompt": "x", "n": 0}', AUTH, 400, None),
    ("n over 128", "POST", CMPL, b'{"prompt": "x", "n": 129}', AUTH, 400, None),
    (
        "best_of below n",
        "POST",
        CMPL,
        b'{"prompt": "x", "best_of": 2, "n": 3}',
        AUTH,
        400,
        "invalid_value",
    ),
    ("best_of over 128", "POST", CMPL, b'{"prompt": "x", "best_of": 129}', AUTH, 400, None),
    (
        "best_of > n greedy",
        "POST",
        CMPL,
        b'{"prompt": "x", "best_of": 2, "temperature": 0}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "best_of > n streamed",
        "POST",
        CMPL,
        b'{"prompt": "x", "best_of": 2, "stream": true}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "logprobs over 20",
        "POST",
        CMPL,
        b'{"prompt": "x", "logprobs": 21}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "negative logprobs",
        "POST",
        CMPL,
        b'{"prompt": "x", "logprobs": -1}',
        AUTH,
        400,
        "invalid_value",
    ),
    ("logprobs as a boolean", "POST", CMPL, b'{"prompt": "x", "logprobs": true}', AUTH, 400, None),
    ("suffix", "POST", CMPL, b'{"prompt": "x", "suffix": "y"}', AUTH, 400, "unsupported_parameter"),
    (
        "presence penalty over 2",
        "POST",
        CMPL,
        b'{"prompt": "x", "presence_penalty": 2.5}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "logit_bias keyed by a word",
        "POST",
        CMPL,
        b'{"prompt": "x", "logit_bias": {"the": 1}}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "logit_bias beyond the vocabulary",
        "POST",
        CMPL,
        b'{"prompt": "x", "logit_bias": {"999999999": 1}}',
        AUTH,
        400,
        None,
    ),
    (
        "min_tokens over max_tokens",
        "POST",
        CMPL,
        b'{"prompt": "x", "max_tokens": 2, "min_tokens": 3}',
        AUTH,
        400,
        "invalid_value",
    ),
    ("empty stop string", "POST", CMPL, b'{"prompt": "x", "stop": [""]}', AUTH, 400, None),
    ("stop of wrong type", "POST", CMPL, b'{"prompt": "x", "stop": 7}', AUTH, 400, None),
    (
        "stream_options of wrong type",
        "POST",
        CMPL,
        b'{"prompt": "x", "stream": true, "stream_options": "usage"}',
        AUTH,
        400,
        None,
    ),
    (
        "unknown model",
        "POST",
        CMPL,
        b'{"model": "gpt-9", "prompt": "x"}',
        AUTH,
        404,
        "model_not_found",
    ),
    (
        "body over the size limit",
        "POST",
        CMPL,
        b'{"prompt": "' + b"x" * (MAX_BODY + 10) + b'"}',
        AUTH,
        413,
        "request_too_large",
    ),
    (
        "missing API key",
        "POST",
        CMPL,
        b'{"prompt": "x"}',
        {"Content-Type": "application/json"},
        401,
        "invalid_api_key",
    ),
    (
        "wrong API key",
        "POST",
        CMPL,
        b'{"prompt": "x"}',
        {"Authorization": "Bearer nope"},
        401,
        "invalid_api_key",
    ),
    (
        "wrong auth scheme",
        "POST",
        CMPL,
        b'{"prompt": "x"}',
        {"Authorization": f"Basic {KEY}"},
        401,
        "invalid_api_key",
    ),
    ("unknown route", "POST", "/v1/nothing", b"{}", AUTH, 404, "not_found"),
    ("wrong method", "GET", CMPL, b"", AUTH, 405, "method_not_allowed"),
    (
        "form-encoded body (curl -d without a Content-Type)",
        "POST",
        CMPL,
        b'{"prompt": "x"}',
        AUTH | {"Content-Type": "application/x-www-form-urlencoded"},
        400,
        "unsupported_media_type",
    ),
    (
        "no Content-Type",
        "POST",
        CMPL,
        b'{"prompt": "x"}',
        {"Authorization": f"Bearer {KEY}"},
        400,
        "unsupported_media_type",
    ),
    ("chat: missing messages", "POST", CHAT, b'{"max_tokens": 3}', AUTH, 400, None),
    ("chat: empty messages", "POST", CHAT, b'{"messages": []}', AUTH, 400, None),
    ("chat: messages not a list", "POST", CHAT, b'{"messages": "hi"}', AUTH, 400, None),
    (  # (any string is a role: vLLM passes custom roles to the template)
        "chat: role not a string",
        "POST",
        CHAT,
        b'{"messages": [{"role": 7, "content": "hi"}]}',
        AUTH,
        400,
        None,
    ),
    (
        "chat: a content part neither a string nor a part",
        "POST",
        CHAT,
        b'{"messages": [{"role": "user", "content": ["hi", 5]}]}',
        AUTH,
        400,
        None,
    ),
    (
        "chat: content of wrong type",
        "POST",
        CHAT,
        b'{"messages": [{"role": "user", "content": 5}]}',
        AUTH,
        400,
        None,
    ),
    (
        "chat: image content part",
        "POST",
        CHAT,
        b'{"messages": [{"role": "user", "content": '
        b'[{"type": "image_url", "image_url": {"url": "x"}}]}]}',
        AUTH,
        400,
        None,
    ),
    (
        "chat: negative max_completion_tokens",
        "POST",
        CHAT,
        b"{" + MSG + b', "max_completion_tokens": -3}',
        AUTH,
        400,
        None,
    ),
    ("responses: no input", "POST", "/v1/responses", b'{"model": "tiny"}', AUTH, 400, None),
    (
        "responses: background",
        "POST",
        "/v1/responses",
        b'{"input": "hi", "background": true}',
        AUTH,
        400,
        "unsupported_parameter",
    ),
    (
        "responses: a text format of no known type",
        "POST",
        "/v1/responses",
        b'{"input": "hi", "text": {"format": {"type": "xml"}}}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "responses: include of output the server doesn't write",
        "POST",
        "/v1/responses",
        b'{"input": "hi", "include": ["message.output_text.logprobs"]}',
        AUTH,
        400,
        "unsupported_parameter",
    ),
    (
        "responses: an image part",
        "POST",
        "/v1/responses",
        b'{"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}',
        AUTH,
        400,
        None,
    ),
    (
        "responses: unknown item type",
        "POST",
        "/v1/responses",
        b'{"input": [{"type": "web_search_call"}]}',
        AUTH,
        400,
        None,
    ),
    (
        "tokenize: neither prompt nor messages",
        "POST",
        "/tokenize",
        b'{"add_special_tokens": false}',
        AUTH,
        400,
        "invalid_value",
    ),
    ("detokenize: tokens as text", "POST", "/detokenize", b'{"tokens": "1 2"}', AUTH, 400, None),
    (
        "detokenize: a negative id",
        "POST",
        "/detokenize",
        b'{"tokens": [1, -2]}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "chat: tool_choice naming no tool",
        "POST",
        CHAT,
        b"{" + MSG + b', "tools": [{"type": "function", "function": {"name": "f"}}], '
        b'"tool_choice": {"type": "function", "function": {"name": "g"}}}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "chat: a tool that is no function",
        "POST",
        CHAT,
        b"{" + MSG + b', "tools": [{"type": "web_search"}]}',
        AUTH,
        400,
        None,
    ),
    (
        "chat: a function without a name",
        "POST",
        CHAT,
        b"{" + MSG + b', "tools": [{"type": "function", "function": {}}]}',
        AUTH,
        400,
        None,
    ),
    (
        "chat: tool call arguments not a string",
        "POST",
        CHAT,
        b'{"messages": [{"role": "assistant", "tool_calls": [{"type": '
        b'"function", "function": {"name": "f", "arguments": {"a": 1}}}]}]}',
        AUTH,
        400,
        None,
    ),
    (
        "chat: a response format of no known type",
        "POST",
        CHAT,
        b"{" + MSG + b', "response_format": {"type": "yaml"}}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "chat: top_logprobs without logprobs",
        "POST",
        CHAT,
        b"{" + MSG + b', "top_logprobs": 2}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "chat: top_logprobs over 20",
        "POST",
        CHAT,
        b"{" + MSG + b', "logprobs": true, "top_logprobs": 21}',
        AUTH,
        400,
        "invalid_value",
    ),
    (
        "chat: template kwargs not an object",
        "POST",
        CHAT,
        b"{" + MSG + b', "chat_template_kwargs": [1]}',
        AUTH,
        400,
        None,
    ),
    (
        "chat: template kwargs that break it",
        "POST",
        CHAT,
        b"{" + MSG + b', "chat_template_kwargs": {"tokenize": true}}',
        AUTH,
        400,
        None,
    ),
    (
        "too many bad words",
        "POST",
        CMPL,
        b'{"prompt": "x", "bad_words": [' + b",".join([b'"w"'] * 1025) + b"]}",
        AUTH,
        400,
        None,
    ),
    (
        "structural tag whose begin is not text",
        "POST",
        CMPL,
        b'{"prompt": "x", "structured_outputs": {"structural_tag": {"structures": [{"begin": 5,'
        b' "schema": {}, "end": "x"}], "triggers": ["a"]}}}',
        AUTH,
        400,
        None,
    ),
    (
        "structural tag whose schema is not one",
        "POST",
        CMPL,
        b'{"prompt": "x", "structured_outputs": {"structural_tag": {"structures": [{"begin":'
        b' "<a>", "schema": 5, "end": "x"}], "triggers": ["<a"]}}}',
        AUTH,
        400,
        None,
    ),
]


@pytest.fixture(scope="module")
def server(checkpoints):
    engine = AsyncLLMEngine.from_engine_args(
        str(checkpoints("qwen3-tiny")),
        dtype="float32",
        device="cpu",
        num_kv_blocks=128,
        max_model_len=MAX_MODEL_LEN,
    )
    with ServerThread(build_app(engine, ["tiny"], api_key=KEY, max_body_bytes=MAX_BODY)) as srv:
        yield srv
    engine.shutdown()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def normal_request_succeeds(http) -> None:
    r = http.post(
        CMPL,
        headers=AUTH,
        json={"model": "tiny", "prompt": "hi", "max_tokens": 2, "ignore_eos": True},
    )
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_there_are_enough_distinct_cases():
    distinct_requests = {
        (method, path, body, str(headers)) for _, method, path, body, headers, _, _ in CASES
    }
    assert len(CASES) >= 25 and len({c[0] for c in CASES}) == len(distinct_requests) == len(CASES)


@pytest.mark.parametrize(
    "name,method,path,body,headers,status,code", CASES, ids=[c[0] for c in CASES]
)
def test_bad_request(http, name, method, path, body, headers, status, code):
    r = http.request(method, path, content=body, headers=headers)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert (
        isinstance(err["message"], str)
        and err["message"]
        and isinstance(err["type"], str)
        and "code" in err
    )
    if code is not None:
        assert err["code"] == code
    normal_request_succeeds(http)


def test_bad_streaming_request_fails_before_the_stream(http):
    """Validation happens before the response starts, so a streaming request gets a plain 400, not a
    broken stream."""
    r = http.post(CMPL, headers=AUTH, json={"prompt": [1] * 300, "stream": True})
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")


def test_server_is_clean_afterwards(server, http):
    normal_request_succeeds(http)
    m = parse_metrics(http.get("/metrics").text)
    assert (m["num_requests_in_engine"], m["num_free_kv_blocks"], m["num_kv_blocks"]) == (
        0,
        128,
        128,
    )
    assert http.get("/health").json() == {"status": "ok"}


def test_fields_of_the_other_endpoint_are_ignored(http):
    """A field another endpoint has, sent to this one, is ignored as vLLM ignores it: chat's
    `best_of` makes no extra choices, the completions' `tools` and `chat_template_kwargs` are not
    read (they were a 500)."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "best_of": 50}
    r = http.post(CHAT, headers=AUTH, json=chat)
    assert r.status_code == 200 and len(r.json()["choices"]) == 1, r.text
    assert r.json()["choices"][0]["logprobs"] is None
    tool = {"type": "function", "function": {"name": "f"}}
    for extra in ({"tools": [tool]}, {"chat_template_kwargs": "x"}, {"best_of": "x"}):
        body = {"prompt": "hi", "max_tokens": 1} | extra
        r = http.post(CMPL if "best_of" not in extra else CHAT, headers=AUTH, json=body)
        assert r.status_code in (200, 400) and r.status_code != 500, r.text


def test_truncation_takes_a_text_prompt_longer_than_the_context(http):
    """`truncate_prompt_tokens` keeps the last tokens of a text prompt too long for the context
    (the check of its characters, before tokenizing, would refuse it otherwise), as vLLM does."""
    long = "a b " * 15000  # 60,000 characters: more than 256 tokens of any length could hold
    body = {"prompt": long, "max_tokens": 2, "ignore_eos": True}
    assert http.post(CMPL, headers=AUTH, json=body).status_code == 400
    r = http.post(CMPL, headers=AUTH, json=body | {"truncate_prompt_tokens": 50})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 50, r.text


def test_bad_words_are_served_within_the_limit(http):
    """A thousand bad words are tokenized in the request's thread and looked up by the step once
    per word length: the word the model writes unconstrained is gone."""
    body = {"prompt": "hi", "max_tokens": 8, "ignore_eos": True, "temperature": 0}
    free = http.post(CMPL, headers=AUTH, json=body).json()["choices"][0]["text"]
    word = free.split()[0]
    words = [f"w{i}x" for i in range(1023)] + [word]
    r = http.post(CMPL, headers=AUTH, json=body | {"bad_words": words})
    assert r.status_code == 200, r.text
    assert word not in r.json()["choices"][0]["text"].split(), (free, r.json())


def test_engine_refusals_name_their_field(http):
    """What only the engine checks (`max_logprobs`) comes back as a 400 naming the request field
    at fault, as the server's own checks do (a prompt too long for the context)."""
    r = http.post(CMPL, headers=AUTH, json={"prompt": "x", "logprobs": 21})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs", r.text
    r = http.post(CMPL, headers=AUTH, json={"prompt": [1] * 300, "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text
