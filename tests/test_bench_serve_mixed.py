"""`metainfer bench serve --mixed` end to end: streams of the tiny model on CPU, one long prompt
among them; the JSON has every field and its counts add up."""

import argparse
import asyncio
import json
import pytest
from metainfer.bench import add_bench_parsers
from metainfer.bench.serve_mixed import mixed_benchmark
from metainfer.entrypoints.openai.api_server import ServerThread, build_app
from metainfer.entrypoints.openai.engine_loop import AsyncLLMEngine

MAX_MODEL_LEN = 512


@pytest.fixture(scope="module")
def server(checkpoints):
    engine = AsyncLLMEngine.from_engine_args(
        str(checkpoints("qwen3-tiny")),
        dtype="float32",
        device="cpu",
        num_kv_blocks=256,
        max_model_len=MAX_MODEL_LEN,
    )
    with ServerThread(build_app(engine, ["tiny"])) as srv:
        yield srv
    engine.shutdown()


def run_cli(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="metainfer")
    add_bench_parsers(
        parser.add_subparsers(dest="command").add_parser("bench").add_subparsers(dest="mode")
    )
    args = parser.parse_args(argv)
    args.argv = argv
    return args.func(args)


def test_bench_serve_mixed(server, tmp_path, capsys):
    flags = ["--mixed-streams", "3", "--mixed-stream-output-len", "24", "--input-len", "16"]
    flags += ["--mixed-long-input-len", "200", "--mixed-long-output-len", "4"]
    flags += ["--mixed-delay", "0.05", "--out", str(tmp_path), "--name", "m"]
    run_cli(["bench", "serve", "--base-url", server.url, "--mixed", *flags])
    res = json.loads((tmp_path / "m.json").read_text())
    assert (
        res["command"].startswith("metainfer bench serve --base-url")
        and "--mixed" in res["command"]
    )
    assert res["workload"] == "mixed" and res["model"] == "tiny"
    settings = res["server_settings"]  # (the server's own, from its /metrics)
    assert (settings["max_model_len"], settings["num_kv_blocks"]) == (str(MAX_MODEL_LEN), "256")
    assert (settings["device_name"], settings["dtype"]) == ("cpu", "float32")  # (resolved)
    assert res["mixed"] == {
        "streams": 3,
        "stream_input_len": 16,
        "stream_output_len": 24,
        "long_input_len": 200,
        "long_output_len": 4,
        "delay_s": 0.05,
    }
    assert (res["streams_completed"], res["streams_failed"], res["errors"]) == (3, 0, [])
    assert res["stream_output_tokens"] == [24, 24, 24]
    assert res["long_completed"] and (res["long_prompt_tokens"], res["long_output_tokens"]) == (
        200,
        4,
    )
    assert 0 < res["long_ttft_ms"] <= res["long_e2el_ms"]
    assert res["streams_first_token_s"] + 0.05 <= res["long_sent_s"] < res["long_first_token_s"]
    times = res["token_times_s"]
    assert len(times) == 3 and all(ts == sorted(ts) for ts in times)
    during, outside = res["itl_during_ms"], res["itl_outside_ms"]
    assert during["count"] + outside["count"] == res["itl_count"] == sum(len(t) - 1 for t in times)
    assert res["itl_count"] > 0 and outside["p50"] > 0
    if during["count"]:
        assert res["max_gap_during_ms"] == during["max"] >= during["p99"] >= during["p50"] > 0
    assert 0 <= res["streams_running_through_prefill"] <= 3
    assert (tmp_path / "m.png").stat().st_size > 0
    assert "mixed: 3/3 streams ok, long 200-token prompt ok TTFT" in capsys.readouterr().out


def test_mixed_too_long_for_the_server(server):
    with pytest.raises(ValueError, match="the server takes 512"):
        asyncio.run(mixed_benchmark(server.url, 1, 8, 8, MAX_MODEL_LEN, 16, num_warmups=0))
