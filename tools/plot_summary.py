"""One picture of a benchmark folder: measured against target and against the limit measured in the
same run.

Usage:  python tools/plot_summary.py FOLDER run7 [run8 ...]
Reads PREFIX-*.json written by `metainfer bench` (and `metainfer bench serve`) in FOLDER (for each
name, the file of the last PREFIX that has it); writes FOLDER/PREFIX-summary.png named after the
last PREFIX. A panel whose runs are missing is left out. FOLDER is a device call's results (run-
prefixed); docs/benchmarks/ keeps only the latest file of each workload (`tools/bench_page.py`
draws its figure), e.g. `docs/benchmarks/h200-2026-11-30 run37 run39 run50 run52` for the TP=2
runs kept there; the earlier runs are in the git history.
"""

import json
import sys
from pathlib import Path
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def load(folder: Path, prefixes: list[str], name: str) -> dict | None:
    paths = [folder / f"{p}-{name}.json" for p in prefixes]
    return next((json.loads(p.read_text()) for p in reversed(paths) if p.exists()), None)


def main(folder: str, *prefixes: str) -> None:
    folder, prefixes = Path(folder), list(prefixes)
    g, tp2, eager = (
        load(folder, prefixes, f"latency-qwen3-8b-b1-{k}") for k in ("graphs", "tp2", "eager")
    )
    thr, serve = (
        load(folder, prefixes, "throughput-qwen3-8b"),
        load(folder, prefixes, "serve-qwen3-8b-h200"),
    )
    ds, ds_tp2, ds_thr = (
        load(folder, prefixes, n)
        for n in ("latency-dsv2lite-b1", "latency-dsv2lite-b1-tp2", "throughput-dsv2lite")
    )
    panels = (
        [draw_qwen_decode, draw_qwen_throughput]
        + ([draw_serving] if serve else [])
        + ([draw_deepseek] if ds or ds_thr else [])
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.5))
    for draw, ax in zip(panels, axes):
        draw(
            ax, g=g, tp2=tp2, eager=eager, thr=thr, serve=serve, ds=ds, ds_tp2=ds_tp2, ds_thr=ds_thr
        )
    fig.tight_layout()
    out = folder / f"{prefixes[-1]}-summary.png"
    fig.savefig(out, dpi=110)
    print(out)


def draw_qwen_decode(ax, g, tp2, eager, **_):
    rows = [("1 GPU, graphs", g, 250), ("TP=2, graphs", tp2, 430), ("1 GPU, eager", eager, 100)]
    rows = [(n, r, t) for n, r, t in rows if r]
    xs = range(len(rows))
    ax.bar(
        xs,
        [r["metainfer"]["decode_tokens_per_s"] for _, r, _ in rows],
        color="tab:blue",
        label="metainfer",
    )
    ax.scatter(
        xs,
        [r["roofline"]["tokens_per_s"] for _, r, _ in rows],
        marker="_",
        s=900,
        color="k",
        label="memory roofline (same run)",
    )
    ax.scatter(
        xs, [t for *_, t in rows], marker="x", s=80, color="tab:red", label="target (issue 4)"
    )
    if g and g.get("peers"):
        for k, v in g["peers"].items():
            ax.axhline(
                v["decode_tokens_per_s"], ls=":", color="tab:gray", label=f"HF {k[3:]} (same run)"
            )
    ax.set_xticks(list(xs), [n for n, *_ in rows])
    ax.set_ylabel("output tokens/s")
    ax.set_title("Qwen3-8B decode, B=1")
    ax.set_ylim(0, 1.45 * max(r["roofline"]["tokens_per_s"] for _, r, _ in rows))
    ax.legend(fontsize=8, loc="upper left")


def draw_qwen_throughput(ax, thr, **_):
    if thr:
        m = thr["metainfer"]
        ax.bar([0], [m["output_tokens_per_s"]], color="tab:blue")
        ax.scatter([0], [thr["roofline"]["output_tokens_per_s"]], marker="_", s=900, color="k")
        ax.scatter([0], [10_000], marker="x", s=80, color="tab:red")
        ax.set_xticks([0], ["256 seqs, U[100,1024]"])
    ax.set_ylabel("output tokens/s")
    ax.set_title("Qwen3-8B offline throughput, 1 GPU")


def draw_serving(ax, serve, **_):
    if serve:
        runs = serve["runs"]
        c = [r["concurrency"] for r in runs]
        ax.plot(c, [r["ttft_ms"]["p50"] for r in runs], "o-", label="TTFT p50 (ms)")
        ax.plot(c, [r["tpot_ms"]["p50"] for r in runs], "s-", label="TPOT p50 (ms)")
        ax.axhline(150, ls="--", color="tab:blue", lw=0.8)
        ax.axhline(25, ls="--", color="tab:orange", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent streams")
        ax.legend(fontsize=8)
    ax.set_title("Serving (OpenAI API), goals dashed")


def draw_deepseek(ax, ds, ds_tp2, ds_thr, **_):
    """B=1 decode (1 GPU, TP=2/EP=2) and offline throughput / 10, against targets and the
    active-weight roofline."""
    rows = [
        (n, v, t, lim)
        for n, v, t, lim in (
            (
                "B=1, 1 GPU",
                ds and ds["metainfer"]["decode_tokens_per_s"],
                350,
                ds and ds["roofline"]["tokens_per_s"],
            ),
            (
                "B=1, TP=2/EP=2",
                ds_tp2 and ds_tp2["metainfer"]["decode_tokens_per_s"],
                None,
                ds_tp2 and ds_tp2["roofline"]["tokens_per_s"],
            ),
            (
                "throughput / 10",
                ds_thr and ds_thr["metainfer"]["output_tokens_per_s"] / 10,
                800,
                ds_thr and ds_thr.get("roofline", {}).get("output_tokens_per_s", 0) / 10,
            ),
        )
        if v
    ]
    xs = range(len(rows))
    ax.bar(xs, [v for _, v, _, _ in rows], color="tab:green")
    ax.scatter(xs, [lim or float("nan") for *_, lim in rows], marker="_", s=900, color="k")
    ax.scatter(xs, [t or float("nan") for _, _, t, _ in rows], marker="x", s=80, color="tab:red")
    ax.set_xticks(list(xs), [n for n, *_ in rows])
    ax.set_ylabel("output tokens/s")
    ax.set_ylim(0, None)
    ax.set_title("DeepSeek-V2-Lite (target x, limit -)")


if __name__ == "__main__":
    main(*sys.argv[1:])
