"""The package's import graph: no cycles among metainfer's modules, and every module imports on its
own."""

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "metainfer"


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {
        module_name(p): p for p in PKG.rglob("*.py") if p.name not in ("_modidx.py", "__main__.py")
    }


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    "The metainfer modules `name` imports anywhere in its file (module level or inside functions)."
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    "One import cycle of `graph`, if it has any."
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_cycle_finder_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    mods = modules()
    graph = {m: imported(p, m, set(mods)) for m, p in mods.items()}
    assert len(graph) > 40 and graph["metainfer.engine.runner"], "the graph was not read"
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def test_every_module_imports_alone():
    def load(m: str) -> tuple[str, str]:
        r = subprocess.run([sys.executable, "-c", f"import {m}"], capture_output=True, text=True)
        return m, r.stderr[-2000:] if r.returncode else ""

    with ThreadPoolExecutor(2) as pool:
        failed = {m: err for m, err in pool.map(load, sorted(modules())) if err}
    assert not failed, failed
