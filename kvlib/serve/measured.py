"""``bench_serve`` against published serving benchmarks (``data/serving_benchmarks.csv``).

Each row of the file is one load point of a published ``vllm bench serve`` /
``sglang.bench_serving`` run: a model, GPU and TP degree, a dataset of stated mean lengths, a
request rate or a client concurrency, and the latencies measured. ``serving_errors`` replays
every row kvlib can place — a registry model, a GPU of ``data/gpus.csv`` and a TP degree — with
``bench_serve`` and the row's own settings, and returns predicted ÷ measured − 1 of median and
p99 TTFT, median TPOT and request throughput, with the row's load band. A row with pipeline
stages is placed but not replayed (the replay's step law times one tensor-parallel group):
``pipeline_validation`` compares it with the pipeline model.

What a replay assumes, since the sources print means only: the prompts and outputs are drawn
uniform within ±``RANGE_RATIO[dataset]`` of the stated means; weights and KV cache are 16-bit
where the row leaves the format empty; at most ``MAX_REQUESTS`` requests are replayed.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pandas as pd

from ..core.data import csv_path, data_dir
from ..deployment import ENGINES, Deployment
from ..engines.workloads import random_lengths
from ..fit import calibrate
from ..speed.parallel import parallel_decode
from .load import bench_serve, run_row, saturated_rps

#: The spread of the lengths drawn for a dataset (a share of the mean): ``random`` as
#: ``vllm bench serve``'s default (``--random-range-ratio 0``), ShareGPT's wide spread read as
#: ±90%.
RANGE_RATIO = {"random": 0.0, "sharegpt": 0.9}
#: Most requests replayed per row (the sources ran 50–5,000).
MAX_REQUESTS = 600
#: Load bands, by offered rate ÷ the replayed saturated rate (open loop) or client concurrency.
RATE_BANDS = ((0.0, 0.5, "light (< 50% of saturation)"), (0.5, 0.9, "near the knee (50–90%)"),
              (0.9, math.inf, "at or past saturation (≥ 90%)"))
CONCURRENCY_BANDS = ((1, 1, "concurrency 1"), (2, 16, "concurrency 2–16"),
                     (17, 1 << 30, "concurrency > 16"))
#: TTFT measurements of the speed data replayed under load, per engine (a seeded sample: the
#: replays take about 30 ms each on this 2-core machine; all 1,153 would add half a minute).
#: vLLM, whose scheduling the replay is, gets the most.
QUEUED_TTFT_SAMPLE = {"vllm": 100, "sglang": 40, "tensorrt-llm": 40}
#: Requests replayed per TTFT point, as a multiple of its client concurrency (at least
#: ``QUEUED_TTFT_MIN`` requests): three waves of the closed loop.
QUEUED_TTFT_WAVES, QUEUED_TTFT_MIN = 3, 12
#: Measured statistics compared, as (column of the data, key of ``run_row``, scale to seconds).
COMPARED = (("median_ttft_ms", "median_ttft_s", 1e-3), ("p99_ttft_ms", "p99_ttft_s", 1e-3),
            ("median_tpot_ms", "median_tpot_s", 1e-3),
            ("request_throughput", "request_throughput", 1.0))


def benchmarks() -> pd.DataFrame:
    """``data/serving_benchmarks.csv``, one load point per row (``id``)."""
    return pd.read_csv(csv_path("serving_benchmarks.csv")).set_index("id")


def _band(row: pd.Series, saturated: float) -> str:
    if row["load_kind"] == "concurrency":
        c = int(row["max_concurrency"])
        return next(label for lo, hi, label in CONCURRENCY_BANDS if lo <= c <= hi)
    share = float(row["request_rate"]) / saturated
    return next(label for lo, hi, label in RATE_BANDS if lo <= share and (share < hi or hi == math.inf))


def stages(row: pd.Series) -> int:
    """Pipeline stages of a benchmark row (its ``pp``; empty is 1)."""
    return 1 if pd.isna(row["pp"]) else int(row["pp"])


def _deployment(row: pd.Series) -> Deployment:
    """The deployment a benchmark row ran: its model, GPU, TP and pipeline stages, weights and
    KV cache (16-bit where the row leaves them empty), engine (vLLM's scheduling for "other")
    and the server limits it states."""
    return Deployment(row["model_slug"], row["gpu_slug"], tp=int(row["tp"]), pp=stages(row),
                      weights=row["weight_format"] if isinstance(row["weight_format"], str)
                      else "bf16",
                      kv=row["kv_cache_dtype"] if isinstance(row["kv_cache_dtype"], str)
                      else "bf16",
                      engine=row["engine"] if row["engine"] in ENGINES else "vllm",
                      max_num_seqs=None if pd.isna(row["max_num_seqs"])
                      else int(row["max_num_seqs"]),
                      max_num_batched_tokens=None if pd.isna(row["max_num_batched_tokens"])
                      else int(row["max_num_batched_tokens"]))


def _placeable(row: pd.Series) -> bool:
    return (isinstance(row["model_slug"], str) and isinstance(row["gpu_slug"], str)
            and not pd.isna(row["tp"]) and not pd.isna(row["input_tokens"])
            and row["dataset"] in RANGE_RATIO)


@lru_cache(maxsize=1)
def serving_errors() -> pd.DataFrame:
    """One row per placeable benchmark row: its setting, load band, and for each measured
    statistic of ``COMPARED`` the prediction, the measurement and ``<statistic>_error``
    (predicted ÷ measured − 1; NaN where the source does not give it); ``not_replayed`` says why
    a row kvlib places could not be replayed (its deployment does not fit kvlib's memory
    model), its statistics then NaN."""
    rows = []
    for key, row in benchmarks().iterrows():
        if not _placeable(row):
            continue
        if stages(row) > 1:
            rows.append({"id": key, "engine": row["engine"], "model": row["model_slug"],
                         "gpu": row["gpu_slug"], "tp": int(row["tp"]), "dataset": row["dataset"],
                         "band": "", "source_url": row["source_url"],
                         "not_replayed": f"{stages(row)} pipeline stages: the replay times one "
                                         "tensor-parallel group"})
            continue
        d = _deployment(row)
        n = min(int(row["num_prompts"]), MAX_REQUESTS)
        requests = random_lengths(n, round(row["input_tokens"]), round(row["output_tokens"]),
                                  RANGE_RATIO[row["dataset"]], seed=0)
        try:
            if row["load_kind"] == "concurrency":  # its load band is the concurrency itself
                saturated = math.nan
                run = bench_serve(d, requests, concurrency=int(row["max_concurrency"]))
            else:
                saturated = saturated_rps(bench_serve(d, requests))
                run = bench_serve(d, requests, request_rate=float(row["request_rate"]),
                                  burstiness=1.0 if pd.isna(row["burstiness"])
                                  else float(row["burstiness"]))
        except ValueError as exc:  # the deployment does not fit kvlib's memory model
            rows.append({"id": key, "engine": row["engine"], "model": row["model_slug"],
                         "gpu": row["gpu_slug"], "tp": int(row["tp"]), "dataset": row["dataset"],
                         "band": "", "source_url": row["source_url"], "not_replayed": str(exc)})
            continue
        predicted = run_row(run)
        out = {"id": key, "engine": row["engine"], "model": row["model_slug"],
               "gpu": row["gpu_slug"], "tp": int(row["tp"]), "dataset": row["dataset"],
               "band": _band(row, saturated), "source_url": row["source_url"],
               "not_replayed": ""}
        for column, stat, scale in COMPARED:
            measured = row[column] * scale if not pd.isna(row[column]) else math.nan
            out[f"{stat}_measured"] = measured
            out[f"{stat}_predicted"] = predicted[stat]
            out[f"{stat}_error"] = predicted[stat] / measured - 1 if measured > 0 else math.nan
        rows.append(out)
    return pd.DataFrame(rows).set_index("id")


def error_table(errors: pd.DataFrame | None = None) -> pd.DataFrame:
    """Median |error| and the number of points of each compared statistic, by load band and
    overall (rows), from ``serving_errors``."""
    errors = serving_errors() if errors is None else errors
    errors = errors[errors["not_replayed"] == ""]
    stats = [stat for _, stat, _ in COMPARED]
    groups = [("all", errors)] + [(band, errors[errors["band"] == band])
                                  for band in dict.fromkeys(errors["band"])]
    rows = []
    for label, sel in groups:
        row = {"load band": label}
        for stat in stats:
            e = sel[f"{stat}_error"].dropna().abs()
            row[f"{stat} median |error|"] = float(e.median()) if len(e) else math.nan
            row[f"{stat} points"] = int(len(e))
        rows.append(row)
    return pd.DataFrame(rows).set_index("load band")


#: ``latency_summary`` of ``serving_errors`` as stored (``write_latency_summary``); Appendix A,
#: which replays every benchmark, asserts it is current.
SUMMARY_FILE = "serving_latency_summary.csv"


def latency_summary(errors: pd.DataFrame | None = None) -> dict[str, float | int]:
    """What the landing page says of the simulation against published serving benchmarks below
    90% of saturation (the first two ``RATE_BANDS``, replayed points only): ttft_longer, the
    median of measured ÷ simulated p99 TTFT − 1, over ttft_n points; tpot_error, the median
    signed error of the median time per output token, over tpot_n points."""
    errors = serving_errors() if errors is None else errors
    below = [label for _, _, label in RATE_BANDS[:2]]
    ran = errors[(errors["not_replayed"] == "") & errors["band"].isin(below)]
    longer = (ran["p99_ttft_s_measured"] / ran["p99_ttft_s_predicted"] - 1).dropna()
    tpot = ran["median_tpot_s_error"].dropna()
    return {"ttft_longer": float(longer.median()), "ttft_n": int(len(longer)),
            "tpot_error": float(tpot.median()), "tpot_n": int(len(tpot))}


def write_latency_summary() -> None:
    """Regenerate ``data/<SUMMARY_FILE>`` (after a change to the simulation or the speed model)."""
    pd.DataFrame([latency_summary()]).to_csv(data_dir() / SUMMARY_FILE, index=False)


def stored_latency_summary() -> dict[str, float | int]:
    """``latency_summary`` as stored in ``data/<SUMMARY_FILE>`` (no replay: seconds saved)."""
    row = pd.read_csv(csv_path(SUMMARY_FILE)).iloc[0]
    return {"ttft_longer": float(row["ttft_longer"]), "ttft_n": int(row["ttft_n"]),
            "tpot_error": float(row["tpot_error"]), "tpot_n": int(row["tpot_n"])}


def signed_median(errors: pd.DataFrame, stat: str) -> float:
    """The median signed error of ``stat`` (negative: the prediction is too fast / too low)."""
    return float(np.nanmedian(errors[f"{stat}_error"].to_numpy(dtype=float)))


@lru_cache(maxsize=1)
def queued_ttft_errors(seed: int = 0) -> pd.DataFrame:
    """Time to first token with and without queueing, against closed-loop measurements.

    A seeded sample of TTFT points of the speed data, ``QUEUED_TTFT_SAMPLE`` per engine (the
    ``"ttft"`` points of ``calibrate.validate``: benchmarks at a client concurrency ``c``, fixed
    prompt and output lengths), each replayed with ``bench_serve`` closed loop at ``c``
    (``QUEUED_TTFT_WAVES`` × ``c`` requests, at least ``QUEUED_TTFT_MIN``); the median TTFT of the
    replay is ``queued_s``. ``unqueued_s`` is the speed model's TTFT alone (the request's own
    prompt steps plus half a running step, as ``validate`` predicts it). Columns: engine,
    source_group, model, gpu, tp, concurrency, batch_range, measured_s, unqueued_s, queued_s and
    both errors (predicted ÷ measured − 1). Points whose deployment does not fit kvlib's memory
    model are left out; ``attrs["not_fit"]`` counts them."""
    points = calibrate.validate()
    points = points[points["role"] == "ttft"]
    sample = pd.concat(group.sample(min(QUEUED_TTFT_SAMPLE[engine], len(group)), random_state=seed)
                       for engine, group in points.groupby("engine", sort=True))
    rows, not_fit = [], 0
    for key, p in sample.iterrows():
        c = int(p["concurrency"])
        d = Deployment(p["model"], p["gpu"], tp=int(p["tp"]), weights=p["weight_format"],
                       kv=p["kv_dtype"], engine=p["engine"])
        n = max(QUEUED_TTFT_WAVES * c, QUEUED_TTFT_MIN)
        requests = np.tile([int(p["input_tokens"]), int(p["output_tokens"])], (n, 1))
        try:
            run = bench_serve(d, requests, concurrency=c)
        except ValueError:  # the deployment does not fit kvlib's memory model
            not_fit += 1
            continue
        queued = float(np.median(run.ttft_s))
        rows.append({"id": key, "engine": p["engine"], "source_group": p["source_group"],
                     "model": p["model"], "gpu": p["gpu"], "tp": int(p["tp"]), "concurrency": c,
                     "batch_range": p["batch_range"], "measured_s": float(p["value"]),
                     "unqueued_s": float(p["predicted"]), "queued_s": queued,
                     "unqueued_error": float(p["predicted"]) / float(p["value"]) - 1,
                     "queued_error": queued / float(p["value"]) - 1})
    out = pd.DataFrame(rows).set_index("id")
    out.attrs["not_fit"] = not_fit
    return out


def _repository(url: str) -> str:
    """``github.com/<owner>/<repo>`` of a source URL (the sweep a benchmark row belongs to)."""
    return "/".join(url.split("/")[2:5])


def _decoding(row: pd.Series) -> float:
    """Requests decoding at once in a request-rate benchmark row, by Little's law: completed
    req/s × the mean seconds a request spends decoding, mean TPOT × (mean output tokens − 1)."""
    return (float(row["request_throughput"]) * float(row["mean_tpot_ms"]) * 1e-3
            * (float(row["output_tokens"]) - 1))


@lru_cache(maxsize=1)
def pipeline_validation() -> pd.DataFrame:
    """Every published serving point with pipeline stages (``data/serving_benchmarks.csv``,
    ``pp`` > 1, at a finite request rate) against ``parallel_decode``, beside the point of the
    same sweep (repository, model, GPU, dataset, rate) that ran one tensor-parallel group.

    One row per pipeline point: id, partner (the one-group point's id), request_rate (req/s),
    tp, pp, batch (requests decoding, ``_decoding`` rounded; the partner's own in
    partner_batch), measured and predicted median TPOT (s) and error (predicted ÷ measured −
    1), the same for the partner, and ratio_error: the modelled ÷ the measured ratio of the two
    TPOTs, − 1 — what the pipeline terms get wrong once the miss both points share (the
    single-group law's, and the prefills the pure decode pass leaves out) is divided out. The
    context is the mean prompt plus half the mean output (``_deployment`` for the rest). A rate of ``inf`` (every request at once) is no steady state and is
    left out."""
    bench = benchmarks()
    bench = bench[bench["request_rate"] != math.inf]
    rows = []
    for key, row in bench.iterrows():
        if stages(row) == 1:
            continue
        same = bench[(bench["model_slug"] == row["model_slug"])
                     & (bench["gpu_slug"] == row["gpu_slug"])
                     & (bench["dataset"] == row["dataset"])
                     & (bench["request_rate"] == row["request_rate"])
                     & (bench["source_url"].map(_repository) == _repository(row["source_url"]))]
        partners = [k for k, r in same.iterrows() if stages(r) == 1]
        if len(partners) != 1:
            raise ValueError(f"{key}: {len(partners)} one-group points of the same sweep "
                             f"at {row['request_rate']} req/s (want 1)")
        out = {"id": key, "partner": partners[0], "request_rate": float(row["request_rate"])}
        for prefix, k in (("", key), ("partner_", partners[0])):
            r = bench.loc[k]
            d = _deployment(r)
            batch = max(1, round(_decoding(r)))
            ctx = round(float(r["input_tokens"]) + float(r["output_tokens"]) / 2)
            measured = float(r["median_tpot_ms"]) * 1e-3
            predicted = parallel_decode(d, batch=batch, context_tokens=ctx).tpot_s
            out |= {f"{prefix}tp": d.tp, f"{prefix}pp": d.pp, f"{prefix}batch": batch,
                    f"{prefix}measured": measured, f"{prefix}predicted": predicted,
                    f"{prefix}error": predicted / measured - 1}
        out["ratio_error"] = ((out["predicted"] / out["partner_predicted"])
                              / (out["measured"] / out["partner_measured"]) - 1)
        rows.append(out)
    return pd.DataFrame(rows).set_index("id")
