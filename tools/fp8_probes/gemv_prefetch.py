"""A batch-1 step of Qwen3-8B (FP8 block-wise, or bf16) on the real kernels, in one CUDA graph:
the package's GEMV against a copy of it with other tiles, loads or L2 prefetches.

Usage: python tools/fp8_probes/gemv_prefetch.py OUT.json [fp8,bf16] [tiles|prefetch]
- `prefetch`: before its PDL wait, the GEMV asks L2 to fetch the weights it will read next (while
  the kernel before it, e.g. attention, leaves the memory bus idle): the lines of a program's first
  P chunks (`prefetch.global.L2`, one per 128 bytes or per 32), or its whole slice in one bulk
  request (`cp.async.bulk.prefetch.L2`); `evict`: the streaming loads marked evict-first.
  H200, 12-06 (docs/benchmarks/h200-2026-12-06-gemv/gemv-prefetch.json): every prefetch is slower
  (FP8 step 2,660 us with the package's GEMV; 2,831 with the best prefetch, 5,423 with a line
  prefetch of a program's whole slice; bf16 4,003 against 4,272 at best), so none is built.
- `tiles`: the tile (rows, columns, warps) of every GEMV of the step, each also double-buffered
  (a chunk's load issued before the previous chunk's sums); `package-bare`: the GEMVs alone, no
  norms or attention between them. H100, 12-07 (docs/benchmarks/h100-2026-12-07-gemv/): the
  package's 8 x 2,048 FP8 tile within 1.3 % of the best (4 x 2,048); double-buffered loads slower
  at every tile (4,116 against 3,373 us a step at the package's), so neither is changed."""

import json
import sys
import time
import torch
from metainfer.kernels import triton_gemv as tg
from metainfer.kernels.triton_launch import cdiv, jit, pdl_sync, tl
from metainfer.kernels.triton_norms import add_rms_norm
from metainfer.kernels.triton_decode import paged_decode
from metainfer.kernels.triton_silu import silu_mul_pairs
from metainfer.layers.fp8 import FP8, Fp8Weight

sys.path.insert(0, "tools/decode_probes")
from graph_timing import graph_us, paged_batch  # noqa: E402

LINE_ASM = {
    1: "prefetch.global.L2 [$1]; mov.u32 $0, 0;",
    2: "prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0;",
}
BULK_ASM = (
    "{ .reg .pred p; .reg .u32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
    "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }"
)


LINE_ASM_1: tl.constexpr = tl.constexpr(LINE_ASM[1])
LINE_ASM_2: tl.constexpr = tl.constexpr(LINE_ASM[2])
BULK: tl.constexpr = tl.constexpr(BULK_ASM)


@jit
def _lines(ptrs, MODE: tl.constexpr):
    if MODE == 1:
        r = tl.inline_asm_elementwise(
            LINE_ASM_1, "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
        )
    else:
        r = tl.inline_asm_elementwise(
            LINE_ASM_2, "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
        )
    return r


@jit
def _gemv_pf(
    x_ptr,
    w_ptr,
    out_ptr,
    s_ptr,
    N,
    K,
    stride_wn,
    stride_sn,
    SCALE: tl.constexpr,
    GROUP: tl.constexpr,
    SILU_MUL: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PF_MODE: tl.constexpr,  # 0 none, 1/2 line prefetch (2: evict_last), 3 bulk
    PF_CHUNKS: tl.constexpr,  # chunks after the first to prefetch (line modes)
    PF_STEP: tl.constexpr,  # bytes between line prefetches
    PF_BYTES: tl.constexpr,  # bulk: bytes of the program's slice (0: all of it)
    POLICY: tl.constexpr,  # the weight loads' eviction policy ("" or "evict_first")
    EL: tl.constexpr,  # bytes a weight
    PER: tl.constexpr,  # line prefetches a row a chunk: BLOCK_K * EL // PF_STEP
    DB: tl.constexpr,  # double-buffered: each chunk's load issued before the previous one's sums
):
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    valid = n < N
    k = tl.arange(0, BLOCK_K)
    rows = w_ptr + n[:, None].to(tl.int64) * stride_wn
    w = tl.load(
        rows + k[None, :], mask=valid[:, None] & (k < K)[None, :], other=0.0, eviction_policy=POLICY
    )
    if PF_MODE == 1 or PF_MODE == 2:
        j = tl.arange(0, PER)
        for c in tl.static_range(1, PF_CHUNKS + 1):
            off = c * BLOCK_K + j * (PF_STEP // EL)
            ok = valid[:, None] & (off < K)[None, :]
            p = tl.where(ok, rows + off[None, :], w_ptr)
            _lines(p, PF_MODE)
    if PF_MODE == 3:
        first = tl.program_id(0) * BLOCK_N
        nrows = tl.minimum(N - first, BLOCK_N)
        size = nrows * K * EL
        if PF_BYTES > 0:
            size = tl.minimum(size, PF_BYTES)
        ptr = w_ptr + first.to(tl.int64) * stride_wn + tl.zeros([1], tl.int64)
        tl.inline_asm_elementwise(
            BULK,
            "=r,l,r",
            [ptr, size + tl.zeros([1], tl.int32)],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    pdl_sync(True)
    s_rows, G = s_ptr, tl.cdiv(K, GROUP)
    if SCALE == 1:
        s_rows = s_ptr + n[:, None].to(tl.int64) * stride_sn
    if DB:
        acc = tl.zeros([BLOCK_N], tl.float32)
        for c in range(0, tl.cdiv(K, BLOCK_K)):
            kn = (c + 1) * BLOCK_K + k
            w_next = tl.load(
                rows + kn[None, :],
                mask=valid[:, None] & (kn < K)[None, :],
                other=0.0,
                eviction_policy=POLICY,
            )
            kk = c * BLOCK_K + k
            x = tl.load(x_ptr + kk, mask=kk < K, other=0.0).to(tl.float32)
            kb0 = c * (BLOCK_K // GROUP)
            acc += tg._chunk_dot(w, x, s_rows, kb0, valid, G, SCALE, GROUP, BLOCK_N, BLOCK_K)
            w = w_next
    else:
        x = tl.load(x_ptr + k, mask=k < K, other=0.0).to(tl.float32)
        acc = tg._chunk_dot(w, x, s_rows, 0, valid, G, SCALE, GROUP, BLOCK_N, BLOCK_K)
        for c in range(1, tl.cdiv(K, BLOCK_K)):
            kk = c * BLOCK_K + k
            w = tl.load(
                rows + kk[None, :],
                mask=valid[:, None] & (kk < K)[None, :],
                other=0.0,
                eviction_policy=POLICY,
            )
            x = tl.load(x_ptr + kk, mask=kk < K, other=0.0).to(tl.float32)
            kb0 = c * (BLOCK_K // GROUP)
            acc += tg._chunk_dot(w, x, s_rows, kb0, valid, G, SCALE, GROUP, BLOCK_N, BLOCK_K)
    y = acc.to(out_ptr.dtype.element_ty)
    if SILU_MUL:
        out = tl.program_id(0) * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        tl.store(out_ptr + out, silu_mul_pairs(tl.reshape(y, [BLOCK_N // 2, 2])), mask=out < N // 2)
    else:
        tl.store(out_ptr + n, y, mask=valid)


def gemv_pf(x, weight, act=None, EVICT=False, DB=False, tiles=None, **pf):
    scale, group = (weight.scale, weight.group) if tg.fp8(weight) else (None, 0)
    w = weight.data if tg.fp8(weight) else weight
    K, N = x.shape[-1], w.shape[0]
    out = torch.empty(N // 2 if act else N, dtype=x.dtype, device=x.device)
    t = tg.gemv_tiles(N, K, x.device, w.element_size())
    if tiles:
        t = dict(t, BLOCK_N=tiles[0], BLOCK_K=min(tiles[1], tg.next_pow2(K)), num_warps=tiles[2])
    _gemv_pf[(cdiv(N, t["BLOCK_N"]),)](
        x.reshape(K),
        w,
        out,
        scale,
        N,
        K,
        w.stride(0),
        0 if scale is None else scale.stride(0),
        SCALE=0 if scale is None else 2 if group >= K else 1,
        GROUP=group if 0 < group < K else 1,
        SILU_MUL=act is not None,
        BLOCK_N=t["BLOCK_N"],
        BLOCK_K=t["BLOCK_K"],
        num_warps=t["num_warps"],
        num_stages=t["num_stages"],
        launch_pdl=True,
        POLICY="evict_first" if EVICT else "",
        DB=DB,
        EL=w.element_size(),
        PER=t["BLOCK_K"] * w.element_size() // pf["PF_STEP"],
        **pf,
    )
    return out


dev = torch.device("cuda")
H, Hk, D, HID, FF, V, L = 32, 8, 128, 4096, 12288, 151936, 36


def fp8_weight(N, K):
    data = (torch.randn(N, K, device=dev) * 0.5).to(FP8)
    scale = torch.rand(N, K // 128, device=dev) * 1e-2 + 1e-3  # a row's scale per 128 columns
    scale = scale.view(N // 128, 128, K // 128)[:, :1].expand(-1, 128, -1).reshape(N, K // 128)
    return Fp8Weight(data, scale.contiguous(), 128)


def bf16_weight(N, K):
    return torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02


def build(kind):
    make = fp8_weight if kind == "fp8" else bf16_weight
    layers = [
        dict(
            qkv=make(H * D + 2 * Hk * D, HID),
            o=make(HID, H * D),
            gu=make(2 * FF, HID),
            down=make(HID, FF),
            n1=torch.ones(HID, device=dev, dtype=torch.bfloat16),
            n2=torch.ones(HID, device=dev, dtype=torch.bfloat16),
        )
        for _ in range(L)
    ]
    return layers, bf16_weight(V, HID)


def step_fn(layers, lm_head, ctx, mm, bare=False):
    "A step's graph; `bare`: its GEMVs alone (no norms, no attention)."
    torch.manual_seed(0)  # the same K/V for every variant
    kc, vc, meta, *_ = paged_batch([ctx], dev)
    x0 = torch.randn(1, HID, device=dev, dtype=torch.bfloat16)
    r0 = torch.zeros_like(x0)
    nf = torch.ones(HID, device=dev, dtype=torch.bfloat16)

    def step():
        x, res = x0, r0
        for ly in layers:
            h, res = (x, res) if bare else add_rms_norm(x, res, ly["n1"], 1e-6)
            qkv = mm(h, ly["qkv"]).view(-1)
            q = qkv[: H * D].view(1, H, D)
            k = qkv[H * D : H * D + Hk * D].view(1, Hk, D)
            v = qkv[H * D + Hk * D :].view(1, Hk, D)
            a = q if bare else paged_decode(q, k, v, kc, vc, meta, 0.08)
            o = mm(a.reshape(1, H * D), ly["o"])
            h = o.view(1, HID)
            h, res = (h, res) if bare else add_rms_norm(h, res, ly["n2"], 1e-6)
            g = mm(h, ly["gu"], act="silu_and_mul")
            x = mm(g.view(1, FF), ly["down"]).view(1, HID)
        h, _ = add_rms_norm(x, res, nf, 1e-6)
        return mm(h, lm_head)

    return step


def timed(step, iters=30):
    "µs per replay of `step` captured in one graph (`graph_us`), and its output."
    box = {}
    us = graph_us(lambda: box.update(out=step()), 1, iters)
    return us, box["out"].float().clone()


def package(x, w, act=None):
    return tg.gemv(x, w, act=act)


NONE = dict(PF_MODE=0, PF_CHUNKS=0, PF_STEP=128, PF_BYTES=0, EVICT=False)
PREFETCH = {  # the first H200 run (12-06): every prefetch slower
    "package": None,
    "copy": NONE,
    "evict": NONE | dict(EVICT=True),
    "line1": NONE | dict(PF_MODE=1, PF_CHUNKS=1),
    "line2": NONE | dict(PF_MODE=1, PF_CHUNKS=2),
    "line5": NONE | dict(PF_MODE=1, PF_CHUNKS=5),
    "line5-32B": NONE | dict(PF_MODE=1, PF_CHUNKS=5, PF_STEP=32),
    "line5-evict": NONE | dict(PF_MODE=1, PF_CHUNKS=5, EVICT=True),
    "line5-last": NONE | dict(PF_MODE=2, PF_CHUNKS=5, EVICT=True),
    "bulk-32K": NONE | dict(PF_MODE=3, PF_BYTES=32768),
    "bulk-all": NONE | dict(PF_MODE=3),
    "bulk-all-evict": NONE | dict(PF_MODE=3, EVICT=True),
}
TILES = (  # (rows, columns, warps) of a program's tile
    (4, 2048, 4),
    (16, 1024, 4),
    (8, 1024, 4),
    (16, 2048, 8),
    (8, 4096, 8),
    (4, 4096, 4),
    (2, 4096, 4),
    (8, 512, 2),
    (4, 1024, 2),
)
TILE_SWEEP = (  # the second: the package's tiles in a whole step, double-buffered loads
    {"package": None, "package-bare": "bare", "copy": NONE, "db": NONE | dict(DB=True)}
    | {f"t{n}x{k}w{w}": NONE | dict(tiles=(n, k, w)) for n, k, w in TILES}
    | {f"db-t{n}x{k}w{w}": NONE | dict(tiles=(n, k, w), DB=True) for n, k, w in TILES}
)
SETS = {"prefetch": PREFETCH, "tiles": TILE_SWEEP}


def main():
    out_path = sys.argv[1]
    kinds = sys.argv[2].split(",") if len(sys.argv) > 2 else ["fp8", "bf16"]
    variants = SETS[sys.argv[3] if len(sys.argv) > 3 else "tiles"]
    result = dict(variants=variants, rows=[])
    for kind in kinds:
        layers, lm_head = build(kind)
        bytes_ = (
            sum(
                (w.data.numel() if kind == "fp8" else w.numel() * 2)
                for ly in layers
                for key, w in ly.items()
                if key in ("qkv", "o", "gu", "down")
            )
            + lm_head.numel() * 2
        )
        ref = None
        for ctx in (512,):
            for name, pf in variants.items():
                mm = (
                    package
                    if pf in (None, "bare")
                    else (lambda x, w, act=None, pf=pf: gemv_pf(x, w, act, **pf))
                )
                t0 = time.time()
                try:
                    us, out = timed(step_fn(layers, lm_head, ctx, mm, bare=pf == "bare"))
                except Exception as e:  # a variant that does not compile here
                    row = dict(
                        kind=kind, ctx=ctx, variant=name, error=f"{type(e).__name__}: {e}"[:400]
                    )
                    result["rows"].append(row)
                    print(row, flush=True)
                    continue
                if name == "package":
                    ref = out
                same = bool(torch.equal(out, ref)) if ref is not None else None
                row = dict(
                    kind=kind,
                    ctx=ctx,
                    variant=name,
                    step_us=us,
                    tok_s=1e6 / us,
                    weight_TBps=bytes_ / us / 1e6,
                    same_as_package=same,
                    wall_s=time.time() - t0,
                )
                result["rows"].append(row)
                print(
                    f"{kind} ctx {ctx} {name:16s} {us:8.1f} us {1e6 / us:6.1f} tok/s "
                    f"{bytes_ / us / 1e6:5.2f} TB/s same {same}",
                    flush=True,
                )
                json.dump(result, open(out_path, "w"), indent=1)
        del layers, lm_head
        torch.cuda.empty_cache()
    json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
