"""The built book in headless Chromium with no network: charts and formulas render offline."""
from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="Debian chromium missing: `make test` installs it")


@pytest.fixture(scope="module")
def server(built_book: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(built_book))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


def _pages(built_book: Path) -> list[str]:
    skip = {"genindex.html", "search.html"}
    return sorted(str(p.relative_to(built_book)) for p in built_book.rglob("*.html")
                  if p.name not in skip and "_static" not in p.parts and p.name != "index.html")


def open_page(browser, url: str):
    """Open ``url`` with every non-local request blocked; return (page, problems list)."""
    page = browser.new_page()
    problems: list[str] = []
    external: list[str] = []

    def route(r):
        if r.request.url.startswith(("http://127.0.0.1", "data:", "blob:")):
            r.continue_()
        else:
            external.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" else None)
    page.goto(url, wait_until="load")
    n_charts = page.locator("div.kvlib-chart").count()
    if n_charts:
        page.wait_for_function(
            "n => window.kvlibChartsRendered >= n || window.kvlibChartErrors.length > 0",
            arg=n_charts, timeout=30_000)
    if page.locator(".math").count():
        page.wait_for_selector("mjx-container", timeout=30_000)
    problems.extend(f"external request: {u}" for u in external)
    return page, problems


def test_every_page_renders_offline(built_book, server, browser):
    pages = _pages(built_book)
    assert any(p.startswith("chapters/") for p in pages), pages
    for rel in pages:
        page, problems = open_page(browser, f"{server}/{rel}")
        charts = page.locator("div.kvlib-chart")
        for i in range(charts.count()):
            chart = charts.nth(i)
            assert chart.locator("svg, canvas").count() > 0, f"{rel}: chart {i} not rendered"
        errors = page.evaluate("window.kvlibChartErrors || []")
        assert not errors, f"{rel}: {errors}"
        assert not problems, f"{rel}: {problems}"
        page.close()


def test_chapter_one_has_its_charts_and_math(built_book, server, browser):
    page, problems = open_page(browser, f"{server}/chapters/01_per_token_kv.html")
    assert page.locator("div.kvlib-chart svg").count() >= 2
    assert page.locator("mjx-container").count() >= 2
    assert not problems
    page.close()
