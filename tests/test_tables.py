"""kvlib.report.tables: the one table builder (sortable, filterable, for people) and its numbers."""
from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from kvlib.report import tables


@pytest.fixture()
def frame() -> pd.DataFrame:
    return pd.DataFrame({"id": ["a", "b", "c"], "verdict": ["holds", "wrong", "holds"],
                         "value": [1.5, 1234.5, math.nan], "text": ["<b>x</b>", "y & z", "w"]})


def test_table_html_has_controls_sort_keys_and_escapes(frame):
    html = tables.table(frame, {"value": "{:,.1f}"}, filters=["verdict"])._repr_html_()
    assert 'class="kvlib-table"' in html and 'class="kvlib-table-search"' in html
    assert 'data-column="verdict"><option value="">all</option><option value="holds">' in html
    assert 'data-sort="1234.5">1,234.5</td>' in html  # formatted text, raw sort key
    assert f'data-sort="">{tables.MISSING}</td>' in html  # NaN: a dash, sorts last
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "y &amp; z" in html
    assert "3 rows" in html
    assert "kvlib-table-search" not in tables.table(frame)._repr_html_()  # no filters: no box
    # a drop-down offers the texts the cells show (the script compares them), e.g. yes/no
    flags = tables.table(frame.assign(ok=[True, False, True]), filters=["ok"])._repr_html_()
    assert '<option value="no">no</option><option value="yes">yes</option>' in flags


def test_short_tables_show_whole_and_long_ones_scroll_in_their_box():
    short = tables.table(pd.DataFrame({"x": range(tables.SHORT_ROWS)}))._repr_html_()
    long = tables.table(pd.DataFrame({"x": range(tables.SHORT_ROWS + 1)}))._repr_html_()
    assert 'class="kvlib-table-wrap kvlib-table-short"' in short
    assert 'class="kvlib-table-wrap"' in long


def test_table_ids_are_reproducible_and_content_hashed(frame):
    a = tables.table(frame)
    assert a.table_id == tables.table(frame.copy()).table_id
    assert a.table_id != tables.table(frame.iloc[:2]).table_id
    assert a._repr_html_() == tables.table(frame)._repr_html_()


def test_table_rejects_unknown_columns(frame):
    with pytest.raises(KeyError, match="nope"):
        tables.table(frame, filters=["nope"])
    with pytest.raises(KeyError, match="nope"):
        tables.table(frame, labels={"nope": "x"})
    with pytest.raises(KeyError, match="nope"):
        tables.table(frame, wide_only=["nope"])


def test_wide_only_columns_are_marked_and_named_for_a_phone(frame):
    html = tables.table(frame, wide_only=["value", "text"])._repr_html_()
    # kvlib-tables.css hides .wide-only cells on a phone and shows the note that names them
    assert html.count('class="num wide-only"') == 4 and html.count('class="wide-only"') == 4
    assert '<p class="kvlib-table-narrow-note">On a wider screen this table also shows: value, text.</p>' in html
    assert "kvlib-table-narrow-note" not in tables.table(frame)._repr_html_()


def _cells(html: str) -> list[str]:
    return re.findall(r"<td[^>]*>([^<]*)</td>", html)


def _headers(html: str) -> list[str]:
    return re.findall(r"<th[^>]*>([^<]*)</th>", html)


def test_no_pandas_artefacts():
    """What a reader should never see: 128.000000, -0, 8.707e+04, an unnamed index column."""
    df = pd.DataFrame({"kv_kib_per_token": [128.0, 2560.0], "delta": [-0.0001, 3.25],
                       "big": [87070.0, 1.7e9], "n": [1, 2]}, index=[5, 9])
    html = tables.table(df, {"big": "{:,.4g}"})._repr_html_()
    cells = _cells(html)
    # whole floats: no decimals; -0.0001 at two decimals: "0.00", not "-0.00"; .4g: no exponent
    assert cells == ["128", "0.00", "87,070", "1", "2,560", "3.25", "1,700,000,000", "2"]
    assert not any(re.fullmatch(r"-0[.,0]*|.*\d\.0{6}|.*\de[+-]\d\d", c) for c in cells), cells
    assert _headers(html) == ["KV per token (KiB)", "delta", "big", "count"]  # index dropped


def test_decimals_follow_the_column():
    # largest 12.3 → one decimal; largest 0.05 → four decimals (about three significant digits)
    html = tables.table(pd.DataFrame({"a": [12.34, 1.0], "b": [0.05, 0.0123]}))._repr_html_()
    assert _cells(html) == ["12.3", "0.0500", "1.0", "0.0123"]


def test_named_index_becomes_a_column_and_unnamed_needs_a_name():
    df = pd.DataFrame({"x": [1, 2]}, index=pd.Index(["a01", "a02"], name="id"))
    assert _headers(tables.table(df)._repr_html_()) == ["id", "x"]
    assert _headers(tables.table(df, hide_index=True)._repr_html_()) == ["x"]
    with pytest.raises(ValueError, match="no name"):
        tables.table(df.rename_axis(None), hide_index=False)
    pivot = pd.DataFrame({"model": ["m", "m"], "tp": [1, 2], "kib": [2.0, 1.0]}).pivot(
        index="model", columns="tp", values="kib")
    assert _headers(tables.table(pivot)._repr_html_()) == ["model", "TP 1", "TP 2"]


@pytest.mark.parametrize("name, label", [
    ("kv_kib_per_token", "KV per token (KiB)"), ("tokens_per_s", "tokens/s"),
    ("dollars_per_gpu_hour", "$ per GPU-hour"), ("saving_vs_67b_pct", "saving vs 67B (%)"),
    ("window_4096_gib", "window 4,096 (GiB)"), ("n_tokens", "tokens"),
    ("input_tokens", "input (tokens)"), ("scale_bytes", "scale (bytes)"),
    ("kv_bytes_per_token", "KV bytes per token"), ("median_abs_error", "median absolute error"),
    ("max_model_len", "--max-model-len"), ("block_size", "block size (tokens)"), ("stated (GiB)", "stated (GiB)"), ("model", "model"),
])
def test_column_labels_in_words_with_units(name, label):
    assert tables.column_label(name) == label


def test_whole_numbers_print_as_integers_and_negatives_with_a_minus():
    # a count in a fixed-point format: "128", not "128.000"; "12,031", not "12,031.00"
    assert tables.number_text(128.0, "{:,.3f}") == "128"
    assert tables.number_text(12031, "{:,.2f}") == "12,031"
    assert tables.number_text(3.111, "{:,.2f}") == "3.11"  # not whole: the format's decimals
    assert tables.number_text(1.0, "{:.2f}×") == "1×"
    assert tables.number_text(3.0, "${:.2f}") == "$3.00"  # cents stay in a dollar format
    assert tables.number_text(0.0, "{:+.1f}") == "0"  # not "+0"
    assert tables.number_text(-1.6, "{:+.1f}") == "\u22121.6"  # the typographic minus
    assert tables.number_text(-3) == "\u22123"


def test_number_text_and_ranges():
    assert tables.number_text(1234567) == "1,234,567"
    assert tables.number_text(True) == "yes" and tables.number_text(None) == tables.MISSING
    assert tables.number_text(-0.04, "{:+.1f}%") == "0.0%"  # no "-0.0%"
    assert tables.number_text(1.5e-5, "{:.3g}") == "0.000015"
    # 4.66 and 4.74 both read 4.7 at one decimal: one figure, not "4.7–4.7"
    assert tables.range_text(4.66, 4.74) == "4.7"
    assert tables.range_text(4.74, 4.6) == "4.6–4.7"  # ascending
    assert tables.range_text(2.4, 7.37, ".0f") == "2–7"


# --- the table's script in a browser (no book build needed) ----------------------------------

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.skipif(not __import__("os").path.exists(CHROMIUM), reason="Debian chromium missing")
def test_table_sorts_and_filters_in_a_browser(tmp_path):
    from pathlib import Path

    from playwright.sync_api import sync_playwright

    script = (Path(__file__).resolve().parent.parent / "book" / "_static" / "kvlib-tables.js")
    df = pd.DataFrame({"id": ["a", "b", "c", "d"], "verdict": ["holds", "wrong", "holds", "unit slip"],
                       "value": [10.0, 2.0, math.nan, 300.0]})
    page_html = (f"<html><body>{tables.table(df, filters=['verdict'])._repr_html_()}"
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


def test_sig3_writes_figures_as_the_calculator_does():
    # the examples of sig3 in book/_static/kvlib-calculator.js: three significant digits,
    # trailing zeros kept, whole numbers with separators from 999.5 up
    assert [tables.sig3(x) for x in (1214.3, 23.66, 0.6667, 0.019, 0.2449, 0.03449)] == [
        "1,214", "23.7", "0.667", "0.0190", "0.245", "0.0345"]
    assert tables.sig3(999.4) == "999" and tables.sig3(999.6) == "1,000"
    assert tables.sig3(0) == "0" and tables.sig3(-0.5) == "-0.500"
    with pytest.raises(ValueError, match="finite"):
        tables.sig3(float("nan"))
