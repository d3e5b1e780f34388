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
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # no access log in the test output
            pass

    handler = functools.partial(Quiet, directory=str(built_book))
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


# --- widgets respond --------------------------------------------------------------------------

def _svg(chart) -> str:
    """The markup of a rendered chart's SVG (marks, axes and text)."""
    return chart.locator("svg").first.evaluate("e => e.outerHTML")


def _svg_text(chart) -> list[str]:
    """Every text element of a rendered chart's SVG, in document order."""
    return chart.locator("svg").first.evaluate(
        "e => Array.from(e.querySelectorAll('text')).map(t => t.textContent)")


def _await_change(page, chart_id: str, before: str) -> str:
    page.wait_for_function(
        "([id, before]) => document.querySelector('#' + id + ' svg').outerHTML !== before",
        arg=[chart_id, before], timeout=10_000)
    return page.locator(f"#{chart_id}").locator("svg").first.evaluate("e => e.outerHTML")


def _wiggle(page, chart) -> list[str]:
    """Change every select and range input bound to ``chart``; return the controls that did
    not change the drawing."""
    chart_id = chart.get_attribute("id")
    dead = []
    for control in chart.locator(".vega-bindings select, .vega-bindings input[type=range]").all():
        name = control.get_attribute("name")
        before = _svg(chart)
        if control.evaluate("e => e.tagName") == "SELECT":
            values = control.locator("option").evaluate_all("os => os.map(o => o.value)")
            current = control.input_value()
            control.select_option(next(v for v in values if v != current))
        else:
            low, high = float(control.get_attribute("min")), float(control.get_attribute("max"))
            target = low + 0.8 * (high - low) if float(control.input_value()) < (low + high) / 2 \
                else low + 0.2 * (high - low)
            control.fill(f"{target:.2f}")
        try:
            _await_change(page, chart_id, before)
        except Exception:  # noqa: BLE001 - report which control is dead, not a timeout
            dead.append(str(name))
    return dead


def test_every_widget_changes_its_chart(built_book, server, browser):
    seen = 0
    for rel in _pages(built_book):
        page, problems = open_page(browser, f"{server}/{rel}")
        for chart in page.locator("div.kvlib-chart:has(.vega-bindings select, .vega-bindings input)").all():
            seen += 1
            assert not _wiggle(page, chart), f"{rel}: controls that change nothing"
        assert not problems, f"{rel}: {problems}"
        page.close()
    assert seen >= 2, "the landing page and chapter 4 have charts with widgets"


def _card(point, price: float) -> list[str]:
    """The four figures the landing chart shows for a kvlib.serving.ServingPoint."""
    conc = point.max_concurrency
    cost = point.dollars_per_million(price)
    return [str(point.n_gpus), format(conc, ",.1f" if conc < 100 else ",.0f"),
            format(point.tokens_per_s, ",.0f"),
            "$" + format(cost, ",.2f" if cost < 10 else ",.1f")]


def test_landing_page_answers_the_readers_case(built_book, server, browser):
    from kvlib import answer

    page, problems = open_page(browser, f"{server}/chapters/00_answer.html")
    chart = page.locator("div.kvlib-chart:has(.vega-bindings select)").first
    chart_id = chart.get_attribute("id")
    price = float(chart.locator("input[name=price]").input_value())
    start = answer.case("llama-3.1-8b", "h100-sxm", 8192)
    text = _svg_text(chart)
    assert text[:4] == _card(start, price), text[:8]

    steps = [("select[name=model]", "llama-3.1-70b"), ("select[name=context]", "32768"),
             ("select[name=gpu]", "h200"), ("input[name=price]", "6.5")]
    model, gpu, context = "llama-3.1-8b", "h100-sxm", 8192
    for selector, value in steps:
        before = _svg(chart)
        control = chart.locator(selector)
        if selector.startswith("select"):
            control.select_option(value)
        else:
            control.fill(value)
            price = float(value)
        _await_change(page, chart_id, before)
        model = value if "model" in selector else model
        gpu = value if "gpu" in selector else gpu
        context = int(value) if "context" in selector else context
        expected = _card(answer.case(model, gpu, context), price)
        text = _svg_text(chart)
        assert text[:4] == expected, (selector, value, text[:8])
    # a case that fits on no 8-GPU group says so
    before = _svg(chart)
    chart.locator("select[name=model]").select_option("llama-3.1-405b")
    chart.locator("select[name=gpu]").select_option("l4")
    _await_change(page, chart_id, before)
    assert any("does not fit one request" in t for t in _svg_text(chart))
    assert not problems
    page.close()


def test_chapter_four_cost_chart_follows_price_and_gpu(built_book, server, browser):
    page, problems = open_page(browser, f"{server}/chapters/04_cost.html")
    chart = page.locator("div.kvlib-chart:has(input[name=price])").first
    chart_id = chart.get_attribute("id")
    ticks = _svg_text(chart)
    before = _svg(chart)
    slider = chart.locator("input[name=price]")
    slider.fill(f"{float(slider.input_value()) * 3:.2f}")  # 3× the price: 3× every $ value
    _await_change(page, chart_id, before)
    assert _svg_text(chart) != ticks, "the cost axis did not move with the price"
    gpu = chart.locator(".vega-bindings select").first
    before = _svg(chart)
    gpu.select_option(index=1)
    _await_change(page, chart_id, before)
    assert not problems
    page.close()
