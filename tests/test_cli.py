import subprocess
import sys
from pathlib import Path


def test_generate_cli_prints_text_and_speed(checkpoints):
    ckpt = checkpoints("qwen3-tiny")
    exe = Path(sys.executable).parent / "metainfer"  # the console script installed with the package
    r = subprocess.run(
        [
            str(exe),
            "generate",
            str(ckpt),
            "--prompt",
            "Hello",
            "--max-tokens",
            "8",
            "--device",
            "cpu",
            "--ignore-eos",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "8 tokens in" in r.stdout and "tokens/s" in r.stdout


def test_generate_cli_default_is_the_trained_model():
    exe = Path(sys.executable).parent / "metainfer"
    r = subprocess.run(
        [str(exe), "generate", "--max-tokens", "16", "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "embedded default metainfer-tiny-qwen3: a tiny Qwen3 trained here" in r.stdout
    assert "--- prompt: 'And God said'" in r.stdout and "tokens/s" in r.stdout


def test_generate_cli_reads_the_generation_config(tmp_path):
    """Sampling fields no flag sets come from `--generation-config`'s generation_config.json (here
    `max_new_tokens`), as `LLM.get_default_sampling_params` has them; a flag wins over it."""
    (tmp_path / "generation_config.json").write_text('{"top_k": 1, "max_new_tokens": 3}')
    exe = Path(sys.executable).parent / "metainfer"
    run = lambda *flags: subprocess.run(
        [str(exe), "generate", "--device", "cpu", "--generation-config", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    for flags, n in [((), 3), (("--max-tokens", "5"), 5)]:
        r = run(*flags)
        assert r.returncode == 0 and f"[{n} tokens, length]" in r.stdout, (r.stdout, r.stderr)
