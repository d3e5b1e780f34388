"""Measured speculative decoding (``data/speculative.csv``) against the speed model's
prediction (``kvlib.speed.speculative``): nothing here is fitted.

A row is checked when it states the model, the method, k, the batch, the mean acceptance
length τ and the speed-up of a draft chain (rows with a draft tree are left out: the model
verifies k + 1 tokens, a tree more). The acceptance length becomes the i.i.d. rate α whose
(1 − α^(k+1)) ÷ (1 − α) is τ (the step time depends on τ and k only). A row naming no GPU is
predicted on ``ASSUMED_GPU`` and says so; contexts are ``ASSUMED_CONTEXT`` tokens (short chat
prompts: at batch 1 the KV read is a small share of the step either way).

``measured_speculation`` picks, per model, the measured draft chain the landing page's
calculator prices: its acceptance as measured, never borrowed from another model or method.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

from ..core.checks import number, positive_integer
from ..core.data import csv_path
from ..deployment import Deployment, Speculative
from ..speed.speculative import speculative_step

#: The GPU a measurement naming none is predicted on.
ASSUMED_GPU = "h100-sxm"
#: Cached tokens per request in the prediction (MT-bench-like prompts and answers).
ASSUMED_CONTEXT = 512


def rate_for_length(k: int, length: float) -> float:
    """The per-token acceptance rate α whose mean acceptance length with k drafts,
    (1 − α^(k+1)) ÷ (1 − α), is ``length`` (1 ≤ length ≤ k + 1), by bisection.
    E.g. k = 1, τ = 1.85 → α = 0.85."""
    k = positive_integer("k", k)
    tau = number("acceptance length", length, minimum=1, maximum=k + 1)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(k + 1)) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def measurements() -> pd.DataFrame:
    """``data/speculative.csv``: every published speculative-decoding result the book cites."""
    return pd.read_csv(csv_path("speculative.csv"))


def speculative_check() -> pd.DataFrame:
    """One row per checkable measurement: id, model_slug, gpu (the one predicted on),
    gpu_assumed, method, k, batch, acceptance_length, measured (speed-up), predicted and
    error = predicted ÷ measured − 1."""
    df = measurements()
    need = ["num_speculative_tokens", "batch", "acceptance_length", "speedup"]
    df = df.dropna(subset=need)
    df = df[~df["notes"].fillna("").str.contains("tree")]
    rows = []
    for r in df.itertuples():
        k = int(r.num_speculative_tokens)
        gpu = r.gpu_slug if isinstance(r.gpu_slug, str) else ASSUMED_GPU
        spec = Speculative(r.method, k, rate_for_length(k, r.acceptance_length))
        d = Deployment(r.model_slug, gpu, tp=int(r.tp) if r.tp == r.tp else 1, speculative=spec)
        predicted = speculative_step(d, int(r.batch), ASSUMED_CONTEXT).speedup
        rows.append({"id": r.id, "model_slug": r.model_slug, "gpu": gpu,
                     "gpu_assumed": not isinstance(r.gpu_slug, str), "method": r.method,
                     "k": k, "batch": int(r.batch), "acceptance_length": r.acceptance_length,
                     "measured": float(r.speedup), "predicted": predicted,
                     "error": predicted / float(r.speedup) - 1})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class MeasuredSpeculation:
    """A model's measured draft chain (one row of ``data/speculative.csv``).

    id, source, source_url, engine, dataset: the row's; speculative: the ``Speculative`` it
    describes (method, k, the per-token acceptance rate α, the EAGLE head's repository);
    stated: the measured acceptance in words ("mean acceptance length 3.08", "acceptance rate
    0.85–0.9"); speedup: the measured speed-up of time per token and batch the requests
    decoded together (each None where the source states none).
    """

    id: str
    source: str
    source_url: str
    engine: str
    dataset: str
    speculative: Speculative
    stated: str
    speedup: float | None
    batch: int | None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def measured_speculation(model_slug: str) -> MeasuredSpeculation | None:
    """The measured draft chain of ``model_slug`` with the highest measured speed-up (rows
    stating none last, then by id): a row of that model that states k and an acceptance rate
    (α itself; the low end of a range) or a mean acceptance length τ (α from
    ``rate_for_length``), drafts a chain (not a tree) and, for an EAGLE head, names its
    checkpoint (``draft_model``). None when no row qualifies: no acceptance is borrowed from
    another model. Llama-3.1-8B: EAGLE-3, k = 4, τ = 3.08 (vLLM issue #20780, row sp12).
    Read once per version of ``data/speculative.csv``."""
    table = csv_path("speculative.csv")
    return _measured_speculation(model_slug, table, table.stat().st_mtime_ns)


@lru_cache(maxsize=256)
def _measured_speculation(model_slug: str, table: Path,
                          mtime_ns: int) -> MeasuredSpeculation | None:
    df = pd.read_csv(table)
    df = df[(df["model_slug"] == model_slug) & df["num_speculative_tokens"].notna()
            & (df["acceptance_rate"].notna() | df["acceptance_length"].notna())
            & ~df["notes"].fillna("").str.contains("tree")
            & (~df["method"].isin(["eagle", "eagle3"]) | df["draft_model"].notna())]
    if df.empty:
        return None
    r = df.assign(_order=-df["speedup"].fillna(-math.inf)).sort_values(["_order", "id"]).iloc[0]
    k = int(r["num_speculative_tokens"])
    if pd.notna(r["acceptance_rate"]):
        rate = float(r["acceptance_rate"])
        high = r["acceptance_rate_high"]
        stated = f"acceptance rate {rate:g}" + (f"–{float(high):g}" if pd.notna(high) else "")
    else:
        rate = rate_for_length(k, float(r["acceptance_length"]))
        stated = f"mean acceptance length {float(r['acceptance_length']):.2f}"
    spec = Speculative(r["method"], k, rate, model=_text(r["draft_model"]) or None)
    return MeasuredSpeculation(
        id=r["id"], source=r["source"], source_url=r["source_url"], engine=_text(r["engine"]),
        dataset=_text(r["dataset"]), speculative=spec, stated=stated,
        speedup=float(r["speedup"]) if pd.notna(r["speedup"]) else None,
        batch=int(r["batch"]) if pd.notna(r["batch"]) else None)
