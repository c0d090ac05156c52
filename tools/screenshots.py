#!/usr/bin/env python3
"""Screenshots of the built docs site in headless Chromium, and a check that nothing is cut off.

Pages: the home page, three notebook pages with code, outputs and figures (the block manager / KV
pool, the scheduler, attention) and the benchmarks page, at a 1400 x 900 viewport. For each page:

  * code: every visible `pre` (code cells, notebook output blocks, Markdown code fences) is measured
    line by line in the page (a DOM Range over each line's text): a line of <= 100 characters fails
    if its rendered right edge lies past the visible right edge of the box that clips it (the
    nearest ancestors with `overflow` other than `visible`, and the viewport), i.e. it would need
    horizontal scrolling. Wrapped lines (`white-space: pre-wrap`) are not cut off and pass.
  * figures: every `img` has loaded (`complete` and `naturalWidth > 0`), has a non-zero rendered
    size, is not `visibility: hidden` / `opacity: 0`, and is not clipped on the right.
  * outputs: notebook output areas wider than their column are listed as warnings.

A full-page PNG of each page goes to --out (palette-quantized with Pillow when it is installed); a
page whose PNG is still over --max-kb is saved instead as a viewport-height shot of the top
(`NAME.png`) plus one of its first figure (`NAME.figure.png`). The report is printed per page and
written as `report.json` next to the PNGs. Exit status 1 if any check fails.

The site is served from --site (default docs/site, built by `make docs`) by a local http.server on
a free port; requests to anything else (Google Fonts) are blocked, so the fallback fonts are used
(DejaVu on Debian: a little wider than Roboto, so the check is on the safe side).

Usage:
  python tools/screenshots.py [--site docs/site] [--out docs/screenshots] [--pages P ...]
                              [--width 1400] [--height 900] [--max-chars 100] [--max-kb 500]
                              [--chromium /usr/bin/chromium] [--no-shots]
  make screenshots            (the same with the defaults; not part of `make test`)

Needs (optional, run by hand, not in settings.ini): a Chromium binary (Debian:
`apt-get install chromium`, /usr/bin/chromium) and the Python package playwright in the running
interpreter (`pip install playwright`; it drives the system Chromium through --chromium, so
`playwright install` and its browser download are not needed). Pillow (matplotlib's dependency)
is used to shrink the PNGs when present.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import io
import json
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name, path in the site): the home page, three notebook pages with figures, the benchmarks page
PAGES = [
    ("home", "index.html"),
    ("block_manager", "engine/10a_block_manager.html"),
    ("scheduler", "engine/11_scheduler.html"),
    ("attention", "layers/07_attention.html"),
    ("benchmarks", "benchmarks/index.html"),
]

# Runs in the page; returns the measurements as a JSON-able object. MAX_CHARS is the argument.
CHECK_JS = r"""
(maxChars) => {
  const vw = document.documentElement.clientWidth;
  // right edge (viewport x) of what is visible of `el`: its tightest clipping ancestor, or the
  // viewport
  function visibleRight(el) {
    let right = vw;
    for (let a = el; a && a !== document.documentElement; a = a.parentElement) {
      if (getComputedStyle(a).overflowX === 'visible') continue;
      const r = a.getBoundingClientRect();
      right = Math.min(right, r.left + a.clientLeft + a.clientWidth);
    }
    return right;
  }
  function shown(el) {
    return el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  }
  function describe(el) {
    if (el.closest('.jp-OutputArea')) return 'output';
    if (el.closest('.jp-MarkdownCell')) return 'markdown code';
    if (el.closest('.jp-CodeCell')) return 'code cell';
    return 'code block';
  }
  const pres = [...document.querySelectorAll('article pre, .md-content pre, .jp-Notebook pre')]
    .filter((p, i, all) => all.indexOf(p) === i && !p.parentElement.closest('pre'));
  const blocks = [];
  let hidden = 0;
  for (const pre of pres) {
    if (!shown(pre)) { hidden++; continue; }
    // the text's own element: Material puts the scroller on `pre > code`
    const box = pre.querySelector(':scope > code') || pre;
    const right = visibleRight(box);
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    const nodes = []; let text = '';
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (n.parentElement.closest('button, .md-clipboard')) continue;
      nodes.push([n, text.length]); text += n.data;
    }
    // (node, offset) for a position in `text`
    function at(pos) {
      let lo = 0, hi = nodes.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (nodes[mid][1] <= pos) lo = mid; else hi = mid - 1;
      }
      const [n, start] = nodes[lo];
      return [n, Math.min(pos - start, n.data.length)];
    }
    const lines = text.split('\n');
    let pos = 0, checked = 0, widest = 0, widestLen = 0;
    const cut = [];
    for (const line of lines) {
      const len = [...line.replace(/\t/g, '        ')].length;
      if (len > 0 && len <= maxChars && nodes.length) {
        const r = document.createRange();
        const [sn, so] = at(pos); const [en, eo] = at(pos + line.length);
        r.setStart(sn, so); r.setEnd(en, eo);
        let lineRight = -Infinity;
        for (const rect of r.getClientRects())
          if (rect.width > 0) lineRight = Math.max(lineRight, rect.right);
        if (lineRight > -Infinity) {
          checked++;
          const over = lineRight - right;
          if (len > widestLen) { widestLen = len; widest = over; }
          if (over > 0.5)
            cut.push({chars: len, over_px: Math.round(over), line: line.slice(0, 120)});
        }
      }
      pos += line.length + 1;
    }
    const cs = getComputedStyle(box);
    blocks.push({kind: describe(pre), lines_checked: checked, cut,
                 longest_checked_chars: widestLen, longest_margin_px: Math.round(-widest),
                 font: cs.fontSize + ' ' + cs.fontFamily.split(',')[0], white_space: cs.whiteSpace,
                 width_px: Math.round(box.clientWidth)});
  }
  const images = [...document.querySelectorAll('.md-content img')].map(img => {
    const r = img.getBoundingClientRect(); const cs = getComputedStyle(img);
    const loaded = img.complete && img.naturalWidth > 0;
    const visible = r.width > 0 && r.height > 0 && cs.visibility !== 'hidden' && cs.opacity !== '0';
    const clipped = visible && r.right > visibleRight(img) + 0.5;
    const src = img.getAttribute('src') || '';
    return {src: src.startsWith('data:') ? src.slice(0, 22) + '...' : src, loaded, visible,
            clipped, natural: [img.naturalWidth, img.naturalHeight],
            shown: [Math.round(r.width), Math.round(r.height)], top: Math.round(r.top + scrollY)};
  });
  const wide = [...document.querySelectorAll('.jp-OutputArea-output')]
    .filter(o => shown(o) && o.scrollWidth > o.clientWidth + 1)
    .map(o => ({scroll_px: o.scrollWidth, visible_px: o.clientWidth,
                text: o.innerText.slice(0, 80)}));
  const main = document.querySelector('.md-content');
  return {title: document.title, viewport: [vw, innerHeight],
          content_width_px: main ? Math.round(main.getBoundingClientRect().width) : null,
          code_font: pres.length ? getComputedStyle(pres[0]).fontSize : null,
          pre_hidden: hidden, blocks, images, wide_outputs: wide};
}
"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/"


def shrink(png: bytes) -> bytes:
    """Palette-quantize a screenshot (256 colours) when Pillow is there; else return it as is."""
    try:
        from PIL import Image
    except ImportError:
        return png
    im = Image.open(io.BytesIO(png)).convert("RGB")
    buf = io.BytesIO()
    im.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(buf, "PNG", optimize=True)
    return buf.getvalue() if buf.tell() < len(png) else png


def take(page, name: str, out: Path, max_kb: int, first_figure_top: int | None) -> list[str]:
    """Full-page shot, or top + first figure when the full page is over max_kb. Returns files."""
    for old in out.glob(f"{name}.*png"):
        old.unlink()
    full = shrink(page.screenshot(full_page=True))
    if len(full) <= max_kb * 1024:
        (out / f"{name}.png").write_bytes(full)
        return [f"{name}.png"]
    (out / f"{name}.png").write_bytes(shrink(page.screenshot()))
    files = [f"{name}.png"]
    if first_figure_top is not None:
        page.evaluate("y => window.scrollTo(0, y)", max(first_figure_top - 150, 0))
        page.wait_for_timeout(200)
        (out / f"{name}.figure.png").write_bytes(shrink(page.screenshot()))
        files.append(f"{name}.figure.png")
        page.evaluate("() => window.scrollTo(0, 0)")
    return files


def check_page(page, base: str, name: str, path: str, args) -> dict:
    page.goto(base + path, wait_until="load")
    # images: no lazy loading, and wait until each has decoded (or failed)
    page.evaluate(
        """async () => { const imgs = [...document.images];
        imgs.forEach(i => i.loading = 'eager');
        await Promise.all(imgs.map(i => i.decode().catch(() => null))); }"""
    )
    page.evaluate("() => document.fonts.ready")
    res = page.evaluate(CHECK_JS, args.max_chars)
    cut = [dict(b, cut=c) for b in res["blocks"] for c in b["cut"]]
    bad_imgs = [i for i in res["images"] if not i["loaded"] or not i["visible"] or i["clipped"]]
    res.update(
        name=name,
        path=path,
        code_blocks=len(res["blocks"]),
        lines_checked=sum(b["lines_checked"] for b in res["blocks"]),
        cut_lines=len(cut),
        min_margin_px=min(
            (b["longest_margin_px"] for b in res["blocks"] if b["lines_checked"]), default=None
        ),
        images_ok=len(res["images"]) - len(bad_imgs),
        ok=not cut and not bad_imgs,
    )
    if not args.no_shots:
        figs = [i["top"] for i in res["images"] if i["visible"]]
        res["files"] = take(page, name, args.out, args.max_kb, min(figs) if figs else None)
    return res


def report_line(r: dict) -> str:
    s = (
        f"{'ok  ' if r['ok'] else 'FAIL'} {r['name']:<14} {r['path']:<34} "
        f"code blocks {r['code_blocks']:>3}, lines <= limit checked {r['lines_checked']:>4}, "
        f"cut off {r['cut_lines']}, min margin {r['min_margin_px']} px; "
        f"images {r['images_ok']}/{len(r['images'])} ok"
    )
    if r["wide_outputs"]:
        s += f"; {len(r['wide_outputs'])} wide output(s) (warning)"
    for b in r["blocks"]:
        for c in b["cut"]:
            s += f"\n       cut {c['over_px']} px ({c['chars']} chars, {b['kind']}): {c['line']!r}"
    for i in r["images"]:
        if not i["loaded"] or not i["visible"] or i["clipped"]:
            s += f"\n       image {i['src']}: loaded={i['loaded']} visible={i['visible']}"
            s += f" clipped={i['clipped']}"
    if r.get("files"):
        s += f"\n       -> {', '.join(r['files'])}"
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site", type=Path, default=ROOT / "docs/site")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/screenshots")
    ap.add_argument("--pages", nargs="*", help="site paths (default: the five pages above)")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--max-chars", type=int, default=100, help="lines this long must fit")
    ap.add_argument("--max-kb", type=int, default=500, help="largest full-page PNG kept")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--no-shots", action="store_true", help="only check, write no PNGs")
    args = ap.parse_args(argv)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sys.exit("screenshots: needs playwright (pip install playwright) and a Chromium binary")
    if not (args.site / "index.html").exists():
        sys.exit(f"screenshots: no site in {args.site}; run `make docs` first")
    pages = [(Path(p).with_suffix("").as_posix().replace("/", "_"), p) for p in args.pages or []]
    pages = pages or PAGES
    args.out.mkdir(parents=True, exist_ok=True)
    httpd, base = serve(args.site)
    results, blocked = [], set()

    def route(r):
        if r.request.url.startswith(base):
            r.continue_()
        else:
            blocked.add(r.request.url.split("?")[0])
            r.abort()

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.route("**/*", route)
            for name, path in pages:
                r = check_page(page, base, name, path, args)
                results.append(r)
                print(report_line(r), flush=True)
            browser.close()
    finally:
        httpd.shutdown()
    ok = all(r["ok"] for r in results)
    summary = {
        "ok": ok,
        "viewport": [args.width, args.height],
        "max_chars": args.max_chars,
        "blocked_requests": sorted(blocked),
        "pages": results,
    }
    (args.out / "report.json").write_text(json.dumps(summary, indent=1) + "\n")
    n_cut = sum(r["cut_lines"] for r in results)
    print(
        f"screenshots: {'all checks pass' if ok else 'FAILED'}: {len(results)} pages, "
        f"{n_cut} cut-off line(s) of <= {args.max_chars} chars; report {args.out / 'report.json'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
