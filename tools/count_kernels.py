"""Kernels one eager decode step launches, counted on the CPU: torch ops (one kernel each on a GPU) and Triton launches.

Usage:  python tools/count_kernels.py PRESET [PRESET ...]     (presets of metainfer.testing, e.g. deepseek-v2-tiny)
The Triton backends run on Triton's interpreter; ops the interpreter itself issues are not counted, nor are views,
allocations and other ops that launch no kernel. A CUDA graph replays the same kernels, so at small batches (where
each costs its launch gap and a few µs) the count is a proxy for the step's overhead.
"""
import collections, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import triton.runtime.interpreter as interp

def _patch_lang_tensor(tensor, scope, patch=interp._patch_lang_tensor):  # triton 3.6 + numpy >= 2.4 (triton#9171)
    patch(tensor, scope); scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))
interp._patch_lang_tensor = _patch_lang_tensor

from torch.utils._python_dispatch import TorchDispatchMode

NO_KERNEL = {"view", "_unsafe_view", "t", "transpose", "slice", "select", "unsqueeze", "expand", "split_with_sizes",
             "split", "alias", "detach", "detach_", "as_strided", "permute", "squeeze", "unbind", "chunk", "empty",
             "empty_strided", "empty_like", "lift_fresh", "reshape", "narrow", "new_empty", "promote_types", "flatten",
             "item", "_local_scalar_dense"}


class CountOps(TorchDispatchMode):
    inside_triton = 0
    def __init__(self):
        super().__init__(); self.ops = collections.Counter()
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        copied = name != "to" or out is not args[0]               # `.to` to what a tensor already is launches nothing
        if not CountOps.inside_triton and name not in NO_KERNEL and copied: self.ops[func.__name__] += 1
        return out


triton_launches = collections.Counter()
_run = interp.InterpretedFunction.run
def _counted_run(self, *args, **kwargs):
    triton_launches[self.fn.__name__] += 1
    CountOps.inside_triton += 1
    try: return _run(self, *args, **kwargs)
    finally: CountOps.inside_triton -= 1
interp.InterpretedFunction.run = _counted_run


def main(presets: list[str]) -> None:
    import tempfile
    from metainfer import LLM, SamplingParams
    from metainfer.testing import write_random_checkpoint
    for preset in presets:
        path = write_random_checkpoint(os.path.join(tempfile.mkdtemp(), preset), preset, seed=0)
        llm = LLM(path, dtype="float32", device="cpu", kernel_backend="triton", block_size=4)
        engine = llm.engine
        engine.add_request("a", [1, 2, 3, 4, 5], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
        engine.step(); engine.step()
        triton_launches.clear()
        with CountOps() as count: engine.step()
        layers = engine.model_config.num_hidden_layers
        ops, launches = sum(count.ops.values()), sum(triton_launches.values())
        print(f"{preset}: {layers} layers, one eager decode step (B=1): {ops} torch kernels + {launches} Triton launches"
              f" = {ops + launches}")
        print("  torch:", ", ".join(f"{k} {v}" for k, v in count.ops.most_common()))
        print("  triton:", ", ".join(f"{k} {v}" for k, v in triton_launches.most_common()))
        llm.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:] or ["qwen3-tiny", "deepseek-v2-tiny"])
