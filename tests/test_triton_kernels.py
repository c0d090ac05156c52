"""The Triton backends inside the engine: greedy tokens equal the torch backend's (on CPU, through
Triton's interpreter)."""

import os
import sys
import pytest
import torch

if not torch.cuda.is_available():
    # As in the Triton notebooks: triton picks interpreter or compiler when it is imported, so
    # import it afresh with the flag set; the patch makes triton 3.6's interpreter work with numpy
    # >= 2.4 (triton-lang/triton#9171).
    os.environ["TRITON_INTERPRET"] = "1"
    for m in [
        m
        for m in sys.modules
        if m == "triton" or m.startswith(("triton.", "metainfer.kernels.triton"))
    ]:
        if not m.startswith("triton._C"):
            del sys.modules[m]
    import triton.runtime.interpreter as ti

    def _patch_lang_tensor(tensor, scope, patch=ti._patch_lang_tensor):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    ti._patch_lang_tensor = _patch_lang_tensor

from metainfer import LLM, SamplingParams

pytest.importorskip("triton")


# GQA with q/k norm; one KV head; MLA + MoE with a softmax router; the same with a sigmoid, biased,
# grouped router
@pytest.mark.parametrize(
    "preset", ["qwen3-tiny", "qwen3-tiny-mqa", "deepseek-v2-tiny", "deepseek-v3-tiny"]
)
def test_triton_backend_equals_torch(preset, checkpoints):
    """Three prompts sharing a 20-token prefix (block size 4: the later prefills hit the prefix
    cache), 6 tokens each.

    Weights are drawn 10x wider than HF's default: at std 0.02 attention is nearly uniform, so even
    a wrong rotary layout leaves the tokens unchanged. The logits of every step are compared too."""
    from metainfer.kernels.triton_launch import relative_error

    tokens, logits = both_backends(str(checkpoints(preset, initializer_range=0.2)))
    assert tokens["triton"] == tokens["torch"]
    assert len(set(sum(tokens["torch"], []))) > 3  # not a degenerate repeat
    assert max(relative_error(a, b) for a, b in zip(logits["triton"], logits["torch"])) < 1e-5


def test_two_engines_two_backends_interleaved(checkpoints):
    """Two `LLM`s in one process, one on the torch kernels and one on Triton's (its interpreter on a
    CPU), built before either runs and called in turns: each gives HF's greedy tokens. With
    process-wide kernel tables the second engine used to switch the first one's kernels."""
    from metainfer.testing import hf_model, hf_greedy

    ckpt = str(checkpoints("qwen3-tiny", initializer_range=0.2))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    prompts = [[5, 17, 300, 42, 7], [9, 2, 11]]
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    want = hf_greedy(hf_model(ckpt), prompts, 5)
    engines = {
        b: LLM(ckpt, dtype="float32", device=device, kernel_backend=b, block_size=4)
        for b in ("torch", "triton")
    }
    try:
        assert engines["torch"].engine.runner.backend.ops.name == "torch"
        assert engines["triton"].engine.runner.backend.ops.name == "triton"
        for prompt, expected in zip(prompts, want):
            for name in ("torch", "triton", "torch"):
                out = (
                    engines[name].generate([prompt], params, use_tqdm=False)[0].outputs[0].token_ids
                )
                assert out == expected, name
    finally:
        for llm in engines.values():
            llm.shutdown()


def both_backends(path: str, fp8_experts: bool = False, **engine) -> tuple[dict, dict]:
    """Greedy tokens and every step's logits on the torch and the Triton kernels: three prompts
    sharing a 20-token prefix (block size 4: the later prefills hit the prefix cache), 6 tokens
    each. `fp8_experts`: check that the MoE experts are held in FP8 on both. `engine`: more `LLM`
    arguments."""
    g = torch.Generator().manual_seed(0)
    shared = torch.randint(0, 1000, (20,), generator=g).tolist()
    prompts = [shared + torch.randint(0, 1000, (n,), generator=g).tolist() for n in (3, 9, 1)]
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokens, logits = {}, {}
    for backend in ("torch", "triton"):
        llm = LLM(
            path, dtype="float32", device=device, kernel_backend=backend, block_size=4, **engine
        )
        assert (
            llm.engine.runner.kernel_backend.split("/")[0].removesuffix("+pdl") == backend
        )  # GPU: "triton/varlen+pdl"
        runner, steps = llm.engine.runner, []
        if fp8_experts:
            experts = [m for m in runner.model.modules() if hasattr(m, "gate_up_proj_scale")]
            assert experts and all(m.gate_up_proj.dtype == torch.float8_e4m3fn for m in experts)
        run_logits = runner.logits
        runner.logits = lambda step: (
            steps.append(run_logits(step)[0].clone()) or (steps[-1], None)
        )  # (graphs reuse
        # buffers)
        outs = llm.generate(prompts[:1], params, use_tqdm=False) + llm.generate(
            prompts[1:], params, use_tqdm=False
        )
        tokens[backend], logits[backend] = [o.outputs[0].token_ids for o in outs], steps
        assert llm.engine.block_manager.num_cache_hit_tokens >= 2 * 20
        llm.shutdown()
    return tokens, logits


@pytest.mark.parametrize("layout", ["block", "online"])
def test_fp8_experts_triton_equals_torch(layout, checkpoints, tmp_path):
    """A tiny DeepSeek-V2 with FP8 experts: a block-wise checkpoint (16 x 16 blocks, written by
    transformers' quantizer) and `quantization="fp8"` on the dense one (a scale per row). The
    Triton backend holds the experts in FP8 too (weight-only FP8 in its MoE kernel) and gives the
    torch backend's tokens and logits."""
    from metainfer.kernels.triton_launch import relative_error
    from metainfer.testing_fp8 import write_block_fp8

    src = checkpoints("deepseek-v2-tiny", initializer_range=0.2)
    if layout == "block":
        tokens, logits = both_backends(str(write_block_fp8(src, tmp_path / "fp8", (16, 16))), True)
    else:
        tokens, logits = both_backends(str(src), True, quantization="fp8")
    assert tokens["triton"] == tokens["torch"]
    assert max(relative_error(a, b) for a, b in zip(logits["triton"], logits["torch"])) < 1e-5
