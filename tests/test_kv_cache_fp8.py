"""`kv_cache_dtype="fp8"` (vLLM's `--kv-cache-dtype fp8`): K/V (MLA: the latents) cached in FP8
e4m3, saturated at +-448, or divided first by a calibrated checkpoint's per-layer scales. The
reference is HF transformers with a cache that rounds what it stores the same way: greedy tokens
equal for 64 tokens on both trained models (but at near-ties), and TP=2 equals TP=1."""

import argparse
import json
import shutil
import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoTokenizer, DynamicCache
from metainfer import LLM, SamplingParams
from metainfer.config import EngineConfig, add_engine_args, engine_config
from metainfer.layers.attention import KVScale, to_cache
from metainfer.testing import heldout_prompts, hf_generate, trained_model_dir

KV_FP8 = torch.float8_e4m3fn
GREEDY = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)


class Fp8RoundingCache(DynamicCache):
    """HF's cache, storing each new key and value (DeepSeek-V2: latent and rotated key) as an FP8
    pool holds it, divided by the layer's `scales` and multiplied back: what every later step
    attends to. `latent`: both parts take the K scale, as MLA's one latent does."""

    def __init__(self, *args, scales: dict[int, KVScale] | None = None, latent=False, **kw):
        super().__init__(*args, **kw)
        self.scales, self.latent = scales or {}, latent

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        s = self.scales.get(layer_idx, KVScale())
        r = lambda x, c: (to_cache(x, KV_FP8, c).float() * c).to(x.dtype)
        k, v = r(key_states, s.k), r(value_states, s.k if self.latent else s.v)
        return super().update(k, v, layer_idx, *args, **kwargs)


def hf_greedy_fp8(model, ids: list[int], n: int, **cache_kw):
    "HF `generate`, greedy, over an `Fp8RoundingCache`: the tokens and each step's logits."
    cache = Fp8RoundingCache(config=model.config, **cache_kw)
    out = hf_generate(model, ids, n, logits=True, past_key_values=cache)
    return out.sequences[0, len(ids) :].tolist(), out.logits


def run(arch: str, ids: list[list[int]], tp: int = 1, kv: str = "fp8", path=None):
    "Greedy completions by metainfer of the trained model `arch` (or the checkpoint at `path`)."
    with LLM(
        path or trained_model_dir(arch),
        dtype="float32",
        device="cpu",
        tensor_parallel_size=tp,
        kv_cache_dtype=kv,
    ) as llm:
        return [o.outputs[0].token_ids for o in llm.generate(ids, GREEDY, use_tqdm=False)]


def identical_to_hf(ours, ids, model, **cache_kw) -> int:
    """How many of `ours` equal HF's greedy tokens over an `Fp8RoundingCache`; each other one must
    part from HF's at a near-tie: float32 noise below an FP8 code's boundary can flip one stored
    value, which moves the logits by ~1e-3, so the two part only where HF's top two are that
    close."""
    identical = 0
    for mine, prompt in zip(ours, ids):
        ref, logits = hf_greedy_fp8(model, prompt, 64, **cache_kw)
        if mine == ref:
            identical += 1
            continue
        step = next(i for i, (a, b) in enumerate(zip(mine, ref)) if a != b)
        top2 = logits[step][0].topk(2)
        assert mine[step] in top2.indices.tolist(), (step, top2)
        assert top2.values[0] - top2.values[1] < 1e-3 * top2.values[0].abs(), (step, top2)
    return identical


@pytest.mark.parametrize("arch", ["qwen3", "deepseek-v2"])
def test_fp8_kv_cache_greedy_equals_hf_rounding_cache_and_tp2(arch, hf_models):
    tok = AutoTokenizer.from_pretrained(trained_model_dir(arch))
    texts = heldout_prompts()
    ids = [tok.encode(t) for t in texts[:8] + texts[-8:]]
    ours = run(arch, ids)
    identical = identical_to_hf(ours, ids, hf_models(trained_model_dir(arch)))
    print(f"{arch}: {identical} of {len(ids)} identical")
    assert identical >= 14, identical
    assert ours != run(arch, ids, kv="auto")  # the rounding changes some continuation
    assert run(arch, ids[:4], tp=2) == ours[:4]


class AmaxCache(DynamicCache):
    "HF's cache, recording each layer's largest |K| and |V| (MLA: latent and rotated key)."

    def __init__(self, amax: dict[int, tuple[float, float]], **kw):
        super().__init__(**kw)
        self.amax = amax

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        k, v = self.amax.get(layer_idx, (0.0, 0.0))
        new = key_states.abs().max().item(), value_states.abs().max().item()
        self.amax[layer_idx] = max(k, new[0]), max(v, new[1])
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


def calibrate(model, prompts: list[list[int]], latent: bool) -> dict[int, KVScale]:
    """Per-layer scales as llm-compressor calibrates them: the largest |K| and |V| seen over
    `prompts`, over 448 (`latent`: MLA's one latent, one scale for both)."""
    amax = {}
    for p in prompts:
        model(torch.tensor([p]), past_key_values=AmaxCache(amax, config=model.config))
    out = {}
    for i, (k, v) in amax.items():
        k, v = (max(k, v), max(k, v)) if latent else (k, v)
        out[i] = KVScale(*(torch.tensor(x / 448).item() for x in (k, v)))  # as float32 stores it
    return out


def with_kv_scales(src, dst, scales: dict[int, KVScale]):
    """A copy of checkpoint `src` at `dst` as llm-compressor writes a KV-cache scheme: the scales as
    `model.layers.N.self_attn.{k,v}_scale` in a shard of their own, and `kv_cache_scheme`."""
    shutil.copytree(src, dst)
    tensors = {
        f"model.layers.{i}.self_attn.{p}_scale": torch.tensor(getattr(s, p))
        for i, s in scales.items()
        for p in "kv"
    }
    save_file(tensors, dst / "kv-scales.safetensors")
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    index["weight_map"] |= dict.fromkeys(tensors, "kv-scales.safetensors")
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    config = json.loads((dst / "config.json").read_text())
    scheme = dict(num_bits=8, type="float", strategy="tensor", dynamic=False, symmetric=True)
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "dense",
        "config_groups": {},
        "kv_cache_scheme": scheme,
    }
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize("arch", ["qwen3", "deepseek-v2"])
def test_checkpoint_kv_scales(arch, hf_models, tmp_path):
    """A checkpoint calibrated for an FP8 KV cache (llm-compressor's `kv_cache_scheme`, per-layer
    `k_scale`/`v_scale` = amax / 448 over held-out text): at defaults the pool is FP8 (as in vLLM)
    holding K/V divided by the scales. Greedy tokens equal HF's over a cache that stores them so,
    for 8 prompts x 64 tokens (but at near-ties), and TP=2 equals TP=1."""
    tok = AutoTokenizer.from_pretrained(trained_model_dir(arch))
    texts, model = heldout_prompts(), hf_models(trained_model_dir(arch))
    latent = arch == "deepseek-v2"
    scales = calibrate(model, [tok.encode(t) for t in texts[8:12]], latent)
    path = with_kv_scales(trained_model_dir(arch), tmp_path / "calibrated", scales)
    ids = [tok.encode(t) for t in texts[:4] + texts[-4:]]
    with LLM(path, dtype="float32", device="cpu") as llm:  # kv_cache_dtype "auto"
        runner = llm.llm_engine.runner
        assert runner.kv_dtype == KV_FP8
        got = [layer.kv_scale for layer in runner.model.attention_layers()]
        assert got == [scales[i] for i in range(len(got))]
        ours = [o.outputs[0].token_ids for o in llm.generate(ids, GREEDY, use_tqdm=False)]
    identical = identical_to_hf(ours, ids, model, scales=scales, latent=latent)
    print(f"{arch}, calibrated scales: {identical} of {len(ids)} identical")
    assert identical >= 7, identical
    assert run(arch, ids[:2], tp=2, kv="auto", path=path) == ours[:2]
    with LLM(path, dtype="float32", device="cpu", kv_cache_dtype="bfloat16") as llm:  # opted out
        runner = llm.llm_engine.runner
        assert runner.kv_dtype == torch.bfloat16
        assert all(a.kv_scale == KVScale() for a in runner.model.attention_layers())


def test_kv_cache_dtype_flag():
    parser = add_engine_args(argparse.ArgumentParser())
    args = parser.parse_args(["--kv-cache-dtype", "fp8_e4m3"])
    assert engine_config(args, "m").kv_cache_dtype == "fp8_e4m3"
    args = parser.parse_args(["--kv-cache-dtype", "bfloat16"])
    assert engine_config(args, "m").kv_cache_dtype == "bfloat16"
    with pytest.raises(SystemExit):
        parser.parse_args(["--kv-cache-dtype", "int8"])
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        EngineConfig("m", kv_cache_dtype="int8")
