"""The probes' stopwatch: microseconds per call of a function captured `reps` times in one CUDA
graph (as a step's layers are), the median of five timed rounds of `iters` replays."""

import torch


def graph_us(fn, reps: int, iters: int) -> float:
    "µs per call of `fn`, captured `reps` times in one graph and replayed `iters` times a round."
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up (and compile) off the capturing stream
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
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
