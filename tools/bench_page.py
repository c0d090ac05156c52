#!/usr/bin/env python3
"""Write docs/benchmarks/README.md (the benchmarks page) from the JSON files beside it.

Usage:
  python tools/bench_page.py            write README.md and comparison.png (needs matplotlib)
  python tools/bench_page.py --check    exit 1 if README.md differs from what it would write
  python tools/bench_page.py --unused   list files under docs/benchmarks/ the page does not use

The page is driven by docs/benchmarks/page.json. Each entry of its "rows" is one workload:
  "json"    the result file (relative to docs/benchmarks/); its `time` or `date` field dates the
            row (else the date in its folder's name), and its `command` goes under "How to
            reproduce";
  "with"    optional {alias: file} of other files of the same device session (e.g. the bf16
            run beside an FP8 one); `{alias.key}` reads from them;
  "what", "ours", "peer", "limit": templates whose `{key.path:fmt}` fields are read from the
            JSON (dots walk dicts and list indices; `{key*1000:.1f}` and `{key/1000:.2f}`
            scale; `{min:key}`, `{max:key}` of a list; `{keys:key}` a dict's keys, `{name:key}`
            the key's last part;
            `{key|same}` a boolean as identical/differ; `{model}` the model folder's name);
  "same_run" optional: a JSON of the same device call that gives the hardware and `{model}`
            where the row's JSON lacks them;
  "target"  the target an issue set, as text; "stage" the `tools/gpu_session.py` stage(s)
            that made the file (null: not a device run), "env" variables set before it;
  "plot"    optional: bars in comparison.png ("panel" decode or throughput, "label"; keys
            of "ours", "peer" (with "peer_label"), "limit"; `alias.key` reads a "with" file).
To replace a row's figure with a newer run: copy the new JSON into a dated folder (e.g.
h200-2026-12-03-defaults/), change that row's one "json" line (and its "with" files, if the
new call measured them too), e.g.
  "json": "h200-2026-12-02-defaults/latency-dsv2lite-b1.json",  becomes
  "json": "h200-2026-12-03-defaults/latency-dsv2lite-b1.json",
run `python tools/bench_page.py` (page and comparison.png), `git rm` what --unused then lists
(the old file, once no row, "with" or "same_run" names it), and commit the three together.
To add a workload, add a row; to drop one, delete it. "figures" lists the PNGs shown ("made":
drawn here); "also" the other files kept, with why (other pages and notebooks link to them).
Every number on the page comes from these JSON files; the script types none.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "docs" / "benchmarks"
PAGE = BENCH / "README.md"
FIELD = re.compile(r"\{([^{}]+)\}")


def load(rel: str) -> dict:
    return json.loads((BENCH / rel).read_text(encoding="utf-8"))


def walk(data, path: str):
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def field(spec: str, docs: dict[str, dict]) -> str:
    "One `{...}` field of a template, read from the row's JSON or an aliased one."
    key, _, fmt = spec.partition(":")
    func = None
    if key in ("min", "max", "keys", "name"):
        func, (key, _, fmt) = key, fmt.partition(":")
    key, _, flt = key.partition("|")
    scale = re.match(r"(.+?)([*/])(\d+)$", key)
    if scale:
        key = scale.group(1)
    if key == "model":
        d = docs[""] if "model" in docs[""] else docs["same_run"]
        return Path(d["model"]["dir"] if isinstance(d["model"], dict) else d["model"]).name
    alias, _, rest = key.partition(".")
    doc, path = (docs[alias], rest) if alias in docs and alias else (docs[""], key)
    value = walk(doc, path)
    if func == "keys":
        return ", ".join(value)
    if func == "name":  # the key itself (e.g. `B=64`), once the JSON is seen to have it
        return path.rpartition(".")[2]
    if func:
        value = {"min": min, "max": max}[func](value)
    if flt == "same":
        return "identical" if value else "differ"
    if scale:
        n = int(scale.group(3))
        value = value * n if scale.group(2) == "*" else value / n
    return format(value, fmt)


def fill(template: str | None, docs: dict[str, dict]) -> str:
    if not template:
        return "—"
    return FIELD.sub(lambda m: field(m.group(1), docs), template)


def row_docs(row: dict) -> dict[str, dict]:
    docs = {"": load(row["json"])}
    if "same_run" in row:
        docs["same_run"] = load(row["same_run"])
    docs.update({k: load(v) for k, v in row.get("with", {}).items()})
    return docs


def row_date(row: dict, doc: dict) -> str:
    when = doc.get("time") or doc.get("date")
    if when:
        return str(when)[:10]
    m = re.search(r"\d{4}-\d\d-\d\d", row["json"])
    return m.group(0) if m else "—"


def hardware(row: dict, doc: dict) -> str:
    '`hardware.gpus` × `hardware.gpu` of the row\'s JSON, or of its "same_run" file.'
    if "hardware" not in doc and "same_run" in row:
        doc = load(row["same_run"])
    hw, tp = doc.get("hardware", {}), doc.get("engine", {}).get("tensor_parallel_size")
    if "gpu" in hw:
        return f"{tp or hw.get('gpus', 1)} × {hw['gpu']}"
    return "CPU" if hw or doc.get("device") == "cpu" else "—"


def table(rows: list[dict]) -> list[str]:
    out = [
        "| workload | date, hardware | ours | compared with (same run) | limit (same run) "
        "| target | JSON |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        try:
            cells = row_cells(row)
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise SystemExit(f"bench_page: row {row['json']}: {type(e).__name__} {e}") from e
        out.append("| " + " | ".join(cells) + " |")
    return out


def row_cells(row: dict) -> list[str]:
    docs = row_docs(row)
    doc = docs[""]
    return [
        fill(row["what"], docs),
        f"{row_date(row, doc)}, {hardware(row, doc)}",
        fill(row.get("ours"), docs),
        fill(row.get("peer"), docs),
        fill(row.get("limit"), docs),
        row.get("target") or "—",
        f"[{Path(row['json']).name}]({row['json']})",
    ]


def reproduce(rows: list[dict]) -> list[str]:
    "Each row's `command`, under the gpu_session stage that ran it (in the rows' order)."
    stages: dict[str, list[str]] = {}
    for row in rows:
        stage = row.get("stage")
        head = (
            f"{row.get('env', '') + ' ' if row.get('env') else ''}"
            f"python3 tools/gpu_session.py {stage}"
            if stage
            else "# not a device run: on any machine, from the repo root"
        )
        cmds = stages.setdefault(head, [])
        for rel in [row["json"], *row.get("with", {}).values()]:
            cmd = load(rel).get("command")
            if cmd and cmd not in cmds:
                cmds.append(cmd)
    out = ["```sh"]
    for head, cmds in stages.items():
        out += ["", head] + [f"#   {c}" for c in cmds]
    out[1:2] = []
    return out + ["```"]


def render(spec: dict) -> str:
    rows = spec["rows"]
    first = load(rows[0]["json"])
    hw = first["hardware"]
    lines = [
        f"# {spec['title']}",
        "",
        "The current figure of each workload, read by `tools/bench_page.py` from the JSON files",
        "in this folder (`page.json` says which file each row reads; targets are the ones the",
        "issues set, recorded there). Each JSON holds the exact command that made it. Device runs",
        f"used {hw['gpu']} machines, or the card a row's second column names (torch",
        f"{hw['torch']}, transformers {hw['transformers']});",
        "checkpoints are random weights at the real shapes (`metainfer.testing`), the tiny",
        "models the trained ones shipped in `metainfer/assets/models`. Unless a row says",
        "otherwise, every engine setting is at its default; the rows dated earlier and the",
        "`--no-pdl` row ran the bench's settings of their day (a shorter `max_model_len`). The",
        "peer and the limit are measured in the same run (the JSON's `peers` and `roofline`:",
        "bytes a step over the copy rate measured on the device, for throughput also FLOPs over",
        "the measured GEMM rate). Throughput limits are as the bench computed them on the row's",
        "date: since 12-07 an FP8 model's FP8 weights multiply at the FP8 rate measured beside",
        "bf16's, and a prompt's tokens but its last skip the LM head; the FP8 rows dated earlier",
        "counted their FP8 weights' products at half (about the same as twice the bf16 rate), and",
        "every earlier row charged the head to each prompt token (a limit ~2 % low for",
        "Qwen3-8B). A row dated earlier has no newer run of its workload (the",
        "tensor-parallel rows need multi-GPU machines, which are not lent now).",
        "",
        *table(rows),
        "",
        "## Figures",
        "",
    ]
    for fig in spec["figures"]:
        lines += [f"![{fig['caption']}]({fig['png']})", "", f"*{fig['caption']}.*", ""]
    lines += ["## Other files here", ""]
    for a in spec["also"]:  # a folder has no page on the site: named, not linked
        name = f"`{a['path']}`" if a["path"].endswith("/") else f"[`{a['path']}`]({a['path']})"
        lines.append(f"- {name}: {a['what']}.")
    lines += [
        "",
        "## How to reproduce",
        "",
        "`tools/gpu_session.py STAGE...` runs on the lent device machine (its docstring lists the",
        "stages, the wheels to carry and the checkpoints it writes under `/tmp/ckpt`); each stage",
        "runs the commands below and leaves their JSON files in `$OUT/results.tar.gz`. Copy them",
        "here, point the rows of `page.json` at them, and run `python tools/bench_page.py`.",
        "",
        *reproduce(rows),
        "",
    ]
    return "\n".join(lines)


def value(docs: dict[str, dict], key: str) -> float:
    "A plot's number: `key` in the row's JSON, or `alias.key` in a \"with\" file."
    alias, _, rest = key.partition(".")
    return walk(docs[alias], rest) if alias in docs and alias else walk(docs[""], key)


def plot(spec: dict, path: Path) -> None:
    "comparison.png: per panel, a group of bars per row (ours, the same run's peer, its limit)."
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {"decode": "B=1 decode, tokens/s", "throughput": "offline, output tokens/s"}
    rows = {k: [r for r in spec["rows"] if r.get("plot", {}).get("panel") == k] for k in panels}
    fig, axes = plt.subplots(
        1, 2, figsize=(13, 1.2 + 0.55 * max(map(len, rows.values()))), squeeze=True
    )
    bars = [("limit", "tab:gray", "roofline"), ("peer", "tab:orange", "peer (see label)")]
    bars.append(("ours", "tab:blue", "metainfer"))
    for ax, (panel, title) in zip(axes, panels.items()):
        names = []
        for i, row in enumerate(rows[panel]):
            p, docs = row["plot"], row_docs(row)
            for j, (k, color, label) in enumerate(bars):
                if k in p:
                    seen = label in ax.get_legend_handles_labels()[1]
                    v = value(docs, p[k])
                    ax.barh(i + (j - 1) * 0.27, v, 0.27, color=color, label=None if seen else label)
                    ax.text(v, i + (j - 1) * 0.27, f" {v:,.0f}", va="center", fontsize=7)
            peer = f", peer: {p['peer_label']}" if "peer_label" in p else ""
            names.append(f"{p['label']} ({row_date(row, docs[''])}){peer}")
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title)
        ax.margins(x=0.15)
    handles = {lab: h for ax in axes for h, lab in zip(*ax.get_legend_handles_labels())}
    fig.legend(handles.values(), handles.keys(), loc="upper center", ncol=3, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=110)


def used(spec: dict) -> set[Path]:
    files = {BENCH / "README.md", BENCH / "page.json"}
    for row in spec["rows"]:
        files |= {BENCH / row["json"], *(BENCH / v for v in row.get("with", {}).values())}
        files |= {BENCH / row["same_run"]} if "same_run" in row else set()
    files |= {BENCH / f["png"] for f in spec["figures"]}
    for a in spec["also"]:
        p = BENCH / a["path"]
        files |= set(p.rglob("*")) if p.is_dir() else {p}
    return files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if README.md is not current")
    ap.add_argument("--unused", action="store_true", help="list files the page does not use")
    ap.add_argument("--no-plot", action="store_true", help="do not redraw comparison.png")
    args = ap.parse_args(argv)
    spec = json.loads((BENCH / "page.json").read_text(encoding="utf-8"))
    if args.unused:
        keep = used(spec)
        for p in sorted(BENCH.rglob("*")):
            if p.is_file() and p not in keep:
                print(p.relative_to(ROOT))
        return 0
    text = render(spec)
    if args.check:
        if PAGE.read_text(encoding="utf-8") != text:
            print(
                f"{PAGE.relative_to(ROOT)} is stale: run python tools/bench_page.py",
                file=sys.stderr,
            )
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    if not args.no_plot:
        for fig in spec["figures"]:
            if fig.get("made"):
                plot(spec, BENCH / fig["png"])
    print(f"wrote {PAGE.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
