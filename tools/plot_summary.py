"""One picture of a benchmark folder: measured against target and against the limit measured in the same run.

Usage:  python tools/plot_summary.py docs/benchmarks/h200-2026-11-29 run5
Reads PREFIX-*.json written by `metainfer bench` (and `metainfer bench serve`) in FOLDER; writes FOLDER/PREFIX-summary.png.
"""
import json, sys
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def load(folder: Path, prefix: str, name: str) -> dict | None:
    path = folder / f"{prefix}-{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def main(folder: str, prefix: str) -> None:
    folder = Path(folder)
    g, tp2, eager = (load(folder, prefix, f"latency-qwen3-8b-b1-{k}") for k in ("graphs", "tp2", "eager"))
    thr, serve = load(folder, prefix, "throughput-qwen3-8b"), load(folder, prefix, "serve-qwen3-8b-h200")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))

    ax = axes[0]  # B=1 decode
    rows = [("1 GPU, graphs", g, 250), ("TP=2, graphs", tp2, 430), ("1 GPU, eager", eager, 100)]
    rows = [(n, r, t) for n, r, t in rows if r]
    xs = range(len(rows))
    ax.bar(xs, [r["metainfer"]["decode_tokens_per_s"] for _, r, _ in rows], color="tab:blue", label="metainfer")
    ax.scatter(xs, [r["roofline"]["tokens_per_s"] for _, r, _ in rows], marker="_", s=900, color="k", label="memory roofline (same run)")
    ax.scatter(xs, [t for *_, t in rows], marker="x", s=80, color="tab:red", label="target (issue 4)")
    if g and g.get("peers"):
        for k, v in g["peers"].items(): ax.axhline(v["decode_tokens_per_s"], ls=":", color="tab:gray", label=f"HF {k[3:]} (same run)")
    ax.set_xticks(list(xs), [n for n, *_ in rows]); ax.set_ylabel("output tokens/s"); ax.set_title("Qwen3-8B decode, B=1")
    ax.set_ylim(0, 1.45 * max(r["roofline"]["tokens_per_s"] for _, r, _ in rows)); ax.legend(fontsize=8, loc="upper left")

    ax = axes[1]  # offline throughput
    if thr:
        m = thr["metainfer"]
        ax.bar([0], [m["output_tokens_per_s"]], color="tab:blue")
        ax.scatter([0], [thr["roofline"]["output_tokens_per_s"]], marker="_", s=900, color="k")
        ax.scatter([0], [10_000], marker="x", s=80, color="tab:red")
        ax.set_xticks([0], ["256 seqs, U[100,1024]"])
    ax.set_ylabel("output tokens/s"); ax.set_title("Qwen3-8B offline throughput, 1 GPU")

    ax = axes[2]  # serving
    if serve:
        runs = serve["runs"]
        c = [r["concurrency"] for r in runs]
        ax.plot(c, [r["ttft_ms"]["p50"] for r in runs], "o-", label="TTFT p50 (ms)")
        ax.plot(c, [r["tpot_ms"]["p50"] for r in runs], "s-", label="TPOT p50 (ms)")
        ax.axhline(150, ls="--", color="tab:blue", lw=0.8); ax.axhline(25, ls="--", color="tab:orange", lw=0.8)
        ax.set_xscale("log", base=2); ax.set_xlabel("concurrent streams"); ax.legend(fontsize=8)
    ax.set_title("Serving (OpenAI API), goals dashed")
    fig.tight_layout()
    fig.savefig(folder / f"{prefix}-summary.png", dpi=110)
    print(folder / f"{prefix}-summary.png")


if __name__ == "__main__":
    main(*sys.argv[1:3])
