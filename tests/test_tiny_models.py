"""Acceptance (issue 29, CPU part): the two trained tiny models. Greedy text of held-out prompts
equals HF `generate` word for word (fp32), TP=2 over gloo equals TP=1, and the Qwen3 checkpoint
loads in HF transformers with no custom code."""

import json
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer
from metainfer import LLM, SamplingParams
from metainfer.testing import heldout_prompts, hf_greedy, trained_model_dir

GREEDY = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)


def prompts(n: int = 16) -> list[list[int]]:
    "The first n held-out prompts (chapters' and quotations' openings), tokenized."
    tok = AutoTokenizer.from_pretrained(trained_model_dir())
    texts = heldout_prompts()
    return [tok.encode(t) for t in texts[: n // 2] + texts[-(n - n // 2) :]]


def run(arch: str, ids: list[list[int]], tp: int = 1) -> list[list[int]]:
    with LLM(
        trained_model_dir(arch), dtype="float32", device="cpu", tensor_parallel_size=tp
    ) as llm:
        return [o.outputs[0].token_ids for o in llm.generate(ids, GREEDY, use_tqdm=False)]


@pytest.mark.parametrize("arch", ["qwen3", "deepseek-v2"])
def test_greedy_text_equals_hf_and_tp2(arch, hf_models):
    ids = prompts(16)
    ours = run(arch, ids)
    assert ours == hf_greedy(hf_models(trained_model_dir(arch)), ids, 64)
    assert run(arch, ids[:6], tp=2) == ours[:6]
    # and it is the corpus's English: mostly words, not one token repeated
    text = AutoTokenizer.from_pretrained(trained_model_dir(arch)).decode(sum(ours[:4], []))
    words = text.split()
    assert len(set(words)) > len(words) / 4, text
    assert sum(w.strip(".,;:?!'\"()").isalpha() for w in words) > 0.8 * len(words), text


def test_trained_models_load_in_hf_without_custom_code():
    path = trained_model_dir("qwen3")
    config = json.loads((path / "config.json").read_text())
    assert "auto_map" not in config and config["architectures"] == ["Qwen3ForCausalLM"]
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=False)
    assert type(model).__module__.startswith("transformers.models.qwen3")
    assert model.config.tie_word_embeddings and model.config.num_key_value_heads == 2
    assert sum(p.numel() for p in model.parameters()) < 12.5e6  # <= 25 MB in bf16
    # the DeepSeek too, even with trust_remote_code (which DeepSeek's own cards ask for): no
    # auto_map names code that is not shipped
    path = trained_model_dir("deepseek-v2")
    assert "auto_map" not in json.loads((path / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
    assert type(model).__module__.startswith("transformers.models.deepseek_v2")
