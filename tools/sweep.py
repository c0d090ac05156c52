"""The loop the GPU sweep tools share: time each candidate's launch options against a reference,
keep the fastest."""

from typing import Callable
from torch import Tensor


def time_candidates(
    run: Callable[..., Tensor], ref: Tensor, candidates: list[dict], nbytes: int, tol: float = 1e-2
) -> tuple[list[dict], dict | None]:
    """Each candidate (keyword arguments of `run`): its relative error against `ref`, median µs
    (`triton.testing.do_bench`) and GB/s over `nbytes`; a candidate that fails to compile or launch
    gets its error. Returns every row and the fastest within `tol` (None if none is)."""
    from triton.testing import do_bench
    from metainfer.kernels.triton_launch import relative_error

    rows = []
    for opts in candidates:
        try:
            err = relative_error(run(**opts), ref)
            us = do_bench(lambda: run(**opts), warmup=5, rep=25, return_mode="median") * 1e3
        except Exception as e:  # e.g. out of shared memory or registers for this tile
            rows.append({"options": opts, "error": repr(e)[:200]})
            continue
        rows.append({"options": opts, "us": us, "rel_err": err, "GBps": nbytes / us / 1e3})
    ok = [r for r in rows if "us" in r and r["rel_err"] < tol]
    return rows, min(ok, key=lambda r: r["us"]) if ok else None
