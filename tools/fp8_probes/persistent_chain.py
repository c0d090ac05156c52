"""What a launch's boundary would cost inside one launch: a B=1 step's 144 FP8 GEMVs of Qwen3-8B's
shapes as a chain (each reads the output of the one before, as a layer's do), once as the package's
144 launches in one CUDA graph and once as one persistent launch whose programs wait for each other
at a grid barrier between GEMVs.

`row_sums.py` found the FP8 GEMVs of a step losing to bf16's per byte by a launch boundary's ~3.6 us
(H100), the same with half the bytes behind it. If a grid barrier costs much less, and the next
GEMV's first weights can be loaded before it (`prefetch`: while the others finish), a persistent
decode step is the lever; if not, it isn't. No norms, attention or activation between the GEMVs: the
boundary's cost alone. The control (`launches`) is the same code launched once a GEMV, a program a
tile, without PDL (the package's GEMV launches with it): persistent against it is the barrier
against a plain launch's boundary, whatever the code's own streaming rate. Outputs are checked
against the package's chain (`rel_err`: largest difference over largest value, after 4 GEMVs and
after all 144; a race between GEMVs would show as ~1). `setup_us`: the input copy and counter reset
each thunk also runs. A chain not done within 10 s ends the process (a barrier that hangs), its rows
so far saved.

H100, 12-07 (docs/benchmarks/h100-2026-12-07-tiles/persistent-chain.json): the package's chain 2,563
us, the control 2,826 (8 x 2,048) and 2,896 (4 x 2,048); persistent at two programs an SM 3,327
without prefetch and 4,085 with it, at one 4,691 and 6,265; no race (every error within bf16
rounding along the chain, at most 0.028, the 4 x 2,048 control's; a race would show ~1). A grid
barrier costs ~3.5 us more than the control's plain launch boundary (3,327 against 2,826 over 144),
and the package, launching with PDL, is faster still: not the lever. (An earlier run,
`h100-2026-12-07-launch/`, read the weights a byte at a time: pointers and sizes loaded from tables
carry no alignment until `_gemv_at` says so.)

Usage: python tools/fp8_probes/persistent_chain.py OUT.json"""

import os
import sys
import time
import torch
from metainfer.kernels import triton_gemv as tg
from metainfer.kernels.triton_launch import cdiv, jit, tl
from metainfer.layers.fp8 import FP8, Fp8Weight

sys.path[:0] = ["tools/decode_probes", "tools/fp8_probes"]
from graph_timing import graph_us  # noqa: E402
from row_sums import FF, HID, L, SHAPES, registers, save_row  # noqa: E402  (a step's GEMV shapes)

GROUP = 128
MAXN = 2 * FF
TILES = ((8, 2048), (4, 2048))  # rows, columns of a program's tile (the package's FP8 tile first)


@jit
def _tile_chunk(w, s, src, rows, valid, k0, N, K, wpre, use_pre, PREFETCH: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr):  # fmt: skip
    """A tile's chunk of columns from `k0`: its weights (`wpre` instead where `use_pre`: loaded
    before the barrier) times the input, summed per group, times the group's scale."""
    kk = k0 + tl.arange(0, BLOCK_K)
    m = valid[:, None] & (kk < K)[None, :]
    ptrs = w + rows[:, None].to(tl.int64) * K + kk[None, :]
    if PREFETCH:
        if use_pre:
            wt = wpre
        else:
            wt = tl.load(ptrs, mask=m, other=0.0)
    else:
        wt = tl.load(ptrs, mask=m, other=0.0)
    x = tl.load(src + kk, mask=kk < K, other=0.0, cache_modifier=".cg").to(tl.float32)
    kb = k0 // GROUP + tl.arange(0, BLOCK_K // GROUP)
    sc = tl.load(s + rows[:, None].to(tl.int64) * (K // GROUP) + kb[None, :],
                 mask=valid[:, None] & (kb * GROUP < K)[None, :], other=0.0)  # fmt: skip
    p = tl.reshape(wt.to(tl.float32) * x[None, :], [BLOCK_N, BLOCK_K // GROUP, GROUP])
    return tl.sum(tl.sum(p, 2) * sc, 1)


@jit
def _gemv_at(w_table, meta, g):
    """GEMV `g`'s `N`, `K` and weights, with the alignment the package's GEMV gets from Triton's
    argument specialization (16 bytes; without it every weight is loaded a byte at a time)."""
    N = tl.multiple_of(tl.load(meta + 2 * g), 16)
    K = tl.multiple_of(tl.load(meta + 2 * g + 1), 16)
    return N, K, tl.multiple_of(tl.load(w_table + g).to(tl.pointer_type(tl.float8e4nv)), 16)


@jit
def _first_chunk(w_table, meta, g, pid, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    "GEMV `g`'s first chunk of this program's first tile (nothing past the chain's last GEMV)."
    N, K, w = _gemv_at(w_table, meta, g)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.arange(0, BLOCK_K)
    m = (rows < N)[:, None] & (k < K)[None, :]
    return tl.load(w + rows[:, None].to(tl.int64) * K + k[None, :], mask=m, other=0.0)


@jit
def _chain(w_table, s_table, meta, buf, counter, g0, n_gemvs, MAXN_: tl.constexpr,
           PREFETCH: tl.constexpr, BARRIER: tl.constexpr, BLOCK_N: tl.constexpr,
           BLOCK_K: tl.constexpr, GROUP: tl.constexpr):  # fmt: skip
    """GEMVs `g0, ..., g0 + n_gemvs - 1` of the chain: GEMV `g` reads `buf[g % 2]` and writes
    `buf[(g + 1) % 2]`, every program taking tiles `pid, pid + P, ...` of it; with `BARRIER` the
    programs then wait for each other (`counter`, zeroed before; all of them resident: a
    cooperative launch)."""
    pid, P = tl.program_id(0), tl.num_programs(0)
    if PREFETCH:
        wpre = _first_chunk(w_table, meta, g0, pid, BLOCK_N, BLOCK_K)
    else:
        wpre = 0
    for g in range(g0, g0 + n_gemvs):
        N, K, w = _gemv_at(w_table, meta, g)
        s = tl.multiple_of(tl.load(s_table + g).to(tl.pointer_type(tl.float32)), 16)
        src, dst = buf + (g % 2) * MAXN_, buf + ((g + 1) % 2) * MAXN_
        for t in range(pid, tl.cdiv(N, BLOCK_N), P):
            rows = t * BLOCK_N + tl.arange(0, BLOCK_N)
            valid = rows < N
            acc = tl.zeros([BLOCK_N], dtype=tl.float32)
            for c in range(0, tl.cdiv(K, BLOCK_K)):
                use_pre = (t == pid) & (c == 0)
                acc += _tile_chunk(w, s, src, rows, valid, c * BLOCK_K, N, K, wpre, use_pre,
                                   PREFETCH, BLOCK_N, BLOCK_K, GROUP)  # fmt: skip
            tl.store(dst + rows, acc.to(tl.bfloat16), mask=valid)
        if BARRIER:
            tl.debug_barrier()  # every thread's stores issued before the count says so
            seen = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") + 1
            if PREFETCH:  # the next GEMV's first weights, after arriving (a release would wait)
                wpre = _first_chunk(w_table, meta, g + 1, pid, BLOCK_N, BLOCK_K)
            while seen < (g - g0 + 1) * P:
                seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")
            tl.debug_barrier()


def make_chain(dev, n: int):
    "`n` FP8 weights of the step's shapes in order, scaled to keep values near 1 along the chain."
    shapes = [SHAPES[i % 4] for i in range(n)]
    ws = []
    for N, K in shapes:
        data = (torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.5).to(FP8)
        scale = torch.full((N, K // GROUP), 2.0 / K**0.5, device=dev)
        ws.append(Fp8Weight(data, scale, GROUP))
    return ws


def package_chain(ws, x0):
    "The chain as the package's GEMV launches: each reads the first K values of the one before."
    out = x0
    for w in ws:
        K = w.data.shape[1]
        out = tg.gemv(out[:K].view(1, K), w).view(-1)
    return out


def chain_run(ws, x0, tile: tuple[int, int], programs: int | None = None, prefetch=False):
    """The chain as a thunk: one cooperative launch of `programs` programs with grid barriers, or
    (`programs` None, the control) a launch a GEMV of the same code, a program a tile, without
    PDL; where its output lands; the compiled kernel, once it ran."""
    dev, n = x0.device, len(ws)
    pad = ws + ws[:1]  # (GEMV n's first chunk is read with prefetch: none of it is used)
    w_table = torch.tensor([w.data.data_ptr() for w in pad], device=dev, dtype=torch.int64)
    s_table = torch.tensor([w.scale.data_ptr() for w in pad], device=dev, dtype=torch.int64)
    shapes = [v for w in ws for v in w.data.shape] + [0, 0]
    meta = torch.tensor(shapes, device=dev, dtype=torch.int32)
    buf = torch.zeros(2, MAXN, device=dev, dtype=torch.bfloat16)
    counter = torch.zeros(1, device=dev, dtype=torch.int32)
    args = (w_table, s_table, meta, buf, counter)
    kw = dict(MAXN_=MAXN, BLOCK_N=tile[0], BLOCK_K=tile[1], GROUP=GROUP, num_warps=4, num_stages=1)
    info = {}

    def setup():  # what the thunk does besides the chain
        buf[0, : x0.numel()] = x0
        counter.zero_()

    def run():
        setup()
        if programs is None:
            for g, w in enumerate(ws):
                grid = (cdiv(w.data.shape[0], tile[0]),)
                info["kernel"] = _chain[grid](*args, g, 1, PREFETCH=0, BARRIER=0, **kw)
        else:
            info["kernel"] = _chain[(programs,)](*args, 0, n, PREFETCH=int(prefetch), BARRIER=1,
                                                 launch_cooperative_grid=True, **kw)  # fmt: skip

    return run, lambda: buf[n % 2, : ws[-1].data.shape[0]], info, setup


def ran_within(seconds: float) -> None:
    "Exit the process unless the work queued so far ends within `seconds` (a barrier that hangs)."
    done, end = torch.cuda.Event(), time.time() + seconds
    done.record()
    while not done.query():
        if time.time() > end:
            print(f"!!! not done after {seconds} s: a hung barrier; exiting", flush=True)
            os._exit(3)
        time.sleep(0.01)


def rel_err(out, ref) -> float:
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def main():
    out_path, dev = sys.argv[1], torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    ws = make_chain(dev, 4 * L)
    nbytes = sum(w.data.numel() for w in ws)
    x0 = torch.randn(HID, device=dev, dtype=torch.bfloat16)
    ref4, ref = package_chain(ws[:4], x0).clone(), package_chain(ws, x0).clone()
    us = graph_us(lambda: package_chain(ws, x0), 1, 20)
    result = dict(device=torch.cuda.get_device_name(), sms=sms, step_bytes=nbytes, rows=[
        dict(variant="package", launches=len(ws), step_us=us, TBps=nbytes / us / 1e6)])  # fmt: skip
    result["setup_us"] = graph_us(chain_run(ws[:1], x0, (8, 2048))[3], 1, 20)  # (in every row)
    print(result, flush=True)
    variants = [dict(programs=None, prefetch=False, tile=t) for t in TILES]
    variants += [dict(programs=p, prefetch=f, tile=t) for p in (sms, 2 * sms) for f in (0, 1)
                 for t in TILES]  # fmt: skip
    for v in variants:
        row = dict(variant="launches" if v["programs"] is None else "persistent", **v)
        try:
            run4, out4, _, _ = chain_run(ws[:4], x0, **v)
            run4()
            ran_within(10)
            run, out, info, _ = chain_run(ws, x0, **v)
            run()
            ran_within(10)
            k = info["kernel"]
            row.update(rel_err_4=rel_err(out4(), ref4), rel_err=rel_err(out(), ref), **registers(k))
            us = graph_us(run, 1, 20)
            row.update(step_us=us, TBps=nbytes / us / 1e6)
        except Exception as e:  # a grid too large to be resident, say
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        save_row(result, out_path, row)


if __name__ == "__main__":
    main()
