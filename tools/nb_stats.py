"""How the notebooks read as a teaching text (issue 26's acceptance 1), counted, checked in CI.

- exported cell size: lines of code (directives, blank lines and comment-only lines not counted)
  of each `#| export` cell; the median must be <= 10.
- shown running: an exported cell counts when the next code cell (markdown, and cells that only
  call `show_doc`, in between are fine) is not exported and uses a name the exported cell defines
  (an import-only cell is skipped: imports are not code to demonstrate); a `@patch` method counts
  as used when called as `obj.method`, and definitions under a top-level `if`/`try` count too;
  >= 75 % must be.
- show_doc: every public name of `metainfer` (a module's `__all__`) has a `show_doc(name)` in the
  notebook that exports it; a constant may instead be shown by value (a cell whose last statement
  is the bare name, `list(NAME)`, `sorted(NAME)`, `NAME.keys()` or a comprehension over
  `NAME.items()`), since `show_doc` of a constant prints its type's docstring.
- figures: notebook outputs that are images (image/png, image/svg+xml), outside the benchmarks
  notebooks; at least 8.

Usage: python tools/nb_stats.py [--check] [--list]   (--list prints what falls short, per notebook)
Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nbtools import ROOT, list_notebooks, read_nb, split_directives, src  # noqa: E402

EXPORT = {"export", "exports"}
LIMITS = {"median_lines": 10, "shown_pct": 75.0, "figures": 8}


def code_lines(code: str) -> int:
    return sum(1 for l in code.splitlines() if l.strip() and not l.strip().startswith("#"))


def defined_names(code: str) -> tuple[set[str], bool]:
    """Top-level names a cell defines (functions, classes, assignments, @patch methods, also under a
    top-level `if`/`try`, e.g. `if triton is not None:`); import-only?"""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set(), False
    names: set[str] = set()
    return names, _collect(tree.body, names)


def _collect(body: list[ast.stmt], names: set[str]) -> bool:
    "Add what `body` defines to `names`; whether it only imports."
    only_imports = bool(body)
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, (ast.If, ast.Try)):
            blocks = [node.body, node.orelse] + [h.body for h in getattr(node, "handlers", [])]
            only_imports &= all([_collect(b, names) or not b for b in blocks])
            continue
        only_imports = False
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            for d in getattr(node, "decorator_list", []):  # @patch def f(self: Cls): Cls.f
                d = d.func if isinstance(d, ast.Call) else d  # @patch(as_prop=True)
                if isinstance(d, ast.Name) and d.id in ("patch", "patch_to") and node.args.args:
                    ann = node.args.args[0].annotation
                    if isinstance(ann, ast.Name):
                        names.add(ann.id)
                    names.add("." + node.name)  # a method runs as `obj.f(...)`
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return only_imports


def only_show_doc(text: str) -> bool:
    "A cell that only calls `show_doc` (its directives aside)."
    lines = [x for x in split_directives(text)[1].splitlines() if x.strip()]
    return bool(lines) and all(x.startswith("show_doc(") for x in lines)


def uses(code: str, names: set[str]) -> bool:
    "Whether `code` names one of `names` (`.f` stands for a method: `obj.f`)."
    pats = [rf"(?<![\w.]){re.escape(n)}\b" if n[0] != "." else rf"\w\{n}\b" for n in names]
    return any(re.search(p, code) for p in pats)


def module_names(mod: str) -> tuple[list[str], set[str]]:
    """A module's `__all__` and the names it assigns at top level (constants: documented by showing
    their value), read from its source (no import: this must run without torch)."""
    path = ROOT / (mod.replace(".", "/") + ".py")
    if not path.exists():
        return [], set()
    public, consts = [], set()
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets += [node.target] if isinstance(node, ast.AnnAssign) else []
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if "__all__" in names:
            public = [ast.literal_eval(e) for e in node.value.elts]
        consts |= names
    return public, consts


def displayed_names(code: str) -> set[str]:
    "The names a cell's last statement displays (`DTYPES`, `TINY, TRAINED`, `list(KERNELS)`)."
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return set()
    if not body or not isinstance(body[-1], ast.Expr):
        return set()
    v = body[-1].value
    elts = v.elts if isinstance(v, ast.Tuple) else [v]
    # `{k: f(v) for k, v in TABLE.items()}`: the table's entries, shown readably
    elts = [
        e.generators[0].iter if isinstance(e, (ast.DictComp, ast.ListComp)) else e for e in elts
    ]
    # `list(TABLE)`, `sorted(TABLE)` or `TABLE.keys()` show a table of functions without addresses
    elts = [_shown_table(e) for e in elts]
    return {e.id for e in elts if isinstance(e, ast.Name)}


def _shown_table(e: ast.expr) -> ast.expr:
    "`X` for `list(X)`, `sorted(X)`, `X.keys()`; else `e`."
    if not isinstance(e, ast.Call):
        return e
    f = e.func
    if isinstance(f, ast.Name) and f.id in ("list", "sorted") and len(e.args) == 1:
        return e.args[0]
    if isinstance(f, ast.Attribute) and f.attr in ("keys", "values", "items") and not e.args:
        return f.value
    return e


def notebook_stats(path: Path) -> dict:
    nb = read_nb(path)
    cells = nb.get("cells", [])
    code_cells = [(i, c) for i, c in enumerate(cells) if c.get("cell_type") == "code"]
    default_exp, sizes, shown, missed, figures, docs = None, [], 0, [], 0, set()
    values: set[str] = set()  # names a cell shows the value of (`displayed_names`)
    for k, (i, c) in enumerate(code_cells):
        dirs, code = split_directives(src(c))
        if "default_exp" in dirs:
            default_exp = dirs["default_exp"][0]
        for m in re.finditer(r"^show_doc\(\s*([\w.]+)", code, re.M):
            docs.add(m.group(1).split(".")[-1] if "." not in m.group(1) else m.group(1))
        if not dirs.keys() & EXPORT:
            values |= displayed_names(code)
        for o in c.get("outputs", []):
            if {"image/png", "image/svg+xml"} & set(o.get("data", {})):
                figures += 1
        if not dirs.keys() & EXPORT:
            continue
        names, only_imports = defined_names(code)
        if only_imports:
            continue
        sizes.append(code_lines(code))
        later = (c2 for _, c2 in code_cells[k + 1 :] if not only_show_doc(src(c2)))
        nxt = next(later, None)  # a `show_doc` documents a name; it does not run it
        ndirs, ncode = split_directives(src(nxt)) if nxt else ({}, "")
        if nxt is not None and not ndirs.keys() & EXPORT and uses(ncode, names):
            shown += 1
        else:
            missed.append(f"cell {i}: {', '.join(sorted(n for n in names if n[0] != '.')) or '?'}")
    public, consts = module_names(f"{settings_lib()}.{default_exp}") if default_exp else ([], set())
    no_doc = [
        n
        for n in public
        if n not in docs
        and not any(d.endswith("." + n) for d in docs)
        and not (n in consts and n in values)  # show_doc of a constant is its type's docstring
    ]
    return dict(sizes=sizes, shown=shown, missed=missed, figures=figures, no_doc=no_doc)


def settings_lib() -> str:
    from nbtools import settings

    return settings()["lib_path"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a limit is not met")
    ap.add_argument("--list", action="store_true", help="what falls short, notebook by notebook")
    args = ap.parse_args()
    nbs_dir = ROOT / "nbs"
    sizes, shown, figures, no_doc, per_nb = [], 0, 0, [], []
    for rel in list_notebooks(nbs_dir):
        s = notebook_stats(nbs_dir / rel)
        sizes += s["sizes"]
        shown += s["shown"]
        if rel.parts[0] != "bench":
            figures += s["figures"]
        no_doc += [f"{rel}: {n}" for n in s["no_doc"]]
        per_nb.append((rel, s))
    median = statistics.median(sizes) if sizes else 0
    pct = 100 * shown / len(sizes) if sizes else 100.0
    print(f"exported cells: {len(sizes)}, median {median:g} lines (limit {LIMITS['median_lines']})")
    print(f"shown running: {shown}/{len(sizes)} = {pct:.1f} % (limit {LIMITS['shown_pct']:g} %)")
    print(f"public names without show_doc: {len(no_doc)}")
    print(f"figures outside the benchmarks notebooks: {figures} (limit {LIMITS['figures']})")
    if args.list:
        for rel, s in per_nb:
            med = statistics.median(s["sizes"]) if s["sizes"] else 0
            print(
                f"\n{rel}: {len(s['sizes'])} exported, median {med:g}, max {max(s['sizes'] or [0])}"
            )
            for m in s["missed"]:
                print(f"  not shown: {m}")
            for n in s["no_doc"]:
                print(f"  no show_doc: {n}")
    ok = (
        median <= LIMITS["median_lines"]
        and pct >= LIMITS["shown_pct"]
        and not no_doc
        and figures >= LIMITS["figures"]
    )
    if args.check and not ok:
        print("nb_stats: a limit is not met (python tools/nb_stats.py --list says where)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
