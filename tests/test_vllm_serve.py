"""`metainfer serve` as a drop-in for `vllm serve` (issue 25, items 1, 2, 4 and 5): vLLM's flags,
each checked for its effect (or, where it cannot apply, accepted with a log line saying why),
one-line errors for a user's mistakes, `/metrics` with vLLM's names and types read by
`prometheus_client`'s parser, `/v1/models/{id}`, `/ping`, and SIGTERM during 32 streams.

Two real servers (the tiny model, CPU) serve the module: `flagged`, started with every flag at once
(HTTPS among them), and `plain`, with vLLM's defaults, which its SIGTERM test stops."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

TEMPLATE = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"
ORIGIN = "http://a.example"


class Server:
    "A `metainfer serve` process: its URL once it serves, and every line it printed."

    def __init__(self, *flags: str, cwd: Path | None = None):
        env = os.environ | {"OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "metainfer", "serve", "--port", "0", "--device", "cpu"]
        cmd += ["--num-kv-blocks", "64", "--max-model-len", "256", *flags]
        if cwd is not None:  # `python -m` finds this checkout's package from elsewhere too
            env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])
        self.p = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
        )
        self.lines: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.p.poll() is None:
            line = self.p.stdout.readline()
            self.lines.append(line)
            if "metainfer: serving" in line:
                break
        assert "metainfer: serving" in self.lines[-1], "".join(self.lines[-20:])
        self.url = self.lines[-1].split(" on ")[1].split()[0]
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        try:
            kids = psutil.Process(self.p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            kids = []
        for q in [*kids, self.p]:
            try:
                q.kill()
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass
        self.p.wait(timeout=10)


@pytest.fixture(scope="module")
def folders(checkpoints, tmp_path_factory):
    """A checkpoint without tokenizer files (`--tokenizer` gives it one), a chat template file, a
    generation_config.json folder, and a self-signed certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed for the certificate of --ssl-certfile")
    root, ckpt = tmp_path_factory.mktemp("vllm_flags"), checkpoints("qwen3-tiny")
    model = root / "model-notok"
    model.mkdir()
    for f in ckpt.iterdir():
        if not f.name.startswith("tokenizer"):
            shutil.copy(f, model / f.name)
    (root / "template.jinja").write_text(TEMPLATE)
    (root / "gen").mkdir()
    gen = {"temperature": 0.0, "top_k": 3, "repetition_penalty": 1.05}
    (root / "gen" / "generation_config.json").write_text(json.dumps(gen))
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(root / "key.pem"), "-out", str(root / "cert.pem")]
        + ["-subj", "/CN=127.0.0.1"],
        check=True,
        capture_output=True,
    )
    return root, ckpt


@pytest.fixture(scope="module")
def flagged(folders):
    root, ckpt = folders
    flags = ["model-notok", "--tokenizer", str(ckpt), "--dtype", "half", "--seed", "7"]
    flags += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--trust-remote-code"]
    flags += ["--max-num-batched-tokens", "32", "--chat-template", str(root / "template.jinja")]
    flags += ["--generation-config", str(root / "gen"), "--enable-log-requests"]
    flags += ["--log-level", "info", "--uvicorn-log-level", "warning", "--root-path", "/api"]
    flags += ["--allowed-origins", json.dumps([ORIGIN]), "--allowed-methods", '["GET", "POST"]']
    flags += ["--allowed-headers", '["x-test"]', "--allow-credentials"]
    flags += ["--ssl-keyfile", str(root / "key.pem"), "--ssl-certfile", str(root / "cert.pem")]
    s = Server(*flags, cwd=root)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def plain():
    s = Server("--disable-log-requests", "--log-level", "info", "--shutdown-timeout", "20")
    yield s
    s.stop()


def first_sample_offline(folders) -> list[int]:
    "The first unseeded sample of an `LLM` built as `flagged`'s engine (seed 7, half, tokenizer)."
    from metainfer import LLM, SamplingParams

    root, ckpt = folders
    kw = dict(tokenizer=str(ckpt), dtype="half", seed=7, device="cpu", num_kv_blocks=64)
    with LLM(str(root / "model-notok"), max_model_len=256, **kw) as llm:
        params = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True)
        return llm.generate([1, 2, 3], params, use_tqdm=False)[0].outputs[0].token_ids


def check_seed(s: Server, folders, c: httpx.Client) -> None:
    "--seed 7: the server's first unseeded sample is the one an offline engine seeded 7 draws."
    body = {"prompt": [1, 2, 3], "max_tokens": 8, "ignore_eos": True, "temperature": 1.0}
    body |= {"top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}
    r = c.post("/v1/completions", json=body | {"return_token_ids": True})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["token_ids"] == first_sample_offline(folders)


def check_served_name(s, folders, c):
    "--served-model-name defaults to the model argument as given (a relative folder here)."
    assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["model-notok"]


def check_tokenizer(s, folders, c):
    "--tokenizer: the model folder has none, and text prompts work."
    r = c.post("/v1/completions", json={"prompt": "hello", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 1


def check_chat_template(s, folders, c):
    ids = c.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    text = c.post("/detokenize", json={"tokens": ids["tokens"]}).json()["prompt"]
    assert text == "<<hi>>"


def check_generation_config(s, folders, c):
    "--generation-config FOLDER: fields a request leaves out take the file's; given ones win."
    c.post("/v1/completions", json={"prompt": "a", "max_tokens": 1})
    c.post("/v1/completions", json={"prompt": "b", "max_tokens": 1, "temperature": 0.5})
    time.sleep(0.2)
    logged = [line for line in s.lines if "INFO metainfer: request cmpl-" in line]
    assert "temperature=0.0, top_p=1.0, top_k=3" in logged[-2], logged[-2]
    assert "repetition_penalty=1.05" in logged[-2]
    assert "temperature=0.5, top_p=1.0, top_k=3" in logged[-1], logged[-1]


def check_log_requests(s, folders, c):
    assert "prompt tokens [1]" in s.log  # --enable-log-requests: one line a request


def check_uvicorn_log_level(s, folders, c):
    "--uvicorn-log-level warning beside --log-level info: no access lines, metainfer's info lines."
    assert '"POST /v1/completions HTTP/1.1" 200' not in s.log
    assert "INFO metainfer: KV cache" in s.log


def check_cors(s, folders, c):
    pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    r = c.options("/v1/completions", headers=pre | {"Access-Control-Request-Headers": "x-test"})
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == ORIGIN
    assert r.headers["access-control-allow-credentials"] == "true"
    assert c.options("/v1/models", headers=pre | {"Origin": "http://b.example"}).status_code == 400
    put = pre | {"Access-Control-Request-Method": "PUT"}
    assert c.options("/v1/models", headers=put).status_code == 400
    r = c.get("/v1/models", headers={"Origin": ORIGIN})
    assert r.headers["access-control-allow-origin"] == ORIGIN


def check_root_path(s, folders, c):
    "--root-path /api: the app knows the prefix a proxy strips (its OpenAPI servers list it)."
    assert c.get("/openapi.json").json()["servers"] == [{"url": "/api"}]
    assert c.get("/health").status_code == 200


def check_ssl(s, folders, c):
    assert s.url.startswith("https://") and c.get("/health").status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(s.url.replace("https://", "http://") + "/health", timeout=5)


def check_dtype(s, folders, c):
    assert "(torch.float16, kernels" in s.log  # --dtype half


def check_no_effect_flags(s, folders, c):
    "Flags that cannot apply are accepted, and the log says why."
    assert "trust_remote_code has no effect" in s.log
    assert "--enable-auto-tool-choice has no effect" in s.log


def check_max_num_batched_tokens(s, folders, c):
    "--max-num-batched-tokens 32: a 100-token prompt is prefilled in chunks and completes."
    r = c.post("/v1/completions", json={"prompt": list(range(100, 200)), "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 100


def check_tool_call_parser(s, folders, c):
    "--tool-call-parser hermes (and auto tool choice): a chat with tools is served."
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    chat = {"messages": [{"role": "user", "content": "hi"}], "tools": [tool], "max_tokens": 4}
    r = c.post("/v1/chat/completions", json=chat | {"tool_choice": "auto"})
    assert r.status_code == 200, r.text  # (a template that takes no tools renders without them)


FLAG_CHECKS = [  # (flag, its check), the seed first: it needs the server's first sample
    ("--seed", check_seed),
    ("--served-model-name (default)", check_served_name),
    ("--tokenizer", check_tokenizer),
    ("--chat-template", check_chat_template),
    ("--generation-config", check_generation_config),
    ("--enable-log-requests", check_log_requests),
    ("--uvicorn-log-level", check_uvicorn_log_level),
    ("--allowed-origins/methods/headers, --allow-credentials", check_cors),
    ("--root-path", check_root_path),
    ("--ssl-keyfile/--ssl-certfile", check_ssl),
    ("--dtype", check_dtype),
    ("--trust-remote-code, --enable-auto-tool-choice", check_no_effect_flags),
    ("--max-num-batched-tokens", check_max_num_batched_tokens),
    ("--tool-call-parser", check_tool_call_parser),
]


@pytest.mark.parametrize("flag,check", FLAG_CHECKS, ids=[f for f, _ in FLAG_CHECKS])
def test_vllm_flag(flagged, folders, flag, check):
    with httpx.Client(base_url=flagged.url, verify=False, timeout=60) as c:
        check(flagged, folders, c)


def test_defaults_where_vllm_has_them(plain):
    "No flags: any origin (CORS), no request lines (--disable-log-requests), uvicorn at info."
    with httpx.Client(base_url=plain.url, timeout=60) as c:
        r = c.options(
            "/v1/models",
            headers={"Origin": "http://x.example", "Access-Control-Request-Method": "GET"},
        )
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
        assert c.post("/v1/completions", json={"prompt": "a", "max_tokens": 1}).status_code == 200
        time.sleep(0.2)
        assert "INFO metainfer: request" not in plain.log
        assert '"POST /v1/completions HTTP/1.1" 200' in plain.log
        name = c.get("/v1/models").json()["data"][0]["id"]
        assert name == "metainfer-tiny-qwen3"  # no model argument: the embedded one, by its name


def test_models_retrieve_and_ping(plain):
    with httpx.Client(base_url=plain.url, timeout=60) as c:
        name = c.get("/v1/models").json()["data"][0]["id"]
        card = c.get(f"/v1/models/{name}").json()
        assert card["id"] == name and card["object"] == "model"
        r = c.get("/v1/models/no-such-model")
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        assert c.get("/ping").status_code == 200 and c.post("/ping").status_code == 200


GAUGES = ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"]
COUNTERS = ["prefix_cache_queries", "prefix_cache_hits", "prompt_tokens", "generation_tokens"]
COUNTERS += ["request_success", "num_preemptions"]
HISTOGRAMS = ["time_to_first_token_seconds", "inter_token_latency_seconds"]
HISTOGRAMS += ["request_time_per_output_token_seconds", "e2e_request_latency_seconds"]
HISTOGRAMS += ["request_queue_time_seconds"]


def scrape(url: str) -> dict:
    "`{family name: family}` of `/metrics`, read by prometheus_client's own parser."
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def count(family, suffix: str = "_count") -> float:
    return sum(s.value for s in family.samples if s.name.endswith(suffix))


def test_metrics_have_vllm_names_and_move(plain):
    before = scrape(plain.url)
    for names, kind in [(GAUGES, "gauge"), (COUNTERS, "counter"), (HISTOGRAMS, "histogram")]:
        for name in names:
            assert before[f"vllm:{name}"].type == kind, name
    labels = before["vllm:num_requests_running"].samples[0].labels
    assert labels["model_name"] == "metainfer-tiny-qwen3"
    reasons = {s.labels["finished_reason"] for s in before["vllm:request_success"].samples}
    assert {"stop", "length", "abort"} <= reasons
    body = {"prompt": "hello", "max_tokens": 5, "ignore_eos": True}
    for stream in (False, True, True):
        r = httpx.post(f"{plain.url}/v1/completions", json=body | {"stream": stream}, timeout=60)
        assert r.status_code == 200
    after = scrape(plain.url)
    for name in HISTOGRAMS:
        moved = count(after[f"vllm:{name}"]) - count(before[f"vllm:{name}"])
        assert moved >= (12 if name == "inter_token_latency_seconds" else 3), name
    tokens = count(after["vllm:generation_tokens"], "_total")
    assert tokens - count(before["vllm:generation_tokens"], "_total") == 15
    ok = [s for s in after["vllm:request_success"].samples if s.name.endswith("_total")]
    assert sum(s.value for s in ok if s.labels["finished_reason"] == "length") >= 3
    assert count(after["vllm:prefix_cache_queries"], "_total") > 0


def read_stream(url: str, out: list) -> None:
    body = {"prompt": "hello", "max_tokens": 24, "ignore_eos": True, "stream": True}
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
            out.append(r.status_code)
            out += [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    except httpx.HTTPError as e:
        out.append(e)


def test_sigterm_drains_32_streams(plain):
    """SIGTERM during 32 streaming requests: each ends with a finish_reason and `[DONE]`, the
    process exits 0 within the drain timeout (20 s), and no child process is left."""
    kids = psutil.Process(plain.p.pid).children(recursive=True)
    outs = [[] for _ in range(32)]
    threads = [threading.Thread(target=read_stream, args=(plain.url, o)) for o in outs]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while not all(len(o) > 1 for o in outs) and time.monotonic() < deadline:
        time.sleep(0.02)  # every stream has its first chunk
    start = time.monotonic()
    plain.p.send_signal(signal.SIGTERM)
    assert plain.p.wait(timeout=25) == 0
    assert time.monotonic() - start < 20
    for t in threads:
        t.join(timeout=10)
    for o in outs:
        assert o[0] == 200 and o[-1] == "[DONE]", o[-3:]
        last = json.loads(o[-2])
        assert last["choices"][0]["finish_reason"] == "length", last
    assert "draining" in plain.log and "server stopped" in plain.log
    assert not psutil.wait_procs(kids, timeout=10)[1], "a child outlived the server"


def metainfer(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}  # (an id: the cache only)
    return subprocess.run(
        [sys.executable, "-m", "metainfer", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=Path(__file__).parents[1],
    )


def test_user_mistakes_are_one_line():
    "Each mistake: one line on stderr naming the problem and the fix, exit code != 0, no traceback."
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        cases = [
            (["serve", "--port", port], "already in use"),
            (["serve", "/no/such/folder"], "does not exist"),
            (["serve", "metainfer-tests/absent"], "hf download metainfer-tests/absent"),
            (["serve", "--dtype", "fp8"], "choose from 'auto', 'half'"),
            (["serve", "--tool-call-parser", "nope"], "choose from 'hermes'"),
            (["generate", "/no/such/folder"], "does not exist"),
        ]
        for argv, says in cases:
            r = metainfer(*argv)
            lines = r.stderr.strip().splitlines()
            assert r.returncode != 0 and len(lines) == 1 and says in lines[0], (argv, r.stderr)
            assert "Traceback" not in r.stderr + r.stdout


def test_help_and_version_are_fast_and_import_no_torch():
    for argv in (["--help"], ["--version"], ["serve", "--help"], ["bench", "latency", "--help"]):
        start = time.monotonic()
        r = metainfer(*argv)
        took = time.monotonic() - start
        assert r.returncode == 0 and took < 2.0, (argv, took)  # about 0.2 s on an idle machine
    assert metainfer("--version").stdout.startswith("metainfer ")
    probe = "import sys; from metainfer.entrypoints.cli import build_parser; build_parser(); "
    probe += "print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr
    help_text = metainfer("serve", "--help").stdout
    for endpoint in ("/v1/completions", "/v1/chat/completions", "/v1/models", "/metrics"):
        assert endpoint in metainfer("--help").stdout + help_text


def test_bench_modes_have_help_and_a_default_model(tmp_path):
    "Every bench flag has help text; `bench latency` with no model runs the embedded one."
    from metainfer.entrypoints.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["bench"]
    modes = next(a for a in sub._actions if a.dest == "mode").choices
    for mode, parser in modes.items():
        for action in parser._actions:
            assert action.help, (mode, action.dest)
    argv = ["bench", "latency", "--device", "cpu", "--input-len", "8", "--output-len", "8"]
    r = metainfer(*argv, "--out", str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].startswith("latency: Qwen3ForCausalLM")
    assert list(tmp_path.glob("latency-metainfer-tiny-qwen3-tp1.json"))
