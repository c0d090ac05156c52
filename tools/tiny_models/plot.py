"""Plot the tiny models' loss curves (train and held-out) from their training.json files.

python3 tools/tiny_models/plot.py OUT.png MODEL_DIR [MODEL_DIR ...]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def main(out: str, *model_dirs: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for d, color in zip(model_dirs, ("tab:blue", "tab:orange", "tab:green")):
        t = json.loads((Path(d) / "training.json").read_text())
        steps = [e["step"] for e in t["log"]]
        ax.plot(steps, [e["train_loss"] for e in t["log"]], color=color, alpha=0.35, lw=1)
        ax.plot(
            steps,
            [e["heldout_loss"] for e in t["log"]],
            color=color,
            lw=2,
            label=f"{t['model']}: held-out (ppl {math.exp(t['heldout_loss']):.1f} at step "
            f"{t['kept_step']}, kept)",
        )
        ax.axvline(t["kept_step"], color=color, ls=":", lw=1)
    ax.set(xlabel="step (16 x 1,024 tokens)", ylabel="loss (nats per token)", ylim=(2.5, 6.5))
    ax.set_title("Tiny models on KJV + fortunes: train (faint) and held-out loss", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:])
