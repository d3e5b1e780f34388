"""Chapter 4's cost chart in the built book follows the price slider and the GPU picker.

(The executed chapter following its parameters is checked on the fork page's own reruns:
tests/test_fork.py, step 3.)
"""
from __future__ import annotations

from pathlib import Path

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
