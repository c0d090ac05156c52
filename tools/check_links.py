"""Every relative link and #anchor in the built docs site resolves (issue 26's acceptance 3).

Usage: python tools/check_links.py [SITE_DIR]   (default docs/site; run after `make docs`).
Reads each HTML page, collects its ids, and checks each `href`/`src` that is not external: the file
exists and, with a fragment, the target page has that id. Standard library only.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


ROOT_PATH = "/metainfer/"  # mkdocs.yml's site_url path: absolute links (the 404 page's) start so


class Page(HTMLParser):
    "The ids a page defines and the links it makes."

    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key) and (key == "id" or tag == "a"):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) and not (
                tag == "link" and key == "href" and a.get("rel") == "preconnect"
            ):
                self.links.append(a[key])


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site: Path) -> list[str]:
    pages = {p: parse(p) for p in site.rglob("*.html")}
    bad = []
    for path, page in pages.items():
        for link in page.links:
            u = urlsplit(link)
            if u.scheme or u.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue
            base, rel = (
                (site, u.path[len(ROOT_PATH) :])
                if u.path.startswith("/")
                else (path.parent, u.path)
            )
            if u.path.startswith("/") and not u.path.startswith(ROOT_PATH):
                bad.append(f"{path.relative_to(site)}: {link} (outside the site)")
                continue
            target = (base / unquote(rel)).resolve() if u.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                bad.append(f"{path.relative_to(site)}: {link} (no such file)")
            elif u.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if unquote(u.fragment) not in ids:
                    bad.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    return bad


if __name__ == "__main__":
    site = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/site")
    if not site.is_dir():
        sys.exit(f"check_links: {site} is not a built site (run `make docs` first)")
    bad = broken_links(site)
    print(*bad[:50], sep="\n")
    print(f"check_links: {len(bad)} broken link(s) in {site}")
    sys.exit(1 if bad else 0)
