"""Where the book's data lives, what every CSV in it must hold, and one slug resolver.

``data_dir()`` is ``$KVLIB_DATA`` when set, else the ``data/`` folder beside the package. A
relative ``$KVLIB_DATA`` is read against the directory the command was started from (``$PWD``,
which papermill's kernels inherit although they run inside ``chapters/``), so
``KVLIB_DATA=my-data`` means the same folder to the ``kvlib`` command and to the chapters.

``csv_path(name)`` checks every row of ``data/<name>`` against its schema below — types, ranges,
dates, a source per row — and returns the path; a failure is a ValueError naming the file, the
row (its line in the file) and the column. Columns a schema does not name are allowed (and not
checked), so new columns can be added at the end of a file.
"""
from __future__ import annotations

import csv
import datetime
import difflib
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

_PACKAGE_DATA = Path(__file__).resolve().parents[2] / "data"
#: A registry or table key: letters, digits, dots, dashes and underscores, not a path.
SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_DATE = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?")


def data_dir() -> Path:
    """The data folder: ``$KVLIB_DATA`` if set (relative to ``$PWD``), else ``data/``."""
    value = os.environ.get("KVLIB_DATA")
    if not value:
        return _PACKAGE_DATA
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    start = os.environ.get("PWD")
    base = Path(start) if start and os.path.isabs(start) and os.path.isdir(start) else Path.cwd()
    return base / path


def resolve_slug(kind: str, slug: object, known: Iterable[str], where: str) -> str:
    """``slug`` if it is one of ``known``; else KeyError naming close matches and ``where``.

    A value that is not a plain name (a path such as ``../x``, an empty or overlong string, a
    non-string) is a ValueError: slugs name files and rows, never paths.
    """
    if not isinstance(slug, str) or not SLUG.fullmatch(slug):
        shown = slug if not isinstance(slug, str) or len(slug) <= 60 else slug[:57] + "..."
        raise ValueError(f"{kind} must be a plain name of letters, digits, '.', '-' or '_' "
                         f"(at most 100 characters), got {shown!r}")
    names = list(known)
    if slug not in names:
        close = difflib.get_close_matches(slug, names, n=5, cutoff=0.5)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        raise KeyError(f"unknown {kind} {slug!r}{hint} (see {where})")
    return slug


# --- cell checks: each takes the cell text and returns an error, or None ------------------

Check = Callable[[str], "str | None"]


def _text(value: str) -> str | None:
    return None if value.strip() else "is empty"


def _slug(value: str) -> str | None:
    return None if SLUG.fullmatch(value) else f"{value!r} is not a plain name"


def _url(value: str) -> str | None:
    return None if re.match(r"https?://\S+", value.strip()) else f"{value!r} is not an http(s) URL"


def _date(value: str) -> str | None:
    m = _DATE.fullmatch(value.strip())
    if not m:
        return f"{value!r} is not a date (YYYY, YYYY-MM or YYYY-MM-DD)"
    year, month, day = (int(g) if g else None for g in m.groups())
    if not 1990 <= year <= 2100 or (month is not None and not 1 <= month <= 12):
        return f"{value!r} is not a real date"
    if day is not None:
        try:
            datetime.date(year, month or 1, day)
        except ValueError:  # 2026-02-30, 2025-02-29, day 00
            return f"{value!r} is not a real date"
    return None


#: Deepest nesting of arrays and objects kvlib reads from a JSON file or cell (the deepest in
#: the book's data, a config's ``rope_scaling`` inside ``text_config``, is 3).
MAX_JSON_DEPTH = 32
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in the JSON ``text`` (brackets inside strings do not
    count), without parsing it: linear in its length, no recursion."""
    depth = deepest = 0
    for bracket in re.findall(r"[\[\]{}]", _JSON_STRING.sub('""', text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def load_json(text: str, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON ``text`` parsed; a ValueError of one line naming ``what`` when it is not JSON
    or nests deeper than ``max_depth`` (which would otherwise end in a RecursionError)."""
    if (depth := json_depth(text)) > max_depth:
        raise ValueError(f"{what} nests arrays and objects {depth} deep; kvlib reads at most "
                         f"{max_depth}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                         f"{exc.colno})") from None
    except RecursionError:  # a bracket count the scan above missed: still one line
        raise ValueError(f"{what} nests too deeply to read") from None


def _json(value: str) -> str | None:
    try:
        load_json(value, "the cell")
    except ValueError as exc:
        return str(exc).removeprefix("the cell ")
    return None


def integer(minimum: int | None = 0) -> Check:
    """A whole number (digits, optional sign) >= ``minimum``."""
    def check(value: str) -> str | None:
        if not re.fullmatch(r"[+-]?\d+", value.strip()):
            return f"{value!r} is not an integer"
        if minimum is not None and int(value) < minimum:
            return f"{value} is below {minimum}"
        return None
    return check


def number(minimum: float | None = None, maximum: float | None = None,
           positive: bool = False) -> Check:
    """A finite decimal number within the bounds (``positive``: strictly above 0)."""
    def check(value: str) -> str | None:
        try:
            x = float(value)
        except ValueError:
            return f"{value!r} is not a number"
        if not math.isfinite(x):
            return f"{value!r} is not finite"
        if positive and x <= 0:
            return f"{value} is not positive"
        if minimum is not None and x < minimum:
            return f"{value} is below {minimum:g}"
        if maximum is not None and x > maximum:
            return f"{value} is above {maximum:g}"
        return None
    return check


def rate(minimum: float = 0.0) -> Check:
    """A finite number >= ``minimum``, or ``inf`` (a benchmark's "send everything at once")."""
    finite = number(minimum=minimum)

    def check(value: str) -> str | None:
        return None if value.strip() == "inf" else finite(value)
    return check


def choice(*options: str) -> Check:
    """One of ``options``."""
    def check(value: str) -> str | None:
        return None if value in options else f"{value!r} is not one of {', '.join(options)}"
    return check


def _runs(value: str) -> str | None:
    """Block-id runs of a trace row: space-separated ``a`` or ``a-b`` (a <= b)."""
    for run in value.split():
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", run)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            return f"{run!r} is not a block id or a run a-b"
    return None


TEXT, SLUG_CELL, URL, DATE, JSON = _text, _slug, _url, _date, _json


def band_problem(low: float, high: float) -> str | None:
    """Why relative errors ``low``/``high`` cannot bound a speed or a price (None when they can):
    a speed ``r·(1 + low)`` must stay above 0 and a cost ``c ÷ (1 + low)`` finite, so
    ``low > −1``; and ``high >= low``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"low {low} and high {high} must be finite"
    if low <= -1:
        return (f"low {low:g} must be above -1: the speed r·(1 + low) would be 0 or negative "
                "and the price infinite or negative")
    if high < low:
        return f"high {high:g} is below low {low:g}"
    return None


def _band_row(row: Mapping[str, str]) -> str | None:
    """An error-band row's ``low`` and ``high`` bound a positive speed (``band_problem``)."""
    try:
        low, high = float(row.get("low") or ""), float(row.get("high") or "")
    except ValueError:  # the cell checks report it
        return None
    return band_problem(low, high)


def _cell_number(row: Mapping[str, str], col: str) -> float | None:
    """The finite number in ``row[col]``; None when blank or not one (its cell check says so)."""
    try:
        x = float(row.get(col) or "")
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _relative_error(value: str) -> str | None:
    """A ratio of two positive quantities less 1 (predicted ÷ measured − 1): above −1."""
    if err := number()(value):
        return err
    if float(value) <= -1:
        return f"{value} is not above -1 (a ratio of positive times, less 1)"
    return None


def _ttft_band_row(row: Mapping[str, str]) -> str | None:
    """A TTFT band: ``low`` and ``high`` both filled or both empty, bounding the median."""
    filled = [c for c in ("low", "high") if (row.get(c) or "").strip()]
    if len(filled) == 1:
        other = "high" if filled == ["low"] else "low"
        return f"column {other}: is empty while {filled[0]} is filled (give both or neither)"
    low, high, median = (_cell_number(row, c) for c in ("low", "high", "median"))
    if low is None or high is None or median is None:
        return None
    if err := band_problem(low, high):
        return err
    if not low <= median <= high:
        return f"column median: {median:g} is outside low {low:g} to high {high:g}"
    return None


#: The GPU vendors kvlib knows (``data/gpus.csv``'s ``vendor``): each has its case bands
#: (``speed_case_bands.csv``) and engine rules; spelled exactly so.
GPU_VENDORS = ("NVIDIA", "AMD")
#: How far above the stated capacity a runtime or nvidia-smi total may lie (a share of it): the
#: totals lie within ~0.5% below N × 2³⁰ on HBM parts and at ~93.7% on GDDR parts with ECC.
MEMORY_ABOVE_STATED = 0.01
#: The least share of the stated capacity a runtime or nvidia-smi total may be: far less is a
#: total in other units (MiB, GB) than bytes.
MEMORY_BELOW_STATED = 0.5
_STATED_AS = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:GB|GiB)\b")


def _gpu_memory_row(row: Mapping[str, str]) -> str | None:
    """``memory_bytes_stated`` is the ``memory_stated_as`` figure read as GiB (when that starts
    with "<N>GB"), and the runtime and nvidia-smi totals lie near it: at most
    ``MEMORY_ABOVE_STATED`` above, at least ``MEMORY_BELOW_STATED`` of it."""
    stated = _cell_number(row, "memory_bytes_stated")
    if stated is None or stated <= 0:
        return None
    if m := _STATED_AS.match(row.get("memory_stated_as") or ""):
        expected = float(m.group(1)) * 2**30
        if stated != expected:
            return (f"column memory_bytes_stated: {row['memory_bytes_stated']} is not the "
                    f"{m.group(1)} GB of memory_stated_as read as {m.group(1)} × 2^30 = "
                    f"{expected:.0f} bytes")
    for col in ("memory_bytes_runtime", "memory_bytes_nvml"):
        total = _cell_number(row, col)
        if total is None or total <= 0:
            continue
        if total > stated * (1 + MEMORY_ABOVE_STATED):
            return (f"column {col}: {row[col]} bytes is more than "
                    f"{MEMORY_ABOVE_STATED:.0%} above memory_bytes_stated "
                    f"{row['memory_bytes_stated']}")
        if total < stated * MEMORY_BELOW_STATED:
            return (f"column {col}: {row[col]} bytes is below {MEMORY_BELOW_STATED:.0%} of "
                    f"memory_bytes_stated {row['memory_bytes_stated']} (is it in bytes?)")
    return None


def _gpu_link_row(row: Mapping[str, str]) -> str | None:
    """The GPU-to-GPU bandwidth and the part of it reaching one peer: both or neither, and
    the peer's part no larger than the whole."""
    link_col = "interconnect_bytes_per_s_per_direction"
    peer_col = "interconnect_peer_bytes_per_s_per_direction"
    filled = [c for c in (link_col, peer_col) if (row.get(c) or "").strip()]
    if len(filled) == 1:
        other = peer_col if filled == [link_col] else link_col
        return f"column {other}: is empty while {filled[0]} is filled (give both or neither)"
    link, peer = _cell_number(row, link_col), _cell_number(row, peer_col)
    if link is not None and peer is not None and peer > link:
        return f"column {peer_col}: {row[peer_col]} is above {link_col} {row[link_col]}"
    return None


def _price_source_row(row: Mapping[str, str]) -> str | None:
    """A filled ``source_url`` of a price is an http(s) URL; only an ``assumption`` row (a
    price a text assumes) may name that text instead."""
    value = (row.get("source_url") or "").strip()
    if not value or row.get("pricing") == "assumption":
        return None
    return None if (err := _url(value)) is None else f"column source_url: {err}"


def _not_above(col: str, bound: str, why: str) -> Callable[[Mapping[str, str]], "str | None"]:
    """A row check: ``col``, when it and ``bound`` hold numbers, is at most ``bound``."""
    def check(row: Mapping[str, str]) -> str | None:
        value, limit = _cell_number(row, col), _cell_number(row, bound)
        if value is None or limit is None or value <= limit:
            return None
        return f"column {col}: {row[col]} is above {bound} {row[bound]} ({why})"
    return check


_TP_IN_GPUS = _not_above("tp", "n_gpus", "a tensor-parallel group spans at most the GPUs used")


@dataclass(frozen=True)
class Schema:
    """What every row of one CSV must hold.

    required: column → check (a blank cell is an error); optional: column → check applied
    when the cell is not blank; unique: columns whose values may not repeat; source: the row
    must name its source in at least one of these columns (an http(s) URL, or for a
    free-text column any text); paired: (value column, source column) — a filled value needs
    its source; rows: checks of a whole row (cells that must agree), run on every row (a cell
    its own check refuses is skipped by them); an error that starts with ``column <name>:``
    is reported as that column's.
    """

    required: Mapping[str, Check] = field(default_factory=dict)
    optional: Mapping[str, Check] = field(default_factory=dict)
    unique: tuple[str, ...] = ()
    source: tuple[str, ...] = ()
    paired: tuple[tuple[str, str], ...] = ()
    rows: tuple[Callable[[Mapping[str, str]], "str | None"], ...] = ()

    def problems(self, header: list[str], rows: list[tuple[int, dict[str, str]]]) -> Iterable[str]:
        """Every problem of ``rows`` ((line in the file, row) pairs), as text."""
        missing = [c for c in self.required if c not in header]
        if missing:
            yield f"header lacks column(s) {', '.join(missing)}"
            return
        seen: dict[str, dict[str, int]] = {c: {} for c in self.unique}
        for line, row in rows:
            if None in row:  # more cells than the header has columns
                yield f"line {line}: {len(header) + len(row[None])} cells for {len(header)} columns"
                continue
            for col, check in self.required.items():
                value = row.get(col) or ""
                err = "is empty" if not value.strip() else check(value)
                if err:
                    yield f"line {line}, column {col}: {err}"
            for col, check in self.optional.items():
                value = row.get(col) or ""
                if value.strip() and (err := check(value)):
                    yield f"line {line}, column {col}: {err}"
            for col in self.unique:
                value = row.get(col) or ""
                if value in seen[col]:
                    yield f"line {line}, column {col}: {value!r} repeats line {seen[col][value]}"
                seen[col].setdefault(value, line)
            if self.source and not any((row.get(c) or "").strip() for c in self.source):
                yield f"line {line}: no source (fill {' or '.join(self.source)})"
            for value_col, source_col in self.paired:
                if (row.get(value_col) or "").strip() and not (row.get(source_col) or "").strip():
                    yield f"line {line}: {value_col} is filled but {source_col} is empty"
            for check_row in self.rows:
                if err := check_row(row):
                    yield f"line {line}{', ' if err.startswith('column ') else ': '}{err}"


_COUNT, _POSITIVE_COUNT, _POSITIVE = integer(0), integer(1), number(positive=True)
_NON_NEGATIVE, _RUNS = number(minimum=0), _runs
_CLAIMS = Schema(
    required={"id": SLUG_CELL, "claim": TEXT, "source": TEXT, "quantity": TEXT,
              "claimed": number(), "unit": TEXT, "computation": TEXT},
    optional={"inputs": JSON, "alt_inputs": JSON, "tolerance": _NON_NEGATIVE,
              "source_url": URL, "per_gpu_factor": _POSITIVE},
    unique=("id",), source=("source",))

#: The ``pricing`` values of ``data/prices.csv``: how an offer is sold. ``committed-1y`` and
#: ``committed-3y`` name the term; ``reserved`` is a reservation whose source states no term;
#: ``committed-capacity-block`` is an AWS EC2 Capacity Block (a short prepaid reservation);
#: ``marketplace`` is peer or community hosts; ``serverless`` is per-second, scale-to-zero
#: workers; ``assumption`` is a price a text assumes, no offer.
PRICINGS = ("on-demand", "spot", "marketplace", "committed-1y", "committed-3y", "reserved",
            "committed-capacity-block", "serverless", "assumption")

#: Every CSV under data/ (paths relative to it; ``claims/*.csv`` covers each claims file).
SCHEMAS: dict[str, Schema] = {
    "gpus.csv": Schema(
        required={"slug": SLUG_CELL, "name": TEXT, "vendor": choice(*GPU_VENDORS),
                  "memory_bytes_stated": _POSITIVE_COUNT, "memory_stated_as": TEXT,
                  "source_url": URL, "accessed": DATE},
        optional={"memory_bytes_runtime": _POSITIVE_COUNT, "memory_runtime_source": TEXT,
                  "memory_bytes_nvml": _POSITIVE_COUNT, "memory_nvml_source": TEXT,
                  "hbm_bytes_per_s": _POSITIVE, "bf16_dense_flops": _POSITIVE,
                  "fp8_dense_flops": _POSITIVE, "int8_dense_ops": _POSITIVE, "tdp_w": _POSITIVE,
                  "compute_units": _POSITIVE_COUNT, "compute_units_source": TEXT,
                  "interconnect_bytes_per_s_per_direction": _POSITIVE,
                  "interconnect_peer_bytes_per_s_per_direction": _POSITIVE,
                  "interconnect_source_url": URL},
        unique=("slug",), source=("source_url",),
        paired=(("memory_bytes_runtime", "memory_runtime_source"),
                ("compute_units", "compute_units_source"),
                ("memory_bytes_nvml", "memory_nvml_source"),
                ("interconnect_bytes_per_s_per_direction", "interconnect_source_url")),
        rows=(_gpu_memory_row, _gpu_link_row)),
    "prices.csv": Schema(
        required={"gpu": SLUG_CELL, "provider": TEXT, "offering": TEXT,
                  "pricing": choice(*PRICINGS),
                  "dollars_per_gpu_hour": _POSITIVE},
        optional={"date": DATE},
        source=("source_url", "notes"), rows=(_price_source_row,)),
    "engine_logs.csv": Schema(
        required={"id": SLUG_CELL, "engine": TEXT, "source_url": URL, "log_excerpt": TEXT,
                  "calibration": choice("fit", "validate", "weights", "history", "no")},
        optional={"n_gpus": _POSITIVE_COUNT, "tp": _POSITIVE_COUNT,
                  "gpu_memory_utilization": number(maximum=1, positive=True),
                  "max_model_len": _POSITIVE_COUNT, "max_num_batched_tokens": _POSITIVE_COUNT,
                  "model_weights_gib": _NON_NEGATIVE, "available_kv_gib": number(),
                  "kv_cache_tokens": _COUNT, "max_concurrency": _NON_NEGATIVE,
                  "max_concurrency_context": _POSITIVE_COUNT, "model_slug": SLUG_CELL,
                  "gpu_slug": SLUG_CELL, "max_num_seqs": _POSITIVE_COUNT,
                  "total_gpu_memory_gib": _POSITIVE, "non_torch_gib": _NON_NEGATIVE,
                  "activation_peak_gib": _NON_NEGATIVE},
        unique=("id",), source=("source_url",),
        rows=(_TP_IN_GPUS,)),
    "throughput.csv": Schema(
        required={"id": SLUG_CELL, "source": TEXT, "source_url": URL, "engine": TEXT,
                  "gpu": TEXT, "n_gpus": _POSITIVE_COUNT, "metric": TEXT, "value": _POSITIVE,
                  "unit": TEXT},
        optional={"tp": _POSITIVE_COUNT, "batch": _POSITIVE_COUNT,
                  "concurrency": _POSITIVE_COUNT, "input_tokens": _POSITIVE_COUNT,
                  "output_tokens": _POSITIVE_COUNT},
        unique=("id",), source=("source_url",),
        rows=(_TP_IN_GPUS,)),
    # the fresh validation set: never fitted, never used for a design choice (kvlib.fit.calibrate)
    "speed_fresh.csv": Schema(
        required={"id": SLUG_CELL, "source": TEXT, "source_url": URL, "engine": TEXT,
                  "gpu": TEXT, "n_gpus": _POSITIVE_COUNT, "tp": _POSITIVE_COUNT,
                  "metric": choice("time_per_output_token_s", "time_to_first_token_s",
                                   "batch_latency_s"),
                  "value": _POSITIVE, "unit": TEXT, "era": choice("modern"),
                  "benchmark_mode": choice("serving", "static"), "model_slug": SLUG_CELL,
                  "weight_format": TEXT, "accessed": DATE, "dated": DATE},
        optional={"batch": _POSITIVE_COUNT, "concurrency": _POSITIVE_COUNT,
                  "input_tokens": _POSITIVE_COUNT, "output_tokens": _POSITIVE_COUNT,
                  "ep": _POSITIVE_COUNT, "gpu_slug": SLUG_CELL,
                  "mean_input_tokens": _POSITIVE, "mean_output_tokens": _POSITIVE,
                  "dp_attention": choice("true", "false")},
        unique=("id",), source=("source_url",),
        rows=(_TP_IN_GPUS,)),
    "speculative.csv": Schema(
        required={"id": SLUG_CELL, "source": TEXT, "source_url": URL, "accessed": DATE,
                  "model_slug": SLUG_CELL,
                  "method": choice("mtp", "eagle", "eagle3", "ngram")},
        optional={"engine": TEXT, "gpu_slug": SLUG_CELL, "tp": _POSITIVE_COUNT,
                  "num_speculative_tokens": _POSITIVE_COUNT, "batch": _POSITIVE_COUNT,
                  "dataset": TEXT, "acceptance_rate": number(minimum=0, maximum=1),
                  "acceptance_rate_high": number(minimum=0, maximum=1),
                  "acceptance_length": number(minimum=1), "speedup": _POSITIVE,
                  "baseline": _POSITIVE, "speculative": _POSITIVE, "unit": TEXT, "notes": TEXT,
                  "draft_model": TEXT},
        unique=("id",), source=("source_url",),
        rows=(_not_above("acceptance_rate", "acceptance_rate_high", "the low end of a range"),)),
    "workloads.csv": Schema(
        required={"name": TEXT, "stat": TEXT, "value": _POSITIVE, "unit": TEXT,
                  "source_url": URL},
        source=("source_url",)),
    "vllm_memory_rules.csv": Schema(
        required={"model_runner": choice("v1", "v2"),
                  "default_for": choice("all", "the rest", "listed dense unquantized", "listed",
                                        "listed or dense", "fallback"),
                  "default_gpu_memory_utilization": number(maximum=1, positive=True),
                  "cuda_graphs_in_profile": choice("true", "false"),
                  "sampler_term": choice("fitted", "triton", "logits", "warmup"),
                  "sampler_state_in_profile": choice("true", "false"),
                  "activation_profile": TEXT, "tp_buffers": TEXT, "source_url": URL,
                  "accessed": DATE, "notes": TEXT},
        optional={"default_architectures": TEXT},
        source=("source_url",)),
    "vllm_runner_fallbacks.csv": Schema(
        required={"since_version": TEXT, "until_version": TEXT, "feature": TEXT,
                  "vllm_reason": TEXT, "source_function": TEXT, "source_url": URL,
                  "accessed": DATE, "notes": TEXT},
        optional={"speculative_method": choice("mtp", "eagle", "eagle3", "ngram"),
                  "min_pp": _POSITIVE_COUNT, "gpu_vendor": choice(*GPU_VENDORS),
                  "architectures": TEXT},
        source=("source_url",)),
    "engine_block_sizes.csv": Schema(
        required={"engine": TEXT, "version": TEXT, "parameter": TEXT,
                  "default_tokens": _POSITIVE_COUNT, "source_url": URL, "accessed": DATE},
        source=("source_url",)),
    "roofline_calibration.csv": Schema(
        required={"throughput_id": SLUG_CELL, "model_slug": SLUG_CELL, "gpu_slug": SLUG_CELL,
                  "weight_dtype": TEXT, "kv_dtype": TEXT,
                  "mode": choice("static", "itl", "itl_unknown_batch"),
                  "role": choice("fit", "validate", "none"), "note": TEXT},
        unique=("throughput_id",), source=("note",)),
    "validation/engine_logs.csv": Schema(
        required={"id": SLUG_CELL, "engine": TEXT, "model_slug": SLUG_CELL,
                  "gpu_slug": SLUG_CELL, "tp": _POSITIVE_COUNT, "block_size": _POSITIVE_COUNT,
                  "kv_cache_tokens": _POSITIVE_COUNT, "source_url": URL, "accessed": DATE,
                  "log_excerpt": TEXT},
        optional={"available_kv_gib": _POSITIVE},
        unique=("id",), source=("source_url",)),
    "validation/throughput.csv": Schema(
        required={"id": SLUG_CELL, "source": TEXT, "source_url": URL, "accessed": DATE,
                  "model_slug": SLUG_CELL, "gpu_slug": SLUG_CELL, "n_gpus": _POSITIVE_COUNT,
                  "tp": _POSITIVE_COUNT, "weight_dtype": TEXT, "kv_dtype": TEXT,
                  "batch": _POSITIVE_COUNT, "input_tokens": _POSITIVE_COUNT,
                  "output_tokens": _POSITIVE_COUNT, "metric": TEXT, "value": _POSITIVE,
                  "unit": TEXT, "mode": TEXT},
        unique=("id",), source=("source_url",),
        rows=(_TP_IN_GPUS,)),
    "validation/throughput_mapping.csv": Schema(
        required={"throughput_id": SLUG_CELL, "model_slug": SLUG_CELL, "gpu_slug": SLUG_CELL,
                  "weight_dtype": TEXT, "kv_dtype": TEXT, "mode": TEXT,
                  "batch": _POSITIVE_COUNT, "note": TEXT},
        unique=("throughput_id",), source=("note",)),
    "allreduce.csv": Schema(
        required={"id": SLUG_CELL, "library": TEXT, "engine": TEXT, "gpu": TEXT,
                  "n_gpus": _POSITIVE_COUNT, "message_bytes": _POSITIVE_COUNT,
                  "latency_us": _POSITIVE, "source": TEXT, "source_url": URL, "accessed": DATE,
                  "engine_version": TEXT, "cuda_graph": choice("yes", "no", "not stated"),
                  "gpu_slug": SLUG_CELL},
        unique=("id",), source=("source_url",)),
    "gemm_rates.csv": Schema(
        required={"gpu": SLUG_CELL, "engine": choice("vllm", "sglang", "trtllm"),
                  "engine_version": TEXT, "gemm_dtype": choice("bf16", "fp8", "fp8_block"),
                  "kernel": TEXT, "shapes": _POSITIVE_COUNT, "median_tflops": _POSITIVE,
                  "source_url": URL, "accessed": DATE, "notes": TEXT},
        unique=(), source=("source_url",)),
    "alltoall.csv": Schema(
        required={"id": SLUG_CELL, "library": TEXT, "gpu": TEXT, "gpu_slug": SLUG_CELL,
                  "interconnect": TEXT, "n_gpus": _POSITIVE_COUNT,
                  "hidden_size": _POSITIVE_COUNT, "tokens_per_gpu": _POSITIVE_COUNT,
                  "experts_per_token": _POSITIVE_COUNT, "n_experts": _POSITIVE_COUNT,
                  "dispatch_us": _POSITIVE, "combine_us": _POSITIVE, "source": TEXT,
                  "source_url": URL, "accessed": DATE},
        unique=("id",), source=("source_url",)),
    # written by kvlib.fit.calibrate.write_error_bands from throughput.csv (its sources per row)
    "speed_error_bands.csv": Schema(
        required={"tp": _COUNT, "scope": TEXT, "n": _POSITIVE_COUNT,
                  "median_abs_error": _NON_NEGATIVE, "low": number(), "high": number()},
        optional={"batch_range": TEXT}, rows=(_band_row,)),
    # written by kvlib.fit.calibrate.write_case_bands from throughput.csv (its sources per row)
    "speed_case_bands.csv": Schema(
        required={"vendor": choice(*GPU_VENDORS), "engine": TEXT, "family": TEXT, "tp": _COUNT,
                  "batch_range": TEXT, "basis": choice("held-out", "leave-one-source-out"),
                  "level": _COUNT, "held_out": _COUNT, "n": _POSITIVE_COUNT,
                  "median_abs_error": _NON_NEGATIVE, "low": number(), "high": number()},
        rows=(_band_row,)),
    "speed_case_measured.csv": Schema(
        required={"gpu": SLUG_CELL, "engine": TEXT, "family": TEXT, "n": _POSITIVE_COUNT}),
    # written by kvlib.serve.measured.write_latency_summary from serving_benchmarks.csv
    "serving_latency_summary.csv": Schema(
        required={"ttft_longer": _relative_error, "ttft_n": _POSITIVE_COUNT,
                  "tpot_error": _relative_error, "tpot_n": _POSITIVE_COUNT}),
    "speed_ttft_bands.csv": Schema(
        required={"batch_range": TEXT, "n": _POSITIVE_COUNT, "median": _relative_error},
        optional={"low": number(), "high": number()}, rows=(_ttft_band_row,)),
    # written by kvlib.fit.terms.write_term_selection from throughput.csv and speed_fresh.csv
    "speed_term_selection.csv": Schema(
        required={"terms": TEXT, "step": choice("engine", "vendor", "shared"),
                  "blocks": choice("kind", "common", "none"), "tie_kv": choice("True", "False"),
                  "constants": _POSITIVE_COUNT,
                  "random_split_n": _POSITIVE_COUNT, "random_split_median": _NON_NEGATIVE,
                  "loso_n": _POSITIVE_COUNT, "loso_median": _NON_NEGATIVE,
                  "loso_beyond_40": number(minimum=0, maximum=1),
                  "fresh_n": _POSITIVE_COUNT, "fresh_median": _NON_NEGATIVE,
                  "fresh_beyond_40": number(minimum=0, maximum=1),
                  "stages": choice("True", "False"),
                  "chosen": choice("True", "False")},
        optional={"requests": choice("engine", "vendor")}, unique=("terms",)),
    "serving_benchmarks.csv": Schema(
        required={"id": SLUG_CELL, "source_url": URL, "accessed": DATE,
                  "engine": choice("vllm", "sglang", "tensorrt-llm", "other"),
                  "dataset": TEXT, "num_prompts": _POSITIVE_COUNT,
                  "load_kind": choice("request_rate", "concurrency"), "notes": TEXT},
        optional={"model_slug": SLUG_CELL, "gpu_slug": SLUG_CELL, "tp": _POSITIVE_COUNT,
                  "pp": _POSITIVE_COUNT,
                  "max_num_seqs": _POSITIVE_COUNT, "max_num_batched_tokens": _POSITIVE_COUNT,
                  "input_tokens": _POSITIVE, "output_tokens": _POSITIVE,
                  "request_rate": rate(), "max_concurrency": _POSITIVE_COUNT,
                  "burstiness": rate(), "request_throughput": _POSITIVE,
                  "output_throughput": _POSITIVE,
                  **{f"{stat}_{metric}_ms": _NON_NEGATIVE
                     for metric in ("ttft", "tpot", "itl", "e2e")
                     for stat in ("mean", "median", "p99")}},
        unique=("id",), source=("source_url",),
        rows=tuple(_not_above(f"median_{metric}_ms", f"p99_{metric}_ms",
                                    "a median is at most the 99th percentile")
                         for metric in ("ttft", "tpot", "itl", "e2e"))),
    "cached_input_prices.csv": Schema(
        required={"provider": TEXT, "model": TEXT, "date": DATE,
                  "input_dollars_per_million": _POSITIVE,
                  "cached_input_dollars_per_million": _NON_NEGATIVE, "source_url": URL},
        optional={"cache_write_dollars_per_million": _POSITIVE},
        source=("source_url",),
        rows=(_not_above("cached_input_dollars_per_million", "input_dollars_per_million",
                          "a cached read would cost more than an uncached one"),)),
    "weight_checkpoints.csv": Schema(
        required={"model": SLUG_CELL, "weight_format": TEXT, "repository": TEXT,
                  "publisher": TEXT, "source_url": URL, "accessed": DATE},
        unique=("repository",), source=("source_url",)),
    "offload_links.csv": Schema(
        required={"link": TEXT, "tier": TEXT, "bytes_per_s": _POSITIVE, "source_url": URL},
        unique=("link",), source=("source_url",)),
    # a published trace: its source (URL, commit, licence) is data/traces/README.md
    "traces/*.csv": Schema(
        required={"timestamp_ms": _COUNT, "input_tokens": _POSITIVE_COUNT,
                  "output_tokens": _POSITIVE_COUNT},
        optional={"hash_id_runs": _RUNS}),
    # written by tests/test_crosscheck.py from transformers' cache objects (versions per row)
    "validation/crosscheck.csv": Schema(
        required={"slug": SLUG_CELL, "layers": _POSITIVE_COUNT, "n_tokens": _POSITIVE_COUNT,
                  "transformers_bytes": _COUNT, "kvlib_bytes": _COUNT, "expected_bytes": _COUNT,
                  "ratio": _NON_NEGATIVE, "explained": choice("True", "False"),
                  "torch": TEXT, "transformers": TEXT}),
    "claims/*.csv": _CLAIMS,
}


def schema_for(name: str) -> Schema:
    """The schema of ``data/<name>`` (KeyError for a CSV no schema covers)."""
    if name in SCHEMAS:
        return SCHEMAS[name]
    folder = name.rsplit("/", 1)[0] + "/*.csv" if "/" in name else None
    if folder in SCHEMAS:
        return SCHEMAS[folder]
    raise KeyError(f"no schema for data/{name}: add one to kvlib.core.data.SCHEMAS")


@lru_cache(maxsize=None)
def _checked(path: Path, name: str, mtime_ns: int, size: int) -> None:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            rows = [(reader.line_num, row) for row in reader]
            header = list(reader.fieldnames or [])
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a readable CSV: {exc}") from None
    problems = list(schema_for(name).problems(header, rows))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(f"{path}: {problems[0]}{more}")


def csv_path(name: str) -> Path:
    """``data_dir() / name`` after checking every row against its schema (see module doc).

    Raises ValueError naming the file, the line and the column of the first bad cell (and how
    many more there are); a missing or unreadable file is a ValueError too.
    """
    path = data_dir() / name
    try:
        stat = path.stat()
    except OSError:
        raise ValueError(f"{path} is missing (KVLIB_DATA={os.environ.get('KVLIB_DATA', '')!r})"
                         ) from None
    _checked(path, name, stat.st_mtime_ns, stat.st_size)
    return path
