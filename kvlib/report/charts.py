"""One Altair theme and every chart builder the chapters use.

Charts are emitted by the ``kvlib`` renderer as a ``<div>`` plus the Vega-Lite spec in a JSON
``<script>``; the book's ``_static/kvlib-charts.js`` hands each spec to ``vegaEmbed`` from a
local copy of Vega, so the built HTML renders offline. Ids are hashes of the spec, so
executing a chapter twice gives byte-identical outputs.

Every chart fits the text column on a laptop and on a phone:

* a single or layered chart is as wide as its column (Vega-Lite ``width: "container"``, the
  renderer sets it), and its legend wraps into as many columns as the width holds;
* a chart whose layout cannot stretch (facets, concatenations) is built twice, for the book's
  column (``COLUMN_WIDTH``) and for a phone (``PHONE_WIDTH``); the page shows the phone layout
  when the first one does not fit (``responsive``).

Colours: one per attention kind in every chart (``KIND_COLOURS``), the book's palette otherwise.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import altair as alt
import pandas as pd

from .tables import number_text, table, use_for_dataframes  # chapters call charts.table

__all__ = ["COLUMN_WIDTH", "KIND_COLOURS", "PALETTE", "PHONE_WIDTH", "cell_text", "error_bars", "grouped_bars", "heatmap",
           "kind_colour", "kind_styles", "lines", "lines_with_marks", "priced_lines", "responsive",
           "sorted_bars", "stacked_bars", "table", "use_book_theme", "versus_chart"]

PALETTE = ["#1f5c99", "#e07b39", "#3a9a5b", "#b8403a", "#7d5ba6", "#8c6d31", "#d36fa8",
           "#5f6b73", "#2aa7b8", "#b5b82a", "#222222", "#9c9ede"]

#: Pixels a chart may use in the book's text column on a laptop (the column is ~688 px at a
#: 1,280-px window) and on a phone (a 390-px screen leaves ~342 px inside a figure).
COLUMN_WIDTH = 640
PHONE_WIDTH = 320

#: A Vega expression, true when the chart's container is a phone's column (a chart drawn for
#: the book's column would not fit).
ON_PHONE = "containerSize()[0] < 500"

#: Legend labels longer than this (characters) get two wide legend columns instead of three.
LONG_LEGEND_LABEL = 24

#: The one colour of each attention kind (``Model.attention``), in every chart that colours by it.
KIND_COLOURS: dict[str, str] = {
    "MHA": "#5f6b73", "GQA": "#1f5c99", "MQA": "#2aa7b8", "MLA": "#b8403a",
    "MHA+SWA": "#8c6d31", "GQA+SWA": "#3a9a5b", "MQA+SWA": "#b5b82a", "MLA+SWA": "#d36fa8",
    "GQA+hybrid": "#7d5ba6", "GQA+SWA+hybrid": "#9c9ede", "MLA+hybrid": "#e07b39",
    "none+hybrid": "#222222", "none": "#222222",
}
#: Colours for a kind not in ``KIND_COLOURS`` (picked by a hash of its name, so stable).
_SPARE = ["#e6a157", "#6b8fbf", "#a05d56", "#4f9f9f", "#c27ba0", "#7f7f3f"]
_KIND = re.compile(r"^(MHA|GQA|MQA|MLA|none)(\+[A-Za-z0-9-]+)*$")


def kind_colour(kind: str) -> str:
    """The colour of an attention kind (``"MLA"``, ``"GQA+SWA"``…) in every chart."""
    if kind in KIND_COLOURS:
        return KIND_COLOURS[kind]
    return _SPARE[int(hashlib.sha1(kind.encode()).hexdigest(), 16) % len(_SPARE)]


def _colour(field: str, values: Iterable[Any], title: str | None = None,
            **kwargs: Any) -> alt.Color:
    """A nominal colour encoding of ``field``; attention kinds get their fixed colours."""
    present = list(dict.fromkeys(str(v) for v in values))
    if "legend" not in kwargs and max(map(len, present), default=0) > LONG_LEGEND_LABEL:
        # long names ("GQA-8, 1:1 local:global, W 4,096"): two wider columns in the book's
        # column, where three would run past its right edge
        kwargs["legend"] = alt.Legend(columns={"expr": "max(1, floor(containerSize()[0] / 320))"},
                                      labelLimit={"expr": f"{ON_PHONE} ? 290 : 260"})
    if present and all(_KIND.match(v) for v in present):
        order = [k for k in KIND_COLOURS if k in present] + sorted(set(present) - set(KIND_COLOURS))
        kwargs.setdefault("scale", alt.Scale(domain=order, range=[kind_colour(k) for k in order]))
    return alt.Color(f"{field}:N", title=field.replace("_", " ") if title is None else title,
                     **kwargs)


def _theme() -> alt.theme.ThemeConfig:
    return {
        "config": {
            "view": {"continuousWidth": COLUMN_WIDTH - 80, "continuousHeight": 320, "stroke": None},
            "font": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif",
            # axis titles a little smaller on a phone, where a long one spans the whole chart
            "axis": {"labelFontSize": 12, "titleFontSize": {"expr": f"{ON_PHONE} ? 11 : 13"},
                     "titleFontWeight": "normal", "labelSeparation": 6,
                     "gridColor": "#e6e6e6", "domainColor": "#888", "tickColor": "#888"},
            # Legends below the plot, in as many columns of ~210 px as the chart's container
            # holds: three in the book's column, one (with room for longer names) on a phone.
            "legend": {"labelFontSize": 12, "titleFontSize": 12, "orient": "bottom",
                       "columns": {"expr": "max(1, floor(containerSize()[0] / 210))"},
                       "labelLimit": {"expr": f"{ON_PHONE} ? 290 : 190"}},
            "range": {"category": PALETTE},
            "bar": {"color": PALETTE[0]},
            "line": {"strokeWidth": 2.2},
        }
    }


_MULTI_VIEW = ("facet", "concat", "hconcat", "vconcat", "repeat")


def _render(spec: dict[str, Any], **_: Any) -> dict[str, str]:
    """Altair renderer: a div and the spec as JSON, picked up by ``kvlib-charts.js``.

    A single or layered chart without a set width fills its container. The phone layout of a
    ``responsive`` chart travels in ``usermeta`` without the data both layouts share."""
    spec = dict(spec)
    if not any(key in spec for key in _MULTI_VIEW) and "width" not in spec:
        spec["width"] = "container"
        spec["autosize"] = {"type": "fit-x", "contains": "padding", "resize": True}
    narrow = (spec.get("usermeta") or {}).get("kvlib_narrow")
    if narrow:
        shared = spec.get("datasets", {})
        narrow["datasets"] = {k: v for k, v in narrow.get("datasets", {}).items() if k not in shared}
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    chart_id = "kvlib-chart-" + hashlib.sha1(text.encode()).hexdigest()[:12]
    safe = text.replace("</", "<\\/")
    html = (f'<div class="kvlib-chart" id="{chart_id}"></div>\n'
            f'<script type="application/json" class="kvlib-spec" data-target="{chart_id}">'
            f"{safe}</script>")
    return {"text/html": html, "text/plain": f"<kvlib chart {chart_id}>"}


def use_book_theme() -> None:
    """Register and enable the book's theme and offline renderer, and render bare DataFrames
    with the book's table builder (call once per chapter)."""
    alt.theme.register("kvlib", enable=True)(_theme)
    alt.renderers.register("kvlib", _render)
    alt.renderers.enable("kvlib")
    alt.data_transformers.disable_max_rows()
    use_for_dataframes()


def responsive(wide: alt.TopLevelMixin, narrow: alt.TopLevelMixin) -> alt.TopLevelMixin:
    """``wide`` for the book's column, carrying ``narrow``: the layout the page shows when
    ``wide`` does not fit its container (a phone). Both should be built from the same data."""
    return wide.properties(usermeta={"kvlib_narrow": narrow.to_dict()})


def _log_scale(log: bool, base: int = 10) -> alt.Scale | Any:
    return alt.Scale(type="log", base=base) if log else alt.Undefined


def _log_ticks(values: Iterable[float], domain: tuple[float, float] | None = None) -> list[float]:
    """Tick values for a base-10 log axis over ``values``: the powers of ten (1, 10, 100…) inside
    ``domain`` (default: half the smallest value to the largest), and 2× and 5× them where fewer
    than three powers fall inside, so labels never crowd and never run out."""
    positive = [float(v) for v in values if v == v and v > 0]
    if not positive:
        return []
    low, high = domain or (min(positive) / 2, max(positive))
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    for steps in ((1,), (1, 2, 5)):
        ticks = [m * 10.0 ** e for e in range(first, last + 1) for m in steps]
        inside = [t for t in ticks if low * (1 - 1e-9) <= t <= high * (1 + 1e-9)]
        if len(inside) >= 3:
            return inside
    return inside if len(inside) >= 2 else ticks[:2]


def _log_axis(log: bool, values: Iterable[float], domain: tuple[float, float] | None = None,
              **kwargs: Any) -> alt.Axis | Any:
    """An axis with ``_log_ticks`` when ``log``; else ``kwargs`` alone (or the default)."""
    if log:
        kwargs["values"] = _log_ticks(values, domain)
    return alt.Axis(**kwargs) if kwargs else alt.Undefined


def sorted_bars(df: pd.DataFrame, value: str, label: str, title: str, color: str | None = None,
                tooltip: Sequence[str] = (), log: bool = False) -> alt.Chart:
    """Horizontal bars sorted by ``value`` (largest on top), one per ``label``; ``log`` puts the
    values on a log axis (when one bar would flatten the rest). Labels longer than the space a
    phone leaves are cut short (the tooltip has them whole)."""
    enc: dict[str, Any] = {
        # on a log axis a bar starts at the axis' left end, not at a zero it cannot show; the
        # title ends at the axis' right end, reaching left under the labels (room on a phone)
        "x": alt.X(f"{value}:Q", title=title, stack=None if log else alt.Undefined,
                   axis=_log_axis(log, df[value], titleAnchor="end", titleAlign="right"),
                   scale=alt.Scale(type="log", domainMin=float(df[value][df[value] > 0].min()) / 2,
                                   nice=False) if log else alt.Undefined),
        "y": alt.Y(f"{label}:N", sort="-x", title=None, axis=alt.Axis(
            labelLimit={"expr": f"{ON_PHONE} ? 130 : 230"})),
        "tooltip": [label, alt.Tooltip(f"{value}:Q", format=",.1f"), *tooltip],
    }
    if color:
        enc["color"] = _colour(color, df[color])
    # a fixed height (16 px a bar), not a step: a step height and a container width warn
    return alt.Chart(df).mark_bar().encode(**enc).properties(height=16 * df[label].nunique())


def grouped_bars(df: pd.DataFrame, value: str, label: str, group: str, title: str) -> alt.Chart:
    """Horizontal bars side by side, one row per ``label`` and in it one bar per ``group``:
    alternatives compared, never summed. Rows and bars keep the order of ``df``."""
    groups = list(dict.fromkeys(df[group]))
    return alt.Chart(df).mark_bar().encode(
        x=alt.X(f"{value}:Q", title=title, stack=None,
                axis=alt.Axis(titleAnchor="end", titleAlign="right")),
        y=alt.Y(f"{label}:N", sort=list(dict.fromkeys(df[label])), title=None,
                axis=alt.Axis(labelLimit={"expr": f"{ON_PHONE} ? 170 : 230"})),
        yOffset=alt.YOffset(f"{group}:N", sort=groups),
        color=_colour(group, df[group], sort=groups),
        tooltip=[label, group, alt.Tooltip(f"{value}:Q", format=",.1f")],
    ).properties(height=12 * df[label].nunique() * len(groups))


#: Marker shapes and dash patterns that tell apart series drawn in one colour (``lines``
#: with ``kind``): the first series of a kind is solid with circles.
_SHAPES = ["circle", "square", "triangle-up", "diamond", "cross", "triangle-down"]
_DASHES = [[1, 0], [6, 3], [2, 2], [8, 3, 2, 3], [4, 4], [1, 3]]


def _shade(colour: str, step: int) -> str:
    """``colour`` for the ``step``-th series of one kind: itself, then alternately darker and
    lighter (mixed with black or white), so series of a kind stay its hue."""
    if step == 0:
        return colour
    towards, amount = (0, 0.3 + 0.15 * (step // 2)) if step % 2 else (255, 0.25 + 0.15 * (step // 2 - 1))
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (towards - c) * amount):02x}" for c in rgb)


def kind_styles(series: Sequence[str], kinds: Sequence[str]) -> dict[str, tuple[str, str, list[int]]]:
    """(colour, marker shape, dash) of each of ``series`` (in order), given its attention kind:
    the kind's colour (``kind_colour``), shaded for the second and later series of one kind,
    which also get their own marker and dash, so no two series depend on hue alone to be told
    apart (colour-blind readers, print)."""
    seen: dict[str, int] = {}
    styles = {}
    for name, kind in dict(zip(series, kinds)).items():
        step = seen[kind] = seen.get(kind, -1) + 1
        styles[name] = (_shade(kind_colour(kind), step), _SHAPES[step % len(_SHAPES)],
                        _DASHES[step % len(_DASHES)])
    return styles


def lines(df: pd.DataFrame, x: str, y: str, series: str, x_title: str, y_title: str,
          log_x: bool = False, log_y: bool = False, distinguish: bool = False,
          kind: str | None = None) -> alt.Chart:
    """One line per ``series`` with point tooltips; log scales on request. ``distinguish``
    also gives each series its own dash pattern and marker shape, so coinciding lines stay
    visible. ``kind``: a column of attention kinds; each series is drawn in its kind's colour,
    as in every other chart (``kind_styles``), series in the order of ``df``."""
    title = series.replace("_", " ")
    colour = _colour(series, df[series], title)
    if kind is not None:
        styles = kind_styles(list(df[series]), list(df[kind]))
        names = list(styles)
        colours = alt.Scale(domain=names, range=[c for c, _, _ in styles.values()])
        # long names in the wider legend columns of ``_colour``
        legend = _colour(series, names, title).to_dict().get("legend", alt.Undefined)
        colour = alt.Color(f"{series}:N", title=title, sort=names, scale=colours, legend=legend)
    base = alt.Chart(df).encode(
        x=alt.X(f"{x}:Q", title=x_title, scale=_log_scale(log_x, 2)),
        y=alt.Y(f"{y}:Q", title=y_title, scale=_log_scale(log_y), axis=_log_axis(log_y, df[y])),
        color=colour,
        tooltip=[series, *([kind] if kind else []), alt.Tooltip(f"{x}:Q", format=","),
                 alt.Tooltip(f"{y}:Q", format=",.2f")],
    )
    if kind is not None:
        line = base.mark_line().encode(
            color=alt.Color(f"{series}:N", sort=names, scale=colours, legend=None),
            strokeDash=alt.StrokeDash(f"{series}:N", legend=None, sort=names, scale=alt.Scale(
                domain=names, range=[d for _, _, d in styles.values()])))
        points = base.mark_point(size=50, filled=True).encode(shape=alt.Shape(
            f"{series}:N", title=title, sort=names, legend=legend,
            scale=alt.Scale(domain=names, range=[s for _, s, _ in styles.values()])))
        # one legend, the points': colour and marker of each series (independent scales of
        # one domain and range, as a legend left out of one layer would drop the merged one)
        return (line + points).resolve_scale(color="independent", shape="independent",
                                             strokeDash="independent")
    if not distinguish:
        return base.mark_line() + base.mark_point(size=30, filled=True)
    line = base.mark_line().encode(color=_colour(series, df[series], title, legend=None),
                                   strokeDash=alt.StrokeDash(f"{series}:N", legend=None))
    points = base.mark_point(size=70, filled=False, strokeWidth=2).encode(
        shape=alt.Shape(f"{series}:N", title=title))
    # independent scales (same domain, same colours) let the points' colour and shape share one legend
    return (line + points).resolve_scale(color="independent", shape="independent",
                                         strokeDash="independent")


def stacked_bars(df: pd.DataFrame, category: str, value: str, stack: str, stack_order: Sequence[str],
                 y_title: str, group: str | None = None, label_min: float = 4.0,
                 label_format: str = ".1f") -> alt.LayerChart:
    """Vertical bars of ``value`` per ``category``, stacked by ``stack`` (``stack_order`` bottom up).

    With ``group`` (e.g. a paper's figure against a simulation) each category gets one bar per
    group, side by side, the group named above its bar. Segments of at least ``label_min``
    carry their value as a label.
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
    x = alt.X(f"{category}:N", title=None, sort=list(dict.fromkeys(df[category])),
              axis=alt.Axis(labelAngle=0, labelLimit=0, labelExpr="split(datum.label, ' ')"))
    offset: dict[str, Any] = {}
    if group:
        offset["xOffset"] = alt.XOffset(f"{group}:N", sort=list(dict.fromkeys(df[group])),
                                        scale=alt.Scale(paddingInner=0.12))
    bars = alt.Chart().mark_bar().encode(
        x=x, y=alt.Y(f"{value}:Q", title=y_title, stack="zero"),
        color=alt.Color(f"{stack}:N", title=stack.replace("_", " "),
                        scale=alt.Scale(domain=list(stack_order), range=PALETTE[:len(stack_order)]),
                        sort=list(stack_order)),
        order=alt.Order("_rank:Q"), tooltip=[*keys, stack, alt.Tooltip(f"{value}:Q", format=label_format)],
        **offset)
    layers = [bars, alt.Chart().mark_text(fontSize=10, color="white").encode(
        x=x, y=alt.Y("_mid:Q"), text="_label:N", **offset)]
    if group:  # the group's name on top of its bar: upright, or turned up where bars are narrow
        upright = f"!({ON_PHONE})"
        layers.append(alt.Chart().transform_aggregate(
            _total="max(_top)", groupby=keys).mark_text(
            fontSize=10, color="#444", angle={"expr": f"{upright} ? 0 : 270"},
            align={"expr": f"{upright} ? 'center' : 'left'"},
            baseline={"expr": f"{upright} ? 'bottom' : 'middle'"},
            dx={"expr": f"{upright} ? 0 : 3"}, dy={"expr": f"{upright} ? -3 : 0"}).encode(
            x=x, y=alt.Y("_total:Q"), text=f"{group}:N", **offset))
    return alt.layer(*layers, data=data).properties(height=300)


def cell_text(value: float, fmt: str) -> str:
    """A heatmap cell's label: ``value`` in the d3/Python format ``fmt`` (".2f", "+.0f"), with
    the typographic minus and never a signed zero (−0.3 at "+.0f" is "0", not "−0" or "+0");
    "" for a missing value."""
    if value is None or value != value:
        return ""
    text = format(float(value), fmt)
    if not re.sub(r"\D", "", text).strip("0"):  # every digit shown is 0
        text = format(0.0, fmt.replace("+", ""))
    return text.replace("-", "\u2212")


def _ordinal_axis(values: pd.Series, **kwargs: Any) -> alt.Axis:
    """An axis for ordinal ``values``; whole numbers read with thousands separators ("5,000"),
    as on every quantitative axis of the book."""
    if pd.api.types.is_integer_dtype(values):
        kwargs.update(format=",", formatType="number")
    return alt.Axis(**kwargs)


def _label_length(values: pd.Series) -> int:
    """Characters of the longest label an ordinal axis shows for ``values``."""
    if pd.api.types.is_integer_dtype(values):
        return max((len(f"{int(v):,}") for v in values), default=0)
    return int(values.astype(str).str.len().max())


def _two_lines(title: str, longest: int = 18) -> str | list[str]:
    """A legend title longer than ``longest`` characters as two lines, split at the space
    nearest its middle: under a heatmap it starts where the cells do, and on a phone one line
    would run past the chart's right edge."""
    spaces = [i for i, ch in enumerate(title) if ch == " "]
    if len(title) <= longest or not spaces:
        return title
    cut = min(spaces, key=lambda i: abs(i - len(title) / 2))
    return [title[:cut], title[cut + 1:]]


def heatmap(df: pd.DataFrame, x: str, y: str, value: str, x_title: str, y_title: str,
            value_title: str, facet: str | None = None, fmt: str = ".2f",
            domain_mid: float | None = None,
            x_label_angle: int = 0,
            tooltip: Sequence[str] = ()) -> alt.LayerChart | alt.FacetChart:
    """Cells of ``value`` over ordinal ``x`` × ``y``, each labelled (``cell_text``: no "−0");
    diverging colours about ``domain_mid``, as deep at the same distance on either side of it.
    Whole-number axes read "5,000". ``x_label_angle``
    tilts the x labels (degrees; −45 for long names side by side; labels longer than four
    characters are tilted on a phone anyway); ``tooltip``: more columns shown on hover.

    ``facet`` draws one panel per value of that column: side by side in the book's column,
    one above the other on a phone.
    """
    # names side by side overlap in a phone's narrow cells: tilted there
    angle = ({"expr": f"{ON_PHONE} ? -45 : 0"} if x_label_angle == 0
             and _label_length(df[x]) > 4 else x_label_angle)
    # diverging: as far below the middle as above it, so a colour's depth reads the same distance
    # from the middle on either side
    scale = alt.Scale(scheme="blues")
    if domain_mid is not None:
        reach = float((df[value] - domain_mid).abs().max())
        scale = (alt.Scale(scheme="blueorange", domain=[domain_mid - reach, domain_mid + reach])
                 if reach > 0 else alt.Scale(scheme="blueorange", domainMid=domain_mid))
    data = df.assign(_label=[cell_text(v, fmt) for v in df[value]])
    # the x title ends at the axis' right end, reaching left under the y labels (on a phone a
    # centred one runs past the chart's edge); y labels a little shorter on a phone, leaving
    # the cells (and the colour legend's title below them) room
    base = alt.Chart().encode(
        x=alt.X(f"{x}:O", title=x_title, axis=_ordinal_axis(
            df[x], labelAngle=angle, titleAnchor="end", titleAlign="right")),
        y=alt.Y(f"{y}:O", title=y_title, sort="descending", axis=_ordinal_axis(
            df[y], labelLimit={"expr": f"{ON_PHONE} ? 150 : 180"})))
    rect = base.mark_rect().encode(
        color=alt.Color(f"{value}:Q", title=_two_lines(value_title), scale=scale,
                        legend=alt.Legend(titleLimit=0)),
        tooltip=[f"{x}:O", f"{y}:O", alt.Tooltip(f"{value}:Q", format=fmt), *tooltip])
    text = base.mark_text(fontSize=10).encode(text="_label:N")
    if facet is None:
        return alt.layer(rect, text, data=data).properties(height=22 * df[y].nunique())
    n_x, panels = df[x].nunique(), df[facet].nunique()

    def layout(width: int, columns: int) -> alt.FacetChart:
        # each panel's cells share what is left of ``width`` after its y axis (~70 px)
        step = int(max(18, min(40, (width - 70 * columns) / (n_x * columns))))
        return alt.layer(rect, text, data=data).properties(
            width=alt.Step(step), height=alt.Step(22)).facet(
            facet=alt.Facet(f"{facet}:N", title=None), columns=columns)

    return responsive(layout(COLUMN_WIDTH, panels), layout(PHONE_WIDTH, 1))


def with_targets(chart: alt.TopLevelMixin, targets: pd.DataFrame, y: str,
                 label: str = "label") -> alt.LayerChart:
    """``chart`` with a dashed horizontal rule at each ``targets[y]`` (the same field as the
    chart's y, so the rules share its scale), labelled by ``targets[label]`` at the left edge."""
    rules = alt.Chart(targets).encode(y=f"{y}:Q")
    return alt.layer(chart,
                     rules.mark_rule(strokeDash=[6, 3], color="#444", strokeWidth=1.2),
                     rules.mark_text(align="left", baseline="bottom", dy=-2, color="#444",
                                     fontSize=10).encode(x=alt.value(4), text=f"{label}:N"))


def lines_with_marks(df: pd.DataFrame, x: str, y: str, series: str, x_title: str, y_title: str,
                     marks: pd.DataFrame | None = None, mark_label: str = "label",
                     dashed: str | None = None, log_x: bool = False,
                     log_y: bool = False) -> alt.LayerChart:
    """``lines`` plus vertical rules at ``marks[x]`` (one per row, coloured by ``series``,
    labelled by ``marks[mark_label]``); rows where boolean column ``dashed`` is true are drawn
    as hollow points (e.g. batches past a capacity ceiling)."""
    colour = _colour(series, df[series], series.replace("_", " "))
    enc = dict(x=alt.X(f"{x}:Q", title=x_title, scale=_log_scale(log_x, 2)),
               y=alt.Y(f"{y}:Q", title=y_title, scale=_log_scale(log_y)),
               color=colour,
               tooltip=[series, alt.Tooltip(f"{x}:Q", format=","),
                        alt.Tooltip(f"{y}:Q", format=",.2f")])
    base = alt.Chart(df).encode(**enc)
    layers = [base.mark_line()]
    if dashed:
        layers.append(base.mark_point(size=40, filled=False, fillOpacity=1, strokeWidth=1.6).encode(
            fill=alt.condition(f"datum.{dashed}", alt.value("white"),
                               _colour(series, df[series], legend=None))))
    else:
        layers.append(base.mark_point(size=30, filled=True))
    if marks is not None and len(marks):
        layers.append(alt.Chart(marks).encode(x=f"{x}:Q", color=alt.Color(f"{series}:N"))
                      .mark_rule(strokeDash=[4, 3]))
        # a label beside its rule, on the side with room: right of a rule in the left half of
        # the axis, left of one in the right half (else a phone's narrow plot cuts it off)
        right = _in_right_half(marks[x], df[x], log_x)
        for side, rows in (("left", marks[~right]), ("right", marks[right])):
            if len(rows):
                layers.append(alt.Chart(rows).encode(
                    x=f"{x}:Q", color=alt.Color(f"{series}:N")).mark_text(
                    align=side, dx=3 if side == "left" else -3, dy=-6, angle=0,
                    fontSize=10).encode(text=f"{mark_label}:N", y=alt.value(8)))
    return alt.layer(*layers)


def _in_right_half(values: pd.Series, axis: pd.Series, log: bool) -> pd.Series:
    """Whether each of ``values`` lies past the middle of the axis that ``axis`` spans (in
    log space on a log axis)."""
    lo, hi = float(axis.min()), float(axis.max())
    if hi <= lo:
        return pd.Series(False, index=values.index)
    if log:
        return values.map(lambda v: math.log(max(v, lo) / lo) / math.log(hi / lo) > 0.5)
    return (values - lo) / (hi - lo) > 0.5


def priced_lines(df: pd.DataFrame, x: str, rate: str, units: str, series: str, select: str,
                 x_title: str, y_title: str, price: float, price_range: tuple[float, float],
                 price_step: float = 0.05, price_label: str = "$ per GPU-hour ",
                 select_label: str = "GPU ", log_x: bool = True, log_y: bool = True,
                 select_names: dict[str, str] | None = None,
                 band: tuple[str, str] | None = None) -> alt.Chart:
    """Cost lines the reader drives in the browser, without a kernel.

    y = price × ``units`` ÷ (``rate`` × 3,600) × 10⁶ — dollars per million of what ``rate``
    counts per second, when ``units`` things each cost ``price`` per hour — is computed by Vega
    from the precomputed ``df``; ``price`` is a slider (``alt.binding_range``) and the rows
    shown are those whose ``select`` column matches a dropdown (``alt.binding_select``, first
    option selected), which shows ``select_names[value]`` for each value when given. One line per
    ``series`` value. ``band`` = (low, high): columns of the rate's relative error band
    (``ErrorBand.low`` / ``high``: the rate spans rate·(1 + low) … rate·(1 + high)), drawn as a
    shaded area around each line, from the cost at rate·(1 + high) to the cost at rate·(1 + low).
    """
    options = list(dict.fromkeys(df[select]))
    names = [select_names[o] for o in options] if select_names else options
    price_param = alt.param(name="price", value=price, bind=alt.binding_range(
        min=price_range[0], max=price_range[1], step=price_step, name=price_label))
    pick = alt.param(name="pick", value=options[0],
                     bind=alt.binding_select(options=options, labels=names, name=select_label))
    base = alt.Chart(df).transform_filter(f"datum.{select} == pick").transform_calculate(
        dollars_per_million=f"price * datum.{units} / (datum.{rate} * 3600) * 1000000"
    ).encode(
        x=alt.X(f"{x}:Q", title=x_title, scale=_log_scale(log_x, 2)),
        y=alt.Y("dollars_per_million:Q", title=y_title, scale=_log_scale(log_y)),
        color=_colour(series, df[series], sort=list(dict.fromkeys(df[series])),
                      legend=alt.Legend(orient="top")),
        tooltip=[series, alt.Tooltip(f"{x}:Q", format=","),
                 alt.Tooltip(f"{rate}:Q", format=",.0f"),
                 alt.Tooltip("dollars_per_million:Q", format="$,.3f")])
    layers = [base.mark_line(), base.mark_point(size=30, filled=True)]
    if band is not None:
        low, high = band
        missing = [c for c in band if c not in df.columns]
        if missing:
            raise KeyError(f"band columns not in the frame: {missing}")
        area = base.transform_calculate(
            band_cheap=f"price * datum.{units} / (datum.{rate} * (1 + datum.{high}) * 3600) * 1000000",
            band_dear=f"price * datum.{units} / (datum.{rate} * (1 + datum.{low}) * 3600) * 1000000",
        ).mark_area(opacity=0.18).encode(
            y=alt.Y("band_cheap:Q", title=y_title, scale=_log_scale(log_y)), y2="band_dear:Q")
        layers.insert(0, area)
    return alt.layer(*layers).add_params(price_param, pick)


def versus_chart(df: pd.DataFrame, x: str, y: str, color: str, x_title: str, y_title: str,
                 tooltip: Sequence[str] = (), color_order: Sequence[str] | None = None) -> alt.LayerChart:
    """``y`` against ``x`` on log–log axes with the line y = x (claimed against recomputed,
    measured against predicted); rows with a value ≤ 0 or NaN are left out (a log axis cannot
    show them). Clicking a legend entry shows only that category.

    Raises ValueError when no row is left to draw.
    """
    keep = df[(df[x] > 0) & (df[y] > 0)]
    if keep.empty:
        raise ValueError(f"no row with positive {x!r} and {y!r} to draw")
    low = float(min(keep[x].min(), keep[y].min())) / 2
    high = float(max(keep[x].max(), keep[y].max())) * 2
    pick = alt.selection_point(fields=[color], bind="legend")
    colour = (_colour(color, keep[color], scale=alt.Scale(domain=list(color_order)))
              if color_order else _colour(color, keep[color]))
    ticks = _log_axis(True, [low, high], (low, high))
    points = alt.Chart(keep).mark_point(size=70, filled=True).encode(
        x=alt.X(f"{x}:Q", title=x_title, scale=alt.Scale(type="log", domain=[low, high]),
                axis=ticks),
        y=alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(type="log", domain=[low, high]),
                axis=ticks),
        color=colour,
        opacity=alt.condition(pick, alt.value(0.9), alt.value(0.08)),
        tooltip=[*tooltip, alt.Tooltip(f"{x}:Q", format=",.4~g"),
                 alt.Tooltip(f"{y}:Q", format=",.4~g")],
    ).add_params(pick)
    diagonal = alt.Chart(pd.DataFrame({x: [low, high], y: [low, high]})).mark_line(
        color="#888", strokeDash=[4, 4], strokeWidth=1).encode(x=f"{x}:Q", y=f"{y}:Q")
    return (diagonal + points).properties(height=380)


def error_bars(df: pd.DataFrame, error: str, label: str, color: str, title: str,
               limit: float = 50.0, tooltip: Sequence[str] = ()) -> alt.LayerChart:
    """Horizontal bars of ``error`` (percent) per ``label``, sorted, on an axis clipped to
    ±``limit``; a bar past the limit is drawn to the edge with its true value written beside it,
    so one outlier does not flatten the rest. Raises KeyError for a missing column."""
    missing = [c for c in (error, label, color, *tooltip) if c not in df.columns]
    if missing:
        raise KeyError(f"columns not in the frame: {missing}")
    data = df.assign(_shown=df[error].clip(-limit, limit),
                     _note=[f"{number_text(v, '{:+.0f}')}%" if abs(v) > limit else ""
                            for v in df[error]])
    base = alt.Chart(data).encode(y=alt.Y(
        f"{label}:N", sort=alt.EncodingSortField(error, op="max", order="descending"), title=None,
        axis=alt.Axis(labelLimit={"expr": f"{ON_PHONE} ? 130 : 230"})))
    bars = base.mark_bar().encode(
        x=alt.X("_shown:Q", title=title, scale=alt.Scale(domain=[-limit, limit]),
                axis=alt.Axis(titleAnchor="end", titleAlign="right")),
        color=_colour(color, data[color]),
        tooltip=[label, alt.Tooltip(f"{error}:Q", format="+.1f"), *tooltip])
    notes = base.mark_text(align="right", dx=-4, color="white", fontWeight="bold").encode(
        x=alt.X("_shown:Q"), text="_note:N")
    return (bars + notes).properties(height=16 * data[label].nunique())
