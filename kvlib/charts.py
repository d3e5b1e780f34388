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


def stacked_bars(df: pd.DataFrame, category: str, value: str, stack: str, stack_order: Sequence[str],
                 y_title: str, group: str | None = None, label_min: float = 4.0,
                 label_format: str = ".1f") -> alt.LayerChart | alt.FacetChart:
    """Vertical bars of ``value`` per ``category``, stacked by ``stack`` (``stack_order`` bottom up).

    With ``group`` (e.g. a paper's figure against a simulation) each category becomes a panel
    with one bar per group. Segments of at least ``label_min`` carry their value as a label.
    """
    data = df.copy()
    rank = {name: i for i, name in enumerate(stack_order)}
    data["_rank"] = data[stack].map(rank)
    if data["_rank"].isna().any():
        raise ValueError(f"{stack} values outside stack_order: {sorted(set(data[stack]) - set(rank))}")
    keys = [category] + ([group] if group else [])
    data = data.sort_values([*keys, "_rank"])
    data["_top"] = data.groupby(keys, sort=False)[value].cumsum()
    data["_mid"] = data["_top"] - data[value] / 2
    data["_label"] = [format(v, label_format) if v >= label_min else "" for v in data[value]]
    x_field = group or category
    x = alt.X(f"{x_field}:N", title=None, sort=list(dict.fromkeys(df[x_field])),
              axis=alt.Axis(labelAngle=0))
    bars = alt.Chart().mark_bar().encode(
        x=x, y=alt.Y(f"{value}:Q", title=y_title, stack="zero"),
        color=alt.Color(f"{stack}:N", title=stack.replace("_", " "),
                        scale=alt.Scale(domain=list(stack_order), range=PALETTE[:len(stack_order)]),
                        sort=list(stack_order)),
        order=alt.Order("_rank:Q"), tooltip=[*keys, stack, alt.Tooltip(f"{value}:Q", format=label_format)])
    labels = alt.Chart().mark_text(fontSize=10, color="white").encode(
        x=x, y=alt.Y("_mid:Q"), text="_label:N")
    layered = alt.layer(bars, labels, data=data)
    if group is None:
        return layered.properties(width=alt.Step(70))
    return layered.properties(width=alt.Step(56)).facet(
        column=alt.Column(f"{category}:N", title=None, sort=list(dict.fromkeys(df[category]))))


def heatmap(df: pd.DataFrame, x: str, y: str, value: str, x_title: str, y_title: str,
            value_title: str, facet: str | None = None, fmt: str = ".2f",
            domain_mid: float | None = None) -> alt.LayerChart | alt.FacetChart:
    """Cells of ``value`` over ordinal ``x`` × ``y``, each labelled; diverging colours about ``domain_mid``.

    ``facet`` draws one panel per value of that column, side by side.
    """
    scale = (alt.Scale(scheme="blueorange", domainMid=domain_mid) if domain_mid is not None
             else alt.Scale(scheme="blues"))
    base = alt.Chart().encode(
        x=alt.X(f"{x}:O", title=x_title, axis=alt.Axis(labelAngle=0)),
        y=alt.Y(f"{y}:O", title=y_title, sort="descending"))
    rect = base.mark_rect().encode(
        color=alt.Color(f"{value}:Q", title=value_title, scale=scale),
        tooltip=[f"{x}:O", f"{y}:O", alt.Tooltip(f"{value}:Q", format=fmt)])
    text = base.mark_text(fontSize=10).encode(text=alt.Text(f"{value}:Q", format=fmt))
    layered = alt.layer(rect, text, data=df).properties(width=alt.Step(40), height=alt.Step(22))
    return layered if facet is None else layered.facet(column=alt.Column(f"{facet}:N", title=None))



def lines_with_marks(df: pd.DataFrame, x: str, y: str, series: str, x_title: str, y_title: str,
                     marks: pd.DataFrame | None = None, mark_label: str = "label",
                     dashed: str | None = None, log_x: bool = False,
                     log_y: bool = False) -> alt.LayerChart:
    """``lines`` plus vertical rules at ``marks[x]`` (one per row, coloured by ``series``,
    labelled by ``marks[mark_label]``); rows where boolean column ``dashed`` is true are drawn
    as hollow points (e.g. batches past a capacity ceiling)."""
    x_scale = alt.Scale(type="log", base=2) if log_x else alt.Undefined
    y_scale = alt.Scale(type="log") if log_y else alt.Undefined
    enc = dict(x=alt.X(f"{x}:Q", title=x_title, scale=x_scale),
               y=alt.Y(f"{y}:Q", title=y_title, scale=y_scale),
               color=alt.Color(f"{series}:N", title=series.replace("_", " ")),
               tooltip=[series, alt.Tooltip(f"{x}:Q", format=","),
                        alt.Tooltip(f"{y}:Q", format=",.2f")])
    base = alt.Chart(df).encode(**enc)
    layers = [base.mark_line()]
    if dashed:
        layers.append(base.mark_point(size=36, filled=True).encode(
            fill=alt.condition(f"datum.{dashed}", alt.value("white"),
                               alt.Color(f"{series}:N", legend=None)),
            shape=alt.Shape(f"{dashed}:N", title=dashed.replace("_", " "))))
    else:
        layers.append(base.mark_point(size=30, filled=True))
    if marks is not None and len(marks):
        rules = alt.Chart(marks).encode(x=f"{x}:Q", color=alt.Color(f"{series}:N"))
        layers.append(rules.mark_rule(strokeDash=[4, 3]))
        layers.append(rules.mark_text(align="left", dx=3, dy=-6, angle=0, fontSize=10).encode(
            text=f"{mark_label}:N", y=alt.value(8)))
    return alt.layer(*layers)


def priced_lines(df: pd.DataFrame, x: str, rate: str, units: str, series: str, select: str,
                 x_title: str, y_title: str, price: float, price_range: tuple[float, float],
                 price_step: float = 0.05, price_label: str = "$ per GPU-hour ",
                 select_label: str = "GPU ", log_x: bool = True,
                 log_y: bool = True) -> alt.Chart:
    """Cost lines the reader drives in the browser, without a kernel.

    y = price × ``units`` ÷ (``rate`` × 3,600) × 10⁶ — dollars per million of what ``rate``
    counts per second, when ``units`` things each cost ``price`` per hour — is computed by Vega
    from the precomputed ``df``; ``price`` is a slider (``alt.binding_range``) and the rows
    shown are those whose ``select`` column matches a dropdown (``alt.binding_select``, first
    option selected). One line per ``series`` value.
    """
    options = list(dict.fromkeys(df[select]))
    price_param = alt.param(name="price", value=price, bind=alt.binding_range(
        min=price_range[0], max=price_range[1], step=price_step, name=price_label))
    pick = alt.param(name="pick", value=options[0],
                     bind=alt.binding_select(options=options, name=select_label))
    x_scale = alt.Scale(type="log", base=2) if log_x else alt.Undefined
    y_scale = alt.Scale(type="log") if log_y else alt.Undefined
    base = alt.Chart(df).transform_filter(f"datum.{select} == pick").transform_calculate(
        dollars_per_million=f"price * datum.{units} / (datum.{rate} * 3600) * 1000000"
    ).encode(
        x=alt.X(f"{x}:Q", title=x_title, scale=x_scale),
        y=alt.Y("dollars_per_million:Q", title=y_title, scale=y_scale),
        color=alt.Color(f"{series}:N", title=series.replace("_", " ")),
        tooltip=[select, series, alt.Tooltip(f"{x}:Q", format=","),
                 alt.Tooltip(f"{rate}:Q", format=",.0f"),
                 alt.Tooltip("dollars_per_million:Q", format="$,.3f")])
    return (base.mark_line() + base.mark_point(size=30, filled=True)).add_params(
        price_param, pick)


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
