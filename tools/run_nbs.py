"""Execute notebooks in place so their outputs (results, show_doc tables) are stored for the docs
site.

Cells flagged `#| cuda`, `#| slow` or `#| eval: false` are skipped, as nbdev_test skips them on CPU.
Usage: python tools/run_nbs.py [nbs/NAME.ipynb ...]   (default: every notebook in nbs/); then run
nbdev_clean.
"""

import json
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell
from fastcore.xtras import working_directory

SKIP = re.compile(r"^#\|\s*(cuda|slow|eval:\s*false)\b", re.M)


def run(path: Path) -> float:
    nb = read_nb(path)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    start = time.time()
    with working_directory(path.parent):
        CaptureShell(path).run_all(
            nb,
            exc_stop=True,
            preproc=lambda c: c.cell_type != "code" or bool(SKIP.search(c.source)),
        )
    for c in nb.cells:  # ipyparallel's %%px results carry datetimes in their metadata
        if c.cell_type == "code":
            c.outputs = json.loads(json.dumps(c.outputs, default=str))
    write_nb(nb, path)
    return time.time() - start


if __name__ == "__main__":
    paths = [Path(p) for p in sys.argv[1:]] or sorted(Path("nbs").rglob("*.ipynb"))
    for p in paths:
        print(f"{p}: {run(p):.1f}s", flush=True)
