"""Run one notebook's cells as `nbdev_test --flags cuda` does, then print what every cell printed.

Usage (GPU):  python tools/nb_outputs.py nbs/03a_triton_kernels.ipynb
`nbdev_test` keeps cell output to itself, so the numbers the `#| cuda` cells print (relative errors,
kernel timings) would never reach a GPU run's log. This runs the same cells (all but `#| slow` ones
and `#| eval: false`), prints their stream output in order, and exits non-zero with the traceback if
a cell fails.
"""

import sys
from pathlib import Path
from execnb.shell import CaptureShell
from fastcore.foundation import working_directory
from nbdev.frontmatter import FrontmatterProc
from nbdev.process import NBProcessor


def skipped(cell) -> bool:
    if cell.cell_type != "code":
        return True
    directives = getattr(cell, "directives_", {}) or {}
    return directives.get("eval:", [""])[0].lower() == "false" or "slow" in directives


def main(path: str) -> int:
    fn = Path(path).absolute()
    nb = NBProcessor(fn, procs=FrontmatterProc, process=True).nb
    shell, ok = CaptureShell(fn), True
    try:
        with working_directory(fn.parent):
            shell.run_all(nb, exc_stop=True, preproc=skipped)
    except Exception:
        sys.stderr.write(shell.prettytb(fname=fn) + "\n")
        ok = False
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                print("".join(out["text"]), end="")
    print(f"{fn.name}: {'passed' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
