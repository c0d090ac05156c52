#!/usr/bin/env python3
"""Build the docs site (MkDocs Material + mkdocs-jupyter) from nbs/*.ipynb and docs/**/*.md.

Steps:
  1. Stage a copy of every notebook into build/docs_src/ (index.ipynb first, then the rest sorted
     by path), processed the way nbdev_docs would show it: cells with `#| hide`, `#| default_exp`
     or `#| include: false` are dropped, `#| ...` directive lines are removed from shown code,
     `#| hide_input`/`#| echo: false` (and show_doc(...) calls) show only their outputs,
     `#| hide_output`/`#| output: false` only their code, and relative links to `x.ipynb` are
     pointed at the rendered `x.html`. (Cell tags can't be used for hiding: nbdev_clean strips
     cell metadata, so the directives are applied here instead.) Notebooks keep their stored
     outputs; nothing is executed.
  2. Copy docs/ (minus the site output, docs/screenshots/ and dotfiles) beside them: docs/*.md
     become top-level pages after the notebooks, each sub-folder a nav section (a folder of one
     page, e.g. docs/benchmarks/, is that page under its own title).
  3. Write build/mkdocs.gen.yml, which INHERITs mkdocs.yml and adds docs_dir, site_dir and the nav,
     and run `mkdocs build --strict` with it. The site lands in docs/site/.

Usage:
  python tools/build_docs.py [--nbs DIR] [--docs DIR] [--site DIR] [--no-strict] [--hide-exports]
  [--serve]
Environment: NBS_DIR and DOCS_DIR override the defaults (settings.ini nbs_path, docs/).
Needs mkdocs, mkdocs-material and mkdocs-jupyter (the dev extras) in the running interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nbtools as T  # noqa: E402

ASSET_EXTS = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".csv", ".json", ".txt", ".pdf"}


HEADING_CODE_RE = re.compile(r"^#{1,6} .*`.*$", re.M)


def stage_notebook(nb: dict, hide_exports: bool) -> dict:
    cells = []
    for cell in nb.get("cells", []):
        kind = cell.get("cell_type")
        if kind == "markdown":
            s = T.src(cell)
            if not s.strip():
                continue
            s = T.NB_LINK_RE.sub(r"\1\2.html", s)
            s = s.replace("benchmarks/README.md", "benchmarks/index.html")  # MkDocs' name for it
            # a heading's `code` becomes plain text: mkdocs-jupyter's table of contents drops it,
            # leaving empty entries and anchors that point nowhere
            s = HEADING_CODE_RE.sub(lambda m: m.group(0).replace("`", ""), s)
            cell = dict(cell, source=s, metadata={})
        elif kind == "code":
            plan = T.display_plan(cell, hide_exports=hide_exports)
            if plan is None:
                continue
            code, keep_out = plan
            tags = []
            if code is None:
                tags.append("remove_input")
            outputs = [o for o in cell.get("outputs", []) if keep_out]
            for o in outputs:
                if o.get("output_type") == "stream":
                    o["text"] = T.clean_stream(T.text(o.get("text")))
            cell = dict(
                cell,
                source=code or "",
                outputs=outputs,
                execution_count=None,
                metadata={"tags": tags} if tags else {},
            )
        else:  # raw cells: Quarto front matter etc. have no place in MkDocs
            continue
        cells.append(cell)
    # nbdev notebooks often open with `#| export` import cells before the `# Title` cell; nbdev_docs
    # hides those, here they stay visible, so lift the title above them to keep it at the top.
    first_md = next((i for i, c in enumerate(cells) if c["cell_type"] == "markdown"), None)
    if first_md and re.match(r"\s*#\s", T.src(cells[first_md])):
        cells.insert(0, cells.pop(first_md))
    meta = {k: v for k, v in nb.get("metadata", {}).items() if k in ("kernelspec", "language_info")}
    meta.setdefault(
        "kernelspec", {"display_name": "Python 3", "language": "python", "name": "python3"}
    )
    return dict(nb, cells=cells, metadata=meta)


def md_title(path: Path) -> str | None:
    m = re.search(r"^#\s+(.+?)\s*#*\s*$", path.read_text(encoding="utf-8"), re.MULTILINE)
    return m.group(1).strip() if m else None


def docs_nav(stage: Path, rel_dir: Path, have_index: bool) -> list:
    """Nav entries for the markdown pages copied from docs/ (files first, then one section per
    folder)."""
    here = stage / rel_dir
    pages = sorted(p for p in here.glob("*.md"))
    pages.sort(key=lambda p: p.name != "index.md")
    nav = []
    for p in pages:
        rel = p.relative_to(stage).as_posix()
        if rel == "index.md" and have_index:
            continue
        nav.append({md_title(p) or p.stem.replace("_", " "): rel})
    for d in sorted(x for x in here.iterdir() if x.is_dir()):
        sub = docs_nav(stage, rel_dir / d.name, have_index)
        if len(sub) == 1 and isinstance(next(iter(sub[0].values())), str):
            nav += sub  # a folder of one page (docs/benchmarks/): that page, under its own title
        elif sub:
            nav.append({d.name.replace("_", " ").replace("-", " ").title(): sub})
    return nav


def main(argv=None) -> int:
    cfg = T.settings()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--nbs",
        type=Path,
        default=Path(os.environ.get("NBS_DIR") or T.ROOT / cfg.get("nbs_path", "nbs")),
    )
    ap.add_argument(
        "--docs", type=Path, default=Path(os.environ.get("DOCS_DIR") or T.ROOT / "docs")
    )
    ap.add_argument("--site", type=Path, default=T.ROOT / "docs" / "site")
    ap.add_argument("--stage", type=Path, default=T.ROOT / "build" / "docs_src")
    ap.add_argument("--config", type=Path, default=T.ROOT / "mkdocs.yml")
    ap.add_argument(
        "--no-strict", action="store_true", help="don't turn mkdocs warnings into errors"
    )
    ap.add_argument(
        "--hide-exports",
        action="store_true",
        help="also drop `#| export`/`#| exporti` cells, as nbdev_docs does (it shows show_doc "
        "instead)",
    )
    ap.add_argument(
        "--serve", action="store_true", help="stage, then `mkdocs serve` instead of build"
    )
    args = ap.parse_args(argv)
    nbs, docs, site, stage = (p.resolve() for p in (args.nbs, args.docs, args.site, args.stage))
    t0 = time.perf_counter()

    # 1. notebooks
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    nav = []
    notebooks = T.list_notebooks(nbs) if nbs.is_dir() else []
    for rel in notebooks:
        nb = T.read_nb(nbs / rel)
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        T.write_nb(stage_notebook(nb, args.hide_exports), stage / rel)
        default = (
            "Home"
            if rel.as_posix() == "index.ipynb"
            else re.sub(r"^\d+[_-]", "", rel.stem).replace("_", " ")
        )
        nav.append({T.nb_title(nb, default): rel.as_posix()})
    if nbs.is_dir():  # images and small data files the notebooks refer to
        for p in nbs.rglob("*"):
            rel = p.relative_to(nbs)
            if (
                p.is_file()
                and p.suffix.lower() in ASSET_EXTS
                and not any(s.startswith(("_", ".")) for s in rel.parts)
            ):
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, stage / rel)
    have_index = (stage / "index.ipynb").exists()

    # 2. docs/ pages
    if docs.is_dir():
        for p in sorted(docs.rglob("*")):
            rel = p.relative_to(docs)
            if not p.is_file() or any(s.startswith(".") for s in rel.parts):
                continue
            if p.resolve().is_relative_to(site) or p.suffix in (".ipynb", ".py"):
                continue
            if rel.parts[0] == "screenshots":  # tools/screenshots.py's output: not in the site
                continue
            if rel.as_posix() == "index.md" and have_index:
                print(
                    "build_docs: docs/index.md ignored: nbs/index.ipynb is the home page",
                    file=sys.stderr,
                )
                continue
            if (stage / rel).exists():
                print(
                    f"build_docs: docs/{rel} ignored: a notebook file has the same path",
                    file=sys.stderr,
                )
                continue
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, stage / rel)
        nav += docs_nav(stage, Path("."), have_index)
    if not nav:
        print(
            f"build_docs: no notebooks in {nbs} and no pages in {docs}; nothing to build",
            file=sys.stderr,
        )
        return 1
    if not have_index and not (stage / "index.md").exists():
        print(
            "build_docs: no nbs/index.ipynb or docs/index.md; the site has no home page",
            file=sys.stderr,
        )

    # 3. config + mkdocs  (JSON is valid YAML, so no YAML library is needed to write it)
    gen = stage.parent / "mkdocs.gen.yml"
    gen.write_text(
        json.dumps(
            {
                "INHERIT": str(args.config.resolve()),
                "docs_dir": str(stage),
                "site_dir": str(site),
                # pages are x.html, so the site also works opened from disk
                "use_directory_urls": False,
                "nav": nav,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    cmd = [sys.executable, "-m", "mkdocs", "serve" if args.serve else "build", "-f", str(gen)]
    if not args.serve:
        cmd += ["--clean"] + ([] if args.no_strict else ["--strict"])
    print(
        f"build_docs: staged {len(notebooks)} notebook(s) + docs pages in {stage}; running: "
        f"{' '.join(cmd[2:])}"
    )
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # silence Material's end-of-life banner
    r = subprocess.run(cmd, cwd=T.ROOT, env=env)
    if r.returncode:
        print(f"build_docs: mkdocs failed (exit {r.returncode})", file=sys.stderr)
        return r.returncode
    if not args.serve:
        print(f"build_docs: site written to {site} in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
