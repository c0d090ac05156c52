"""The FP8 probes' stopwatch: microseconds per eager call, by CUDA events (launches included)."""

import torch


def eager_us(fn, iters: int = 20) -> float:
    "µs per call of `fn`: three warm-up calls, then `iters` timed back to back."
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters * 1e3
