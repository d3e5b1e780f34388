"""The book's one table builder, and the number formatting every table and range in prose uses.

``table(df)`` renders a DataFrame for a reader: no pandas index (a *named* index becomes the
first column), column names in words with their unit (``kv_kib_per_token`` → "KV per token
(KiB)"), numbers with thousands separators and no ``128.000000``, ``-0`` or ``8.707e+04``.
Every table can be sorted by clicking a header; with ``filters`` it also gets a text box and one
drop-down per named column. Both are wired by ``book/_static/kvlib-tables.js``; without
JavaScript it is a plain table. Element ids are hashes of the content, so executing a chapter
twice gives byte-identical output. ``use_for_dataframes()`` makes a bare ``df`` at the end of a
cell render through the same builder.
"""
from __future__ import annotations

import hashlib
import html
import math
import re
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import pandas as pd

Formatter = str | Callable[[Any], str]

#: What a missing value shows.
MISSING = "—"
_EXPONENT = re.compile(r"\d[eE][+-]?\d")
_NEGATIVE_ZERO = re.compile(r"[^\d-]*-[0.,]*0[^\d]*")
_SIGNIFICANT = re.compile(r"\.(\d+)[gG]")
_FIXED = re.compile(r"\.\d+f(?=[^{}]*})")

# -- numbers as text -----------------------------------------------------------------------------


def _plain(value: float, significant: int) -> str:
    """``value`` to ``significant`` digits with thousands separators and no exponent."""
    if value == 0:
        return "0"
    decimals = max(0, significant - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _tidy(text: str, value: Any, fmt: str | None = None) -> str:
    """Undo what a format string does that a reader should not see: exponents and ``-0``."""
    if isinstance(value, Real) and not isinstance(value, bool) and _EXPONENT.search(text):
        match = _SIGNIFICANT.search(fmt or "")
        text = _plain(float(value), int(match.group(1)) if match else 6)
    if _NEGATIVE_ZERO.fullmatch(text):
        text = text.replace("-", "", 1)
    return text


def _decimals(values: pd.Series) -> int:
    """Decimals that show about three significant digits of a float column's largest value;
    none when every value is whole."""
    finite = values[values.map(lambda v: isinstance(v, Real) and math.isfinite(v))].astype(float)
    if finite.empty or (finite == finite.round()).all():
        return 0
    largest = float(finite.abs().max())
    return int(min(4, max(0, 2 - math.floor(math.log10(largest))))) if largest > 0 else 0


def _minus(text: str, value: Any) -> str:
    """A negative number's sign as the typographic minus, as in the prose: "−1.6", not "-1.6"."""
    negative = isinstance(value, Real) and not isinstance(value, bool) and value < 0
    return text.replace("-", "\u2212", 1) if negative else text


def _whole(value: Any) -> bool:
    """A finite number with nothing after the point (up to float noise): 128.0, 12031."""
    if not isinstance(value, Real) or isinstance(value, bool) or not math.isfinite(value):
        return False
    v = float(value)
    return abs(v - round(v)) <= 1e-9 * max(1.0, abs(v))


def number_text(value: Any, fmt: Formatter | None = None, decimals: int | None = None) -> str:
    """One cell as a reader sees it: ``fmt`` (a format string such as ``"{:,.2f}"`` or a
    function) when given, else thousands separators and ``decimals`` decimals for floats;
    never an exponent or a ``-0``; ``MISSING`` for None/NaN and blanks; yes/no for booleans.
    A whole number in a fixed-point format string prints as an integer ("128", not "128.000";
    "12,031 tokens", not "12,031.00"), except in a dollar format, where cents are the unit."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return MISSING
    if isinstance(fmt, str) and "$" not in fmt and _whole(value):
        fmt = _FIXED.sub(".0f", fmt if value else fmt.replace("{:+", "{:"))  # 0, not "+0"
    if fmt is not None:
        text = fmt(value) if callable(fmt) else fmt.format(value)
        return _minus(_tidy(text, value, None if callable(fmt) else fmt), value) or MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Integral):
        return _minus(f"{int(value):,}", value)
    if isinstance(value, Real):
        if not math.isfinite(value):
            return MISSING
        places = 2 if decimals is None else decimals
        return _minus(_tidy(f"{float(value):,.{places}f}", value), value)
    return str(value) or MISSING


def sig3(value: float) -> str:
    """A figure as the landing page's calculator writes it (``sig3`` in
    book/_static/kvlib-calculator.js), so the prose beside it reads the same: three significant
    digits with thousands separators, trailing zeros kept, whole numbers from 1,000 up —
    1,214 · 23.7 · 0.667 · 0.0190."""
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"not a finite number: {value!r}")
    if v == 0:
        return "0"
    if abs(v) >= 999.5:
        return f"{round(v):,}"
    v = float(f"{v:.3g}")
    return f"{v:,.{max(0, 2 - math.floor(math.log10(abs(v))))}f}"


def range_text(low: float, high: float, spec: str = ".1f") -> str:
    """"low–high" formatted with ``spec``, or a single figure when both ends read the same
    (4.66 and 4.74 at ``.1f`` are "4.7", not "4.7–4.7"); the ends in ascending order."""
    a, b = sorted((float(low), float(high)))
    first, second = _tidy(format(a, spec), a, "{:" + spec + "}"), _tidy(format(b, spec), b,
                                                                        "{:" + spec + "}")
    return first if first == second else f"{first}–{second}"


# -- column names in words ------------------------------------------------------------------------

#: Engine settings as a reader starts the engine with them (vLLM's flags), and the block size.
FLAGS = {"max_model_len": "--max-model-len", "max_num_seqs": "--max-num-seqs",
         "max_num_batched_tokens": "--max-num-batched-tokens",
         "gpu_memory_utilization": "--gpu-memory-utilization",
         "kv_cache_dtype": "--kv-cache-dtype", "block_size": "block size (tokens)"}
_UNITS = {"kib": "KiB", "mib": "MiB", "gib": "GiB", "tib": "TiB", "kb": "KB", "mb": "MB",
          "gb": "GB", "tb": "TB", "pct": "%", "ms": "ms", "bytes": "bytes", "tokens": "tokens"}
_WORDS = {"kv": "KV", "tp": "TP", "gpu": "GPU", "gpus": "GPUs", "mla": "MLA", "gqa": "GQA",
          "mha": "MHA", "mqa": "MQA", "ttft": "TTFT", "hbm": "HBM", "rho": "ρ", "n": "count",
          "abs": "absolute", "vs": "vs", "dollars": "$", "usd": "$", "moe": "MoE"}
_SIZE = re.compile(r"^\d+[kmb]$")


def column_label(name: Any) -> str:
    """A column name in words with its unit in brackets: ``kv_kib_per_token`` → "KV per token
    (KiB)", ``tokens_per_s`` → "tokens/s", ``error_pct`` → "error (%)". Names that already
    read as words (a space, a bracket, a capital) are kept; an engine setting reads as its flag
    (``FLAGS``: ``max_num_seqs`` → "--max-num-seqs")."""
    text = str(name)
    if text in FLAGS:
        return FLAGS[text]
    if text == "id" or not re.fullmatch(r"[a-z0-9_]+", text) or "_" not in text and (
            text not in _WORDS and text not in _UNITS):
        return text
    tokens = text.split("_")
    unit = ""
    # a unit after the first word ("state_mib", "kv_kib_per_token") goes in brackets; "bytes"
    # and "tokens" only when they end the name ("scale_bytes", "input_tokens")
    for i, token in enumerate(tokens):
        last = i == len(tokens) - 1
        if i > 0 and token in _UNITS and (last or token not in ("bytes", "tokens")):
            unit = _UNITS[token]
            del tokens[i]
            break
    words = []
    for i, token in enumerate(tokens):
        if token == "per" and i + 1 < len(tokens) and tokens[i + 1] == "s":
            words.append("/s")
        elif token == "s" and i > 0 and tokens[i - 1] == "per":
            continue
        elif token == "gpu" and i + 1 < len(tokens) and tokens[i + 1] == "hour":
            words.append("GPU-hour")
        elif token == "hour" and i > 0 and tokens[i - 1] == "gpu":
            continue
        elif _SIZE.match(token):
            words.append(token.upper())
        elif token.isdigit():
            words.append(f"{int(token):,}")
        else:
            words.append(_WORDS.get(token) or (_UNITS.get(token, token) if i == 0 else token))
    if words == ["count"] and unit:  # n_tokens, n_bytes: the unit is the name
        return unit
    label = " ".join(words).replace(" /s", "/s")
    return f"{label} ({unit})" if unit else label


# -- the table ------------------------------------------------------------------------------------


def _sort_key(value: Any) -> str:
    """What the browser sorts on: the raw number (repr) or the text; blanks sort last."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, Real) and not isinstance(value, bool):
        return repr(float(value))
    return str(value)


def _is_number_column(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


#: Tables of at most this many rows are shown whole, without the box's height limit.
SHORT_ROWS = 12


class Table:
    """A table for a reader (see the module docstring); ``df`` keeps the data as given."""

    def __init__(self, df: pd.DataFrame, formats: Mapping[Any, Formatter] | None = None,
                 filters: Sequence[str] = (), caption: str | None = None,
                 labels: Mapping[Any, str] | None = None, hide_index: bool | None = None,
                 wide_only: Sequence[str] = ()) -> None:
        self.df = df
        frame = _with_index(df, hide_index)
        missing = [c for c in [*filters, *(formats or {}), *(labels or {}), *wide_only]
                   if c not in frame.columns]
        if missing:
            raise KeyError(f"columns not in the table: {missing}")
        self.frame = frame
        self.formats = dict(formats or {})
        self.filters = list(filters)
        self.caption = caption
        self.wide_only = list(wide_only)
        prefix = (f"{column_label(frame.columns.name)} "
                  if frame.columns.name and not all(isinstance(c, str) for c in frame.columns)
                  else "")
        self.labels = {c: (labels or {}).get(c) or (prefix + str(c) if prefix and not isinstance(c, str)
                                                    else column_label(c))
                       for c in frame.columns}
        digest = hashlib.sha1(pd.util.hash_pandas_object(frame, index=False).values.tobytes())
        digest.update("|".join(map(str, frame.columns)).encode())
        self.table_id = "kvlib-table-" + digest.hexdigest()[:10]

    def _texts(self) -> dict[Any, list[str]]:
        """Every cell as the reader sees it, column by column."""
        frame = self.frame
        texts = {}
        for c in frame.columns:
            places = (_decimals(frame[c]) if _is_number_column(frame[c])
                      and pd.api.types.is_float_dtype(frame[c]) else None)
            texts[c] = [number_text(v, self.formats.get(c), places) for v in frame[c]]
        return texts

    def _controls(self, texts: Mapping[Any, list[str]]) -> str:
        if not self.filters:
            return ""
        parts = [f'<input type="search" class="kvlib-table-search" placeholder="filter rows…" '
                 f'aria-label="filter rows" data-table="{self.table_id}">']
        for column in self.filters:  # the options are the texts shown, which the script matches
            options = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>'
                              for v in sorted(set(texts[column])))
            parts.append(f'<label>{html.escape(self.labels[column])} <select class="kvlib-table-filter" '
                         f'data-table="{self.table_id}" data-column="{html.escape(str(column))}">'
                         f'<option value="">all</option>{options}</select></label>')
        parts.append(f'<span class="kvlib-table-count" data-table="{self.table_id}">'
                     f'{len(self.frame)} rows</span>')
        return '<div class="kvlib-table-controls">' + " ".join(parts) + "</div>"

    def _repr_html_(self) -> str:
        frame = self.frame
        texts = self._texts()
        numeric = {c for c in frame.columns if _is_number_column(frame[c])}
        # short text stays on one line (the box scrolls sideways); long text wraps
        long = {c for c in frame.columns if c not in numeric and max(map(len, texts[c]), default=0) > 30}

        def cls(c: Any) -> str:
            names = (["num"] if c in numeric else ["long"] if c in long else []) + (
                ["wide-only"] if c in self.wide_only else [])
            return f' class="{" ".join(names)}"' if names else ""

        head = "".join(f'<th scope="col"{cls(c)} data-column="{html.escape(str(c))}" '
                       f'title="click to sort">{html.escape(self.labels[c])}</th>'
                       for c in frame.columns)
        body = []
        for i, row in enumerate(frame.itertuples(index=False, name=None)):
            cells = "".join(
                f'<td{cls(c)} data-column="{html.escape(str(c))}" data-sort="{html.escape(_sort_key(v))}">'
                f"{html.escape(texts[c][i])}</td>" for c, v in zip(frame.columns, row))
            body.append(f"<tr>{cells}</tr>")
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        # on a phone the wide-only columns are left out (kvlib-tables.css), and the table says so
        note = ('<p class="kvlib-table-narrow-note">On a wider screen this table also shows: '
                + ", ".join(html.escape(self.labels[c]) for c in self.wide_only) + ".</p>"
                if self.wide_only else "")
        # a short table shows whole; a long one scrolls inside its box, header kept in view
        wrap = "kvlib-table-wrap" + (" kvlib-table-short" if len(frame) <= SHORT_ROWS else "")
        return (f'<div class="{wrap}">{self._controls(texts)}{note}'
                f'<table class="kvlib-table" id="{self.table_id}">{caption}'
                f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")

    def __repr__(self) -> str:
        return f"<table: {len(self.frame)} rows × {len(self.frame.columns)} columns>"


def _with_index(df: pd.DataFrame, hide_index: bool | None) -> pd.DataFrame:
    """The frame a reader sees: a named index becomes the first column(s), an unnamed one is
    dropped. ``hide_index`` True drops any index; False insists on showing it (it must be named)."""
    named = all(name is not None for name in df.index.names)
    if hide_index is False and not named:
        raise ValueError("the table's index has no name: name it (df.rename_axis('...')) so its "
                         "column has a header, or hide it")
    if hide_index or not named:
        return df.reset_index(drop=True)
    return df.reset_index()


def table(df: pd.DataFrame, formats: Mapping[Any, Formatter] | None = None,
          filters: Sequence[str] = (), caption: str | None = None,
          labels: Mapping[Any, str] | None = None, hide_index: bool | None = None,
          wide_only: Sequence[str] = ()) -> Table:
    """A table for a reader: sortable by any column, filterable by text and by each of
    ``filters`` when given. ``wide_only``: columns a phone leaves out (the table then says
    which), so the rest fit its screen without scrolling sideways.

    ``formats``: column → format string (``"{:,.2f}"``) or function (sorting uses the raw
    values); ``labels``: column → header, where ``column_label``'s words are not the right ones.
    ``hide_index``: None (default) shows a named index as the first column and drops an unnamed
    one; True drops it; False requires it to be named. Raises KeyError for a column not in ``df``.
    """
    return Table(df, formats, filters, caption, labels, hide_index, wide_only)


def use_for_dataframes() -> None:
    """Render a DataFrame or Series left at the end of a notebook cell through ``table``."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    formatter = shell.display_formatter.formatters["text/html"]
    formatter.for_type(pd.DataFrame, lambda df: table(df)._repr_html_())
    formatter.for_type(pd.Series, lambda s: table(s.to_frame())._repr_html_())
