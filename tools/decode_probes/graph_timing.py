"""The probes' stopwatch: microseconds per call of a function captured `reps` times in one CUDA
graph (as a step's layers are), the median of five timed rounds of `iters` replays."""

import torch


def captured(fn, reps: int = 1, warmups: int = 3) -> torch.cuda.CUDAGraph:
    "A graph of `reps` calls of `fn`, after `warmups` calls (compiling) off the capturing stream."
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def graph_us(fn, reps: int, iters: int) -> float:
    "µs per call of `fn`, captured `reps` times in one graph and replayed `iters` times a round."
    g = captured(fn, reps)
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record()
        for _ in range(iters):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / iters / reps)
    return sorted(ts)[2]


def paged_batch(ctx: list[int], dev, H: int = 32, Hk: int = 8, D: int = 128, bs: int = 16):
    """A decode batch at Qwen3-8B's shapes over contexts `ctx`, its pages scattered: `(K pool, V
    pool, metadata with max_seqlen_k 40,960 as the graphs take it, q, new k, new v)`, bf16."""
    from metainfer.layers.attention import make_metadata

    B, n_blocks = len(ctx), [-(-c // bs) for c in ctx]
    ids = torch.randperm(sum(n_blocks) + 8).tolist()
    tables = [ids[sum(n_blocks[:i]) : sum(n_blocks[: i + 1])] for i in range(B)]
    kc = torch.randn(len(ids), bs, Hk, D, device=dev, dtype=torch.bfloat16)
    _, meta = make_metadata(tables, ctx, [1] * B, bs, False, dev)
    meta.max_seqlen_k = 40960
    q = torch.randn(B, H, D, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hk, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
    return kc, torch.randn_like(kc), meta, q, k, v
