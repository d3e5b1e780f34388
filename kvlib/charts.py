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
           "#5f6b73", "#2aa7b8", "#b5b82a", "#222222", "#9c9ede"]


def _theme() -> alt.theme.ThemeConfig:
    return {
        "config": {
            "view": {"continuousWidth": 560, "continuousHeight": 320, "stroke": None},
            "font": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif",
            "axis": {"labelFontSize": 12, "titleFontSize": 13, "titleFontWeight": "normal",
                     "gridColor": "#e6e6e6", "domainColor": "#888", "tickColor": "#888"},
            # Legends below the plot, three entries a row: on the right, long series names
            # (model names) pushed charts past the book's ~670-pixel text column.
            "legend": {"labelFontSize": 12, "titleFontSize": 12, "orient": "bottom",
                       "columns": 3, "labelLimit": 190},
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
          log_x: bool = False, log_y: bool = False, distinguish: bool = False) -> alt.Chart:
    """One line per ``series`` with point tooltips; log scales on request. ``distinguish``
    also gives each series its own dash pattern and marker shape, so coinciding lines stay
    visible."""
    x_scale = alt.Scale(type="log", base=2) if log_x else alt.Undefined
    y_scale = alt.Scale(type="log") if log_y else alt.Undefined
    title = series.replace("_", " ")
    base = alt.Chart(df).encode(
        x=alt.X(f"{x}:Q", title=x_title, scale=x_scale),
        y=alt.Y(f"{y}:Q", title=y_title, scale=y_scale),
        color=alt.Color(f"{series}:N", title=title),
        tooltip=[series, alt.Tooltip(f"{x}:Q", format=","), alt.Tooltip(f"{y}:Q", format=",.2f")],
    )
    if not distinguish:
        return base.mark_line() + base.mark_point(size=30, filled=True)
    line = base.mark_line().encode(color=alt.Color(f"{series}:N", legend=None),
                                   strokeDash=alt.StrokeDash(f"{series}:N", legend=None))
    points = base.mark_point(size=70, filled=False, strokeWidth=2).encode(
        shape=alt.Shape(f"{series}:N", title=title))
    # independent scales (same domain, same colours) let the points' colour and shape share one legend
    return (line + points).resolve_scale(color="independent", shape="independent",
                                         strokeDash="independent")


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
    # cells narrow (to 24 px) until every panel fits the ~620-pixel plotting width of the book
    panels = df[facet].nunique() if facet is not None else 1
    step = int(max(24, min(40, 560 / (df[x].nunique() * panels))))
    layered = alt.layer(rect, text, data=df).properties(width=alt.Step(step), height=alt.Step(22))
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
        layers.append(base.mark_point(size=40, filled=False, fillOpacity=1, strokeWidth=1.6).encode(
            fill=alt.condition(f"datum.{dashed}", alt.value("white"),
                               alt.Color(f"{series}:N", legend=None))))
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
        color=alt.Color(f"{series}:N", title=series.replace("_", " "),
                        sort=list(dict.fromkeys(df[series])), legend=alt.Legend(orient="top")),
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
        # numbers line up on the right, headers above them (text columns stay left)
        numeric = [i for i, c in enumerate(df.columns)
                   if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]
        if numeric:
            styler = styler.set_properties(subset=[df.columns[i] for i in numeric],
                                           **{"text-align": "right"})
            styler = styler.set_table_styles(
                [{"selector": f"th.col_heading.col{i}", "props": [("text-align", "right")]}
                 for i in numeric], overwrite=False)
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


def _vega_string(text: str) -> str:
    """A Python string as a single-quoted Vega expression literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


#: The Vega expression the answer chart prices a token with: kvlib.cost.cost_per_million_tokens
#: of (price per GPU-hour × GPUs) and the group's tokens/s (tests/test_answer.py checks it).
ANSWER_COST_EXPR = "price * datum.n_gpus * 1000000 / (datum.tokens_per_s * 3600)"


def answer_explorer(grid: pd.DataFrame, default_model: str, default_gpu: str,
                    default_context: int, default_price: float, price_max: float = 15.0,
                    width: int = 640) -> alt.VConcatChart:
    """The landing page's answer: pick a model, a GPU, a context and a price; read the GPUs,
    concurrent requests, decode tokens/s and $/1M tokens, and how each moves with context.

    ``grid``: ``kvlib.answer.answer_grid`` output. Everything is precomputed except the
    price, applied in the browser (``ANSWER_COST_EXPR``); the widgets are Vega-Lite params
    named ``model``, ``gpu``, ``context`` and ``price``. ``width``: the whole chart's width in
    pixels, axes included (the book's text column is about 670). Raises ValueError when a
    default is not in the grid.
    """
    for column, value in (("model", default_model), ("gpu", default_gpu),
                          ("context_tokens", default_context)):
        if value not in set(grid[column]):
            raise ValueError(f"default {column} {value!r} is not in the grid")
    # Per-row numbers only (rounded for the page: 3 significant decimals are plenty); names,
    # formats and prices are looked up from one small table per model and per GPU.
    data = grid[["model", "gpu", "context_tokens", "n_gpus", "max_concurrency", "batch",
                 "tokens_per_s", "bound"]].copy()
    data["max_concurrency"] = data["max_concurrency"].round(3)
    data["tokens_per_s"] = data["tokens_per_s"].round(2)
    model_info = grid.drop_duplicates("model")[["model", "model_name", "weight_format", "kv_dtype"]]
    gpu_info = grid.drop_duplicates("gpu")[["gpu", "gpu_name", "price_low", "price_median",
                                            "price_high"]]
    models = list(model_info["model"])
    names = dict(zip(model_info["model"], model_info["model_name"]))
    gpus = list(gpu_info["gpu"])
    gpu_names = dict(zip(gpu_info["gpu"], gpu_info["gpu_name"]))
    contexts = sorted(set(int(c) for c in grid["context_tokens"]))
    ctx_label = {c: (f"{c // 1024}K" if c % 1024 == 0 else f"{c:,}") for c in contexts}

    model = alt.param(name="model", value=default_model, bind=alt.binding_select(
        options=models, labels=[names[m] for m in models], name="model "))
    gpu = alt.param(name="gpu", value=default_gpu, bind=alt.binding_select(
        options=gpus, labels=[gpu_names[g] for g in gpus], name="GPU "))
    context = alt.param(name="context", value=int(default_context), bind=alt.binding_select(
        options=contexts, labels=[f"{ctx_label[c]} ({c:,})" for c in contexts],
        name="tokens per request "))
    price = alt.param(name="price", value=float(default_price), bind=alt.binding_range(
        min=0.25, max=price_max, step=0.05, name="price per GPU-hour ($) "))

    base = (alt.Chart(data)
            .transform_filter("datum.model == model && datum.gpu == gpu")
            .transform_lookup(lookup="model", from_=alt.LookupData(
                model_info, key="model", fields=["model_name", "weight_format", "kv_dtype"]))
            .transform_lookup(lookup="gpu", from_=alt.LookupData(
                gpu_info, key="gpu", fields=["gpu_name", "price_low", "price_median", "price_high"]))
            .transform_calculate(fits="datum.n_gpus > 0")
            .transform_calculate(cost=f"datum.fits ? {ANSWER_COST_EXPR} : null"))

    spacing, axis_w = 18, 62  # pixels between panels; a y axis with its title
    # -- the card: four figures for the chosen context -----------------------------------
    tiles = [("v_gpus", "GPUs"), ("v_requests", "concurrent requests"),
             ("v_tps", "decode tokens/s"), ("v_cost", "$ per 1M tokens")]
    card_base = base.transform_filter("datum.context_tokens == context").transform_calculate(
        v_gpus="datum.fits ? '' + datum.n_gpus : '> 8'",
        v_requests="datum.fits ? format(datum.max_concurrency, datum.max_concurrency < 100 ? ',.1f' : ',.0f') : '—'",
        v_tps="datum.fits ? format(datum.tokens_per_s, ',.0f') : '—'",
        v_cost="datum.fits ? '$' + format(datum.cost, datum.cost < 10 ? ',.2f' : ',.1f') : '—'",
    ).transform_fold([k for k, _ in tiles], as_=["tile", "value"]).transform_calculate(
        label=" : ".join(f"datum.tile == {_vega_string(k)} ? {_vega_string(v)}" for k, v in tiles)
        + " : ''")
    x_tile = alt.X("tile:N", sort=[k for k, _ in tiles], axis=None)
    values = card_base.mark_text(fontSize=30, fontWeight="bold", color=PALETTE[0],
                                 baseline="bottom").encode(x=x_tile, y=alt.value(40), text="value:N")
    labels = card_base.mark_text(fontSize=13, color="#444", baseline="top").encode(
        x=x_tile, y=alt.value(46), text="label:N")
    setup_expr = (
        "datum.fits ? datum.model_name + ' on ' + datum.n_gpus + ' × ' + datum.gpu_name"
        " + ' · weights ' + datum.weight_format + ', KV cache ' + datum.kv_dtype"
        " : datum.model_name + ' does not fit one request of ' + format(datum.context_tokens, ',')"
        " + ' tokens on up to 8 × ' + datum.gpu_name")
    batch_expr = (
        "datum.fits ? datum.batch + ' requests decoded together, each at '"
        " + format(datum.context_tokens, ',') + ' tokens (' + datum.bound + '-bound)' : ''")
    price_expr = (
        "isValid(datum.price_median) ? 'Offers in data/prices.csv: $'"
        " + format(datum.price_low, '.2f') + '–$' + format(datum.price_high, '.2f')"
        " + ' per GPU-hour' + (datum.fits ? '; at the median, $' + format(datum.price_median, '.2f')"
        " + ': $' + format(" + ANSWER_COST_EXPR.replace("price", "datum.price_median")
        + ", ',.2f') + ' per 1M tokens' : '')"
        " : 'No offer for this GPU in data/prices.csv: set your own price'")
    detail = card_base.transform_filter(f"datum.tile == {_vega_string(tiles[0][0])}")
    lines_ = [detail.transform_calculate(t=expr).mark_text(
        fontSize=12, color=colour, align="left").encode(x=alt.value(0), y=alt.value(y), text="t:N")
        for expr, colour, y in ((setup_expr, "#333", 86), (batch_expr, "#333", 103),
                                (price_expr, "#666", 120))]
    # vconcat lines the card up with the panels' plot areas, right of their y axis
    card = alt.layer(values, labels, *lines_).properties(width=width - axis_w - 10, height=128)

    # -- three small panels: the same figures against context ----------------------------
    label_expr = " : ".join(f"datum.value == {c} ? {_vega_string(ctx_label[c])}"
                            for c in contexts) + " : datum.value"
    x = alt.X("context_tokens:O", title="tokens per request",
              axis=alt.Axis(labelAngle=0, labelExpr=label_expr, labelFontSize=10))
    chosen = "datum.context_tokens == context"
    tooltip = [alt.Tooltip("context_tokens:Q", title="tokens per request", format=","),
               alt.Tooltip("n_gpus:Q", title="GPUs"),
               alt.Tooltip("max_concurrency:Q", title="concurrent requests", format=",.1f"),
               alt.Tooltip("tokens_per_s:Q", title="decode tokens/s", format=",.0f"),
               alt.Tooltip("cost:Q", title="$ per 1M tokens", format=",.2f")]
    panel_w = (width - 2 * spacing - 3 * axis_w) // 3

    def panel(field: str, title: str) -> alt.LayerChart:
        fitted = base.transform_filter("datum.fits").encode(
            x=x, y=alt.Y(f"{field}:Q", title=title, scale=alt.Scale(type="log"),
                         axis=alt.Axis(format=",~g", tickCount=4, gridOpacity=0.6)),
            tooltip=tooltip)
        line = fitted.mark_line(color=PALETTE[0], strokeWidth=1.6)
        dots = fitted.mark_point(filled=True, opacity=1).encode(
            size=alt.condition(chosen, alt.value(130), alt.value(36)),
            color=alt.condition(chosen, alt.value(PALETTE[1]), alt.value(PALETTE[0])))
        layers = [line, dots]
        if field == "max_concurrency":  # name the GPU count where it starts and changes
            layers.append(fitted.transform_window(
                prev_gpus="lag(n_gpus)", sort=[alt.SortField("context_tokens")]
            ).transform_filter("datum.prev_gpus != datum.n_gpus").transform_calculate(
                gpus_label="datum.n_gpus + (datum.n_gpus > 1 ? ' GPUs' : ' GPU')").mark_text(
                align="left", dx=5, dy=-9, fontSize=10, color="#555").encode(text="gpus_label:N"))
        return alt.layer(*layers).properties(width=panel_w, height=140)

    panels = alt.hconcat(panel("max_concurrency", "concurrent requests"),
                         panel("tokens_per_s", "decode tokens/s"),
                         panel("cost", "$ per 1M tokens"), spacing=spacing)
    return alt.vconcat(card, panels, spacing=16).add_params(model, gpu, context, price)
