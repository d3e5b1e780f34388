"""Display builders for the rechecks chapter and the validation appendix.

* ``interactive_table`` — an HTML table a reader can sort (click a header) and filter (a text
  box and one drop-down per chosen column) in the built book with no kernel: the controls are
  plain HTML, wired by ``book/_static/kvlib-tables.js``; without JavaScript it is a plain table.
* ``versus_chart`` — claimed against recomputed (or measured against predicted), log–log, one
  colour per category, the diagonal drawn, categories toggled by clicking the legend.

Ids are hashes of the content, so executing a chapter twice gives byte-identical output.
"""
from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import altair as alt
import pandas as pd

Formatter = str | Callable[[Any], str]


def _cell_text(value: Any, fmt: Formatter | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if fmt is None:
        return str(value)
    return fmt(value) if callable(fmt) else fmt.format(value)


def _sort_key(value: Any) -> str:
    """What the browser sorts on: the raw number (repr) or the text; blanks sort last."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    return str(value)


class InteractiveTable:
    """A sortable, filterable HTML table (see the module docstring); ``df`` keeps the data."""

    def __init__(self, df: pd.DataFrame, formats: Mapping[str, Formatter] | None = None,
                 filters: Sequence[str] = (), caption: str | None = None) -> None:
        missing = [c for c in [*filters, *(formats or {})] if c not in df.columns]
        if missing:
            raise KeyError(f"columns not in the table: {missing}")
        self.df = df
        self.formats = dict(formats or {})
        self.filters = list(filters)
        self.caption = caption
        digest = hashlib.sha1(pd.util.hash_pandas_object(df, index=False).values.tobytes())
        digest.update("|".join(map(str, df.columns)).encode())
        self.table_id = "kvlib-table-" + digest.hexdigest()[:10]

    def _controls(self) -> str:
        parts = [f'<input type="search" class="kvlib-table-search" placeholder="filter rows…" '
                 f'aria-label="filter rows" data-table="{self.table_id}">']
        for column in self.filters:
            options = "".join(f'<option value="{html.escape(str(v))}">{html.escape(str(v))}</option>'
                              for v in sorted(self.df[column].dropna().astype(str).unique()))
            parts.append(f'<label>{html.escape(column)} <select class="kvlib-table-filter" '
                         f'data-table="{self.table_id}" data-column="{html.escape(column)}">'
                         f'<option value="">all</option>{options}</select></label>')
        parts.append(f'<span class="kvlib-table-count" data-table="{self.table_id}">'
                     f'{len(self.df)} rows</span>')
        return '<div class="kvlib-table-controls">' + " ".join(parts) + "</div>"

    def _repr_html_(self) -> str:
        head = "".join(f'<th scope="col" data-column="{html.escape(str(c))}" '
                       f'title="click to sort">{html.escape(str(c))}</th>' for c in self.df.columns)
        body = []
        for _, row in self.df.iterrows():
            cells = "".join(
                f'<td data-column="{html.escape(str(c))}" data-sort="{html.escape(_sort_key(row[c]))}">'
                f"{html.escape(_cell_text(row[c], self.formats.get(c)))}</td>" for c in self.df.columns)
            body.append(f"<tr>{cells}</tr>")
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (f'<div class="kvlib-table-wrap">{self._controls()}'
                f'<table class="kvlib-table" id="{self.table_id}">{caption}'
                f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")

    def __repr__(self) -> str:
        return f"<interactive table: {len(self.df)} rows × {len(self.df.columns)} columns>"


def interactive_table(df: pd.DataFrame, formats: Mapping[str, Formatter] | None = None,
                      filters: Sequence[str] = (), caption: str | None = None) -> InteractiveTable:
    """A table sortable by any column and filterable by text and by each of ``filters``.

    ``formats``: column → format string (``"{:,.2f}"``) or function; sorting uses the raw values.
    """
    return InteractiveTable(df, formats, filters, caption)


def versus_chart(df: pd.DataFrame, x: str, y: str, color: str, x_title: str, y_title: str,
                 tooltip: Sequence[str] = (), color_order: Sequence[str] | None = None) -> alt.LayerChart:
    """``y`` against ``x`` on log–log axes with the line y = x; rows with a value ≤ 0 or NaN are
    left out (a log axis cannot show them). Clicking a legend entry shows only that category.

    Raises ValueError when no row is left to draw.
    """
    keep = df[(df[x] > 0) & (df[y] > 0)]
    if keep.empty:
        raise ValueError(f"no row with positive {x!r} and {y!r} to draw")
    low = float(min(keep[x].min(), keep[y].min())) / 2
    high = float(max(keep[x].max(), keep[y].max())) * 2
    pick = alt.selection_point(fields=[color], bind="legend")
    scale = alt.Scale(domain=list(color_order)) if color_order else alt.Undefined
    points = alt.Chart(keep).mark_point(size=70, filled=True).encode(
        x=alt.X(f"{x}:Q", title=x_title, scale=alt.Scale(type="log", domain=[low, high])),
        y=alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(type="log", domain=[low, high])),
        color=alt.Color(f"{color}:N", title=color.replace("_", " "), scale=scale,
                        legend=alt.Legend(orient="bottom", columns=4)),
        opacity=alt.condition(pick, alt.value(0.9), alt.value(0.08)),
        tooltip=[*tooltip, alt.Tooltip(f"{x}:Q", format=",.4g"), alt.Tooltip(f"{y}:Q", format=",.4g")],
    ).add_params(pick)
    diagonal = alt.Chart(pd.DataFrame({x: [low, high], y: [low, high]})).mark_line(
        color="#888", strokeDash=[4, 4], strokeWidth=1).encode(x=f"{x}:Q", y=f"{y}:Q")
    return (diagonal + points).properties(width=520, height=380)


def error_bars(df: pd.DataFrame, error: str, label: str, color: str, title: str,
               limit: float = 50.0, tooltip: Sequence[str] = ()) -> alt.LayerChart:
    """Horizontal bars of ``error`` (percent) per ``label``, sorted, on an axis clipped to
    ±``limit``; a bar past the limit is drawn to the edge with its true value written beside it,
    so one outlier does not flatten the rest. Raises KeyError for a missing column."""
    missing = [c for c in (error, label, color, *tooltip) if c not in df.columns]
    if missing:
        raise KeyError(f"columns not in the frame: {missing}")
    data = df.assign(_shown=df[error].clip(-limit, limit),
                     _note=[f"{v:+.0f} %" if abs(v) > limit else "" for v in df[error]])
    base = alt.Chart(data).encode(y=alt.Y(f"{label}:N", sort=alt.EncodingSortField(error, op="max", order="descending"),
                                          title=None))
    bars = base.mark_bar().encode(
        x=alt.X("_shown:Q", title=title, scale=alt.Scale(domain=[-limit, limit])),
        color=alt.Color(f"{color}:N", title=color.replace("_", " "),
                        legend=alt.Legend(orient="bottom")),
        tooltip=[label, alt.Tooltip(f"{error}:Q", format="+.1f"), *tooltip])
    notes = base.mark_text(align="right", dx=-4, color="white", fontWeight="bold").encode(
        x=alt.X("_shown:Q"), text="_note:N")
    return (bars + notes).properties(height=alt.Step(16))
