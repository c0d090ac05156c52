"""Every request field OpenAI and vLLM define for chat completions and completions is honoured
(200) or a 400 naming it: none is silently ignored. The lists are OpenAI's API reference and vLLM's
`ChatCompletionRequest` / `CompletionRequest` (protocol.py), each field with a value that asks for
something (not its neutral default)."""

import httpx
import pytest
from metainfer.entrypoints.openai.api_server import ServerThread, build_app
from metainfer.entrypoints.openai.engine_loop import AsyncLLMEngine

SCHEMA = {"type": "object", "properties": {"a": {"enum": ["x", "y"]}}, "required": ["a"]}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}]
# field -> a value that asks for something; shared by both endpoints
SHARED = {
    "max_tokens": 3,
    "temperature": 0.7,
    "top_p": 0.9,
    "n": 2,
    "stream": True,
    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    "stop": ["\n\n"],
    "seed": 1,
    "presence_penalty": 0.5,
    "frequency_penalty": 0.5,
    "logit_bias": {"11": 2.0},
    "user": "someone",
    # vLLM's sampling fields
    "top_k": 5,
    "min_p": 0.1,
    "repetition_penalty": 1.1,
    "stop_token_ids": [11],
    "ignore_eos": True,
    "min_tokens": 1,
    "include_stop_str_in_output": True,
    "skip_special_tokens": False,
    "spaces_between_special_tokens": False,
    "allowed_token_ids": [11, 12, 13],
    "bad_words": ["hello"],
    "truncate_prompt_tokens": 4,
    "return_token_ids": True,
    "structured_outputs": {"choice": ["a", "b"]},
    "guided_json": SCHEMA,
    "guided_regex": "[a-z]+",
    "guided_choice": ["a", "b"],
    "guided_grammar": 'start: "x" | "y"',
    "guided_whitespace_pattern": " ?",
    "guided_decoding_backend": "guidance",
    "response_format": {"type": "json_object"},
    # vLLM's, not implemented here
    "use_beam_search": True,
    "length_penalty": 2.0,
    "priority": 3,
    "logits_processors": ["my.module:Proc"],
    "cache_salt": "s",
    "kv_transfer_params": {"a": 1},
    "vllm_xargs": {"a": 1},
    "request_id": "r-1",
    "return_tokens_as_token_ids": True,
    "prompt_logprobs": 1,
}
CHAT = {  # OpenAI's chat fields (and vLLM's chat-only ones)
    "max_completion_tokens": 3,
    "logprobs": True,
    "top_logprobs": 2,
    "tools": TOOLS,
    "tool_choice": "required",
    "parallel_tool_calls": True,
    "audio": {"voice": "alloy", "format": "wav"},
    "modalities": ["text", "audio"],
    "prediction": {"type": "content", "content": "x"},
    "web_search_options": {"search_context_size": "low"},
    "functions": [{"name": "f"}],
    "function_call": "auto",
    "service_tier": "flex",
    "store": True,
    "metadata": {"k": "v"},
    "reasoning_effort": "high",
    "verbosity": "low",
    "chat_template_kwargs": {"enable_thinking": False},
    "add_generation_prompt": False,
    "continue_final_message": True,
    "echo": True,
    "add_special_tokens": True,
    "include_reasoning": False,
    "documents": [{"title": "t", "text": "x"}],
    "mm_processor_kwargs": {"a": 1},
    "media_io_kwargs": {"a": 1},
    "chat_template": "{{ messages }}",
}
COMPLETION = {
    "logprobs": 2,
    "echo": True,
    "suffix": "tail",
    "best_of": 2,
    "add_special_tokens": False,
    "prompt_embeds": "AAAA",
}
HONOURED = {  # fields this server implements (their effects: the other tests)
    *"max_tokens temperature top_p n stream stream_options stop seed presence_penalty".split(),
    *"frequency_penalty logit_bias user top_k min_p repetition_penalty stop_token_ids".split(),
    *"ignore_eos min_tokens include_stop_str_in_output skip_special_tokens".split(),
    "spaces_between_special_tokens",
    *"allowed_token_ids bad_words truncate_prompt_tokens return_token_ids".split(),
    *"structured_outputs guided_json guided_regex guided_choice guided_grammar".split(),
    *"guided_whitespace_pattern guided_decoding_backend response_format".split(),
    *"max_completion_tokens logprobs top_logprobs tools tool_choice parallel_tool_calls".split(),
    *"chat_template_kwargs add_generation_prompt continue_final_message echo best_of".split(),
    *"request_id add_special_tokens return_tokens_as_token_ids".split(),
}
# honoured in completions only: its special tokens (a chat's: the template's)
REFUSED_IN_CHAT = {"add_special_tokens"}
# honoured only with another field beside it
NEEDS = {
    "top_logprobs": {"logprobs": True},
    "tool_choice": {"tools": TOOLS},
    "guided_whitespace_pattern": {"guided_json": SCHEMA},
    "continue_final_message": {"add_generation_prompt": False},
    "best_of": {"temperature": 1.0},
    "stream_options": {"stream": True},  # (a 400 without it, as in vLLM)
}
# refused with its own message rather than as unsupported
OWN_400 = {"chat_template": "--trust-request-chat-template"}


@pytest.fixture(scope="module")
def url(checkpoints):
    engine = AsyncLLMEngine.from_engine_args(
        str(checkpoints("qwen3-tiny")), dtype="float32", device="cpu", max_model_len=512
    )
    with ServerThread(build_app(engine, ["tiny"])) as srv:
        yield srv.url
    engine.shutdown()


CASES = [("chat", f, v) for f, v in (SHARED | CHAT).items()] + [
    ("completions", f, v) for f, v in (SHARED | COMPLETION).items()
]


@pytest.mark.parametrize("endpoint, field, value", CASES, ids=[f"{e}-{f}" for e, f, _ in CASES])
def test_each_field_is_honoured_or_refused(url, endpoint, field, value):
    body = {"model": "tiny", "max_tokens": 2} | NEEDS.get(field, {}) | {field: value}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": "Say x."}]
        if field == "continue_final_message":
            body["messages"].append({"role": "assistant", "content": "x"})
    else:
        body["prompt"] = "Say x:"
    # (the first grammar builds llguidance's tokenizer: seconds on a busy 2-core machine)
    path = endpoint.replace("chat", "chat/completions")
    r = httpx.post(f"{url}/v1/{path}", json=body, timeout=60)
    if field in HONOURED and not (endpoint == "chat" and field in REFUSED_IN_CHAT):
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 400, (field, r.status_code, r.text[:200])
        err = r.json()["error"]
        assert err["param"] == field or OWN_400.get(field, "\0") in err["message"], err
