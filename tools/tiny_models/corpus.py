"""Fetch and clean the training text of the tiny models: Debian packages, downloaded by name.

    python3 tools/tiny_models/corpus.py OUT_DIR [--wide]

`apt-get download` fetches the packages (no root install), `dpkg-deb -x` unpacks them, and the
package's own `bible` program prints the King James Version from its compressed data file. Writes
OUT_DIR/train.txt and OUT_DIR/heldout.txt (documents separated by a form feed, `\\f`) and
OUT_DIR/sources.json (package names, versions, licences, sizes) and OUT_DIR/prompts.json (the
opening words of held-out documents, the prompts of the tests and of `metainfer bench greedy`).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = {
    "bible-kjv-text": "King James Version text (1611, public domain)",
    "bible-kjv": "its reader, the `bible` program (GPL-2+), used only to print the text",
    "fortunes": "fortune-mod's quotations (BSD-licensed collection)",
    "fortunes-min": "the same collection's `fortunes` file",
}
# `--wide` adds these: ~9x the tokens, in two more registers (tried for issue 29; README.md).
WIDE_PACKAGES = {
    "dict-gcide": "GCIDE, Webster's 1913 dictionary revised (GPL-2+)",
    "python3.11-doc": "the Python 3.11 documentation's reST sources (PSF licence)",
}
# The fortune files kept: prose and verse; ASCII art and the Debian/Linux in-jokes are left out.
FORTUNE_FILES = (
    "art cookie computers definitions education food fortunes goedel humorists kids law literature"
    " love magic medicine men-women miscellaneous news people pets platitudes politics riddles"
    " science songs-poems sports startrek translate-me wisdom work"
).split()
HELDOUT_EVERY = 50  # every 50th document (chapter or quotation) is held out
PROMPTS, PROMPT_WORDS = 64, 12  # the held-out prompts: each held-out document's first 12 words


def prompts(heldout: dict[str, list[str]]) -> list[str]:
    "Every held-out chapter's opening, then quotations' (those of 12 words or more) up to PROMPTS."
    out = []
    for docs in heldout.values():
        for doc in docs:
            words = list(re.finditer(r"\S+", doc))
            if len(words) >= PROMPT_WORDS and len(out) < PROMPTS:
                out.append(doc[: words[PROMPT_WORDS - 1].end()])
    return out


def unpack(packages: list[str], work: Path) -> dict[str, str]:
    "Download `packages` with apt-get and unpack them under work/root; returns their versions."
    subprocess.run(["apt-get", "download", *packages], cwd=work, check=True, capture_output=True)
    versions = {}
    for deb in sorted(work.glob("*.deb")):
        fields = subprocess.run(
            ["dpkg-deb", "-f", deb, "Package", "Version"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        name, version = (line.split(": ", 1)[1] for line in fields.strip().splitlines())
        versions[name] = version
        subprocess.run(["dpkg-deb", "-x", deb, work / "root"], check=True)
    return versions


def kjv_chapters(root: Path) -> list[str]:
    "One document per chapter: the heading ('Genesis 1'), then one verse a line, numbers dropped."
    text = subprocess.run(
        [root / "usr/bin/bible", "-l100000", "-p", root / "usr/lib", "gen1:1-rev22:21"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs, lines = [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        verse = re.match(r"^\s+\d+ (.*)$", line)
        if verse:
            lines.append(verse.group(1).strip())
        else:  # a chapter heading
            if lines:
                docs.append("\n".join(lines))
            lines = [line.strip()]
    docs.append("\n".join(lines))
    return docs


def fortunes(root: Path) -> list[str]:
    "One document per quotation: overstrikes (`_\\bx`) and tabs undone, trailing blanks dropped."
    docs = []
    for name in FORTUNE_FILES:
        raw = (root / "usr/share/games/fortunes" / name).read_text(encoding="latin-1")
        raw = re.sub(".\x08", "", raw)
        for entry in raw.split("\n%\n"):
            entry = "\n".join(l.rstrip().expandtabs(4) for l in entry.strip("\n%").splitlines())
            if entry.strip():
                docs.append(entry)
    return docs


GCIDE_TAG = re.compile(r"^\s*\[[^\]]*\]\s*$")  # a source line: [1913 Webster], [PJC], ...
GCIDE_ACCENT = re.compile(r"\[[=\-'\"`~.]?([a-z]{1,2})\^?\]")  # [=a], ['e], [i^] -> the letter


def gcide(root: Path) -> list[str]:
    "One document per dictionary entry: pronunciations, braces and source tags dropped."
    raw = gzip.decompress((root / "usr/share/dictd/gcide.dict.dz").read_bytes()).decode("latin-1")
    docs, lines = [], []
    for line in raw.splitlines():
        if line and not line[0].isspace():  # a headword starts an entry
            if lines and not lines[0].startswith("00-"):  # 00-database-*: the file's header
                docs.append("\n".join(lines).strip())
            lines = []
        if GCIDE_TAG.match(line):
            continue
        line = re.sub(r"\\[^\\]*\\,?", "", line)  # \Ab"so*lute\, the pronunciation
        line = GCIDE_ACCENT.sub(r"\1", line).replace("{", "").replace("}", "")
        lines.append(line.strip())
    docs.append("\n".join(lines).strip())
    return [re.sub(r"\n{3,}", "\n\n", d) for d in docs if d]


def python_docs(root: Path) -> list[str]:
    "One document per page of the Python documentation, its reStructuredText source as shipped."
    pages = sorted((root / "usr/share/doc/python3.11/html/_sources").rglob("*.rst.txt"))
    return [p.read_text() for p in pages]


def main(out_dir: str, wide: bool = False) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    packages = PACKAGES | (WIDE_PACKAGES if wide else {})
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        versions = unpack(list(packages), work)
        corpora = {"kjv": kjv_chapters(work / "root"), "fortunes": fortunes(work / "root")}
        if wide:
            corpora |= {"gcide": gcide(work / "root"), "python-docs": python_docs(work / "root")}
    held = {k: v[HELDOUT_EVERY - 1 :: HELDOUT_EVERY] for k, v in corpora.items()}
    train = [
        d
        for docs in corpora.values()
        for i, d in enumerate(docs)
        if i % HELDOUT_EVERY != HELDOUT_EVERY - 1
    ]
    heldout = [d for docs in held.values() for d in docs]
    (out / "train.txt").write_text("\f".join(train))
    (out / "heldout.txt").write_text("\f".join(heldout))
    sources = {
        "packages": {p: dict(version=versions[p], what=w) for p, w in packages.items()},
        "fortune_files": FORTUNE_FILES,
        "documents": {k: len(v) for k, v in corpora.items()},
        "characters": {"train": sum(map(len, train)), "heldout": sum(map(len, heldout))},
        "heldout_rule": f"every {HELDOUT_EVERY}th document of each corpus",
    }
    (out / "prompts.json").write_text(json.dumps(prompts(held), indent=1) + "\n")
    (out / "sources.json").write_text(json.dumps(sources, indent=1) + "\n")
    print(json.dumps(sources, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], wide="--wide" in sys.argv[2:])
