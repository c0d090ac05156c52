"""Issue 30, CPU part: FP8 checkpoints in both layouts people deploy, written by the field's tools
(transformers' block-wise quantizer, compressed-tensors' FP8_DYNAMIC), read by metainfer: greedy
tokens equal HF transformers on the weights dequantized by those libraries (fp32, 64 tokens, 16
held-out prompts), TP=2 over gloo equals TP=1, and a shard that would split a block is refused;
DeepSeek-V3's partial edge blocks, written here block by block, load as their dequantized twin."""

import json
import pytest
import torch
from transformers import AutoTokenizer
from metainfer import LLM, SamplingParams
from metainfer.layers.fp8 import FP8
from metainfer.testing import heldout_prompts, hf_greedy, trained_model_dir
from metainfer.testing_fp8 import LINEAR_WEIGHT, _rewrite, write_block_fp8, write_channel_fp8
from metainfer.testing_fp8 import write_dequantized

GREEDY = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
# (architecture, layout): the block size that keeps most of that model's projections whole blocks
CASES = {
    ("qwen3", "block"): (128, 128),
    ("qwen3", "channel"): None,
    ("deepseek-v2", "block"): (32, 32),
    ("deepseek-v2", "channel"): None,
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    "Each case's FP8 checkpoint and its dequantized twin, written once."
    root, out = tmp_path_factory.mktemp("fp8"), {}
    for (arch, layout), block in CASES.items():
        src, dst = trained_model_dir(arch), root / f"{arch}-{layout}"
        fp8 = write_block_fp8(src, dst, block) if block else write_channel_fp8(src, dst)
        out[arch, layout] = fp8, write_dequantized(fp8, root / f"{arch}-{layout}-dense")
    return out


def prompts(n: int) -> list[list[int]]:
    tok = AutoTokenizer.from_pretrained(trained_model_dir())
    return [tok.encode(t) for t in heldout_prompts()[:n]]


def greedy(path, ids, tp: int = 1, fp8: bool = True, **kw) -> list[list[int]]:
    "Greedy tokens of `ids`; `fp8`: some weights must be held in FP8."
    with LLM(path, dtype="float32", device="cpu", tensor_parallel_size=tp, **kw) as llm:
        held = [p for p in llm.engine.runner.model.parameters() if p.dtype == FP8]
        assert bool(held) == fp8, "the weights are not held as the checkpoint stores them"
        return [o.outputs[0].token_ids for o in llm.generate(ids, GREEDY, use_tqdm=False)]


@pytest.mark.parametrize("case", list(CASES), ids=lambda c: "-".join(c))
def test_greedy_equals_hf_on_dequantized_weights(case, checkpoints, hf_models):
    fp8, dense = checkpoints[case]
    ids = prompts(16)
    assert greedy(fp8, ids) == hf_greedy(hf_models(dense), ids, 64)


@pytest.mark.parametrize("arch,block", [("qwen3", (64, 64)), ("deepseek-v2", (32, 32))])
def test_tp2_equals_tp1(arch, block, tmp_path):
    fp8 = write_block_fp8(trained_model_dir(arch), tmp_path / arch, block)
    ids = prompts(4)
    assert greedy(fp8, ids, tp=2) == greedy(fp8, ids)


def test_a_shard_splitting_a_block_is_refused(checkpoints):
    fp8, _ = checkpoints["qwen3", "block"]  # o_proj: 384 columns, 192 a rank, blocks of 128
    with pytest.raises(Exception, match="split a 128-column FP8 block"):
        LLM(fp8, dtype="float32", device="cpu", tensor_parallel_size=2)


def test_scales_not_matching_the_configured_blocks_are_refused(tmp_path):
    """Scales written per 64-row blocks under a config that says 128: refused, naming the tensor
    (expanded as 128-row blocks they would scale the wrong rows, silently)."""
    fp8 = write_block_fp8(trained_model_dir(), tmp_path / "fine", (64, 128))
    config = json.loads((fp8 / "config.json").read_text())
    config["quantization_config"]["weight_block_size"] = [128, 128]
    (fp8 / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"weight_scale_inv is .* in 128 x 128 blocks"):
        LLM(fp8, dtype="float32", device="cpu")


def block_quantized(w: torch.Tensor, bn: int, bk: int):
    """`w` in FP8 as DeepSeek-V3's checkpoints hold it, written here block by block: a scale per
    `bn` x `bk` block, those at the edges partial; the codes, the scales and the dequantized `w`."""
    N, K = w.shape
    q, s, deq = torch.empty(N, K, dtype=FP8), torch.empty(-(-N // bn), -(-K // bk)), w.float()
    for i in range(0, N, bn):
        for j in range(0, K, bk):
            block = deq[i : i + bn, j : j + bk]
            scale = block.abs().max() / 448 if block.abs().max() > 0 else torch.tensor(1.0)
            q[i : i + bn, j : j + bk] = (block / scale).clamp(-448, 448).to(FP8)
            s[i // bn, j // bk], block[:] = scale, q[i : i + bn, j : j + bk].float() * scale
    return q, s, deq


def test_partial_blocks_as_deepseek_v3_writes_them(tmp_path):
    """Blocks that do not divide the weights (DeepSeek-V3's kv_a_proj_with_mqa: 576 rows in blocks
    of 128), each edge block with its own scale: the merged MLA projection and the experts load in
    FP8 as the same weights as the dequantized twin's, so the greedy tokens are equal."""
    deq = {}

    def fp8(name, t):
        if not LINEAR_WEIGHT.search(name):
            return {name: t}
        q, s, deq[name] = block_quantized(t, 48, 96)
        return {name: q, name.removesuffix("weight") + "weight_scale_inv": s}

    qc = dict(quant_method="fp8", fmt="e4m3", activation_scheme="dynamic")
    src = trained_model_dir("deepseek-v2")
    path = _rewrite(src, tmp_path / "fp8", fp8, qc | {"weight_block_size": [48, 96]})
    twin = _rewrite(src, tmp_path / "dense", lambda n, t: {n: deq.get(n, t)}, None)
    with LLM(path, dtype="float32", device="cpu") as llm:
        held = {n for n, p in llm.engine.runner.model.named_parameters() if p.dtype == FP8}
        assert any("q_kv_a_proj" in n for n in held) and any("experts" in n for n in held), held
    assert greedy(path, prompts(8)) == greedy(twin, prompts(8), fp8=False)


def test_online_fp8_matches_compressed_tensors(checkpoints):
    """`quantization='fp8'` on the dense model: within one FP8 step of the codes compressed-tensors
    writes per channel (it divides by its scale rounded to bf16; 97 % are the same code)."""
    with LLM(trained_model_dir(), dtype="float32", device="cpu", quantization="fp8") as llm:
        layer = llm.engine.runner.model.model.layers[0].mlp.down_proj
        ours = layer.weight.view(torch.uint8)
        from safetensors import safe_open

        fp8, _ = checkpoints["qwen3", "channel"]
        with safe_open(fp8 / "model.safetensors", "pt") as f:
            theirs = f.get_tensor("model.layers.0.mlp.down_proj.weight").view(torch.uint8)
        assert (ours.int() - theirs.int()).abs().max() <= 1
        assert (ours == theirs).float().mean() > 0.95
