"""Measured speculative decoding (``data/speculative.csv``) against the speed model's
prediction (``kvlib.speed.speculative``): nothing here is fitted.

A row is checked when it states the model, the method, k, the batch, the mean acceptance
length τ and the speed-up of a draft chain (rows with a draft tree are left out: the model
verifies k + 1 tokens, a tree more). The acceptance length becomes the i.i.d. rate α whose
(1 − α^(k+1)) ÷ (1 − α) is τ (the step time depends on τ and k only). A row naming no GPU is
predicted on ``ASSUMED_GPU`` and says so; contexts are ``ASSUMED_CONTEXT`` tokens (short chat
prompts: at batch 1 the KV read is a small share of the step either way).
"""
from __future__ import annotations

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
