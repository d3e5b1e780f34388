"""Tests for the generic chart builders in kvlib.charts."""
from __future__ import annotations

import pandas as pd
import pytest

from kvlib import charts


def test_stacked_bars_labels_and_order():
    df = pd.DataFrame({"system": ["A", "A", "B", "B"], "part": ["used", "free"] * 2,
                       "pct": [20.0, 80.0, 96.0, 2.0]})
    chart = charts.stacked_bars(df, "system", "pct", "part", ["used", "free"], "share (%)")
    spec = chart.to_dict()
    rows = spec["datasets"][next(iter(spec["datasets"]))]
    grouped = charts.stacked_bars(df.assign(src="paper"), "system", "pct", "part", ["used", "free"],
                                  "share (%)", group="src").to_dict()
    assert grouped["facet"]["column"]["field"] == "system"
    mids = {(r["system"], r["part"]): r["_mid"] for r in rows}
    assert mids == {("A", "used"): 10.0, ("A", "free"): 60.0, ("B", "used"): 48.0, ("B", "free"): 97.0}
    labels = {(r["system"], r["part"]): r["_label"] for r in rows}
    assert labels[("B", "free")] == "" and labels[("A", "used")] == "20.0"  # under label_min: none
    with pytest.raises(ValueError, match="stack_order"):
        charts.stacked_bars(df, "system", "pct", "part", ["used"], "share (%)")


def test_heatmap_single_and_faceted():
    df = pd.DataFrame({"bs": [1, 16, 1, 16], "p": [0.0, 0.0, 0.3, 0.3], "v": [1.0, 0.9, 0.8, 0.7],
                       "panel": ["a", "a", "b", "b"]})
    single = charts.heatmap(df, "bs", "p", "v", "block size", "penalty", "relative", domain_mid=1.0)
    assert "layer" in single.to_dict()
    faceted = charts.heatmap(df, "bs", "p", "v", "block size", "penalty", "relative", facet="panel")
    assert faceted.to_dict()["facet"]["column"]["field"] == "panel"


def test_lines_distinguish_gives_each_series_a_dash_and_a_shape():
    df = pd.DataFrame({"tp": [1, 2, 1, 2], "kib": [320.0, 160.0, 320.0, 160.0],
                       "model": ["a", "a", "b", "b"]})
    plain = charts.lines(df, "tp", "kib", "model", "t", "KiB").to_dict()
    assert all("strokeDash" not in lay["encoding"] and "shape" not in lay["encoding"]
               for lay in plain["layer"])
    line, point = charts.lines(df, "tp", "kib", "model", "t", "KiB", distinguish=True).to_dict()["layer"]
    assert line["encoding"]["strokeDash"]["field"] == "model"
    assert point["encoding"]["shape"]["field"] == "model"


def test_table_right_aligns_numbers_only():
    df = pd.DataFrame({"name": ["a", "b"], "bytes": [1024, 2048], "ok": [True, False]})
    html = charts.table(df, {"bytes": "{:,}"})._repr_html_()
    assert "th.col_heading.col1" in html and "th.col_heading.col0" not in html
    assert "_row0_col1, " in html and "_row0_col0," not in html and "col2 {" not in html
    assert html == charts.table(df, {"bytes": "{:,}"})._repr_html_()  # reproducible


def test_theme_keeps_legends_inside_the_text_column():
    config = charts._theme()["config"]
    assert config["legend"]["orient"] == "bottom"
    assert config["view"]["continuousWidth"] + 80 < 670  # plot + y axis fit the column
