"""kvlib.report: the sortable/filterable table and the log–log versus chart."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from kvlib import report


@pytest.fixture()
def frame() -> pd.DataFrame:
    return pd.DataFrame({"id": ["a", "b", "c"], "verdict": ["holds", "wrong", "holds"],
                         "value": [1.5, 1234.5, math.nan], "text": ["<b>x</b>", "y & z", "w"]})


def test_table_html_has_controls_sort_keys_and_escapes(frame):
    html = report.interactive_table(frame, {"value": "{:,.1f}"}, filters=["verdict"])._repr_html_()
    assert 'class="kvlib-table"' in html and 'class="kvlib-table-search"' in html
    assert 'data-column="verdict"><option value="">all</option><option value="holds">' in html
    assert 'data-sort="1234.5">1,234.5</td>' in html  # formatted text, raw sort key
    assert 'data-sort=""></td>' in html  # NaN: blank, sorts last
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "y &amp; z" in html
    assert "3 rows" in html


def test_table_ids_are_reproducible_and_content_hashed(frame):
    a = report.interactive_table(frame)
    assert a.table_id == report.interactive_table(frame.copy()).table_id
    assert a.table_id != report.interactive_table(frame.iloc[:2]).table_id
    assert a._repr_html_() == report.interactive_table(frame)._repr_html_()


def test_table_rejects_unknown_columns(frame):
    with pytest.raises(KeyError, match="nope"):
        report.interactive_table(frame, filters=["nope"])


def test_versus_chart_drops_what_a_log_axis_cannot_show():
    df = pd.DataFrame({"c": [1.0, 10.0, 0.0, -1.0, math.nan], "r": [1.1, 9.0, 1.0, 2.0, 3.0],
                       "v": ["holds", "rounding", "holds", "wrong", "wrong"]})
    spec = report.versus_chart(df, "c", "r", "v", "claimed", "recomputed").to_dict()
    points = [layer for layer in spec["layer"] if layer["mark"]["type"] == "point"][0]
    data = spec["datasets"][points["data"]["name"]]
    assert sorted(row["c"] for row in data) == [1.0, 10.0]
    assert points["encoding"]["x"]["scale"]["type"] == "log"
    assert [p["bind"] for p in spec["params"]] == ["legend"]  # click a verdict to filter


def test_versus_chart_needs_a_row():
    with pytest.raises(ValueError, match="no row"):
        report.versus_chart(pd.DataFrame({"c": [0.0], "r": [1.0], "v": ["x"]}), "c", "r", "v", "a", "b")


# --- the table's script in a browser (no book build needed) ----------------------------------

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.skipif(not __import__("os").path.exists(CHROMIUM), reason="Debian chromium missing")
def test_table_sorts_and_filters_in_a_browser(tmp_path):
    from pathlib import Path

    from playwright.sync_api import sync_playwright

    script = (Path(__file__).resolve().parent.parent / "book" / "_static" / "kvlib-tables.js")
    df = pd.DataFrame({"id": ["a", "b", "c", "d"], "verdict": ["holds", "wrong", "holds", "unit slip"],
                       "value": [10.0, 2.0, math.nan, 300.0]})
    page_html = (f"<html><body>{report.interactive_table(df, filters=['verdict'])._repr_html_()}"
                 f"<script>{script.read_text()}</script></body></html>")
    page_file = tmp_path / "t.html"
    page_file.write_text(page_html)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_file.as_uri())
        first_column = lambda: page.locator("tbody tr:not([hidden]) td[data-column='id']").all_inner_texts()
        page.click("th[data-column='value']")
        assert first_column() == ["b", "a", "d", "c"]  # numeric order, blank last
        page.click("th[data-column='value']")
        assert first_column() == ["d", "a", "b", "c"]
        page.select_option("select.kvlib-table-filter", "holds")
        assert sorted(first_column()) == ["a", "c"]
        assert page.locator(".kvlib-table-count").inner_text() == "2 of 4 rows"
        page.select_option("select.kvlib-table-filter", "")
        page.fill(".kvlib-table-search", "slip")
        assert first_column() == ["d"]
        browser.close()
    assert not errors


def test_error_bars_clip_and_label_outliers():
    df = pd.DataFrame({"row": ["a", "b"], "err": [5.0, 320.0], "kind": ["x", "y"]})
    spec = report.error_bars(df, "err", "row", "kind", "error (%)", limit=50).to_dict()
    data = list(spec["datasets"].values())[0]
    assert [r["_shown"] for r in data] == [5.0, 50.0]
    assert [r["_note"] for r in data] == ["", "+320 %"]
    with pytest.raises(KeyError):
        report.error_bars(df, "nope", "row", "kind", "t")
