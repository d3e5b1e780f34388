"""The landing page's calculator: a model, a checkpoint, a GPU and the settings people pass to
``vllm serve`` in; GPUs, requests in flight, speed, time to first token, dollars and the speed
model's error out — ``serving.Engine`` (the one serving pipeline) asked about every choice the
page offers, once, when the book is built. The page only looks rows up; dollars are linear in
the price per GPU-hour, so the grid holds them at $1 and the page multiplies by the price.

* Checkpoints (``weight_choices``, from ``kvlib.model.checkpoints``): the format a model is
  published in (its config's ``quantization_config``, else bf16) and each row of
  ``data/weight_checkpoints.csv`` naming a published checkpoint of the same architecture in
  another format (FP8, 4-bit AWQ), with its repository and source. A model *has* an fp8 or
  int4 checkpoint when, and only when, its config or such a row says so.
* Prices (``market_prices``): per GPU and kind of offer (on-demand, spot, marketplace,
  committed-1y, committed-3y, reserved, …), the median of the dated offers in
  ``data/prices.csv`` of that kind — each provider's newest quote counted once — with their
  number and range, naming them; the undated rows only when a GPU has no dated one of that
  kind, and then said so.
* The grid (``answer_grid``): one row per model × checkpoint × KV dtype × utilization × GPU ×
  max_model_len × request (input + output tokens), never past a model's maximum context; a
  case that does not fit says why and what would (``would_fit``).
* What to buy (``cheapest``): per model and request, the cheapest GPU × count whose per-user
  speed reaches a floor at market prices.
* More GPUs per replica (``tp_choices``): the grid's cases again on every larger TP degree.
* Speculative decoding (``speculative_columns``): for a model with a measured draft chain
  (``fit.speculative.measured_speculation``), each fitting vLLM case of its published
  checkpoint again with that draft, at the case's batch.
* Latency targets (``slo_grid``, ``at_target``, ``cheapest_at_slo``): the request rate one
  replica sustains within each of a few TTFT and per-user-speed targets (``serve.load``'s
  search, precomputed for a few cases), the fleet a peak rate needs, its $ per 1M tokens over
  a day of paid GPU-hours, and the cheapest GPU that meets a target.
"""
from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..core.checks import number
from ..fit import calibrate
from ..fit.speculative import measured_speculation
from ..engines.capacity import derived_max_model_len
from ..serve.cost import cost_per_million_tokens
from ..core.data import csv_path
from ..deployment import ENGINE_NAMES, Deployment, engine_refusal
from ..engines.capacity import NoKVMemory, pool_arithmetic
from ..engines.launch import launch_command
from ..engines.pools import kv_pool
from ..hardware.gpus import GPU, gpu_slugs, load_gpu, load_prices
# The checkpoints live in the model layer (``launch`` needs their repositories); named here too,
# where the landing page's readers and chapters look them up.
from ..model.checkpoints import WeightChoice, checkpoint_repository, weight_choices
from ..model.checkpoints import checkpoint_rows as checkpoint_rows
from ..model.checkpoints import published_weight_format as published_weight_format
from ..model.formats import weight_format as parse_weights
from ..model.model import Model
from ..serve.load import SLO, max_rates_at_slos
from ..serve.prefix_cost import input_cost_per_million
from ..model.registry import load_model
from ..serve.serving import TP_DEGREES, Engine, ServingPoint
from ..serve.speculative import draft_pools, speculative_at_point
from ..speed.parallel import parallel_decode
from ..speed.roofline import blocks
from .tables import Table, table

#: Kinds of offer the page lets a reader pick, from ``data/prices.csv``'s ``pricing`` column
#: (``kvlib.core.data.PRICINGS``). A 1-year and a 3-year commitment are kinds of their own, and
#: so is a reservation whose source states no term; Capacity Blocks are short-term
#: reservations, priced above on-demand, so they are not "committed"; serverless workers bill
#: per second and scale to zero, so they are not hourly rentals.
PRICING_KINDS: dict[str, str] = {
    "on-demand": "on-demand", "spot": "spot", "marketplace": "marketplace",
    "committed-1y": "committed-1y", "committed-3y": "committed-3y", "reserved": "reserved",
    "committed-capacity-block": "capacity block", "serverless": "serverless",
}

#: ``pricing`` values of ``data/prices.csv`` that are no offer (the article's own assumed
#: price): never part of a market price.
NOT_OFFERS = frozenset({"assumption"})

#: The prefix-cache hit rate of the page's input-price line (chapter 7's landing example, chapters/07_prefix_caching.md).
PREFIX_HIT_RATE = 0.6


def complete_gpus() -> list[str]:
    """GPUs of ``data/gpus.csv`` with everything the answer needs: a memory size, a sourced
    bandwidth and a sourced dense bf16 FLOP/s (sorted by slug)."""
    out = []
    for slug in gpu_slugs():
        gpu = load_gpu(slug)
        if gpu.hbm_bytes_per_s and gpu.bf16_dense_flops:
            out.append(slug)
    return out


def price_range(gpu: str) -> tuple[float, float, float] | None:
    """(lowest, median, highest) $/GPU-hour over every row of ``data/prices.csv`` for
    ``gpu`` (every kind, superseded and assumed prices included), or None when it has none."""
    prices = load_prices()
    rows = prices.loc[prices["gpu"] == gpu, "dollars_per_gpu_hour"].astype(float)
    if rows.empty:
        return None
    return float(rows.min()), float(rows.median()), float(rows.max())


def _newest_per_provider(rows: list[dict[str, Any]], gpu: str, kind: str) -> list[dict[str, Any]]:
    """Each provider's newest dated row of ``rows`` (a date given to the month or year sorts
    before the days in it); a ValueError when one provider has two rows on that date."""
    newest: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        kept = newest.get(row["provider"])
        if kept is None or row["date"] > kept[0]["date"]:
            newest[row["provider"]] = [row]
        elif row["date"] == kept[0]["date"]:
            raise ValueError(f"data/prices.csv: {row['provider']} has several {kind} rows for "
                             f"{gpu} dated {row['date']}; keep one offer per provider, kind and "
                             "date")
    return [kept[0] for kept in newest.values()]


def _offer_words(row: Mapping[str, Any]) -> str:
    """One offer for a reader: "Lambda, 8x NVIDIA H100 SXM (2026-09-20): $3.99"."""
    when = f"({row['date']})" if row["date"] else "(undated)"
    return f"{row['provider']}, {row['offering']} {when}: ${float(row['dollars_per_gpu_hour']):.2f}"


def market_prices() -> pd.DataFrame:
    """Per GPU and kind of offer (``PRICING_KINDS``): ``dollars_per_gpu_hour``, the median of
    that kind's offers in ``data/prices.csv`` — each provider's newest dated row, once (the
    undated rows when none is dated: ``dated`` False; rows of ``NOT_OFFERS`` never count);
    ``n`` offers used, ``low`` and ``high`` (their range), ``superseded`` (older rows of the
    same providers left out), ``rows`` naming the offers (provider, offering, date, price) and
    ``basis``, the price in words ("the median of 10 dated on-demand offers ($2.99–$12.29)",
    "1 dated on-demand offer"). One row per (gpu, kind) that has offers."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in load_prices().to_dict("records"):
        if row["pricing"] not in NOT_OFFERS:
            kind = PRICING_KINDS.get(row["pricing"], row["pricing"])
            groups.setdefault((row["gpu"], kind), []).append(row)
    out = []
    for (gpu, kind), rows in sorted(groups.items()):
        dated_rows = [r for r in rows if r["date"].strip()]
        used = _newest_per_provider(dated_rows, gpu, kind) if dated_rows else rows
        used = sorted(used, key=lambda r: float(r["dollars_per_gpu_hour"]))
        dollars = [float(r["dollars_per_gpu_hour"]) for r in used]
        named = "; ".join(_offer_words(r) for r in used)
        offers = f"{'dated' if dated_rows else 'undated'} {kind} offer{'s' * (len(used) > 1)}"
        basis = (f"1 {offers}" if len(used) == 1 else
                 f"the median of {len(used)} {offers} (${dollars[0]:.2f}–${dollars[-1]:.2f})")
        out.append({"gpu": gpu, "kind": kind, "dollars_per_gpu_hour": statistics.median(dollars),
                    "n": len(used), "dated": bool(dated_rows), "low": dollars[0],
                    "high": dollars[-1],
                    "superseded": len(dated_rows) - len(used) if dated_rows else 0,
                    "rows": named, "basis": basis})
    return pd.DataFrame(out, columns=["gpu", "kind", "dollars_per_gpu_hour", "n", "dated", "low",
                                      "high", "superseded", "rows", "basis"])


def market_price(gpu: str, kind: str = "on-demand") -> float | None:
    """The median $/GPU-hour of ``gpu``'s offers of ``kind`` (``market_prices``), or None."""
    table = market_prices()
    hit = table[(table["gpu"] == gpu) & (table["kind"] == kind)]
    return float(hit["dollars_per_gpu_hour"].iloc[0]) if len(hit) else None


def offers_text(n: int) -> str:
    """How many offers a market price is the median of, for a reader: "1 offer", "7 offers"."""
    return f"{n} offer{'s' * (n != 1)}"


def price_text(gpu: str, kind: str = "on-demand") -> str:
    """``gpu``'s market price (``market_prices``) as a table shows it, with how many offers it
    is the median of: "$3.99 (10 offers)". KeyError for a GPU with no offer of ``kind``."""
    table = market_prices()
    hit = table[(table["gpu"] == gpu) & (table["kind"] == kind)]
    if hit.empty:
        raise KeyError(f"no {kind} offer for {gpu} in prices.csv")
    return f"${hit['dollars_per_gpu_hour'].iloc[0]:.2f} ({offers_text(int(hit['n'].iloc[0]))})"


def max_model_lens(slug: str, lengths: Iterable[int]) -> list[int]:
    """The ``max_model_len`` values offered for ``slug``: those of ``lengths`` below the
    model's maximum context, and the maximum itself (vLLM's default when none is given).

    ValueError when the model's config states no maximum: then no length can be checked
    against it."""
    limit = derived_max_model_len(load_model(slug))
    if limit is None:
        raise ValueError(f"{slug}: its config states no maximum context, so the lengths "
                         "offered cannot be checked against it; leave it out of the grid")
    return sorted({int(n) for n in lengths if n < limit} | {limit})


def _speed_modelled(gpu: GPU | str, weight_format: str | Mapping[str, str],
                    engine: str = "vllm") -> str:
    """"" when kvlib's speed model covers ``weight_format`` on ``gpu`` under ``engine``, else
    why not: FP8 weights on a GPU without FP8 tensor cores are timed as vLLM serves them,
    weight-only (``roofline.matmul_flops``), and not for the other engines."""
    compute = parse_weights(weight_format).compute_dtype
    g = gpu if isinstance(gpu, GPU) else load_gpu(gpu)
    if compute == "fp8" and g.fp8_dense_flops is None and engine != "vllm":
        return (f"FP8 weights run on FP8 tensor cores, which the {g.name} lacks; kvlib times "
                f"them as vLLM serves them there, weight-only, not as {ENGINE_NAMES[engine]} "
                "does")
    return ""


def pool_modelled(deployment: Deployment) -> str:
    """"" when kvlib sizes ``deployment``'s pool (vLLM's always; SGLang's and TensorRT-LLM's
    not for every layer kind: their ``kv_pool`` says which), else why not."""
    if deployment.engine != "vllm":
        try:
            kv_pool(deployment)
        except NoKVMemory:
            pass  # sized, and too small on one GPU: the grid tries more
        except ValueError as refused:
            return str(refused)
    return ""


#: The engines the page offers, in menu order, and the memory fractions it offers each (None:
#: the engine's own default): vLLM at the chapter's utilizations, SGLang and TensorRT-LLM at
#: their defaults (SGLang's depends on the GPU's memory and the TP degree).
PAGE_ENGINES = ("vllm", "sglang", "tensorrt-llm")

#: Each engine's memory-fraction flag and what it is a share of, for a reader.
FRACTION_FLAGS = {
    "vllm": ("--gpu-memory-utilization", "of the GPU's whole memory"),
    "sglang": ("--mem-fraction-static", "of the memory free before the weights load, for "
               "weights and KV cache"),
    "tensorrt-llm": ("--kv_cache_free_gpu_memory_fraction", "of the memory free after the "
                     "weights and the profiling pass, for the KV cache"),
}


def _setting_order(value: Any) -> tuple[bool, str, float]:
    """Sorts a grid axis: numbers by value, then words ("default", labels) by name."""
    return (True, value, 0.0) if isinstance(value, str) else (False, "", float(value))


def fraction_key(value: Any) -> float | str:
    """A grid row's memory-fraction setting as a key: the value given, or "default" (NaN in
    the grid: the engine chose it; ``memory_fraction`` holds what it chose)."""
    value = float(value)
    return "default" if math.isnan(value) else value


def launch_repository(slug: str, choice: WeightChoice) -> str | None:
    """The Hugging Face repository a launch command of ``choice`` loads, or None where the
    registry records none (a forked record without ``source.repo``): never a guess."""
    try:
        return checkpoint_repository(slug, choice.weight_format)
    except ValueError:
        return None


def launch_text(deployment: Deployment, repository: str | None) -> str:
    """The shell lines that start ``deployment`` (``kvlib.launch_command``): any file the
    command reads written first (a here-document), then the command on one line; "" when no
    repository is recorded (``launch_repository``)."""
    if repository is None:
        return ""
    command = launch_command(deployment, repo=repository)
    files = "".join(f"cat > {path} <<'EOF'\n{text}EOF\n" for path, text in command.files)
    return files + command.text


#: The grid's speculative-decoding columns (``speculative_columns``), "" or NaN where none is
#: priced: the ``data/speculative.csv`` row of the model's measured draft chain, its method, k
#: and per-token acceptance rate α; why the case has none (else ""); the batch it decodes;
#: per-user tokens/s and $ per 10⁶ output tokens at $1 per GPU-hour with and without the draft
#: (decode steps only: ``serve.speculative.speculative_at_point``), the speed-up; the pool's
#: tokens with and without the draft; the command that starts it.
SPEC_COLUMNS = [
    "spec_source", "spec_method", "spec_k", "spec_acceptance", "spec_why_not", "spec_batch",
    "spec_per_user_tokens_per_s", "spec_base_per_user_tokens_per_s", "spec_speedup",
    "spec_output_cost", "spec_base_output_cost", "spec_pool_tokens", "spec_base_pool_tokens",
    "spec_launch",
]


def speculative_columns(slug: str, deployment: Deployment, point: ServingPoint,
                        choice: WeightChoice, repository: str | None,
                        drafts: dict[Deployment, Any] | None = None) -> dict[str, Any]:
    """The ``SPEC_COLUMNS`` of a grid case: ``deployment`` (at the case's GPU count and
    max_model_len) and its ``point``, with the measured draft chain of ``slug``
    (``measured_speculation``) when the case fits, runs under vLLM (the only engine whose
    draft kvlib sizes) and loads the published checkpoint (the acceptance was measured on
    it); else why not in ``spec_why_not``. No measured chain: every column empty. ``drafts``
    keeps each drafted deployment's pools and launch command for the next case of the same
    deployment (the grid passes one dict for all its cases)."""
    out: dict[str, Any] = dict.fromkeys(SPEC_COLUMNS, math.nan)
    out.update(spec_source="", spec_method="", spec_why_not="", spec_launch="")
    measured = measured_speculation(slug)
    if measured is None or not point.fits:
        return out
    spec = measured.speculative
    out.update(spec_source=measured.id, spec_method=spec.method,
               spec_k=spec.num_speculative_tokens, spec_acceptance=spec.acceptance)
    if deployment.engine != "vllm":
        out["spec_why_not"] = "kvlib sizes a draft's KV and weights in vLLM's pool only"
        return out
    if not choice.published:
        out["spec_why_not"] = ("its acceptance rate was measured with the published checkpoint, "
                               "not this one")
        return out
    drafted = deployment.with_(speculative=spec)
    drafts = {} if drafts is None else drafts
    if drafted not in drafts:
        try:
            drafts[drafted] = (draft_pools(drafted), launch_text(drafted, repository))
        except ValueError as refused:  # no memory left for the KV cache
            drafts[drafted] = f"with the draft's weights, {refused}"
    kept = drafts[drafted]
    try:
        if isinstance(kept, str):
            raise ValueError(kept)
        r = speculative_at_point(drafted, point, dollars_per_hour=float(point.n_gpus),
                                 pools=kept[0])
    except ValueError as refused:
        out["spec_why_not"] = str(refused)
        return out
    out.update(spec_batch=r.step.batch, spec_per_user_tokens_per_s=1 / r.tpot_s,
               spec_base_per_user_tokens_per_s=1 / r.base_tpot_s, spec_speedup=r.speedup,
               spec_output_cost=r.dollars_per_million,
               spec_base_output_cost=r.base_dollars_per_million,
               spec_pool_tokens=r.pool_tokens, spec_base_pool_tokens=r.base_pool_tokens,
               spec_launch=kept[1])
    return out


#: The grid's columns, in order (``answer_grid``). Costs are $ per 10⁶ tokens at $1 per
#: GPU-hour: multiply by the price.
GRID_COLUMNS = [
    "engine", "model", "model_name", "weights", "checkpoint", "kv_dtype",
    "gpu_memory_utilization", "memory_fraction",
    "gpu", "gpu_name", "max_model_len", "input_tokens", "output_tokens", "n_gpus", "limit",
    "why_not", "would_fit", "max_concurrency", "batch", "tokens_per_s", "tokens_per_s_low",
    "tokens_per_s_high", "per_user_tokens_per_s", "ttft_s", "tpot_s", "prefill_time_share",
    "bound", "kv_bytes_per_gpu", "output_cost", "input_cost", "output_cost_split",
    "band_scope", "band_n", "band_median", "band_low", "band_high", "band_words", "launch",
    *SPEC_COLUMNS,
]


def _row(point: ServingPoint, choice: WeightChoice, model: Model, limit: int) -> dict[str, Any]:
    row = {"engine": point.engine, "model": point.model, "model_name": point.model_name,
           "weights": choice.label, "checkpoint": choice.repository, "kv_dtype": point.kv_dtype,
           "memory_fraction": point.gpu_memory_utilization, "gpu": point.gpu,
           "gpu_name": point.gpu_name, "max_model_len": point.max_model_len,
           "input_tokens": point.input_tokens, "output_tokens": point.output_tokens,
           "n_gpus": point.n_gpus, "limit": point.limit, "why_not": _why_not(point),
           "would_fit": "", "max_concurrency": point.max_concurrency, "batch": point.batch,
           "per_user_tokens_per_s": point.per_user_tokens_per_s, "ttft_s": point.ttft_s,
           "tpot_s": point.tpot_s, "prefill_time_share": point.prefill_time_share,
           "bound": point.bound, "kv_bytes_per_gpu": point.kv_bytes_per_gpu, "launch": ""}
    # past the largest batch with a band of its own, the case's band at that batch (its own
    # borrows a wider, kinder scope): the figures are an extrapolation
    band = point.band if point.batch <= limit else calibrate.case_band(
        model, point.gpu, point.engine, point.n_gpus, limit)
    if point.fits:
        low, high = band.speed_range(point.tokens_per_s)
        cost_in, cost_out_split = point.dollars_per_million_split(1.0)
        row.update(tokens_per_s=point.tokens_per_s, tokens_per_s_low=low, tokens_per_s_high=high,
                   output_cost=point.dollars_per_million(1.0), input_cost=cost_in,
                   output_cost_split=cost_out_split, band_scope=band.scope, band_n=band.n,
                   band_median=band.median_abs_error, band_low=band.low, band_high=band.high,
                   band_words=band.words)
    else:
        row.update(dict.fromkeys(("tokens_per_s", "tokens_per_s_low", "tokens_per_s_high",
                                  "output_cost", "input_cost", "output_cost_split",
                                  "band_median", "band_low", "band_high"), math.nan),
                   band_scope="", band_n=0, band_words="")
    return row


def _why_not(point: ServingPoint) -> str:
    """``point.why_not()``, saying so when the GPU is offered as one only (no GPU-to-GPU link
    on file, so no tensor-parallel group is tried)."""
    why = point.why_not()
    if why and point.tried_gpus == 1 and load_gpu(point.gpu).link_bytes_per_s is None:
        why += (f"; the {point.gpu_name} is offered as a single GPU (data/gpus.csv names no "
                "GPU-to-GPU link for it)")
    return why


def answer_grid(models: Sequence[str], gpus: Sequence[str], *, lengths: Sequence[int],
                requests: Sequence[tuple[int, int]],
                utilizations: Sequence[float | None] = (0.9,),
                kv_dtypes: Sequence[str] = ("bf16",), engine: str = "vllm") -> pd.DataFrame:
    """The landing page's grid (``GRID_COLUMNS``) for one ``engine``: one row per model ×
    checkpoint (``weight_choices``) × KV dtype × memory fraction × GPU × max_model_len
    (``max_model_lens`` of ``lengths``) × request (input, output tokens) that fits within that
    max_model_len.

    Each row is ``serving.Engine(...).point(input, output, max_model_len=...)`` (its error band
    the case's, ``calibrate.case_band``, at ``banded_batch_limit`` when its batch is larger) with
    the GPU count chosen as the engine needs it (the fewest of ``TP_DEGREES`` that hold one
    request of max_model_len); a row that does not fit carries ``limit``, ``why_not`` and
    ``would_fit`` (another setting, checkpoint or GPU of the grid that holds it). ``utilizations``
    are the engine's memory fraction (vLLM's ``--gpu-memory-utilization``, SGLang's
    ``--mem-fraction-static``, TensorRT-LLM's ``free_gpu_memory_fraction``; None: its default,
    NaN in column ``gpu_memory_utilization``); ``memory_fraction`` is the one it started with.
    ``launch``: the command that starts the row's deployment (``launch_text``). A checkpoint
    whose speed kvlib cannot model on a GPU (FP8 weights without FP8 tensor cores) gets limit
    "format"; a GPU the engine does not run on, limit "engine". Costs are at $1 per GPU-hour.
    ValueError for an empty axis or a model with no known maximum context.
    """
    for name, values in (("models", models), ("gpus", gpus), ("lengths", lengths),
                         ("requests", requests), ("utilizations", utilizations),
                         ("kv_dtypes", kv_dtypes)):
        if not list(values):
            raise ValueError(f"answer_grid needs at least one of {name}")
    rows = []
    drafts: dict[Deployment, Any] = {}
    limit = calibrate.banded_batch_limit()
    loaded = {g: load_gpu(g) for g in gpus}
    runs = {g: engine_refusal(engine, loaded[g]) for g in gpus}
    for slug in models:
        lens = max_model_lens(slug, lengths)
        model = load_model(slug)
        for choice in weight_choices(slug):
            repository = launch_repository(slug, choice)
            speed = {g: _speed_modelled(loaded[g], choice.weight_format, engine) for g in gpus}
            for kv in kv_dtypes:
                for util in utilizations:
                    setting = math.nan if util is None else float(util)
                    for gpu in gpus:
                        g = loaded[gpu]
                        refused = runs[gpu]
                        if not refused:
                            d = Deployment(model, g, weights=choice.weight_format, kv=kv,
                                           gpu_memory_utilization=util, engine=engine)
                            refused = pool_modelled(d)
                        unmodelled = refused or speed[gpu]
                        eng = None if unmodelled else Engine(d, tp_degrees=TP_DEGREES)
                        commands: dict[tuple[int, int], str] = {}
                        for length in lens:
                            for i, o in requests:
                                if i + o > length:
                                    continue
                                if eng is None:
                                    rows.append(_unmodelled_row(
                                        slug, model.name, choice, kv, setting, engine, g,
                                        length, i, o, unmodelled, "engine" if refused
                                        else "format"))
                                    continue
                                point = eng.point(i, o, max_model_len=length)
                                row = _row(point, choice, model, limit)
                                row.update(model=slug, gpu_memory_utilization=setting)
                                at = eng.deployment.with_(tp=max(point.n_gpus, 1),
                                                          max_model_len=length)
                                if point.fits:
                                    key = (point.n_gpus, length)
                                    if key not in commands:
                                        commands[key] = launch_text(at, repository)
                                    row["launch"] = commands[key]
                                row.update(speculative_columns(slug, at, point, choice,
                                                               repository, drafts))
                                rows.append(row)
    grid = pd.DataFrame(rows, columns=GRID_COLUMNS)
    grid["would_fit"] = would_fit(grid)
    return grid


def _unmodelled_row(slug: str, name: str, choice: WeightChoice, kv_dtype: str, setting: float,
                    engine: str, g: GPU, length: int, input_tokens: int, output_tokens: int,
                    why: str, limit: str) -> dict[str, Any]:
    row = dict.fromkeys(GRID_COLUMNS, math.nan)
    row.update(engine=engine, model=slug, model_name=name, weights=choice.label,
               checkpoint=choice.repository, kv_dtype=kv_dtype,
               gpu_memory_utilization=setting, gpu=g.slug,
               gpu_name=g.name, max_model_len=length, input_tokens=input_tokens,
               output_tokens=output_tokens, n_gpus=0, limit=limit, why_not=why,
               would_fit="", max_concurrency=0.0, batch=0, bound="", kv_bytes_per_gpu=0,
               band_scope="", band_n=0, band_words="", launch="", spec_source="",
               spec_method="", spec_why_not="", spec_launch="")
    return row


#: The settings ``would_fit`` tries changing, one at a time, in this order.
_SETTINGS = ("weights", "kv_dtype", "gpu_memory_utilization", "max_model_len")


def would_fit(grid: pd.DataFrame) -> pd.Series:
    """For each row that does not fit, what would, in words: the same case with one setting
    changed (another checkpoint, KV dtype, utilization or a shorter max_model_len that still
    holds the request) on the same GPU, and every GPU of the grid that holds it unchanged
    (fewest GPUs first); "" for rows that fit."""
    if "engine" in grid and grid["engine"].nunique() > 1:
        raise ValueError("would_fit compares the cases of one engine: pass one engine's grid")
    keys = ["model", "weights", "kv_dtype", "gpu_memory_utilization", "gpu", "max_model_len",
            "input_tokens", "output_tokens"]
    frame = grid[keys].assign(gpu_memory_utilization=grid["gpu_memory_utilization"].map(
        fraction_key))
    fits = {tuple(k): int(n) for k, n in zip(frame.itertuples(index=False), grid["n_gpus"])}
    names = dict(zip(grid["gpu"], grid["gpu_name"]))
    options = {k: sorted(set(frame[k]), key=_setting_order) for k in _SETTINGS}
    gpus = sorted(set(grid["gpu"]))
    out = []
    for row in frame.itertuples(index=False):
        key = tuple(row)
        if fits[key] > 0:
            out.append("")
            continue
        found = []
        for setting in _SETTINGS:
            pos = keys.index(setting)
            for value in options[setting]:
                if value == key[pos] or (setting == "max_model_len" and value > key[pos]):
                    continue
                n = fits.get(key[:pos] + (value,) + key[pos + 1:], 0)
                if n > 0:
                    found.append(f"{_setting_words(setting, value)} ({n} GPU{'s' * (n > 1)})")
        gpu_pos = keys.index("gpu")
        elsewhere = [(fits.get(key[:gpu_pos] + (g,) + key[gpu_pos + 1:], 0), names[g])
                     for g in gpus]
        found += [f"{n} × {name}" for n, name in sorted(e for e in elsewhere if e[0] > 0)]
        out.append("would fit with " + _or(found) if found else
                   "fits none of the settings and GPUs on this page")
    return pd.Series(out, index=grid.index, dtype=str)


def engine_alternatives(grid: pd.DataFrame) -> pd.DataFrame:
    """``grid`` (several engines' grids, ``answer_grid``) with each case that does not fit under
    one engine naming the other engines it fits under, on the same GPU and settings but the
    memory fraction (fewest GPUs first): "under vLLM it fits on 2 GPUs (choose it under
    Engine)", after what ``would_fit`` found under its own engine."""
    keys = ["model", "weights", "kv_dtype", "gpu", "max_model_len", "input_tokens",
            "output_tokens"]
    fits: dict[tuple, dict[str, int]] = {}
    for key, engine, n in zip(grid[keys].itertuples(index=False, name=None), grid["engine"],
                              grid["n_gpus"]):
        if n > 0:
            best = fits.setdefault(key, {})
            best[engine] = min(best.get(engine, int(n)), int(n))
    out = grid.copy()
    words = []
    for key, engine, n, own in zip(grid[keys].itertuples(index=False, name=None),
                                   grid["engine"], grid["n_gpus"], grid["would_fit"]):
        other = {e: k for e, k in fits.get(key, {}).items() if e != engine}
        if n > 0 or not other:
            words.append(own)
            continue
        also = _or([f"under {ENGINE_NAMES[e]} it fits on {k} GPU{'s' * (k > 1)}"
                    for e, k in sorted(other.items(), key=lambda item: (item[1], item[0]))])
        lead = "" if own.startswith("fits none") or not own else own + "; "
        words.append(f"{lead}{also} (choose it under Engine)")
    out["would_fit"] = words
    return out


def _setting_words(setting: str, value: Any) -> str:
    if setting == "weights":
        return f"{value} weights"
    if setting == "kv_dtype":
        return f"an {value} KV cache"
    if setting == "gpu_memory_utilization":
        return f"--gpu-memory-utilization {value:g}"  # vLLM's: the others run at their default
    return f"--max-model-len {int(value):,}"


def _or(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def prefix_input_costs(grid: pd.DataFrame, hit_rate: float = PREFIX_HIT_RATE) -> pd.DataFrame:
    """Chapter 7's input price (chapters/07_prefix_caching.md) for every fitting case of the grid: $ per 10⁶ input tokens at
    $1 per GPU-hour when each prompt is prefilled alone (``prefix_cost.input_cost_per_million``)
    with no prefix-cache hits (``cold``) and with ``hit_rate`` of every prompt cached
    (``cached``). One row per engine, model, checkpoint, KV dtype, GPU, GPU count and prompt
    length — what the price depends on."""
    keys = ["engine", "model", "weights", "kv_dtype", "gpu", "n_gpus", "input_tokens"]
    cases = grid[grid["n_gpus"] > 0][keys].drop_duplicates()
    formats = {(m, c.label): c.weight_format for m in cases["model"].unique()
               for c in weight_choices(m)}
    models = {m: load_model(m) for m in cases["model"].unique()}
    gpus = {g: load_gpu(g) for g in cases["gpu"].unique()}
    rows = []
    for r in cases.itertuples(index=False):
        d = Deployment(models[r.model], gpus[r.gpu], tp=int(r.n_gpus), kv=r.kv_dtype,
                       weights=formats[(r.model, r.weights)], engine=r.engine)
        kw = dict(prompt_tokens=int(r.input_tokens), dollars_per_gpu_hour=1.0)
        rows.append({**r._asdict(), "cold": input_cost_per_million(d, **kw),
                     "cached": input_cost_per_million(d, hit_rate=hit_rate, **kw)})
    return pd.DataFrame(rows, columns=[*keys, "cold", "cached"])


def band_side(low: float, high: float) -> str:
    """Where an error band (``calibrate.ErrorBand`` low / high, predicted ÷ measured − 1 of time
    per token, 10th and 90th percentile) lies against the model's figure: "optimistic" when
    nine in ten held-out cases ran slower than predicted (high < 0), "pessimistic" when nine in
    ten ran faster (low > 0), else "" (the band holds the figure)."""
    return "optimistic" if high < 0 else "pessimistic" if low > 0 else ""


def cheapest(grid: pd.DataFrame, *, speed_floor: float, kind: str = "on-demand",
             gpu_memory_utilization: float = 0.9, output_tokens: int = 1024,
             dated_only: bool = True) -> pd.DataFrame:
    """What to buy: per model and prompt length of ``grid`` (requests of ``output_tokens``
    generated tokens), the deployment with the lowest $ per 10⁶ output tokens at market price
    (``market_price`` of ``kind``; GPUs without one are left out, and with ``dated_only`` those
    whose offers are all undated) whose every user gets at least ``speed_floor`` tokens/s —
    both read at the slow end of the speed model's error band (``slow_end``), the evidence the
    book trusts, not at the model's own figure.

    Candidates are the grid's rows at ``gpu_memory_utilization`` that fit, with vLLM started at
    the shortest max_model_len holding the request: every GPU, checkpoint and KV dtype, on the
    fewest GPUs that hold the model. A deployment too slow per user with as many requests in
    flight as its pool holds is asked again with fewer (vLLM's ``--max-num-seqs``): the
    largest power of two below that batch that reaches the floor. Candidates are tried from
    the lowest bound on their price (the full-batch price at the most favourable slow end of
    any band), and the search stops when that bound exceeds the best found. Columns: model,
    model_name, input_tokens, output_tokens, gpu, gpu_name, n_gpus, weights, checkpoint,
    kv_dtype, max_model_len, batch, capped (the batch was lowered), extrapolated (the batch
    exceeds ``banded_batch_limit``), per_user_tokens_per_s, tokens_per_s (the model's
    figures), slow_end (their factor), per_user_slow, output_cost_slow ($ per 10⁶ at the slow
    end, the ranking), output_cost (at the model's figure), dollars_per_gpu_hour; a prompt
    length nothing serves that fast has n_gpus 0.
    """
    speed_floor = number("speed_floor (tokens/s)", speed_floor, positive=True)
    offers = market_prices()
    offers = offers[(offers["kind"] == kind) & (offers["dated"] | (not dated_only))]
    prices = dict(zip(offers["gpu"], offers["dollars_per_gpu_hour"]))
    limit = calibrate.banded_batch_limit()
    best_factor = 1 + float(pd.read_csv(csv_path(calibrate.CASE_BANDS_FILE))["low"].max())
    asked = grid[grid["output_tokens"] == output_tokens]
    rows = asked[(asked["n_gpus"] > 0)
                 & (asked["gpu_memory_utilization"] == gpu_memory_utilization)
                 & asked["gpu"].isin(list(prices))]
    keys = ["model", "weights", "kv_dtype", "gpu", "input_tokens"]
    rows = rows.sort_values("max_model_len").drop_duplicates(keys)  # the shortest that holds it
    rows = rows.assign(bound=rows["output_cost"] * rows["gpu"].map(prices) / best_factor)
    formats = {(m, c.label): c.weight_format for m in rows["model"].unique()
               for c in weight_choices(m)}
    models = {m: load_model(m) for m in rows["model"].unique()}
    engines: dict[tuple[str, str, str, str], Engine] = {}
    out = []
    for (slug, prompt), name in asked.groupby(["model", "input_tokens"], sort=False)[
            "model_name"].first().items():
        group = rows[(rows["model"] == slug) & (rows["input_tokens"] == prompt)]
        best: dict[str, Any] | None = None
        for r in group.sort_values("bound").itertuples(index=False):
            if best is not None and r.bound >= best["output_cost_slow"]:
                break  # no batch of this or a later candidate can be cheaper
            n = int(r.n_gpus)
            batch, user, tps = int(r.batch), r.per_user_tokens_per_s, r.tokens_per_s
            if user * calibrate.slow_end(slug, r.gpu, "vllm", n, batch, limit) < speed_floor:
                key = (slug, r.weights, r.kv_dtype, r.gpu)
                if key not in engines:
                    engines[key] = Engine(Deployment(
                        models[slug], r.gpu, weights=formats[(slug, r.weights)], kv=r.kv_dtype,
                        gpu_memory_utilization=gpu_memory_utilization))
                found = _largest_batch(engines[key], prompt, output_tokens, int(r.max_model_len),
                                       batch, speed_floor, limit)
                if found is None:
                    continue
                batch, user, tps = found
            factor = calibrate.slow_end(slug, r.gpu, "vllm", n, batch, limit)
            cost = cost_per_million_tokens(prices[r.gpu] * n, tps * factor)
            if best is None or cost < best["output_cost_slow"]:
                best = {"gpu": r.gpu, "gpu_name": r.gpu_name, "n_gpus": n,
                        "weights": r.weights, "checkpoint": r.checkpoint,
                        "kv_dtype": r.kv_dtype, "max_model_len": int(r.max_model_len),
                        "batch": batch, "capped": batch < r.batch, "extrapolated": batch > limit,
                        "per_user_tokens_per_s": user, "tokens_per_s": tps, "slow_end": factor,
                        "per_user_slow": user * factor, "output_cost_slow": cost,
                        "output_cost": cost_per_million_tokens(prices[r.gpu] * n, tps),
                        "dollars_per_gpu_hour": prices[r.gpu]}
        out.append({"model": slug, "model_name": name,
                    "input_tokens": int(prompt), "output_tokens": output_tokens,
                    **(best or {"n_gpus": 0})})
    return pd.DataFrame(out)


#: The "What should I buy" table's columns, in order: the deciding one first, so that a phone
#: (390 px) shows it without scrolling sideways; then what identifies the case and the answer.
BUY_COLUMNS = {"output_cost_slow": "$ per 1M output tokens", "deployment": "GPUs, weights · KV cache",
               "model_name": "model", "input_tokens": "prompt (tokens)",
               "requests": "requests in flight", "per_user_slow": "tokens/s per user",
               "gpu_price": "$ per GPU-hour (offers)"}


def short_gpu_name(name: str) -> str:
    """A GPU's name without vendor or SXM form factor, and without the memory of an SXM part:
    "NVIDIA H100 SXM5 80GB" → "H100"; a part sold in two memory sizes keeps its own, "NVIDIA
    A100 80GB (SXM4)" → "A100 80GB"."""
    short = name.split(" (", 1)[0].removeprefix("NVIDIA ").removeprefix("AMD Instinct ")
    return re.sub(r" SXM\d? \d+GB$| Grace Hopper Superchip$", "", short)


def buy_table(buy: pd.DataFrame, kind: str = "on-demand") -> Table:
    """The served rows of ``cheapest`` (priced at ``kind``) as a reader's table
    (``BUY_COLUMNS``, cost first): the deployment in words ("1 × H100, bf16 · fp8"), the
    requests in flight marked * where the batch was capped and † where it is extrapolated past
    ``banded_batch_limit``, and the GPU-hour price with the number of offers it is the median
    of ("$6.69 (7 offers)", ``market_prices``); filterable by model."""
    served = buy[buy["n_gpus"] > 0]
    offers = market_prices()
    offers = offers[offers["kind"] == kind].set_index("gpu")
    for gpu, price in zip(served["gpu"], served["dollars_per_gpu_hour"]):
        if gpu not in offers.index or offers.loc[gpu, "dollars_per_gpu_hour"] != price:
            raise ValueError(f"the what-to-buy row for {gpu} is not priced at its {kind} market "
                             "price: pass the kind cheapest() was asked for")
    shown = served.assign(
        gpu_price=[price_text(g, kind) for g in served["gpu"]],
        model_name=served["model_name"].str.removeprefix("NVIDIA-"),
        deployment=[f"{n} × {short_gpu_name(g)}, {w.removesuffix(' experts')} · {k}"  # gpt-oss
                    for n, g, w, k in zip(served["n_gpus"], served["gpu_name"],
                                          served["weights"], served["kv_dtype"])],
        requests=[f"{int(b):,}" + ("*" if c else "") + ("†" if x else "")
                  for b, c, x in zip(served["batch"], served["capped"], served["extrapolated"])])
    shown = shown[list(BUY_COLUMNS)].rename(columns=BUY_COLUMNS)
    # on a phone: the deciding column, the case and its speed; the batch and the price basis
    # on wider screens (and in the calculator)
    return table(shown, {"prompt (tokens)": "{:,}", "tokens/s per user": "{:.1f}",
                         "$ per 1M output tokens": "${:,.3f}"}, filters=["model"],
                 wide_only=[BUY_COLUMNS["requests"], BUY_COLUMNS["gpu_price"]])


def _largest_batch(engine: Engine, prompt: int, output: int, max_model_len: int, held: int,
                   floor: float, limit: int) -> tuple[int, float, float] | None:
    """(batch, per-user tokens/s, tokens/s) at the largest power of two below ``held`` whose
    users get ``floor`` tokens/s at the slow end of the band (``slow_end``, which is not
    monotone in the batch: every power is tried, largest first), or None."""
    for batch in sorted((2 ** k for k in range(held.bit_length()) if 2 ** k < held),
                        reverse=True):
        p = engine.point(prompt, output, max_model_len=max_model_len, batch=batch)
        d = engine.deployment
        if p.per_user_tokens_per_s * calibrate.slow_end(d.model, d.gpu, d.engine, p.n_gpus, batch,
                                                        limit) >= floor:
            return batch, p.per_user_tokens_per_s, p.tokens_per_s
    return None


# --- the page's data ----------------------------------------------------------------------------

#: Significant digits of the numbers the page's data carries (its figures show three).
PAGE_DIGITS = 5

#: Case fields the page shows, in the order of its rows (``calculator_data``).
PAGE_FIELDS = ["max_concurrency", "batch", "tokens_per_s", "tokens_per_s_low",
               "tokens_per_s_high", "per_user_tokens_per_s", "ttft_s", "output_cost",
               "input_cost", "output_cost_split"]


def _sig(value: float, digits: int = PAGE_DIGITS) -> float | int | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    rounded = float(f"{value:.{digits}g}")
    return int(rounded) if rounded.is_integer() and abs(rounded) < 2 ** 53 else rounded


def calculator_data(grid: pd.DataFrame, prefix: pd.DataFrame, *, models: Sequence[str],
                    default: Mapping[str, Any], ttft: pd.DataFrame,
                    hit_rate: float = PREFIX_HIT_RATE, more_gpus: pd.DataFrame | None = None,
                    slo: pd.DataFrame | None = None,
                    slo_error: Mapping[str, Any] | None = None,
                    wider: pd.DataFrame | None = None,
                    speculative_error: Mapping[str, Any] | None = None,
                    data_parallel: pd.DataFrame | None = None,
                    data_parallel_error: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything the landing page's calculator shows, as plain JSON-able data: the choices
    (engines with their memory-fraction flag and the fractions offered, None for the engine's
    default; models with their checkpoints and lengths, GPUs with their market prices by kind,
    KV dtypes, prompt and output lengths), the error bands, the texts of the cases that do not
    fit and the launch commands, and one row per grid row (``rows``, columns ``cols``: indices
    into the choices — the fraction's into its engine's — then the case's numbers at
    ``PAGE_DIGITS`` significant digits, costs at $1 per GPU-hour, then indices into ``bands``
    — [scope, n, median, low, high, ``band_side``, the band's basis in words
    (``CaseBand.words``)] — and into ``ttft_bands``, ``ttft`` (``calibrate.ttft_errors``) for
    the batch range of its batch, -1 where none was measured; then the fraction the engine
    started with and the index of its launch command in ``texts``); ``batch_limit``:
    ``banded_batch_limit``. ``default`` names the starting choice: engine, model, weights,
    kv_dtype, gpu_memory_utilization, gpu, max_model_len, input_tokens, output_tokens, kind. A fitting
    row's input cost is the split of ``ServingPoint.dollars_per_million_split``, or, at batch 1
    (no other request's prompt to share the steps), its own prompt prefilled alone.

    ``more_gpus`` (``tp_choices``) adds rows of the same cases on more GPUs per replica (the
    page's "GPUs per replica" choice; ``prefix`` must cover them). ``slo`` (``slo_grid``) gives
    ``slo``: the targets offered, and per case (its first ten row values joined by "|") the
    saturated rate and, for each TTFT and then each speed target, [requests/s, users in
    flight]; ``slo_error`` (in words and numbers: how far measured latencies ran from the
    simulation's) is passed through as ``slo["error"]``.

    ``wider`` (``two_nodes``) gives a case that fits no group of eight, after its limit and
    texts, [the two-node placement in words, its $ per 10⁶ output tokens at $1 per GPU-hour,
    its launch command] (indices into ``texts`` and a number).

    ``speculative``: per model slug with a measured draft chain (``measured_speculation``)
    ``sources`` (the row: id, method and its name, k, α, τ, the acceptance as stated, source,
    URL, engine, dataset, the measured speed-up and its batch), and per case of the grid's
    ``SPEC_COLUMNS`` (``cases``, keyed like ``slo``'s) [batch, per-user tokens/s with and
    without the draft, speed-up, $ per 10⁶ output tokens at $1 per GPU-hour with and without,
    pool tokens with and without, the launch command's index in ``texts``], or [why not, an
    index in ``texts``]; ``speculative_error`` (how far the model's speed-ups ran from measured
    ones: n, median) is passed through as ``speculative["error"]``.

    ``data_parallel`` (``dp_attention``) gives ``data_parallel``: per case of a mixture of
    experts with MLA (``cases``, keyed like ``slo``'s first nine values) [the layout in words,
    its $ per 10⁶ output tokens at $1 per GPU-hour, its launch command's index in ``texts``];
    ``data_parallel_error`` (how far the step law ran from published data-parallel points: n,
    median) is passed through as ``data_parallel["error"]``.

    The page looks rows up and multiplies costs by the price; it computes nothing else.
    """
    if more_gpus is not None and len(more_gpus):
        grid = pd.concat([grid, more_gpus], ignore_index=True)
    model_list = list(models)
    gpus = list(dict.fromkeys(grid["gpu"]))
    kv = list(dict.fromkeys(grid["kv_dtype"]))
    engines = [e for e in PAGE_ENGINES if e in set(grid["engine"])]
    settings = {e: sorted(set(grid.loc[grid["engine"] == e, "gpu_memory_utilization"].map(
        fraction_key)), key=_setting_order) for e in engines}
    prompts = sorted(set(int(p) for p in grid["input_tokens"]))
    outputs = sorted(set(int(o) for o in grid["output_tokens"]))
    offers = market_prices()
    weights = {m: [c.label for c in weight_choices(m)] for m in model_list}
    gpu_names = dict(zip(grid["gpu"], grid["gpu_name"]))
    texts: dict[str, int] = {"": 0}
    bands: dict[tuple, int] = {}
    ttft_index = {label: i for i, label in enumerate(ttft["batch_range"])}
    pre = {(r.engine, r.model, r.weights, r.kv_dtype, r.gpu, int(r.n_gpus), int(r.input_tokens)):
           (r.cold, r.cached) for r in prefix.itertuples(index=False)}
    index = {"engine": {e: i for i, e in enumerate(engines)},
             "model": {m: i for i, m in enumerate(model_list)}, "kv_dtype": {k: i for i, k in
             enumerate(kv)}, "gpu": {g: i for i, g in enumerate(gpus)},
             "gpu_memory_utilization": {e: {u: i for i, u in enumerate(settings[e])}
                                        for e in engines},
             "input_tokens": {p: i for i, p in enumerate(prompts)},
             "output_tokens": {o: i for i, o in enumerate(outputs)}}
    columns = ["engine", "model", "weights", "kv_dtype", "gpu_memory_utilization", "gpu",
               "max_model_len", "input_tokens", "output_tokens", "n_gpus", "limit", "why_not",
               "would_fit", "band_scope", "band_n", "band_median", "band_low", "band_high",
               "band_words", "memory_fraction", "launch", *PAGE_FIELDS]
    wide: dict[tuple, list[Any]] = {}
    for r in (wider if wider is not None else pd.DataFrame(columns=TWO_NODE_COLUMNS)).itertuples():
        words = (f"On two nodes of eight ({int(r.n_gpus)} × {short_gpu_name(gpu_names[r.gpu])}, "
                 f"one pipeline stage per node) it fits: the pool holds {r.max_concurrency:,.1f}"
                 f" of these requests; decoding {int(r.batch):,} at once, at most "
                 f"{r.decode_tokens_per_s:,.0f} output tokens/s in all (decode only, and no "
                 "measured pipeline run checks it: an upper bound)")
        wide[("vllm", r.model, r.weights, r.kv_dtype, fraction_key(r.gpu_memory_utilization),
              r.gpu, int(r.max_model_len), int(r.input_tokens), int(r.output_tokens))] = [
            texts.setdefault(words, len(texts)), _sig(r.output_cost),
            texts.setdefault(r.launch, len(texts))]
    rows = []
    for (e, m, w, k, u, g, length, p, o, n, limit, why, fit, *band, fraction, launch), \
            numbers in zip(zip(*(grid[c].tolist() for c in columns[:21])),
                           zip(*(grid[c].tolist() for c in PAGE_FIELDS))):
        key = [index["engine"][e], index["model"][m], weights[m].index(w), index["kv_dtype"][k],
               index["gpu_memory_utilization"][e][fraction_key(u)], index["gpu"][g],
               int(length), index["input_tokens"][int(p)], index["output_tokens"][int(o)],
               int(n)]
        if n > 0:
            cold, cached = pre[(e, m, w, k, g, int(n), int(p))]
            batch = int(numbers[PAGE_FIELDS.index("batch")])
            rows.append(key + [_sig(x) for x in numbers]
                        + [bands.setdefault(tuple(band), len(bands)), _sig(cold), _sig(cached),
                           ttft_index.get(calibrate.batch_range(batch), -1), _sig(fraction),
                           texts.setdefault(launch, len(texts))])
        else:
            rows.append(key + [limit, texts.setdefault(why, len(texts)),
                               texts.setdefault(fit, len(texts))]
                        + wide.get((e, m, w, k, fraction_key(u), g, int(length), int(p), int(o)),
                                   []))
    speculative = _speculative_data(grid, index, weights, texts, speculative_error)
    parallel_cases = {}
    for r in (data_parallel if data_parallel is not None
              else pd.DataFrame(columns=TWO_NODE_COLUMNS)).itertuples():
        key = "|".join(str(x) for x in (
            index["engine"]["vllm"], index["model"][r.model], weights[r.model].index(r.weights),
            index["kv_dtype"][r.kv_dtype],
            index["gpu_memory_utilization"]["vllm"][fraction_key(r.gpu_memory_utilization)],
            index["gpu"][r.gpu], int(r.max_model_len), index["input_tokens"][int(r.input_tokens)],
            index["output_tokens"][int(r.output_tokens)]))
        words = (f"With data-parallel attention and expert parallelism on one node of eight "
                 f"({int(r.n_gpus)} × {short_gpu_name(gpu_names[r.gpu])} as eight ranks of one "
                 f"GPU, the experts spread over all eight) the eight pools hold "
                 f"{r.max_concurrency:,.{0 if r.max_concurrency >= 100 else 1}f} of these "
                 f"requests in all; decoding {int(r.batch):,} "
                 f"per rank, at most {r.decode_tokens_per_s:,.0f} output tokens/s in all")
        parallel_cases[key] = [texts.setdefault(words, len(texts)), _sig(r.output_cost),
                               texts.setdefault(r.launch, len(texts))]
    return {
        "engines": [{"slug": e, "name": ENGINE_NAMES[e], "flag": FRACTION_FLAGS[e][0],
                     "share": FRACTION_FLAGS[e][1],
                     "settings": [None if v == "default" else v for v in settings[e]]}
                    for e in engines],
        "models": [{"slug": m, "name": load_model(m).name,
                    "max_model_len": derived_max_model_len(load_model(m)),
                    "lengths": sorted(set(int(n) for n in grid.loc[grid["model"] == m,
                                                                   "max_model_len"])),
                    "weights": [{"label": c.label, "repository": c.repository,
                                 "source": c.source_url, "published": c.published}
                                for c in weight_choices(m)]} for m in model_list],
        "gpus": [{"slug": g, "name": gpu_names[g],
                  "prices": {o.kind: {"price": o.dollars_per_gpu_hour, "n": int(o.n),
                                      "dated": bool(o.dated), "rows": o.rows,
                                      "basis": o.basis, "low": o.low, "high": o.high}
                             for o in offers[offers["gpu"] == g].itertuples()}} for g in gpus],
        "kinds": list(dict.fromkeys(PRICING_KINDS.values())),
        "kv_dtypes": kv, "prompts": prompts, "outputs": outputs,
        "hit_rate": hit_rate,
        "bands": [[scope, int(n), _sig(med), _sig(low), _sig(high), band_side(low, high), words]
                  for scope, n, med, low, high, words in bands],
        "ttft_bands": [[r.batch_range, int(r.n), _sig(r.median), _sig(r.low), _sig(r.high)]
                       for r in ttft.itertuples()],
        "batch_limit": calibrate.banded_batch_limit(),
        "texts": list(texts),
        "cols": ["engine", "model", "weights", "kv_dtype", "utilization", "gpu",
                 "max_model_len", "prompt", "output", "n_gpus", *PAGE_FIELDS, "band",
                 "prefix_cold", "prefix_cached", "ttft_band", "memory_fraction", "launch"],
        "rows": rows,
        "default": dict(default),
        "slo": None if slo is None else _slo_data(slo, index, weights, slo_error),
        "speculative": speculative,
        "data_parallel": {"cases": parallel_cases, "error": dict(data_parallel_error or {})},
    }


#: How the page names each speculative-decoding method (vLLM's names as keys).
SPEC_METHOD_NAMES = {"mtp": "MTP", "eagle": "EAGLE", "eagle3": "EAGLE-3", "ngram": "n-gram"}


def _speculative_data(grid: pd.DataFrame, index: Mapping[str, Any],
                      weights: Mapping[str, list[str]], texts: dict[str, int],
                      error: Mapping[str, Any] | None) -> dict[str, Any]:
    """The page's speculative decoding (``calculator_data``'s ``speculative``)."""
    sources = {}
    for slug in index["model"]:
        m = measured_speculation(slug)
        if m is not None:
            spec = m.speculative
            sources[slug] = {"id": m.id, "method": spec.method,
                             "name": SPEC_METHOD_NAMES[spec.method],
                             "k": spec.num_speculative_tokens, "acceptance": _sig(spec.acceptance),
                             "tokens_per_step": _sig(spec.tokens_per_step), "stated": m.stated,
                             "source": m.source, "url": m.source_url, "engine": m.engine,
                             "dataset": m.dataset, "speedup": m.speedup, "batch": m.batch}
    cases: dict[str, list[Any]] = {}
    priced = grid[(grid["spec_source"] != "") & (grid["n_gpus"] > 0)]
    for r in priced.itertuples(index=False):
        key = "|".join(str(x) for x in (
            index["engine"][r.engine], index["model"][r.model], weights[r.model].index(r.weights),
            index["kv_dtype"][r.kv_dtype],
            index["gpu_memory_utilization"][r.engine][fraction_key(r.gpu_memory_utilization)],
            index["gpu"][r.gpu], int(r.max_model_len), index["input_tokens"][int(r.input_tokens)],
            index["output_tokens"][int(r.output_tokens)], int(r.n_gpus)))
        if r.spec_why_not:
            cases[key] = [texts.setdefault(r.spec_why_not, len(texts))]
        else:
            cases[key] = [int(r.spec_batch), *(_sig(float(x)) for x in (
                r.spec_per_user_tokens_per_s, r.spec_base_per_user_tokens_per_s, r.spec_speedup,
                r.spec_output_cost, r.spec_base_output_cost)), int(r.spec_pool_tokens),
                int(r.spec_base_pool_tokens), texts.setdefault(r.spec_launch, len(texts))]
    return {"sources": sources, "cases": cases, "error": dict(error or {})}


def _slo_data(slo: pd.DataFrame, index: Mapping[str, Mapping[Any, int]],
              weights: Mapping[str, list[str]],
              error: Mapping[str, Any] | None) -> dict[str, Any]:
    """The page's latency targets (``calculator_data``'s ``slo``)."""
    ttfts = sorted(set(float(t) for t in slo.loc[slo["bound"] == "ttft", "target"]))
    speeds = sorted(set(float(t) for t in slo.loc[slo["bound"] == "speed", "target"]))
    cases: dict[str, list[Any]] = {}
    keys = list(SLO_CASE_KEYS)
    for case, group in slo.groupby(keys, sort=False, dropna=False):
        e, m, w, k, u, g, length, p, o, n = case
        key = "|".join(str(x) for x in (
            index["engine"][e], index["model"][m], weights[m].index(w), index["kv_dtype"][k],
            index["gpu_memory_utilization"][e][fraction_key(u)], index["gpu"][g], int(length),
            index["input_tokens"][int(p)], index["output_tokens"][int(o)], int(n)))
        by = {(b, float(t)): (r, c) for b, t, r, c in zip(group["bound"], group["target"],
                                                           group["rate_rps"],
                                                           group["concurrency"])}
        cases[key] = [_sig(float(group["saturated_rps"].iloc[0])),
                      *[[_sig(x) for x in by[("ttft", t)]] for t in ttfts],
                      *[[_sig(x) for x in by[("speed", t)]] for t in speeds]]
    return {"ttfts": ttfts, "speeds": speeds, "ttft_percentile": SLO_TTFT_PERCENTILE,
            "tpot_percentile": SLO_TPOT_PERCENTILE,
            "n_requests": sorted(set(int(n) for n in slo["n_requests"])),
            "tolerance": float(slo["tolerance"].iloc[0]) if len(slo) else 0.0,
            "duty_cycles": list(DUTY_CYCLES), "cases": cases, "error": dict(error or {}),
            "covered": slo_covered(slo)}


def slo_covered(slo: pd.DataFrame) -> str:
    """The cases of ``slo`` (``slo_grid``) in words: "Llama-3.1-8B (bf16 weights) under vLLM on
    1 × H100 or 1 × B200; … — requests of 7,168 + 1,024 tokens, KV cache bf16, …"."""
    parts = []
    for (e, m, w), group in slo.groupby(["engine", "model", "weights"], sort=False):
        on = " or ".join(dict.fromkeys(f"{int(n)} × {short_gpu_name(load_gpu(g).name)}"
                                       for g, n in zip(group["gpu"], group["n_gpus"])))
        parts.append(f"{load_model(m).name} ({w} weights) under {ENGINE_NAMES[e]} on {on}")
    settings = []
    for column, words in (("input_tokens", "prompts of {:,} tokens"),
                          ("output_tokens", "outputs of {:,} tokens"),
                          ("kv_dtype", "KV cache {}"),
                          ("gpu_memory_utilization", "--gpu-memory-utilization {:g}"),
                          ("max_model_len", "--max-model-len {:,}")):
        values = list(dict.fromkeys(slo[column]))
        settings.append(" or ".join(words.format(v) for v in values))
    return "; ".join(parts) + " — " + ", ".join(settings)


# --- more GPUs per replica, and latency targets ---------------------------------------------


def tp_choices(grid: pd.DataFrame, *, gpu_memory_utilization: float = 0.9) -> pd.DataFrame:
    """The grid's fitting vLLM rows at ``gpu_memory_utilization`` again on every larger degree
    of ``TP_DEGREES`` vLLM runs the model on (the grid holds the fewest GPUs that fit): the
    reader's choice of GPUs per replica. Columns ``GRID_COLUMNS``."""
    base = grid[(grid["n_gpus"] > 0) & (grid["engine"] == "vllm")
                & (grid["gpu_memory_utilization"] == gpu_memory_utilization)]
    limit = calibrate.banded_batch_limit()
    formats = {(m, c.label): c for m in base["model"].unique() for c in weight_choices(m)}
    models = {m: load_model(m) for m in base["model"].unique()}
    rows = []
    drafts: dict[Deployment, Any] = {}
    keys = ["model", "weights", "kv_dtype", "gpu"]
    for (slug, w, kv, gpu), group in base.groupby(keys, sort=False):
        choice = formats[(slug, w)]
        eng = Engine(Deployment(models[slug], gpu, weights=choice.weight_format, kv=kv,
                                gpu_memory_utilization=gpu_memory_utilization),
                     tp_degrees=TP_DEGREES)
        commands: dict[tuple[int, int], str] = {}
        repository = launch_repository(slug, choice)
        for r in group.itertuples(index=False):
            length = int(r.max_model_len)
            for tp in (t for t in TP_DEGREES if t > r.n_gpus and eng.runs_on(t)):
                point = eng.point(int(r.input_tokens), int(r.output_tokens),
                                  max_model_len=length, n_gpus=tp)
                if (tp, length) not in commands:
                    commands[(tp, length)] = launch_text(
                        eng.deployment.with_(tp=tp, max_model_len=length), repository)
                row = _row(point, choice, models[slug], limit)
                row.update(model=slug, would_fit="", launch=commands[(tp, length)],
                           gpu_memory_utilization=float(gpu_memory_utilization))
                row.update(speculative_columns(slug, eng.deployment.with_(
                    tp=tp, max_model_len=length), point, choice, repository, drafts))
                rows.append(row)
    return pd.DataFrame(rows, columns=GRID_COLUMNS)


#: The layout the page offers a vLLM case that no group of up to eight GPUs holds: two nodes of
#: eight, one pipeline stage each (``--tensor-parallel-size 8 --pipeline-parallel-size 2``).
TWO_NODES = (8, 2)

#: ``two_nodes``'s columns.
TWO_NODE_COLUMNS = ["model", "weights", "kv_dtype", "gpu_memory_utilization", "gpu",
                    "max_model_len", "input_tokens", "output_tokens", "n_gpus",
                    "max_concurrency", "batch", "decode_tokens_per_s", "output_cost", "launch"]


def two_nodes(grid: pd.DataFrame) -> pd.DataFrame:
    """The vLLM cases of ``grid`` that fit no degree of ``TP_DEGREES`` (limit weights,
    activation or kv), on two nodes of eight GPUs (``TWO_NODES``), where that holds one request
    of max_model_len: n_gpus (16), max_concurrency (requests of the case's length the pool of
    the stage with the fewest blocks holds), batch (as many, at most ``max_num_seqs``),
    decode_tokens_per_s (``speed.parallel.parallel_decode`` at that batch, mid-output: decode
    only, no prefill, and not checked against a measured pipeline run — an upper bound),
    output_cost ($ per 10⁶ output tokens at $1 per GPU-hour, at that speed) and launch
    (``launch_text``). A GPU with no sourced GPU-to-GPU link is left out."""
    tp, pp = TWO_NODES
    return _placed(grid[(grid["engine"] == "vllm") & (grid["n_gpus"] == 0)
                        & grid["limit"].isin(["weights", "activation", "kv"])], tp=tp, pp=pp)


#: The layout the page offers a mixture of experts with MLA layers beside tensor parallelism:
#: one node of eight GPUs as eight data-parallel ranks of one GPU with the experts spread over
#: all eight (``--data-parallel-size 8 --enable-expert-parallel``), as (tp, dp, ep). MLA's latent
#: cache is whole on every GPU of a tensor-parallel group, so eight ranks hold eight sets of
#: requests where one group of eight holds one (chapter 4).
DP_ATTENTION = (1, 8, 8)


def uses_dp_attention(model: Model | str) -> bool:
    """Whether the page offers ``DP_ATTENTION`` for ``model``: a mixture of experts with MLA."""
    counts = blocks(load_model(model) if isinstance(model, str) else model)
    return counts.mla > 0 and counts.moe_ffn > 0


def dp_attention(grid: pd.DataFrame) -> pd.DataFrame:
    """The vLLM cases of ``grid`` whose model ``uses_dp_attention``, fitting or not, on one node
    of eight GPUs as ``DP_ATTENTION`` where a rank's pool holds one request of max_model_len:
    n_gpus (8), max_concurrency (requests of the case's length the eight pools hold in all),
    batch (per rank: as many as its pool holds, at most ``max_num_seqs``),
    decode_tokens_per_s (``speed.parallel.parallel_decode`` at that batch per rank, mid-output,
    in all: decode only, an upper bound — on the published data-parallel points it ran far
    faster than measured, ``kvlib.fit.parallel.parallel_validation``), output_cost ($ per 10⁶
    output tokens at $1 per GPU-hour) and launch (``launch_text``). Columns
    ``TWO_NODE_COLUMNS``; a GPU with no sourced GPU-to-GPU link is left out."""
    tp, dp, ep = DP_ATTENTION
    models = [m for m in grid["model"].unique() if uses_dp_attention(m)]
    return _placed(grid[(grid["engine"] == "vllm") & grid["model"].isin(models)],
                   tp=tp, dp=dp, ep=ep)


def _placed(cases: pd.DataFrame, **layout: int) -> pd.DataFrame:
    """``cases`` (vLLM grid rows) under ``layout`` (``Deployment``'s tp, pp, dp, ep) where its
    GPUs have a sourced link, the model splits over its tp and a pool holds one request of
    max_model_len: ``TWO_NODE_COLUMNS``, the batch one rank's (as many requests as its pool
    holds, at most ``max_num_seqs``) decoded mid-output by ``parallel_decode``, the requests
    held the whole deployment's."""
    formats = {(m, c.label): c for m in cases["model"].unique() for c in weight_choices(m)}
    rows = []
    keys = ["model", "weights", "kv_dtype", "gpu_memory_utilization", "gpu", "max_model_len"]
    for (slug, w, kv, util, gpu, length), group in cases.groupby(keys, sort=False):
        d = Deployment(slug, gpu, weights=formats[(slug, w)].weight_format, kv=kv,
                       gpu_memory_utilization=float(util), max_model_len=int(length), **layout)
        if d.gpu.link_bytes_per_s is None or not d.model.supports_tp(d.tp):
            continue
        pool = pool_arithmetic(d)
        if pool.max_concurrency(int(length)) < 1:
            continue
        d = d.resolved()
        launch = launch_text(d, launch_repository(slug, formats[(slug, w)]))
        for r in group.drop_duplicates(["input_tokens", "output_tokens"]).itertuples(index=False):
            i, o = int(r.input_tokens), int(r.output_tokens)
            batch = min(math.floor(pool.max_concurrency(i + o)), d.max_num_seqs)
            step = parallel_decode(d, batch=batch, context_tokens=i + o // 2)
            rows.append({"model": slug, "weights": w, "kv_dtype": kv,
                         "gpu_memory_utilization": float(util), "gpu": gpu,
                         "max_model_len": int(length), "input_tokens": i, "output_tokens": o,
                         "n_gpus": d.gpus, "max_concurrency": pool.deployment_concurrency(i + o),
                         "batch": batch, "decode_tokens_per_s": step.tokens_per_s,
                         "output_cost": cost_per_million_tokens(float(d.gpus), step.tokens_per_s),
                         "launch": launch})
    return pd.DataFrame(rows, columns=TWO_NODE_COLUMNS)


#: The latency targets the page offers: p99 time to the first token (s), and per-user speed
#: (tokens/s: the median time per output token is its inverse).
SLO_TTFTS_S = (0.5, 2.0, 5.0)
SLO_SPEEDS = (10.0, 20.0, 40.0)
#: Percentiles the page's targets bound: TTFT at p99, time per output token at the median.
SLO_TTFT_PERCENTILE, SLO_TPOT_PERCENTILE = 99.0, 50.0
#: Requests per simulated benchmark run of a latency case: ``SLO_BATCHES`` times the batch the
#: pool holds, within ``SLO_REQUESTS``. Near the saturated rate a queue builds up slowly; a run
#: of a few batches' worth ends before it has, and shows targets met up to saturation that a
#: steady load would miss.
SLO_BATCHES = 40
SLO_REQUESTS = (1_000, 4_000)
#: Shares of the day at the peak rate the page offers (the rest idle, the GPUs still paid).
DUTY_CYCLES = (1.0, 0.5, 1 / 3, 0.25, 0.1)


#: What identifies a latency case (``slo_grid``'s first columns).
SLO_CASE_KEYS = ("engine", "model", "weights", "kv_dtype", "gpu_memory_utilization", "gpu",
                 "max_model_len", "input_tokens", "output_tokens", "n_gpus")


def slo_requests(batch: int) -> int:
    """Requests simulated for a case whose pool holds ``batch``: ``SLO_BATCHES`` × batch within
    ``SLO_REQUESTS``."""
    lo, hi = SLO_REQUESTS
    return int(min(hi, max(lo, SLO_BATCHES * batch)))


def slo_requests_for(deployment: Deployment, tokens: int) -> int:
    """``slo_requests`` of the batch ``deployment`` runs on requests of ``tokens`` tokens
    (prompt + output): the whole requests its KV pool holds, at most its running cap
    (``max_num_seqs``), at least 1."""
    held = kv_pool(deployment).max_concurrency(int(tokens))
    return slo_requests(max(1, min(math.floor(held), deployment.resolved().max_num_seqs)))


def slo_grid(cases: pd.DataFrame, *, ttfts_s: Sequence[float] = SLO_TTFTS_S,
             speeds: Sequence[float] = SLO_SPEEDS, seed: int = 0) -> pd.DataFrame:
    """For each fitting row of ``cases`` (grid rows), the highest request rate one replica
    sustains (``load.max_rates_at_slos``: Poisson arrivals of ``slo_requests`` requests of the
    row's lengths, seeded) with p99 TTFT within each of ``ttfts_s`` and, separately, with the
    median time per output token within 1 ÷ each of ``speeds``. Latency grows with the rate,
    so a target of both is met up to the lower of its two rates. One row per case and bound:
    the case's keys (engine, model, weights, kv_dtype, gpu_memory_utilization, gpu,
    max_model_len, input_tokens, output_tokens, n_gpus), ``bound`` ("ttft" or "speed"), ``target`` (s or
    tokens/s), ``rate_rps``, ``saturated_rps``, ``concurrency`` (users in flight at that
    rate, Little's law), ``n_requests`` and ``tolerance``."""
    ttfts = [number("TTFT target (s)", t, positive=True) for t in ttfts_s]
    speed_list = [number("per-user speed (tokens/s)", s, positive=True) for s in speeds]
    slos = ([SLO(ttft_s=t, percentile=SLO_TTFT_PERCENTILE) for t in ttfts]
            + [SLO(tpot_s=1 / s, percentile=SLO_TPOT_PERCENTILE) for s in speed_list])
    targets = [("ttft", t) for t in ttfts] + [("speed", s) for s in speed_list]
    keys = list(SLO_CASE_KEYS)
    fitting = cases[cases["n_gpus"] > 0]
    formats = {(m, c.label): c.weight_format for m in fitting["model"].unique()
               for c in weight_choices(m)}
    rows = []
    for r in fitting.itertuples(index=False):
        setting = fraction_key(r.gpu_memory_utilization)
        d = Deployment(r.model, r.gpu, tp=int(r.n_gpus), weights=formats[(r.model, r.weights)],
                       kv=r.kv_dtype, engine=r.engine, max_model_len=int(r.max_model_len),
                       gpu_memory_utilization=None if setting == "default" else setting)
        n = slo_requests(int(r.batch))
        requests = np.tile([int(r.input_tokens), int(r.output_tokens)], (n, 1))
        caps = max_rates_at_slos(d, requests, slos, seed=seed)
        case = {k: getattr(r, k) for k in keys}
        for (bound, target), cap in zip(targets, caps):
            rows.append({**case, "bound": bound, "target": target, "rate_rps": cap.rate_rps,
                         "saturated_rps": cap.saturated_rps, "concurrency": cap.concurrency,
                         "n_requests": n, "tolerance": cap.tolerance})
    return pd.DataFrame(rows, columns=[*keys, "bound", "target", "rate_rps", "saturated_rps",
                                       "concurrency", "n_requests", "tolerance"])


def targets_at_capacity(case_slo: pd.DataFrame) -> tuple[int, int, float]:
    """For one case's ``slo_grid`` rows: how many of its targets hold up to the replica's
    saturated rate (met with its queue full: capacity binds, not latency, and a stricter target
    costs nothing more), how many targets there are, and that saturated rate (requests/s).
    ValueError for rows of more than one case, or none."""
    cases = len(case_slo.drop_duplicates(list(SLO_CASE_KEYS)))
    if cases != 1:
        raise ValueError(f"targets_at_capacity takes one case's rows, got {cases} cases")
    rate = float(case_slo["saturated_rps"].iloc[0])
    capped = case_slo["rate_rps"] >= rate * (1 - 1e-12)
    return int(capped.sum()), len(case_slo), rate


def bounds_at_capacity(case_slo: pd.DataFrame) -> pd.DataFrame:
    """``targets_at_capacity`` per bound of one case's ``slo_grid`` rows: one row per bound
    ("ttft", "speed") with n (its targets), capped (the targets that hold up to the saturated
    rate, in menu order), loosest (the longest TTFT or the slowest speed) and loosest_rate (the
    requests/s that target holds to)."""
    _, _, rate = targets_at_capacity(case_slo)
    rows = []
    for bound, group in case_slo.groupby("bound", sort=False):
        group = group.sort_values("target")
        edge = group.iloc[-1] if bound == "ttft" else group.iloc[0]
        rows.append({"bound": bound, "n": len(group),
                     "capped": group.loc[group["rate_rps"] >= rate * (1 - 1e-12),
                                         "target"].tolist(),
                     "loosest": float(edge["target"]), "loosest_rate": float(edge["rate_rps"])})
    return pd.DataFrame(rows)


def at_target(slo: pd.DataFrame, *, ttft_s: float, speed: float, peak_rps: float,
              prices: Mapping[str, float], duty_cycle: float = 1.0) -> pd.DataFrame:
    """Each case of ``slo`` (``slo_grid``) sized for a latency target — p99 TTFT within
    ``ttft_s`` and ``speed`` tokens/s per user, both targets of the grid — at a peak of
    ``peak_rps`` requests/s, priced at ``prices`` ($ per GPU-hour by GPU slug; cases of other
    GPUs are left out), the peak held for ``duty_cycle`` of the day and the GPUs paid all day:
    rate_rps (one replica within the target: the lower of its two rates), users (in flight at
    that rate), replicas (⌈peak ÷ rate⌉), gpus, dollars_per_hour (all of them), and over a day
    ``output_cost`` ($ per 10⁶ output tokens: GPUs × price × 24 h ÷ (peak × output tokens ×
    duty × 86,400 s)) and ``token_cost`` (input and output tokens together). A case that misses
    the target at any rate has rate 0 and no replicas (NaN costs)."""
    peak = number("peak_rps (requests/s)", peak_rps, positive=True)
    duty = number("duty_cycle", duty_cycle, positive=True, maximum=1)
    ttft, per_user = float(ttft_s), float(speed)
    for bound, value in (("ttft", ttft), ("speed", per_user)):
        if not (slo.loc[slo["bound"] == bound, "target"] == value).any():
            raise ValueError(f"no {bound} target {value:g} in the latency grid")
    keys = list(SLO_CASE_KEYS)
    by_t = slo[(slo["bound"] == "ttft") & (slo["target"] == ttft)].set_index(keys)
    by_s = slo[(slo["bound"] == "speed") & (slo["target"] == per_user)].set_index(keys)
    both = by_t[["rate_rps", "concurrency"]].join(
        by_s[["rate_rps", "concurrency"]].add_suffix("_speed")).reset_index()
    both = both[both["gpu"].isin(list(prices))]
    speed_binds = both["rate_rps_speed"] < both["rate_rps"]
    rate = both["rate_rps"].where(~speed_binds, both["rate_rps_speed"])
    users = both["concurrency"].where(~speed_binds, both["concurrency_speed"])
    served = rate > 0
    replicas = np.where(served, np.ceil(peak / rate.where(served, 1.0)), 0).astype(int)
    gpus = replicas * both["n_gpus"].astype(int)
    dollars = gpus * both["gpu"].map(prices).astype(float)
    day_tokens = peak * duty * 86_400 / 1e6  # 10⁶ requests per day, × tokens per request
    out = both[keys].assign(rate_rps=rate.to_numpy(), users=users.to_numpy(),
                            replicas=replicas, gpus=gpus, dollars_per_hour=dollars)
    out["output_cost"] = np.where(served, dollars * 24 / (day_tokens * both["output_tokens"]),
                                  math.nan)
    out["token_cost"] = np.where(served, dollars * 24 / (
        day_tokens * (both["output_tokens"] + both["input_tokens"])), math.nan)
    return out


def cheapest_at_slo(slo: pd.DataFrame, *, ttft_s: float, speed: float, peak_rps: float,
                    kind: str = "on-demand", duty_cycle: float = 1.0,
                    dated_only: bool = True) -> pd.DataFrame:
    """What to buy at a latency target: per model, checkpoint and request of ``slo``, the
    case of ``at_target`` (GPU, GPUs per replica, KV dtype) with the lowest $ per 10⁶ output
    tokens at market price (``market_prices`` of ``kind``, dated offers only with
    ``dated_only``) among those whose replica meets the target; ``n_gpus`` 0 where none does.
    Columns: at_target's, dollars_per_gpu_hour, and gpu_name."""
    offers = market_prices()
    offers = offers[(offers["kind"] == kind) & (offers["dated"] | (not dated_only))]
    prices = dict(zip(offers["gpu"], offers["dollars_per_gpu_hour"]))
    sized = at_target(slo, ttft_s=ttft_s, speed=speed, peak_rps=peak_rps, prices=prices,
                      duty_cycle=duty_cycle)
    out = []
    for key, group in sized.groupby(["model", "weights", "input_tokens", "output_tokens"],
                                    sort=False):
        ok = group[group["rate_rps"] > 0]
        if len(ok):
            best = ok.loc[ok["output_cost"].idxmin()].to_dict()
            best["dollars_per_gpu_hour"] = prices[best["gpu"]]
            best["gpu_name"] = load_gpu(best["gpu"]).name
            out.append(best)
        else:
            out.append({**dict(zip(["model", "weights", "input_tokens", "output_tokens"], key)),
                        "n_gpus": 0})
    return pd.DataFrame(out)


#: The "what to buy at a latency target" table's columns, the deciding one first.
BUY_SLO_COLUMNS = {"output_cost": "$ per 1M output tokens over a day",
                   "deployment": "replicas × GPUs", "model_name": "model",
                   "rate_rps": "requests/s per replica", "users": "users per replica",
                   "dollars_per_hour": "$ per hour"}


def buy_slo_table(buy: pd.DataFrame) -> Table:
    """The served rows of ``cheapest_at_slo`` as a reader's table (``BUY_SLO_COLUMNS``)."""
    served = buy[buy["n_gpus"] > 0]
    shown = served.assign(
        model_name=[f"{load_model(m).name} ({w})" for m, w in zip(served["model"],
                                                                  served["weights"])],
        deployment=[f"{int(r)} × {int(n)} {short_gpu_name(g)}" for r, n, g in
                    zip(served["replicas"], served["n_gpus"], served["gpu_name"])])
    shown = shown[list(BUY_SLO_COLUMNS)].rename(columns=BUY_SLO_COLUMNS)
    return table(shown, {"$ per 1M output tokens over a day": "${:,.3f}",
                         "requests/s per replica": "{:.2f}", "users per replica": "{:.0f}",
                         "$ per hour": "${:,.2f}"}, wide_only=[BUY_SLO_COLUMNS["dollars_per_hour"]])
