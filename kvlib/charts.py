"""One Altair theme and the chart builders the chapters use.

Charts are emitted by the ``kvlib`` renderer as a ``<div>`` plus the Vega-Lite spec in a JSON
``<script>``; the book's ``_static/kvlib-charts.js`` hands each spec to ``vegaEmbed`` from a
local copy of Vega, so the built HTML renders offline. Ids are hashes of the spec, so
executing a chapter twice gives byte-identical outputs.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import altair as alt
import pandas as pd

PALETTE = ["#1f5c99", "#e07b39", "#3a9a5b", "#b8403a", "#7d5ba6", "#8c6d31", "#d36fa8",
           "#5f6b73", "#2aa7b8", "#b5b82a"]


def _theme() -> alt.theme.ThemeConfig:
    return {
        "config": {
            "view": {"continuousWidth": 560, "continuousHeight": 320, "stroke": None},
            "font": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif",
            "axis": {"labelFontSize": 12, "titleFontSize": 13, "titleFontWeight": "normal",
                     "gridColor": "#e6e6e6", "domainColor": "#888", "tickColor": "#888"},
            "legend": {"labelFontSize": 12, "titleFontSize": 12, "orient": "right"},
            "range": {"category": PALETTE},
            "bar": {"color": PALETTE[0]},
            "line": {"strokeWidth": 2.2},
        }
    }


def _render(spec: dict[str, Any], **_: Any) -> dict[str, str]:
    """Altair renderer: a div and the spec as JSON, picked up by ``kvlib-charts.js``."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    chart_id = "kvlib-chart-" + hashlib.sha1(text.encode()).hexdigest()[:12]
    safe = text.replace("</", "<\\/")
    html = (f'<div class="kvlib-chart" id="{chart_id}"></div>\n'
            f'<script type="application/json" class="kvlib-spec" data-target="{chart_id}">'
            f"{safe}</script>")
    return {"text/html": html, "text/plain": f"<kvlib chart {chart_id}>"}


def use_book_theme() -> None:
    """Register and enable the book's theme and offline renderer (call once per chapter)."""
    alt.theme.register("kvlib", enable=True)(_theme)
    alt.renderers.register("kvlib", _render)
    alt.renderers.enable("kvlib")
    alt.data_transformers.disable_max_rows()


def sorted_bars(df: pd.DataFrame, value: str, label: str, title: str, color: str | None = None,
                tooltip: Sequence[str] = ()) -> alt.Chart:
    """Horizontal bars sorted by ``value`` (largest on top), one per ``label``."""
    enc: dict[str, Any] = {
        "x": alt.X(f"{value}:Q", title=title),
        "y": alt.Y(f"{label}:N", sort="-x", title=None),
        "tooltip": [label, alt.Tooltip(f"{value}:Q", format=",.1f"), *tooltip],
    }
    if color:
        enc["color"] = alt.Color(f"{color}:N", title=color.replace("_", " "))
    return alt.Chart(df).mark_bar().encode(**enc).properties(height=alt.Step(16))


def lines(df: pd.DataFrame, x: str, y: str, series: str, x_title: str, y_title: str,
          log_x: bool = False, log_y: bool = False) -> alt.Chart:
    """One line per ``series`` with point tooltips; log scales on request."""
    x_scale = alt.Scale(type="log", base=2) if log_x else alt.Undefined
    y_scale = alt.Scale(type="log") if log_y else alt.Undefined
    base = alt.Chart(df).encode(
        x=alt.X(f"{x}:Q", title=x_title, scale=x_scale),
        y=alt.Y(f"{y}:Q", title=y_title, scale=y_scale),
        color=alt.Color(f"{series}:N", title=series.replace("_", " ")),
        tooltip=[series, alt.Tooltip(f"{x}:Q", format=","), alt.Tooltip(f"{y}:Q", format=",.2f")],
    )
    return base.mark_line() + base.mark_point(size=30, filled=True)



class Table:
    """An HTML table for a chapter: formatted, with ids hashed from its content (reproducible)."""

    def __init__(self, df: pd.DataFrame, formats: dict[str, Any] | None = None,
                 hide_index: bool = True) -> None:
        digest = hashlib.sha1(pd.util.hash_pandas_object(df, index=True).values.tobytes())
        styler = df.style.format(formats or {}).set_uuid(digest.hexdigest()[:8])
        self.df = df
        self._styler = styler.hide(axis="index") if hide_index else styler

    def _repr_html_(self) -> str:
        return self._styler.to_html()

    def __repr__(self) -> str:
        return f"<table: {len(self.df)} rows × {len(self.df.columns)} columns>"


def table(df: pd.DataFrame, formats: dict[str, Any] | None = None,
          hide_index: bool = True) -> Table:
    """A formatted HTML table whose element ids are a hash of its content."""
    return Table(df, formats, hide_index)
