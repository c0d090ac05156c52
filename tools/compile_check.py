"""Compile every Triton kernel of the package for an H100/H200 (sm_90) on a machine without a GPU.

Usage:  python tools/compile_check.py [--json out.json]
        (CPU only; exits 1 if a kernel fails or is never compiled)
Why: the CPU tests run the kernels on Triton's interpreter, which executes them as numpy and checks
no GPU compile rule: a loop-carried tile that changes shape, a helper that is not `@triton.jit`, a
register- or shared-memory limit, PTX the assembler rejects. Those surfaced only on the GPU machine,
whose time is scarce (run16, run34). Here Triton's own launch path runs for real (the same argument
specialization, the same compile pipeline down to `ptxas`), with a stand-in driver that reports an
sm_90 target and no device, and with every launch turned into a compile-only warm-up. The package's
ops are called at Qwen3-8B's and DeepSeek-V2-Lite's shapes with CPU tensors and 132 SMs (an
H100/H200), once with programmatic dependent launch and once without, as a GPU would take them;
nothing is computed, so nothing is checked numerically (the interpreter tests and the notebooks' GPU
cells do that). Every `*_kernel` of the Triton modules in `MODULES` must compile at least once, so a
new kernel needs a call here (and a new module a line in `MODULES`).
"""

import argparse
import importlib
import json
import os
import sys
import time
import traceback

os.environ.pop("TRITON_INTERPRET", None)  # the real compile path, not the interpreter
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver as triton_driver
from triton.runtime.jit import JITFunction

TARGET = GPUTarget("cuda", 90, 32)
BF = torch.bfloat16
MODULES = [  # every module that defines or launches a Triton kernel (under metainfer.)
    "kernels.triton_launch",
    "kernels.triton_norms",
    "kernels.triton_rotary",
    "kernels.triton_silu",
    "kernels.triton_embedding",
    "kernels.triton_gemv",
    "kernels.triton_kernels",
    "distributed.symm_mem_kernel",
    "kernels.triton_paged_kv",
    "kernels.triton_prefill",
    "kernels.triton_split_kv",
    "kernels.triton_decode_kernel",
    "kernels.triton_decode",
    "kernels.triton_attention",
    "kernels.triton_moe_routing",
    "kernels.triton_moe",
    "kernels.triton_mla_decode",
    "kernels.triton_mla",
]


class CompileOnlyDriver:
    """What Triton's launch path asks of a driver before it launches: a device, a stream and the
    target."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return TARGET

    def get_active_torch_device(self):
        return torch.device("cpu")

    def is_active(self):
        return True


compiled: dict[
    str, int
] = {}  # kernel name -> launches turned into compiles (each specialization compiles once)
_run = JITFunction.run


def compile_only(self, *args, grid, warmup, **kwargs):
    """A launch becomes a warm-up: specialize and compile (cached per specialization), launch
    nothing."""
    kernel = _run(self, *args, grid=grid, warmup=True, **kwargs)
    compiled[self.__name__] = compiled.get(self.__name__, 0) + 1
    return kernel


def install() -> list:
    """The stand-in driver, compile-only launches, and an H100/H200's 132 SMs for the ops that read
    it; the modules."""
    triton_driver.set_active(CompileOnlyDriver())
    JITFunction.run = compile_only
    from metainfer.kernels import triton_launch

    triton_launch.LeanJITFunction.run = compile_only  # the package's kernels launch through it
    modules = [importlib.import_module(f"metainfer.{name}") for name in MODULES]
    for m in modules:
        if hasattr(m, "num_sms"):
            m.num_sms = lambda device: 132
    return modules


def set_pdl(modules: list, on: bool) -> None:
    "What `pdl()` answers on a Hopper GPU (on), or on older GPUs (off)."
    for m in modules:
        if hasattr(m, "pdl"):
            m.pdl = lambda: on


def calls():
    """(name, thunk) for each op call to compile: the engine's shapes, both model families, each
    variant a kernel takes."""
    from metainfer.layers.attention import make_metadata
    from metainfer.kernels.elementwise import Rope, rope_cos_sin_cache, rope_inv_freq
    from metainfer.distributed import symm_mem_kernel as sm
    from metainfer.kernels import triton_norms as tn, triton_rotary as tr, triton_silu as ts
    from metainfer.kernels import triton_embedding as tb, triton_gemv as tg
    from metainfer.kernels import triton_paged_kv as tkv, triton_prefill as tp, triton_decode as td
    from metainfer.kernels import triton_mla_decode as tmd, triton_mla as tm
    from metainfer.kernels import triton_moe_routing as ter, triton_moe as te

    r = lambda *s, dt=BF: torch.randn(*s).to(dt)

    def fp8_stack(E: int, N: int, K: int, group: int | None = None):
        "Experts' FP8 weights `[E, N, K]`, a scale per row and `group` columns (None: the row)."
        from metainfer.layers.fp8 import FP8, Fp8Weight

        g = group or K
        return Fp8Weight(torch.empty(E, N, K, dtype=FP8), torch.rand(E, N, -(-K // g)), g)

    def fp8_matrix(N: int, K: int, group: int | None = None):
        "An FP8 weight `[N, K]`, a scale per row and `group` columns (None: the row)."
        from metainfer.layers.fp8 import FP8, Fp8Weight

        g = group or K
        return Fp8Weight(torch.empty(N, K, dtype=FP8), torch.rand(N, -(-K // g)), g)

    cache = rope_cos_sin_cache(rope_inv_freq(128, 1e6), 4096)
    cache64 = rope_cos_sin_cache(rope_inv_freq(64, 1e4), 4096)
    out = []
    for T in (1, 5):  # norms and activation: one row (decode at B=1) and several
        x, res, w = r(T, 4096), r(T, 4096), r(4096)
        qkv = r(T, (32 + 16) * 128)
        out += [
            (f"rms_norm T={T}", lambda x=x, w=w: tn.rms_norm(x, w, 1e-6)),
            (f"add_rms_norm T={T}", lambda x=x, res=res, w=w: tn.add_rms_norm(x, res, w, 1e-6)),
            (
                f"q_norm view T={T}",
                lambda q=qkv: tn.rms_norm(q[:, :4096].view(-1, 32, 128), r(128), 1e-6),
            ),
            (f"silu_and_mul T={T}", lambda T=T: ts.silu_and_mul(r(T, 2 * 12288))),
            (
                f"rms_norm_fp8 T={T} (128 columns a scale, residual; a row a scale; 7,168 wide)",
                lambda x=x, res=res, w=w, T=T: (
                    tn.rms_norm_fp8(x, res, w, 1e-6, 128, T + 3),
                    tn.rms_norm_fp8(x, None, w, 1e-6, 4096),
                    tn.rms_norm_fp8(r(T, 7168), r(T, 7168), r(7168), 1e-6, 128),
                ),
            ),
        ]
        for neox in (True, False):
            q, k = qkv[:, :4096].view(T, 32, 128), qkv[:, 4096:5120].view(T, 8, 128)
            pos = torch.arange(T)
            out += [
                (
                    f"rotary neox={neox} T={T}",
                    lambda q=q, k=k, p=pos, n=neox: tr.rotary(q, k, p, cache, n),
                ),
                (
                    f"rotary+norms neox={neox} T={T}",
                    lambda q=q, k=k, p=pos, n=neox: tr.rotary(
                        q, k, p, cache, n, r(128), r(128), 1e-6
                    ),
                ),
            ]
        for world, rank in (
            (2, 0),
            (2, 1),
            (4, 2),
        ):  # the TP all-reduce fused with the next add + norm, fp32 partials
            bufs = sm.PushBuffers(
                torch.zeros(world, dtype=torch.int64),
                torch.zeros(32, dtype=torch.int32),
                rank,
                32,
                8192,
            )
            for dt in (
                torch.float32,
                BF,
            ):  # (Qwen) and bf16 (MoE); rank 1 and 0 are specializations of their own
                out.append(
                    (
                        f"all_reduce_add_rms_norm world={world} rank={rank} {dt} T={T}",
                        lambda x=x, res=res, w=w, b=bufs, dt=dt: sm.all_reduce_add_rms_norm(
                            x.to(dt), res, w, 1e-6, b
                        ),
                    )
                )
            # the row-parallel GEMV pushing its partials, and the all-reduce that then only waits
            if T == 1:
                out += [
                    (
                        f"gemv o pushing world={world} rank={rank}",
                        lambda b=bufs: tg.gemv(
                            r(1, 2048), r(4096, 2048), out_dtype=torch.float32, push=b
                        ),
                    ),
                    (
                        f"gemv fp8 o pushing world={world} rank={rank}",
                        lambda b=bufs: tg.gemv(
                            r(1, 2048),
                            fp8_matrix(4096, 2048, 128),
                            out_dtype=torch.float32,
                            push=b,
                        ),
                    ),
                    (
                        f"all_reduce_add_rms_norm pushed world={world} rank={rank}",
                        lambda x=x, res=res, w=w, b=bufs: sm.all_reduce_add_rms_norm(
                            x.float(), res, w, 1e-6, b, pushed=True
                        ),
                    ),
                ]
            out.append(
                (
                    f"all_reduce_add_rms_norm no residual (embedding) world={world} rank={rank} "
                    f"T={T}",
                    lambda x=x, w=w, b=bufs: sm.all_reduce_add_rms_norm(x, None, w, 1e-6, b),
                )
            )
        out.append(
            (
                f"rotary dim 64 (MLA) T={T}",  # DeepSeek: the rope part of q and the shared k_pe
                lambda T=T: tr.rotary(r(T, 16, 64), r(T, 1, 64), torch.arange(T), cache64, False),
            )
        )
    for name, (N, K) in {
        "qkv": (6144, 4096),
        "o": (4096, 4096),
        "gate_up": (24576, 4096),
        "down": (4096, 12288),
        "lm_head": (151936, 4096),
        "dsv2 q": (3072, 2048),
        "dsv2 kv_a": (576, 2048),
    }.items():
        out.append((f"gemv {name}", lambda N=N, K=K: tg.gemv(r(1, K), r(N, K))))
    out += [
        (
            "gemv gate_up + activation",
            lambda: tg.gemv(r(1, 4096), r(24576, 4096), act="silu_and_mul"),
        ),
        (
            "gemv gate_up + activation, 4-row tiles (DeepSeek shared experts at TP=2)",
            lambda: tg.gemv(r(1, 2048), r(2816, 2048), act="silu_and_mul"),
        ),
        ("gemv with bias (Qwen2 qkv)", lambda: tg.gemv(r(1, 3584), r(4608, 3584), r(4608))),
        (
            "gemv fp32 out (row-parallel partial)",
            lambda: tg.gemv(r(1, 2048), r(4096, 2048), out_dtype=torch.float32),
        ),
        ("gemv fp32", lambda: tg.gemv(r(1, 2100, dt=torch.float32), r(10, 2100, dt=torch.float32))),
        (
            "gemv with the norm in its prologue (qkv)",
            lambda: tg.gemv(
                r(1, 4096), r(6144, 4096), norm=(r(1, 4096), r(4096), 1e-6), residual_out=r(1, 4096)
            ),
        ),
        (
            "gemv with the norm, no residual, + activation",
            lambda: tg.gemv(
                r(1, 4096), r(24576, 4096), act="silu_and_mul", norm=(None, r(4096), 1e-6)
            ),
        ),
        # FP8 weights: the tensor-core GEMV, block-wise (128) and per-channel scales
        ("gemv fp8 qkv block-wise", lambda: tg.gemv(r(1, 4096), fp8_matrix(6144, 4096, 128))),
        ("gemv fp8 down per channel", lambda: tg.gemv(r(1, 12288), fp8_matrix(4096, 12288))),
        (
            "gemv fp8 gate_up + activation",
            lambda: tg.gemv(r(1, 4096), fp8_matrix(24576, 4096, 128), act="silu_and_mul"),
        ),
        (
            "gemv fp8 with bias, fp32 out",
            lambda: tg.gemv(r(1, 3584), fp8_matrix(4608, 3584, 128), r(4608), torch.float32),
        ),
        (
            "gemv fp8, fp32 row",
            lambda: tg.gemv(r(1, 512, dt=torch.float32), fp8_matrix(96, 512, 128)),
        ),
        (
            "embedding (a rank's rows)",
            lambda: tb.embedding(torch.tensor([3, 70000]), r(75968, 4096), 75968),
        ),
    ]
    PAGE, H, HK, D = 16, 32, 8, 128
    kc, vc = r(64, PAGE, HK, D), r(64, PAGE, HK, D)
    kc8, vc8 = (c.to(torch.float8_e4m3fn) for c in (kc, vc))
    for B, ctx in ((1, 384), (16, 100)):
        tables = (
            [list(range(i * 4, i * 4 + -(-ctx // PAGE))) for i in range(B)]
            if B > 1
            else [list(range(24))]
        )
        pos, meta = make_metadata(tables, [ctx] * B, [1] * B, PAGE, False)
        q, k, v = r(B, H, D), r(B, HK, D), r(B, HK, D)
        for splits in (None, 1, 7):
            out.append(
                (
                    f"paged_decode B={B} splits={splits}",
                    lambda q=q, k=k, v=v, m=meta, s=splits: td.paged_decode(
                        q, k, v, kc, vc, m, D**-0.5, num_splits=s
                    ),
                )
            )
        for neox in (True, False):
            out.append(
                (
                    f"paged_decode B={B} rope neox={neox}",
                    lambda q=q, k=k, v=v, m=meta, p=pos, n=neox: td.paged_decode(
                        q, k, v, kc, vc, m, D**-0.5, Rope(p, cache, n, r(D), r(D), 1e-6)
                    ),
                )
            )
        out.append(
            (
                f"paged_decode B={B} rope without norms",
                lambda q=q, k=k, v=v, m=meta, p=pos: td.paged_decode(
                    q, k, v, kc, vc, m, D**-0.5, Rope(p, cache, True)
                ),
            )
        )
    for prefix in (False, True):
        qlens, ctxs = [7, 20], ([7, 20] if not prefix else [30, 52])
        pos, meta = make_metadata([[0, 1], [2, 3, 4, 5]], ctxs, qlens, PAGE, True)
        q, k, v = r(27, H, D), r(27, HK, D), r(27, HK, D)
        out += [
            (
                f"store_kv prefix={prefix}",
                lambda k=k, v=v, m=meta: tkv.store_kv(k, v, kc, vc, m.slot_mapping),
            ),
            (
                f"paged_prefill prefix={prefix}",
                lambda q=q, m=meta: tp.paged_prefill(q, kc, vc, m, D**-0.5),
            ),
        ]
        out.append(  # an FP8 pool (kv_cache_dtype="fp8"): stored saturated, read as bf16
            (
                f"store_kv + paged_prefill, FP8 pool, prefix={prefix}",
                lambda q=q, k=k, v=v, m=meta: (
                    tkv.store_kv(k, v, kc8, vc8, m.slot_mapping),
                    tp.paged_prefill(q, kc8, vc8, m, D**-0.5),
                ),
            )
        )
    for B in (1, 16):
        pos, meta = make_metadata(
            [list(range(i * 2, i * 2 + 2)) for i in range(B)], [20] * B, [1] * B, PAGE, False
        )
        q, k, v = r(B, H, D), r(B, HK, D), r(B, HK, D)
        out.append(
            (
                f"paged_decode B={B} rope, FP8 pool",
                lambda q=q, k=k, v=v, m=meta, p=pos: td.paged_decode(
                    q, k, v, kc8, vc8, m, D**-0.5, Rope(p, cache, True, r(D), r(D), 1e-6)
                ),
            )
        )
    R, DR, HM = 512, 64, 16  # DeepSeek-V2-Lite's MLA: latent rank, rope dims, heads
    lat = r(64, PAGE, 1, R + DR)
    lat8 = lat.to(torch.float8_e4m3fn)
    for B in (1, 16):
        pos, meta = make_metadata(
            [list(range(i * 2, i * 2 + 2)) for i in range(B)], [20] * B, [1] * B, PAGE, False
        )
        for splits in (None, 1):
            out.append(
                (
                    f"mla_decode_latent B={B} splits={splits}",
                    lambda B=B, m=meta, s=splits: tmd.mla_decode_latent(
                        r(B, HM, R), r(B, HM, DR), lat, m, 0.1, num_splits=s
                    ),
                )
            )
        out += [
            (
                f"store_latent B={B}",
                lambda B=B, m=meta: tm.store_latent(r(B, R), r(B, DR), lat, m.slot_mapping),
            ),
            (
                f"store_latent + mla_decode_latent, FP8 cache, B={B}",
                lambda B=B, m=meta: (
                    tm.store_latent(r(B, R), r(B, DR), lat8, m.slot_mapping, (r(R), 1e-6)),
                    tmd.mla_decode_latent(r(B, HM, R), r(B, HM, DR), lat8, m, 0.1),
                ),
            ),
            (
                f"store_latent + norm B={B}",
                lambda B=B, m=meta: tm.store_latent(
                    r(B, R), r(B, DR), lat, m.slot_mapping, (r(R), 1e-6)
                ),
            ),
        ]
    for T in (1, 7):
        out += [
            (
                f"select_experts softmax T={T}",
                lambda T=T: ter.select_experts_triton(r(T, 64, dt=torch.float32), 6),
            ),
            (
                f"select_experts sigmoid, groups T={T}",
                lambda T=T: ter.select_experts_triton(
                    r(T, 256, dt=torch.float32),
                    8,
                    "sigmoid",
                    "noaux_tc",
                    8,
                    4,
                    r(256, dt=torch.float32),
                    True,
                    2.5,
                ),
            ),
        ]
        ids = torch.randint(0, 64, (T, 6))
        wts = torch.rand(T, 6)
        out += [
            (f"moe_align T={T}", lambda ids=ids: ter.moe_align_triton(ids, 0, 64, 16)),
            (
                f"fused_moe T={T}",
                lambda T=T, ids=ids, wts=wts: te.fused_moe(
                    r(T, 2048), r(64, 2 * 1408, 2048), r(64, 2048, 1408), wts, ids
                ),
            ),
            (
                f"fused_moe + shared T={T}",
                lambda T=T, ids=ids, wts=wts: te.fused_moe(
                    r(T, 2048), r(64, 2 * 1408, 2048), r(64, 2048, 1408), wts, ids, add=r(T, 2048)
                ),
            ),
            (
                f"fused_moe, FP8 experts, 128-column scale groups T={T}",
                lambda T=T, ids=ids, wts=wts: te.fused_moe(
                    r(T, 2048),
                    fp8_stack(64, 2 * 1408, 2048, 128),
                    fp8_stack(64, 2048, 1408, 128),
                    wts,
                    ids,
                ),
            ),
            (
                f"fused_moe, FP8 experts, per channel T={T}",
                lambda T=T, ids=ids, wts=wts: te.fused_moe(
                    r(T, 2048), fp8_stack(64, 2 * 1408, 2048), fp8_stack(64, 2048, 1408), wts, ids
                ),
            ),
            (
                f"fused_moe + fp32 shared, fp32 partial out (TP) T={T}",
                lambda T=T, ids=ids, wts=wts: te.fused_moe(
                    r(T, 2048),
                    r(32, 2 * 1408, 2048),
                    r(32, 2048, 1408),
                    wts,
                    ids,
                    32,
                    add=r(T, 2048, dt=torch.float32),
                    out_dtype=torch.float32,
                ),
            ),
        ]
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    args = p.parse_args()
    modules = install()
    kernels = {
        name
        for m in modules
        for name, obj in vars(m).items()
        if isinstance(obj, JITFunction) and name.endswith("_kernel")
    }
    failures, start = {}, time.time()
    for pdl in (True, False):  # every kernel that takes PDL compiles both ways
        set_pdl(modules, pdl)
        for name, thunk in calls():
            try:
                thunk()
            except Exception:
                failures[f"{name}, pdl={pdl}"] = traceback.format_exc(limit=4)[-3000:]
                print(f"FAIL {name}, pdl={pdl}\n{failures[f'{name}, pdl={pdl}']}", flush=True)
    never = sorted(kernels - set(compiled))
    res = {
        "target": f"{TARGET.backend} sm_{TARGET.arch}",
        "triton": triton.__version__,
        "seconds": time.time() - start,
        "compiled": compiled,
        "failures": failures,
        "never_compiled": never,
    }
    print(
        f"compile_check ({res['target']}, triton {triton.__version__}): "
        f"{sum(compiled.values())} launches of {len(compiled)} kernels compiled in "
        f"{res['seconds']:.0f} s; {len(failures)} calls failed; never compiled: {never or 'none'}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 1 if failures or never else 0


if __name__ == "__main__":
    sys.exit(main())
