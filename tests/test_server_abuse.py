"""Issue 22 ("no client can hurt the others"): request chat templates, bounded validation,
TCP_NODELAY, fields the server would otherwise ignore, tiny temperatures, error texts and limits.

One tiny CPU engine serves two apps: the default one, and one started with
`trust_request_chat_template` (vLLM's `--trust-request-chat-template`). Every loop is bounded in
count and time; everything is on loopback."""

import json
import socket
import statistics
import subprocess
import sys
import time
import httpx
import pytest
from metainfer.engine.sampling_params import SamplingParams
from metainfer.entrypoints.openai.engine_loop import AsyncLLMEngine
from metainfer.entrypoints.openai.api_server import ServerThread, bind_socket, build_app

MAX_MODEL_LEN = 256
CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
JSON = {"content-type": "application/json"}
HI = [{"role": "user", "content": "hi"}]
INJECTED = "INJECTED {{ messages[0].content }}"


@pytest.fixture(scope="module")
def engine(checkpoints):
    engine = AsyncLLMEngine.from_engine_args(
        str(checkpoints("qwen3-tiny")),
        dtype="float32",
        device="cpu",
        num_kv_blocks=128,
        max_model_len=MAX_MODEL_LEN,
    )
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def http(engine):
    with ServerThread(build_app(engine, ["tiny"])) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            yield c


@pytest.fixture(scope="module")
def trusting(engine):
    with ServerThread(build_app(engine, ["tiny"], trust_request_chat_template=True)) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            yield c


def error_of(r: httpx.Response, status: int = 400) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


# item 1: a request's chat template


@pytest.mark.parametrize("path", ["/tokenize", CHAT])
@pytest.mark.parametrize(
    "extra,param",
    [
        (
            {"chat_template_kwargs": {"chat_template": INJECTED}},
            "chat_template_kwargs.chat_template",
        ),
        ({"chat_template": INJECTED}, "chat_template"),
    ],
)
def test_request_chat_template_refused_by_default(http, path, extra, param):
    err = error_of(http.post(path, json={"messages": HI, "max_tokens": 2} | extra))
    assert err["param"] == param and param in err["message"]
    assert "--trust-request-chat-template" in err["message"]


def test_other_template_kwargs_still_work(http):
    body = {"messages": HI, "chat_template_kwargs": {"enable_thinking": False}}
    with_kwargs = http.post("/tokenize", json=body)
    assert with_kwargs.status_code == 200, with_kwargs.text
    assert (
        with_kwargs.json()["tokens"]
        != http.post("/tokenize", json={"messages": HI}).json()["tokens"]
    )
    r = http.post(CHAT, json=body | {"max_tokens": 2})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "extra", [{"chat_template_kwargs": {"chat_template": INJECTED}}, {"chat_template": INJECTED}]
)
def test_trusting_server_renders_the_request_template(trusting, extra):
    r = trusting.post("/tokenize", json={"messages": HI, "return_token_strs": True} | extra)
    assert r.status_code == 200, r.text
    assert "".join(r.json()["token_strs"]).replace("Ġ", " ") == "INJECTED hi"


# inputs vLLM takes laxly, as it gives them to the template

SHOW = (  # a template that writes what it is given
    "{% for t in tools or [] %}{{ t.type }} {{ t.function.name }}|{% endfor %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }} ({{ m.reasoning_content or '' }})|"
    "{% endfor %}"
)


def test_lax_inputs_reach_the_template_as_vllm_gives_them(http, trusting):
    """A custom role (vLLM's, e.g. `ipython`) as it is, a tool without `type` as a function, a
    list of plain strings as text parts, an assistant's `reasoning` as `reasoning_content`."""
    messages = [
        {"role": "ipython", "content": "42"},
        {"role": "user", "content": ["Hi", "there"]},
        {"role": "assistant", "content": "Yes.", "reasoning": "Hm."},
    ]
    tools = [{"function": {"name": "now"}}]
    body = {"messages": messages, "tools": tools, "add_generation_prompt": False}
    ids = trusting.post("/tokenize", json=body | {"chat_template": SHOW}).json()["tokens"]
    text = trusting.post("/detokenize", json={"tokens": ids}).json()["prompt"]
    assert text == "function now|ipython: 42 ()|user: Hi\nthere ()|assistant: Yes. (Hm.)|"
    chat = {"messages": messages[:2], "tools": tools, "max_tokens": 1}  # (the model's template)
    assert http.post(CHAT, json=chat).status_code == 200


# item 2: validation that fails fast, bounded, off the event loop

BAD_2MB = json.dumps({"prompt": ["x"] + [1] * 700_000}).encode()  # 2.1 MB, 700k wrong items


def test_huge_wrong_list_fails_fast_with_a_short_summary(http):
    t = time.monotonic()
    err = error_of(http.post(CMPL, content=BAD_2MB, headers=JSON))
    assert time.monotonic() - t < 2, "validation must stop at the first wrong item"
    assert len(err["message"]) < 500 and err["param"] == "prompt"
    assert "more errors" in err["message"]  # at most a few quoted, the rest counted


def test_body_over_the_limit_is_a_413(engine):
    with ServerThread(build_app(engine, ["tiny"], max_body_bytes=1 << 20)) as srv:
        r = httpx.post(srv.url + CMPL, content=BAD_2MB, headers=JSON, timeout=30)
    assert error_of(r, 413)["code"] == "request_too_large"


ATTACKER = """
import sys, time, httpx
url, body, pause = sys.argv[1], open(sys.argv[2], "rb").read(), float(sys.argv[3])
deadline = time.monotonic() + 30
with httpx.Client(timeout=30) as c:
    print("ready", flush=True)
    for _ in range(2000):  # bounded in count and time (the test kills it when done)
        if time.monotonic() > deadline:
            break
        r = c.post(url, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400, r.status_code
        time.sleep(pause)  # (0: a flood, each body sent as soon as the last one's 400 came)
"""


@pytest.mark.parametrize("pause", [0.2, 0.0])
def test_bad_bodies_do_not_stall_other_clients(http, tmp_path, pause):
    """Large bad bodies one after another (and as a flood) are validated in a worker process: the
    other clients' requests and `/health` go on at their own pace."""
    small = {"model": "tiny", "prompt": "hello there", "max_tokens": 40, "ignore_eos": True}

    def timed(path, **kw) -> float:
        t = time.monotonic()
        r = http.request("GET" if path == "/health" else "POST", path, **kw)
        assert r.status_code == 200, r.text
        return time.monotonic() - t

    timed(CMPL, json=small)  # (warm)
    idle = statistics.median(timed(CMPL, json=small) for _ in range(5))
    body = tmp_path / "bad.json"
    body.write_bytes(BAD_2MB)
    attacker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            ATTACKER,
            str(http.base_url).rstrip("/") + CMPL,
            str(body),
            str(pause),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert attacker.stdout.readline().strip() == "ready"
        time.sleep(3)  # (its posts under way, the worker process started at the first)
        health = [timed("/health") for _ in range(20)]
        busy = statistics.median(timed(CMPL, json=small) for _ in range(5))
        assert attacker.poll() is None, "the attack must last through the measurements"
    finally:
        attacker.kill()
        attacker.wait(10)
    p90 = sorted(health)[int(0.9 * len(health))]
    print(f"idle {idle:.3f} s, busy {busy:.3f} s, /health p90 {p90:.3f} s, max {max(health):.3f} s")
    # under 100 ms at the 90th percentile (on 2 shared cores one probe can meet a scheduler
    # hiccup), and never a stall
    assert p90 < 0.1 and max(health) < 0.5, health
    assert busy <= 2 * idle, (busy, idle)


# item 6: TCP_NODELAY


def test_served_sockets_have_tcp_nodelay(http):
    s = bind_socket("127.0.0.1", 0)
    try:
        assert s.proto == socket.IPPROTO_TCP  # asyncio sets NODELAY on what it accepts
        assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        s.close()
    http.get("/health")
    times = []
    for _ in range(10):  # one kept-alive connection: no Nagle/delayed-ACK wait (~40 ms)
        t = time.monotonic()
        assert http.get("/health").status_code == 200
        times.append(time.monotonic() - t)
    assert statistics.median(times) < 0.02, times


# item 7: fields the server would have ignored


@pytest.mark.parametrize(
    "path,field,value",
    [
        (CHAT, "guided_decoding_backend", "outlines"),
        (CHAT, "audio", {"voice": "alloy", "format": "wav"}),
        (CMPL, "logits_processors", ["m:P"]),
        (CMPL, "priority", 1),
        (CHAT, "use_beam_search", True),
        (CMPL, "prompt_logprobs", 1),
        (CHAT, "prompt_logprobs", 0),
    ],
)
def test_unsupported_fields_are_named(http, path, field, value):
    body = {"max_tokens": 2, field: value} | (
        {"messages": HI} if path == CHAT else {"prompt": "hi"}
    )
    err = error_of(http.post(path, json=body))
    assert (err["param"], err["code"]) == (field, "unsupported_parameter") and field in err[
        "message"
    ]


def test_neutral_values_of_those_fields_pass(http):
    body = {"prompt": "hi", "max_tokens": 2, "priority": 0, "use_beam_search": False}
    assert http.post(CMPL, json=body | {"response_format": {"type": "text"}}).status_code == 200


# item 8: tiny temperatures are greedy


def test_tiny_temperature_is_greedy(http):
    assert SamplingParams(temperature=1e-40).greedy

    def ids(t):
        body = {"prompt": "hello", "max_tokens": 8, "ignore_eos": True, "temperature": t}
        r = http.post(CMPL, json=body | {"return_token_ids": True})
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["token_ids"]

    greedy = ids(0)
    assert ids(1e-40) == greedy and set(greedy) != {0}


# item 10: error texts and limits


def test_no_python_error_text_in_a_400(http):
    tools = [{"type": "function", "function": {"name": "f"}}]
    body = {"messages": HI, "tools": tools, "tool_choice": {"type": "function", "function": "f"}}
    err = error_of(http.post(CHAT, json=body))
    assert "attribute" not in err["message"] and err["param"].startswith("tool_choice")
    err = error_of(http.post(CHAT, json={"messages": HI, "chat_template_kwargs": {"tokenize": 1}}))
    assert "keyword" not in err["message"] and "argument" not in err["message"]


def test_choice_limit_checked_before_tokenizing(http):
    body = {"prompt": ["hello world " * 20] * 20_000, "n": 2}  # 40k choices, 5 MB of text
    t = time.monotonic()
    err = error_of(http.post(CMPL, json=body))
    assert err["param"] == "n" and time.monotonic() - t < 2


def test_tokenize_has_a_size_limit(http):
    t = time.monotonic()
    err = error_of(http.post("/tokenize", json={"prompt": "hello " * 1_000_000}))
    assert err["code"] == "context_length_exceeded" and time.monotonic() - t < 2
    assert http.post("/tokenize", json={"prompt": "hello " * 10}).status_code == 200


@pytest.mark.parametrize("key", [" 5", "5 ", "1_0", "٥", "+5", "05", "-1", "5.0", ""])
def test_logit_bias_keys_are_canonical_ids(http, key):
    err = error_of(http.post(CMPL, json={"prompt": "hi", "logit_bias": {key: 1}}))
    assert err["param"] == "logit_bias"


def test_logit_bias_bounds(http):
    ok = http.post(CMPL, json={"prompt": "hi", "max_tokens": 2, "logit_bias": {"5": 1, "0": -2}})
    assert ok.status_code == 200, ok.text
    error_of(http.post(CMPL, json={"prompt": "hi", "logit_bias": {"151936": 1}}))  # vocab size
    error_of(http.post(CMPL, json={"prompt": "hi", "logit_bias": {"5": "1"}}))
    error_of(http.post(CMPL, json={"prompt": "hi", "logit_bias": {"5": 10**400}}))


def test_detokenize_takes_every_id_of_the_model(http):
    r = http.post("/detokenize", json={"tokens": [151669, 151935]})  # past the tokenizer's ids
    assert r.status_code == 200, r.text
    assert error_of(http.post("/detokenize", json={"tokens": [151936]}))["param"] == "tokens"


@pytest.mark.parametrize(
    "field, value",
    [
        ("stop", [f"s{i}" for i in range(65)]),
        ("stop", ["x" * 1025]),
        ("stop_token_ids", list(range(4097))),
    ],
)
def test_stop_limits(http, field, value):
    "More stop strings or ids than the documented limits: a 400 naming the field, before any step."
    err = error_of(http.post(CMPL, json={"prompt": "hi", "max_tokens": 1, field: value}))
    assert err["param"] == field
    ok = {"stop": [f"s{i}" for i in range(64)], "stop_token_ids": list(range(4096))}
    assert http.post(CMPL, json={"prompt": "hi", "max_tokens": 1, field: ok[field]}).is_success


def test_streamed_response_error_event_code(http, engine):
    """An engine failure mid-stream ends a streamed `/v1/responses` response with an `error` event
    whose code is the other endpoints' `engine_unavailable`."""
    step, failed = engine.engine.step, []

    def failing_step():
        if not failed:
            failed.append(1)
            raise RuntimeError("boom")  # once: the engine aborts what runs, then goes on
        return step()

    req = {"input": "hello", "max_output_tokens": 100, "stream": True}
    events = []
    with http.stream("POST", "/v1/responses", json=req) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if events[-1]["type"] == "response.output_text.delta" and not failed:
                    engine.engine.step = failing_step
    del engine.engine.step  # (the instance attribute: the class's method again)
    assert failed and events[-1]["type"] == "error", events[-2:]
    assert events[-1]["code"] == "engine_unavailable"
    assert http.post(CMPL, json={"prompt": "hi", "max_tokens": 2}).is_success


def test_dead_engine_thread_turns_health_to_503(checkpoints):
    """The engine thread itself dies (not a worker process): the request in flight gets a 503,
    `/health` says 503, and so does every later request."""
    from metainfer.distributed.workers import WorkerDied

    engine = AsyncLLMEngine.from_engine_args(
        str(checkpoints("qwen3-tiny")), dtype="float32", device="cpu", num_kv_blocks=32
    )

    def dying_step():
        raise WorkerDied("rank 1 exited")  # what ends the thread (other errors abort requests)

    try:
        with ServerThread(build_app(engine, ["tiny"])) as srv:
            with httpx.Client(base_url=srv.url, timeout=30) as c:
                assert c.get("/health").status_code == 200
                engine.engine.step = dying_step
                r = c.post(CMPL, json={"prompt": "hi", "max_tokens": 4})
                assert error_of(r, 503)["code"] == "engine_unavailable"
                assert not engine.is_alive
                assert error_of(c.get("/health"), 503)["code"] == "engine_unavailable"
                assert c.post(CMPL, json={"prompt": "hi", "max_tokens": 4}).status_code == 503
    finally:
        engine.shutdown()


@pytest.mark.parametrize("stream", [False, True])
def test_echoed_prompt_logprobs_scored_once(http, engine, stream):
    """echo + logprobs + n: the prompt is scored by one choice; the others echo the same logprobs
    and take its blocks from the prefix cache (a choice that scores a prompt takes no hits)."""
    prompt = list(range(1000, 1040))  # 40 tokens: two full 16-token blocks
    body = {"prompt": prompt, "echo": True, "logprobs": 2, "n": 4, "max_tokens": 2}
    bm = engine.engine.block_manager
    hits = bm.num_cache_hit_tokens
    if stream:
        chunks = []
        with http.stream("POST", CMPL, json=body | {"stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    chunks.append(json.loads(line[6:]))
        firsts = {}
        for ch in chunks:
            for c in ch["choices"]:
                firsts.setdefault(c["index"], c["logprobs"])
        choices = [firsts[i] for i in range(4)]
    else:
        r = http.post(CMPL, json=body)
        assert r.status_code == 200, r.text
        choices = [c["logprobs"] for c in r.json()["choices"]]
    echoed = [c["token_logprobs"][:40] for c in choices]
    assert echoed[0][0] is None and None not in echoed[0][1:]
    assert all(e == echoed[0] for e in echoed)
    assert bm.num_cache_hit_tokens - hits >= 3 * 32


def test_errors_and_requests_cross_processes():
    "What the body-validating worker sends back pickles whole: an `OpenAIError`, a request."
    import pickle
    from metainfer.entrypoints.openai.protocol import CompletionRequest, OpenAIError, parse_request

    e = pickle.loads(pickle.dumps(OpenAIError("m", 413, "too_big", "prompt", "server_error")))
    assert (e.message, e.status, e.code, e.param, e.type) == (
        "m",
        413,
        "too_big",
        "prompt",
        "server_error",
    )
    req = parse_request(CompletionRequest, b'{"prompt": [1, 2], "max_tokens": 3}')
    assert pickle.loads(pickle.dumps(req)) == req
