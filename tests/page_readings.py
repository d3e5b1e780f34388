"""Every page of the built book read in headless Chromium with no network, at a laptop's and
a phone's width: what ``tests/test_browser.py`` checks a reader sees (errors, requests leaving
the machine, sideways scroll, charts against the article column, notes, table cells, code
shown). Run as a script it reads every page and writes the readings as JSON, so the test
session can read the book while its other tests run (``tests/background_runs.py``):

    python tests/page_readings.py HTML_FOLDER OUT.json
"""
from __future__ import annotations

import functools
import http.server
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
#: The widths every page is read at (px): a laptop's and a phone's.
WIDTHS = (1280, 390)
#: Working notes that must never reach a reader (DEVELOPERS.md: text a reader sees is for the reader).
WORKING_NOTES = ("not readable here", "not verified here", "not in our store", "year not seen",
                 "publication date not seen")

#: What a page looks like to a reader, in one pass: sideways scroll, charts outside the article
#: column, chart text reading "−0" or cut off by its chart, inline code split inside a word,
#: display formulas wider than theirs, visible working notes, pandas artefacts in table cells,
#: charts drawn, code shown.
INSPECT = r"""notes => {
  const se = document.scrollingElement;
  const art = document.querySelector('article.bd-article');
  const box = art.getBoundingClientRect(), cs = getComputedStyle(art);
  const col = [box.left + parseFloat(cs.paddingLeft), box.right - parseFloat(cs.paddingRight)];
  const charts = Array.from(document.querySelectorAll('div.kvlib-chart')).map(c => {
    const g = c.querySelector('svg, canvas');
    if (!g) { return {id: c.id, drawn: false}; }
    const b = g.getBoundingClientRect();
    return {id: c.id, drawn: true, left: b.left, right: b.right};
  });
  // chart text a reader cannot read: a signed zero ("−0"), or a label cut off by the chart's box
  const chartText = Array.from(document.querySelectorAll('div.kvlib-chart')).flatMap(c => {
    const box = c.getBoundingClientRect();
    return Array.from(c.querySelectorAll('svg text')).filter(t => t.textContent.trim()).map(t => {
      const b = t.getBoundingClientRect();
      return {id: c.id, text: t.textContent, cut: b.left < box.left - 1 || b.right > box.right + 1};
    });
  });
  const signedZeros = chartText.filter(t => /^[-−+]0([.,]0*)?$/.test(t.text.trim()));
  const cutLabels = chartText.filter(t => t.cut);
  // inline code in prose split inside a word (a flag at its hyphens)
  const brokenCode = Array.from(art.querySelectorAll('code.literal span.pre'))
    .filter(s => !s.closest('pre, table') && s.getClientRects().length > 1).map(s => s.textContent);
  const text = document.body.innerText.toLowerCase();
  const cells = Array.from(art.querySelectorAll('table td, table th')).map(c => c.textContent.trim());
  const blankHeads = Array.from(art.querySelectorAll('table thead th'))  // folded tables too
    .filter(th => th.textContent.trim() === '').length;
  const citeLabels = Array.from(document.querySelectorAll('div.citation > .label'))
    .map(l => l.innerText.replace(/[\[\]]/g, '').trim());
  const code = Array.from(art.querySelectorAll('div.cell div.cell_input pre'))
    .filter(p => !p.closest('details:not([open])'))
    .map(p => p.textContent.replace(/\n+$/, ''));
  return {scrollWidth: se.scrollWidth, clientWidth: se.clientWidth, col, charts, cells, blankHeads,
          signedZeros, cutLabels, brokenCode,
          citeLabels, codeLines: code.reduce((n, c) => n + c.split('\n').length, 0),
          codeChecks: code.filter(c => c.includes('glue(') || c.includes('assert ')).length,
          notes: notes.filter(n => text.includes(n)),
          rawPandas: art.querySelectorAll('table.dataframe').length,
          mathRendered: document.querySelectorAll('mjx-container').length,
          wideFormulas: Array.from(document.querySelectorAll('mjx-container[display="true"]'))
            .filter(m => m.scrollWidth > m.clientWidth + 1).length,
          chartErrors: (window.kvlibChartErrors || []).concat(window.kvlibCalculatorErrors || [])};
}"""


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """``folder`` served on a free local port: its address."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # no access log in the test output
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


@contextmanager
def browser() -> Iterator[Any]:
    """Debian's headless Chromium, through Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            yield b
        finally:
            b.close()


class Reader:
    """One headless Chromium page that reads the built book with every non-local request
    blocked, collecting page errors, console errors and external requests per visit."""

    def __init__(self, browser) -> None:
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.problems: list[str] = []
        self.page.route("**/*", self._route)
        self.page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        self.page.on("console", lambda msg: self.problems.append(f"console {msg.type}: {msg.text}")
                     if msg.type == "error" else None)

    def _route(self, r) -> None:
        if r.request.url.startswith(("http://127.0.0.1", "data:", "blob:")):
            r.continue_()
        else:
            self.problems.append(f"external request: {r.request.url}")
            r.abort()

    def open(self, url: str, width: int = 1280):
        """Go to ``url`` at a window ``width`` pixels wide; wait for charts and formulas."""
        self.problems.clear()
        page = self.page
        if page.viewport_size["width"] != width:
            page.set_viewport_size({"width": width, "height": 900})
        page.goto(url, wait_until="load")
        n_charts = page.locator("div.kvlib-chart").count()
        if n_charts:
            page.wait_for_function(
                "n => window.kvlibChartsRendered >= n || window.kvlibChartErrors.length > 0",
                arg=n_charts, timeout=30_000)
        n_calculators = page.locator("div.kvlib-calculator").count()
        if n_calculators:
            page.wait_for_function(
                "n => window.kvlibCalculatorsReady >= n || window.kvlibCalculatorErrors.length > 0",
                arg=n_calculators, timeout=30_000)
        if page.locator(".math").count():
            page.wait_for_selector("mjx-container", timeout=30_000)
        return page


def pages(built_book: Path) -> list[str]:
    """Every page of the built book a reader opens (not the index redirect, search or the
    general index), relative to its folder."""
    skip = {"genindex.html", "search.html"}
    return sorted(str(p.relative_to(built_book)) for p in built_book.rglob("*.html")
                  if p.name not in skip and "_static" not in p.parts and p.name != "index.html")


def read_every_page(built_book: Path) -> list[dict[str, Any]]:
    """Each page at each of ``WIDTHS``: ``{"page", "width", "problems", "seen"}`` (``seen``:
    what ``INSPECT`` returns)."""
    readings = []
    with serve(built_book) as server, browser() as b:
        reader = Reader(b)
        for width in WIDTHS:
            for rel in pages(built_book):
                page = reader.open(f"{server}/{rel}", width)
                readings.append({"page": rel, "width": width, "problems": list(reader.problems),
                                 "seen": page.evaluate(INSPECT, list(WORKING_NOTES))})
    return readings


if __name__ == "__main__":
    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.write_text(json.dumps(read_every_page(folder)))
