"""The book's own error: ``kv_pool`` against engine start-up logs, the roofline against measured
throughput.

Memory (``memory_validation``): every start-up log of ``data/engine_logs.csv`` that names a registry
model and GPU is predicted with ``capacity.log_pool`` (``kv_pool`` from the log's own settings) —
the available KV memory, or the KV tokens, or the weights, whichever the log prints — and every log
that prints both its KV memory and its KV tokens also gets the block arithmetic alone checked
(tokens from the logged memory).

Speed (``speed_validation``): measured decode or end-to-end throughputs (``data/throughput.csv`` rows
mapped to registry models by ``data/roofline_calibration.csv`` and ``data/validation/
throughput_mapping.csv``, plus ``data/validation/throughput.csv``) are predicted with the roofline —
first with datasheet peaks, then with efficiency factors fitted on half the points (a
deterministic split) and tested on the other half. Errors are ``predicted ÷ measured − 1``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

import numpy as np
import pandas as pd

from . import capacity, roofline
from .capacity import NO_OVERHEADS, VLLM, Overheads
from .data import csv_path
from .hardware import load_gpu
from .params import params_for
from .registry import load_model
from .roofline import DATASHEET, Efficiency
from .units import GIB

#: Independent publishers of the measured points (a source's documents count once).
SOURCE_GROUPS = {
    "NVIDIA": "NVIDIA (TensorRT-LLM documentation and blog)",
    "vLLM": "vLLM project blog",
    "LMDeploy": "LMDeploy documentation (InternLM)",
    "Oracle": "Oracle Cloud Infrastructure blog (vLLM on AMD MI300X)",
}


# --- memory ---------------------------------------------------------------------------------

def _num(value: Any) -> float | None:
    text = str(value).strip()
    return float(text) if text else None


def is_dense(model_slug: str) -> bool:
    """True for a model with plain MHA/GQA/MQA attention in every layer and no experts."""
    model = load_model(model_slug)
    return model.attention in ("MHA", "GQA", "MQA") and not params_for(model).n_experts


def _layout_tokens(model_slug: str, available_bytes: int, tp: int, kv_dtype: str,
                   block_size: int) -> int:
    """KV tokens ``kv_pool`` makes of ``available_bytes`` on one GPU: the block arithmetic alone
    (a GPU whose whole memory is the logged KV memory, no weights, no overheads)."""
    gpu = replace(load_gpu("h100-sxm"), slug="logged-kv-memory",
                  memory_bytes_runtime=int(available_bytes))
    pool = capacity.kv_pool(model_slug, gpu, n_gpus=tp, gpu_memory_utilization=1.0,
                            kv_dtype=kv_dtype, block_size=block_size, overheads=NO_OVERHEADS,
                            weights_bytes_per_gpu=0)
    return pool.tokens


def memory_validation(overheads: Overheads = VLLM) -> pd.DataFrame:
    """One row per (start-up log, checked quantity): predicted, logged, relative error.

    ``check`` is "full" (``kv_pool`` from the log's settings: available KV memory in GiB, else KV
    tokens, else weights in GiB per GPU) or "layout" (KV tokens from the logged KV memory).
    ``dense`` marks plain-attention models without experts; ``role`` is the log's role in
    ``capacity``'s overhead fit ("fit" rows were used to fit the overheads); the logs of
    ``data/validation/engine_logs.csv`` (role "validation only") reuse the settings of the
    ``engine_logs.csv`` row named in ``same_settings_as``.
    """
    logs = capacity.engine_logs()
    rows: list[dict[str, Any]] = []
    for log_id, row in logs.iterrows():
        if not row["model_slug"] or not row["gpu_slug"]:
            continue
        base = {"id": log_id, "model": row["model_slug"], "gpu": row["gpu_slug"],
                "engine": row["engine"], "engine_version": row["engine_version"],
                "tp": int(row["tp"] or row["n_gpus"] or 1), "role": row["calibration"],
                "dense": is_dense(row["model_slug"]), "source": row["source_url"]}
        logged_w, logged_a, logged_t = (_num(row["model_weights_gib"]), _num(row["available_kv_gib"]),
                                        _num(row["kv_cache_tokens"]))
        if row["calibration"] != "weights" and (logged_a is not None or logged_t is not None):
            pool = capacity.log_pool(log_id, overheads, use_logged_weights=True)
            if logged_a is not None:
                rows.append({**base, "check": "full", "quantity": "available KV memory (GiB)",
                             "predicted": pool.available_kv_bytes / GIB, "logged": logged_a})
            else:
                rows.append({**base, "check": "full", "quantity": "KV tokens",
                             "predicted": float(pool.tokens), "logged": logged_t})
        elif logged_w is not None:
            pool = capacity.log_pool(log_id, overheads, use_logged_weights=False)
            rows.append({**base, "check": "full", "quantity": "weights per GPU (GiB)",
                         "predicted": pool.weights_bytes_per_gpu / GIB, "logged": logged_w})
        if logged_a is not None and logged_t is not None and logged_a > 0:
            rows.append({**base, "check": "layout", "quantity": "KV tokens from logged KV memory",
                         "predicted": float(_layout_tokens(row["model_slug"], round(logged_a * GIB),
                                                           base["tp"], row["kv_cache_dtype"] or "bf16",
                                                           1 if row["engine"] == "sglang" else 16)),
                         "logged": logged_t})
    extra = pd.read_csv(csv_path("validation/engine_logs.csv"), dtype=str,
                        keep_default_na=False)
    for _, row in extra.iterrows():
        base = {"id": row["id"], "model": row["model_slug"], "gpu": row["gpu_slug"],
                "engine": row["engine"], "engine_version": row["engine_version"],
                "tp": int(row["tp"]), "role": "validation only", "dense": is_dense(row["model_slug"]),
                "source": row["source_url"]}
        logged_a, logged_t = _num(row["available_kv_gib"]), _num(row["kv_cache_tokens"])
        if row["same_settings_as"]:
            pool = capacity.log_pool(row["same_settings_as"], overheads, use_logged_weights=True)
            rows.append({**base, "check": "full", "quantity": "KV tokens",
                         "predicted": float(pool.tokens), "logged": logged_t})
        if logged_a is not None and logged_t is not None:
            rows.append({**base, "check": "layout", "quantity": "KV tokens from logged KV memory",
                         "predicted": float(_layout_tokens(row["model_slug"], round(logged_a * GIB),
                                                           base["tp"], row["kv_cache_dtype"] or "bf16",
                                                           int(row["block_size"] or 16))),
                         "logged": logged_t})
    out = pd.DataFrame(rows)
    out["error"] = out["predicted"] / out["logged"] - 1
    return out


# --- speed: the measured points ---------------------------------------------------------------

def _source_group(source: str) -> str:
    for key, name in SOURCE_GROUPS.items():
        if key.lower() in source.lower():
            return name
    raise ValueError(f"measured point from an unknown source {source!r}: add it to SOURCE_GROUPS")


def _weight_format(text: str) -> str | dict[str, str]:
    """``fp8``, or ``component=format[;component=format]`` (``experts=mxfp4``)."""
    if "=" not in text:
        return text
    return dict(part.split("=", 1) for part in text.split(";"))


def speed_points() -> pd.DataFrame:
    """Every measured point the roofline can be asked about, one row each (``id``), with the
    model, GPU, dtypes, batch, lengths, metric and value, its ``mode`` ("static": a batch of
    ``batch`` requests prefilled then decoded together, metric output tokens/s; "itl": one decode
    step at the batch, metric seconds per output token) and its independent ``source_group``."""
    measured = pd.read_csv(csv_path("throughput.csv")).set_index("id")
    mapped = [pd.read_csv(csv_path("roofline_calibration.csv"), keep_default_na=False)
              .assign(batch="", origin="data/roofline_calibration.csv"),
              pd.read_csv(csv_path("validation/throughput_mapping.csv"),
                          keep_default_na=False, dtype={"batch": str})
              .assign(origin="data/validation/throughput_mapping.csv")]
    rows = []
    for frame in mapped:
        for _, m in frame.iterrows():
            if m["mode"] not in ("static", "itl"):
                continue
            t = measured.loc[m["throughput_id"]]
            batch = m["batch"] or (t["batch"] if t["batch"] == t["batch"] else t["concurrency"])
            rows.append({"id": m["throughput_id"], "source": t["source"],
                         "source_url": t["source_url"], "model": m["model_slug"],
                         "gpu": m["gpu_slug"], "tp": int(t["tp"]), "weight_dtype": m["weight_dtype"],
                         "kv_dtype": m["kv_dtype"], "batch": int(float(batch)),
                         "input_tokens": int(t["input_tokens"]),
                         "output_tokens": int(t["output_tokens"]), "metric": t["metric"],
                         "value": float(t["value"]), "mode": m["mode"], "mapping": m["origin"]})
    extra = pd.read_csv(csv_path("validation/throughput.csv"), keep_default_na=False)
    for _, t in extra.iterrows():
        rows.append({"id": t["id"], "source": t["source"], "source_url": t["source_url"],
                     "model": t["model_slug"], "gpu": t["gpu_slug"], "tp": int(t["tp"]),
                     "weight_dtype": t["weight_dtype"], "kv_dtype": t["kv_dtype"],
                     "batch": int(t["batch"]), "input_tokens": int(t["input_tokens"]),
                     "output_tokens": int(t["output_tokens"]), "metric": t["metric"],
                     "value": float(t["value"]), "mode": t["mode"],
                     "mapping": "data/validation/throughput.csv"})
    points = pd.DataFrame(rows)
    if points["id"].duplicated().any():
        raise ValueError(f"measured points listed twice: {points['id'][points['id'].duplicated()].tolist()}")
    points["source_group"] = points["source"].map(_source_group)
    return points.set_index("id")


# --- speed: the roofline, split into parts so the efficiencies can be fitted fast --------------

@dataclass(frozen=True)
class Parts:
    """A measured point's steps under the datasheet roofline (η = 1, no overhead).

    memory_s / compute_s: the two legs of each step (seconds); weight: how many times each step
    runs (the prefill once, each sampled decode step output_tokens ÷ samples times);
    allreduces: all-reduces per step (2 per layer under tensor parallelism, else 0);
    tokens: what the metric counts (output tokens of the whole batch; 1 for "itl"), waves: how
    many batches the KV pool forces the requested batch into (1 when it fits).
    """

    memory_s: np.ndarray
    compute_s: np.ndarray
    weight: np.ndarray
    allreduces: float
    tokens: float
    mode: str
    waves: int

    def seconds(self, eff: Efficiency) -> float:
        """Time of the point's work under ``eff`` (what ``roofline`` computes with it)."""
        step = (np.maximum(self.memory_s / eff.bandwidth, self.compute_s / eff.compute)
                + eff.step_overhead_s + self.allreduces * eff.allreduce_s)
        return float(self.waves * (step * self.weight).sum())

    def predict(self, eff: Efficiency) -> float:
        """The point's metric under ``eff``: tokens/s for "static", seconds/token for "itl"."""
        t = self.seconds(eff)
        return t if self.mode == "itl" else self.tokens / t


def kv_fit_batch(point: Mapping[str, Any]) -> int:
    """Requests of ``input + output`` tokens that fit the KV pool vLLM would give this model
    and GPU (utilization 0.9, profiled batch 8,192): the batch beyond which an engine queues."""
    pool = capacity.kv_pool(point["model"], point["gpu"], n_gpus=int(point["tp"]),
                            weight_dtype=_weight_format(point["weight_dtype"]),
                            kv_dtype=point["kv_dtype"], gpu_memory_utilization=0.9)
    if pool.tokens <= 0:
        return 0
    return int(pool.max_concurrency(int(point["input_tokens"]) + int(point["output_tokens"])))


def parts(point: Mapping[str, Any], samples: int = 16) -> Parts:
    """Decompose one measured point into roofline steps (see ``Parts``).

    "static": a prefill of ``batch × input`` tokens then ``output`` decode steps at growing
    context (``roofline.generation_time_s``); when the batch does not fit the KV pool it runs in
    equal waves that do. "itl": one decode step at context input + output ÷ 2.
    """
    model, gpu, tp = point["model"], point["gpu"], int(point["tp"])
    kw = dict(n_gpus=tp, weight_dtype=_weight_format(point["weight_dtype"]),
              kv_dtype=point["kv_dtype"], efficiency=DATASHEET)
    isl, osl, batch = int(point["input_tokens"]), int(point["output_tokens"]), int(point["batch"])
    allreduces = 2 * load_model(model).n_layers if tp > 1 else 0
    if point["mode"] == "itl":
        step = roofline.decode_step(model, gpu, batch=batch, context_tokens=isl + osl // 2, **kw)
        return Parts(np.array([step.memory_time_s]), np.array([step.compute_time_s]),
                     np.array([1.0]), allreduces, 1.0, "itl", 1)
    if point["mode"] != "static":
        raise ValueError(f"unknown mode {point['mode']!r} (static or itl)")
    fits = kv_fit_batch(point)
    waves = max(1, math.ceil(batch / fits)) if fits > 0 else 1
    wave = math.ceil(batch / waves)
    steps = [roofline.prefill_step(model, gpu, batch=wave, prompt_tokens=max(isl, 1), **kw)]
    n = min(samples, osl)
    steps += [roofline.decode_step(model, gpu, batch=wave,
                                   context_tokens=isl + int((i + 0.5) * osl / n), **kw)
              for i in range(n)]
    weight = np.array([1.0] + [osl / n] * n)
    return Parts(np.array([s.memory_time_s for s in steps]),
                 np.array([s.compute_time_s for s in steps]), weight, allreduces,
                 float(batch * osl), "static", waves)


# --- speed: split, fit, errors ----------------------------------------------------------------

def split(points: pd.DataFrame) -> pd.Series:
    """"train" or "test" per point: sorted by source then id, alternating (train first), so
    every source lands on both sides. Deterministic: no random numbers."""
    order = points.rename_axis("id").reset_index().sort_values(["source_group", "id"])
    order = order.set_index("id")
    roles = ["train" if i % 2 == 0 else "test" for i in range(len(order))]
    return pd.Series(roles, index=order.index, name="role").reindex(points.index)


#: The grid ``fit_efficiency`` searches: achieved bandwidth and compute fractions, the fixed cost
#: per step (seconds) and per all-reduce (seconds).
FIT_GRID = {
    "bandwidth": [x / 20 for x in range(6, 21)],
    "compute": [x / 20 for x in range(4, 21)],
    "step_overhead_s": [x * 0.5e-3 for x in range(0, 13)],
    "allreduce_s": [x * 10e-6 for x in range(0, 11)],
}


def fit_efficiency(point_parts: Mapping[str, Parts], measured: Mapping[str, float]) -> Efficiency:
    """The ``FIT_GRID`` point minimising the summed squared log error over the given points.

    Uses that a point's time is ``waves × (Σ w·max(mem/η_bw, comp/η_c) + Σ w·(overhead +
    all-reduces × t_ar))``, so the two fixed costs are swept with array arithmetic.
    """
    ids = list(point_parts)
    if not ids:
        raise ValueError("no points to fit")
    grid = FIT_GRID
    ovh = np.array(grid["step_overhead_s"])[:, None]
    ar = np.array(grid["allreduce_s"])[None, :]
    best: tuple[float, tuple[float, float, float, float]] | None = None
    for bw, comp in product(grid["bandwidth"], grid["compute"]):
        sse = np.zeros((len(grid["step_overhead_s"]), len(grid["allreduce_s"])))
        for i in ids:
            p = point_parts[i]
            roof = float((np.maximum(p.memory_s / bw, p.compute_s / comp) * p.weight).sum())
            seconds = p.waves * (roof + p.weight.sum() * (ovh + p.allreduces * ar))
            pred = seconds if p.mode == "itl" else p.tokens / seconds
            sse += (np.log(pred) - math.log(measured[i])) ** 2
        k = np.unravel_index(int(np.argmin(sse)), sse.shape)
        if best is None or sse[k] < best[0] - 1e-12:
            best = (float(sse[k]), (bw, comp, grid["step_overhead_s"][k[0]], grid["allreduce_s"][k[1]]))
    assert best is not None
    bw, comp, o, a = best[1]
    return Efficiency("fitted on the train half", bandwidth=bw, compute=comp, step_overhead_s=o,
                      allreduce_s=a, source="kvlib.validation.fit_efficiency")


def speed_validation(points: pd.DataFrame | None = None) -> tuple[pd.DataFrame, Efficiency]:
    """Every measured point predicted with the datasheet roofline and with efficiencies fitted on
    the train half; returns (one row per point, the fitted ``Efficiency``).

    Columns add ``role`` (train/test), ``kv_fit_batch`` and ``waves`` (the batch the KV pool
    holds, and how many waves the requested batch needs), ``datasheet``/``fitted`` predictions
    and their relative errors (``predicted ÷ measured − 1``).
    """
    pts = speed_points() if points is None else points
    roles = split(pts)
    all_parts = {i: parts(p) for i, p in pts.iterrows()}
    train = {i: all_parts[i] for i in pts.index if roles[i] == "train"}
    eff = fit_efficiency(train, pts["value"].to_dict())
    out = pts.copy()
    out["role"] = roles
    out["kv_fit_batch"] = [kv_fit_batch(p) if p["mode"] == "static" else None for _, p in pts.iterrows()]
    out["waves"] = [all_parts[i].waves for i in pts.index]
    out["datasheet"] = [all_parts[i].predict(DATASHEET) for i in pts.index]
    out["fitted"] = [all_parts[i].predict(eff) for i in pts.index]
    out["datasheet_error"] = out["datasheet"] / out["value"] - 1
    out["fitted_error"] = out["fitted"] / out["value"] - 1
    return out, eff


def error_summary(results: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Median and worst absolute relative error of the datasheet and fitted predictions, for all
    points, the train half and the test half (and per ``by`` group when given)."""
    rows = []
    groups: list[tuple[Any, pd.DataFrame]] = [("all", results)]
    if by:
        groups = list(results.groupby(list(by)))
    for key, grp in groups:
        for half in ("all", "train", "test"):
            sel = grp if half == "all" else grp[grp["role"] == half]
            if sel.empty:
                continue
            for model_name, col in (("datasheet", "datasheet_error"), ("fitted", "fitted_error")):
                err = sel[col].abs()
                rows.append({**({"group": key} if by else {}), "points": half,
                             "prediction": model_name, "n": len(sel),
                             "median_abs_error": float(err.median()),
                             "worst_abs_error": float(err.max())})
    return pd.DataFrame(rows)
