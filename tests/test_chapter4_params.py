"""Chapter 4 run through papermill with another GPU and price: the outputs follow."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import nbformat

import kvlib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))


def _glued(path: Path) -> dict[str, str]:
    """Every value glued in an executed notebook, as text (name → repr)."""
    out = {}
    for cell in nbformat.read(path, as_version=4).cells:
        for o in cell.get("outputs", []):
            assert o.get("output_type") != "error", o.get("evalue")
            meta = o.get("metadata", {}).get("scrapbook")
            if meta:
                out[meta["name"]] = o["data"]["application/papermill.record/text/plain"]
    return out


def test_other_gpu_and_price_change_the_outputs(tmp_path):
    import pipeline

    params = {"gpu": "h200", "dollars_per_hour": 3.75, "context_tokens": 16384}
    out = pipeline.execute_chapter(ROOT / "chapters" / "04_cost.md", tmp_path / "h200.ipynb",
                                   params)
    glued = _glued(out)
    assert glued["c4_gpu"] == "'h200'" and float(glued["c4_price"]) == 3.75
    assert int(glued["c4_my_context"]) == 16384
    # the pool follows the GPU: an H200 holds more than the default H100
    h100 = kvlib.kv_pool("llama-3.1-8b", "h100-sxm")
    h200 = kvlib.kv_pool("llama-3.1-8b", "h200")
    assert int(glued["c4_my_tokens"]) == h200.tokens > h100.tokens
    assert math.isclose(float(glued["c4_my_conc"]), h200.max_concurrency(16384))
    # the cost follows the price and the throughput at the new context
    tps = float(glued["c4_best_tps"])
    assert math.isclose(float(glued["c4_best_cost"]),
                        kvlib.cost_per_million_tokens(3.75, tps), rel_tol=1e-12)
    # the article's own figures do not move with the parameters
    assert int(glued["c4_a_tokens"]) == h100.tokens
    # the interactive chart opens on the chosen GPU and price
    text = out.read_text()
    assert '\\"value\\":3.75' in text or '"value":3.75' in text


CHROMIUM = Path("/usr/bin/chromium")


def test_cost_chart_price_slider_and_gpu_pick_work_offline(built_book):
    """The built page's cost chart redraws when the reader moves the price or picks a GPU."""
    import functools
    import http.server
    import threading

    import pytest

    if not CHROMIUM.exists():
        pytest.skip("Debian chromium missing: `make test` installs it")
    from playwright.sync_api import sync_playwright

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(built_book))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    drawn = """() => { const c = [...document.querySelectorAll('.kvlib-chart')]
        .find(d => d.querySelector('input[type=range]'));
        return [...c.querySelectorAll('svg path, svg text')]
        .map(e => e.getAttribute('d') || e.textContent).join('|'); }"""
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM),
                                         args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(
                ("http://127.0.0.1", "data:", "blob:")) else r.abort())
            page.goto(f"http://127.0.0.1:{httpd.server_address[1]}/chapters/04_cost.html")
            page.wait_for_function("window.kvlibChartsRendered >= 4", timeout=30_000)
            assert page.evaluate("window.kvlibChartErrors") == []
            before = page.evaluate(drawn)
            page.query_selector("input[type=range]").evaluate(
                "e => { e.value = 10; e.dispatchEvent(new Event('input', {bubbles: true})); }")
            page.wait_for_timeout(300)
            priced = page.evaluate(drawn)
            select = page.query_selector("select")
            options = select.evaluate("s => [...s.options].map(o => o.value)")
            assert options[0] == "h100-sxm" and len(options) >= 5
            select.select_option(options[-1])
            page.wait_for_timeout(300)
            assert before != priced != page.evaluate(drawn)
            browser.close()
    finally:
        httpd.shutdown()
