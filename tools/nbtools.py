"""Small, dependency-free helpers shared by tools/make_readme.py and tools/build_docs.py.

Only the standard library is used, so these scripts run before (or without) the dev venv.
The directive handling mirrors nbdev 2 (`nbdev.process.extract_directives`):
directives are the leading `#| ...` comment lines of a code cell (blank lines may be mixed in).
"""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_dir_re = re.compile(r"^\s*#\s*\|")  # a `#| ...` directive line
_magic_re = re.compile(r"^\s*%%\w+")  # a cell magic line (kept by nbdev, dropped here for display)
_ansi_re = re.compile(r"\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")
_hideline_re = re.compile(r"#\|\s*hide_line\s*$")

# Directives after which nbdev_docs removes a whole cell.
HIDE_DIRS = {"hide", "default_exp"}
# Directives that nbdev_docs also removes (their API is shown by show_doc instead); optional here.
EXPORT_DIRS = {"export", "exporti"}


# `](target` of a relative markdown link or image (no scheme, not absolute, not a bare #anchor)
REL_LINK_RE = re.compile(r"(\]\(\s*<?)(?![a-zA-Z][a-zA-Z0-9+.-]*:|/|#)([^)\s>]+)")
# the same, for targets ending in .ipynb (optionally followed by an #anchor)
NB_LINK_RE = re.compile(
    r"(\]\(\s*<?)(?![a-zA-Z][a-zA-Z0-9+.-]*:|/|#)([^)\s>#]+?)\.ipynb(?=[)\s>#])"
)


def settings() -> configparser.SectionProxy:
    cfg = configparser.ConfigParser(delimiters=["="])
    cfg.read(ROOT / "settings.ini", encoding="utf-8")
    return cfg["DEFAULT"]


def src(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def text(x) -> str:
    return "".join(x) if isinstance(x, list) else (x or "")


def read_nb(path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_nb(nb: dict, path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")


def _parse_directive(line: str):
    "`#| echo: false` -> ('echo', ['false']); `#| hide` -> ('hide', [])"
    s = _dir_re.sub("", line, count=1).strip()
    if s.endswith(":"):
        s = s[:-1]
    s = s.replace(":", ": ")
    parts = s.split()
    if not parts:
        return None
    return parts[0].rstrip(":").lower(), parts[1:]


def split_directives(source: str):
    "Split a code cell's source into ({directive: args}, code-without-directives)."
    lines = source.splitlines(True)
    dirs, i = {}, 0
    while i < len(lines) and (
        not lines[i].strip() or _dir_re.match(lines[i]) or _magic_re.match(lines[i])
    ):
        if _dir_re.match(lines[i]):
            d = _parse_directive(lines[i])
            if d:
                dirs[d[0]] = d[1]
        i += 1
    code = "".join(l for l in lines[i:] if not _hideline_re.search(l))
    return dirs, code.strip("\n")


def is_false(dirs: dict, key: str) -> bool:
    v = dirs.get(key)
    return bool(v) and v[0].lower() == "false"


def display_plan(cell, hide_exports: bool = False):
    """Decide how a code cell is shown, nbdev-style.

    Returns None (drop the cell) or (code_to_show_or_None, keep_outputs: bool).
    """
    dirs, code = split_directives(src(cell))
    if dirs.keys() & HIDE_DIRS or is_false(dirs, "include"):
        return None
    if hide_exports and dirs.keys() & EXPORT_DIRS:
        return None
    show_code = not (is_false(dirs, "echo") or "hide_input" in dirs)
    if re.search(r"^show_doc\b", code, re.MULTILINE):
        show_code = False  # nbdev_docs hides show_doc(...) inputs; the markdown output is the doc
    keep_out = not (is_false(dirs, "output") or "hide_output" in dirs)
    filt = dirs.get("filter_stream")
    if filt and keep_out:
        pat = re.compile("|".join(map(re.escape, filt)))
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                o["text"] = [l for l in text(o.get("text")).splitlines(True) if not pat.search(l)]
    code = code if show_code and code.strip() else None
    if code is None and not (keep_out and cell.get("outputs")):
        return None
    return code, keep_out


def clean_stream(s: str) -> str:
    "Strip ANSI escapes and collapse carriage-return progress updates."
    s = _ansi_re.sub("", s)
    return "\n".join(l.rsplit("\r", 1)[-1] for l in s.split("\n"))


def list_notebooks(nbs_dir: Path):
    """Notebooks in site order: index.ipynb first, then the rest in reading order: by file name
    (`15_cli`, `16a_protocol`, ... wherever their folder is), then by relative path.

    Like nbdev, files and folders whose names start with `_` or `.` are skipped.
    """
    nbs = []
    for p in nbs_dir.rglob("*.ipynb"):
        rel = p.relative_to(nbs_dir)
        if any(part.startswith(("_", ".")) for part in rel.parts):
            continue
        nbs.append(rel)
    return sorted(nbs, key=lambda r: (r != Path("index.ipynb"), r.name, r.as_posix()))


def nb_title(nb: dict, default: str) -> str:
    "First level-1 markdown heading, else `default`."
    for c in nb.get("cells", []):
        if c.get("cell_type") == "markdown":
            m = re.search(r"^#\s+(.+?)\s*#*\s*$", src(c), re.MULTILINE)
            if m:
                return m.group(1).strip()
    return default
