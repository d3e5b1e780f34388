"""The book's one-screen answer: a model, a GPU and a request length in; how many GPUs, how
many requests, how fast and what a token costs out — ``serving.serving_point`` (the one serving
pipeline) for every model × GPU × length the landing page offers.

A request of ``context_tokens`` holds ``context_tokens − output_tokens`` prompt tokens and
``output_tokens`` generated ones (``case``). Weights are served in the format each model is
published in (``published_weight_format``). ``answer_grid`` tabulates it for the landing page's
chart, which does the last step — $/1M tokens from the price slider — in the browser.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

import pandas as pd

from .hardware import gpu_slugs, load_gpu, load_prices
from .registry import load_model
from .serving import ServingPoint, serving_point

#: Generated tokens of a landing-page request; the rest of its length is prompt.
OUTPUT_TOKENS = 1024

#: Checkpoint formats read from a config's ``quantization_config.quant_method`` → the
#: ``weight_dtype`` kvlib serves them in (others, e.g. GPTQ's bit widths, are not guessed).
_QUANT_FORMATS: dict[str, str | dict[str, str]] = {
    "fp8": "fp8",  # DeepSeek-V3/R1, Kimi-K2, MiniMax: block-wise FP8 linear layers
    "mxfp4": {"experts": "mxfp4"},  # gpt-oss: MXFP4 routed experts, the rest bf16
}


def published_weight_format(slug: str) -> str | dict[str, str]:
    """The weight format a registry model's checkpoint is published in: ``"bf16"`` when its
    config has no ``quantization_config``, else the ``_QUANT_FORMATS`` entry for its method.

    Raises ValueError for a quantization method kvlib does not map (it never guesses bits).
    """
    method = load_model(slug).architecture.quant_method
    if method is None:
        return "bf16"
    if method not in _QUANT_FORMATS:
        raise ValueError(f"{slug}: quantization method {method!r} has no kvlib weight format "
                         f"(known: {', '.join(_QUANT_FORMATS)}); pass weight_dtype explicitly")
    fmt = _QUANT_FORMATS[method]
    return dict(fmt) if isinstance(fmt, Mapping) else fmt


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
    """(lowest, median, highest) $/GPU-hour over the rows of ``data/prices.csv`` for ``gpu``,
    or None when it has none."""
    prices = load_prices()
    rows = prices.loc[prices["gpu"] == gpu, "dollars_per_gpu_hour"].astype(float)
    if rows.empty:
        return None
    return float(rows.min()), float(rows.median()), float(rows.max())


def case(model: str, gpu: str, context_tokens: int, *, output_tokens: int = OUTPUT_TOKENS,
         **kwargs: Any) -> ServingPoint:
    """The landing page's case: ``serving.serving_point`` for requests of ``context_tokens``
    (``context_tokens − output_tokens`` prompt, ``output_tokens`` generated) with the model's
    published weight format; ``kwargs`` go to ``serving_point``."""
    if isinstance(context_tokens, bool) or not isinstance(context_tokens, int):
        raise ValueError(f"context_tokens must be an integer, got {context_tokens!r}")
    if context_tokens <= output_tokens:
        raise ValueError(f"context_tokens ({context_tokens}) leaves no prompt beside "
                         f"{output_tokens} output tokens")
    return serving_point(model, gpu, input_tokens=context_tokens - output_tokens,
                         output_tokens=output_tokens,
                         weight_dtype=published_weight_format(model), **kwargs)


def answer_grid(models: Iterable[str], gpus: Iterable[str], contexts: Iterable[int], *,
                output_tokens: int = OUTPUT_TOKENS, **kwargs: Any) -> pd.DataFrame:
    """One row per (model, GPU, context): the ``serving.ServingPoint`` fields (the error band as
    ``band_low``, ``band_high``, ``band_median``, ``band_scope``) plus ``context_tokens``,
    ``fits``, ``tokens_per_s_per_gpu`` and the GPU's listed price range (``price_low``,
    ``price_median``, ``price_high`` in $/GPU-hour; NaN without a row in ``data/prices.csv``).

    Each row is ``case(model, gpu, context)``; ``kwargs`` go to ``serving_point``
    (utilization, KV dtype, engine, efficiency, TP degrees).
    """
    models, gpus, contexts = list(models), list(gpus), list(contexts)
    for name, values in (("models", models), ("gpus", gpus), ("contexts", contexts)):
        if not values:
            raise ValueError(f"answer_grid needs at least one of {name}")
    prices = {g: price_range(g) for g in gpus}
    rows = []
    for model in models:
        for gpu in gpus:
            for ctx in contexts:
                point = case(model, gpu, ctx, output_tokens=output_tokens, **kwargs)
                row = asdict(point)
                band = row.pop("band")
                row.update(context_tokens=ctx, fits=point.fits,
                           tokens_per_s_per_gpu=(point.tokens_per_s / point.n_gpus
                                                 if point.fits else 0.0),
                           band_low=band["low"] if band else math.nan,
                           band_high=band["high"] if band else math.nan,
                           band_median=band["median_abs_error"] if band else math.nan,
                           band_scope=band["scope"] if band else "")
                low, median, high = prices[gpu] or (math.nan, math.nan, math.nan)
                row.update(price_low=low, price_median=median, price_high=high)
                rows.append(row)
    return pd.DataFrame(rows)
