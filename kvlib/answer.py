"""The book's one-screen answer: a model, a GPU and a context length in; how many GPUs, how
many requests, how many tokens per second and what a token costs out.

For one (model, GPU, context) ``serving_point``:

1. takes the smallest tensor-parallel degree in ``TP_DEGREES`` whose KV pool
   (``capacity.kv_pool``, vLLM's arithmetic) holds at least one request of
   ``context_tokens`` tokens — degrees the model's heads cannot be split over are skipped;
2. concurrent requests = the pool's ``max_concurrency(context_tokens)`` (vLLM's "Maximum
   concurrency"); the decode batch is that, rounded down and capped at the engine's
   ``max_num_seqs``;
3. decode tokens/s = ``roofline.decode_step`` at that batch with every request holding the
   whole context (the slowest step of a request's life: the most KV to read);
4. $/1M tokens = ``cost.cost_per_million_tokens`` of (price per GPU-hour × GPUs) and that
   rate — the book's chart does this last step in the browser, from its price slider.

``answer_grid`` tabulates it over models × GPUs × contexts for the landing page's chart.
Weights are served in the format each model is published in (``published_weight_format``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from .capacity import VLLM_DEFAULT_UTILIZATION_OLD, kv_pool
from .cost import cost_per_million_tokens
from .hardware import gpu_slugs, load_gpu, load_prices
from .registry import load_model, model_record
from .roofline import CALIBRATED, Efficiency, decode_step

#: Tensor-parallel degrees tried, smallest first (one 8-GPU server at most).
TP_DEGREES = (1, 2, 4, 8)

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


def format_label(weight_dtype: str | Mapping[str, str]) -> str:
    """A short label for a weight format: ``"bf16"``, ``"experts mxfp4, rest bf16"``."""
    if isinstance(weight_dtype, str):
        return weight_dtype
    parts = ", ".join(f"{k} {v}" for k, v in sorted(weight_dtype.items()))
    return f"{parts}, rest bf16"


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


@dataclass(frozen=True)
class ServingPoint:
    """What one (model, GPU, context) gets (the module docstring gives the rules).

    n_gpus: the smallest tensor-parallel degree that holds one request (0: none does);
    max_concurrency: requests of ``context_tokens`` the pool holds at once (vLLM's figure,
    fractional); batch: requests decoded together (whole, ≤ max_num_seqs); step_time_s and
    tokens_per_s: one decode step of that batch and the whole group's output rate; bound:
    "memory" or "compute"; kv_bytes_per_gpu: the pool on each GPU (bytes); weight_format and
    kv_dtype: how weights and cache are stored.
    """

    model: str
    model_name: str
    gpu: str
    gpu_name: str
    context_tokens: int
    weight_format: str
    kv_dtype: str
    gpu_memory_utilization: float
    n_gpus: int
    max_concurrency: float
    batch: int
    step_time_s: float
    tokens_per_s: float
    bound: str
    kv_bytes_per_gpu: int

    @property
    def fits(self) -> bool:
        """Whether some degree in ``TP_DEGREES`` holds one request."""
        return self.n_gpus > 0

    def dollars_per_million(self, dollars_per_gpu_hour: float) -> float:
        """$ per 10⁶ output tokens when each of the ``n_gpus`` GPUs costs
        ``dollars_per_gpu_hour``; ValueError when the model does not fit."""
        if not self.fits:
            raise ValueError(f"{self.model} does not fit {self.context_tokens:,}-token requests "
                             f"on {max(TP_DEGREES)} × {self.gpu}")
        return cost_per_million_tokens(dollars_per_gpu_hour * self.n_gpus, self.tokens_per_s)


def serving_point(model: str, gpu: str, context_tokens: int, *,
                  tp_degrees: Sequence[int] = TP_DEGREES,
                  gpu_memory_utilization: float = VLLM_DEFAULT_UTILIZATION_OLD,
                  kv_dtype: str = "bf16",
                  weight_dtype: str | Mapping[str, str] | None = None,
                  efficiency: Efficiency = CALIBRATED) -> ServingPoint:
    """The answer for one registry ``model`` on ``gpu`` at ``context_tokens`` per request.

    weight_dtype: None serves the published format (``published_weight_format``).
    A model that fits no degree comes back with ``n_gpus = 0`` and zeros.
    """
    if isinstance(context_tokens, bool) or not isinstance(context_tokens, int) or context_tokens <= 0:
        raise ValueError(f"context_tokens must be a positive integer, got {context_tokens!r}")
    degrees = sorted(tp_degrees)
    if not degrees or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in degrees):
        raise ValueError(f"tp_degrees must be positive integers, got {tp_degrees!r}")
    wd = published_weight_format(model) if weight_dtype is None else weight_dtype
    g = load_gpu(gpu)
    name = model_record(model).get("name", model)
    base = dict(model=model, model_name=name, gpu=gpu, gpu_name=g.name,
                context_tokens=context_tokens, weight_format=format_label(wd), kv_dtype=kv_dtype,
                gpu_memory_utilization=float(gpu_memory_utilization))
    m = load_model(model)
    for tp in degrees:
        if not m.supports_tp(tp):  # vLLM refuses this degree (heads do not split over it)
            continue
        pool = kv_pool(m, g, n_gpus=tp, gpu_memory_utilization=gpu_memory_utilization,
                       weight_dtype=wd, kv_dtype=kv_dtype)
        concurrency = pool.max_concurrency(context_tokens)
        if concurrency < 1:
            continue
        batch = min(math.floor(concurrency), pool.max_num_seqs)
        step = decode_step(model, g, batch=batch, context_tokens=context_tokens, n_gpus=tp,
                           weight_dtype=wd, kv_dtype=kv_dtype, efficiency=efficiency)
        return ServingPoint(**base, n_gpus=tp, max_concurrency=float(concurrency), batch=batch,
                            step_time_s=float(step.time_s), tokens_per_s=float(step.tokens_per_s),
                            bound=step.bound, kv_bytes_per_gpu=pool.kv_bytes_per_gpu)
    return ServingPoint(**base, n_gpus=0, max_concurrency=0.0, batch=0, step_time_s=0.0,
                        tokens_per_s=0.0, bound="", kv_bytes_per_gpu=0)


def answer_grid(models: Iterable[str], gpus: Iterable[str], contexts: Iterable[int],
                **kwargs: Any) -> pd.DataFrame:
    """One row per (model, GPU, context): the ``ServingPoint`` fields plus ``fits``,
    ``tokens_per_s_per_gpu`` and the GPU's listed price range (``price_low``, ``price_median``,
    ``price_high`` in $/GPU-hour; NaN without a row in ``data/prices.csv``).

    ``kwargs`` go to ``serving_point`` (utilization, KV dtype, efficiency, TP degrees).
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
                point = serving_point(model, gpu, ctx, **kwargs)
                row = asdict(point)
                row["fits"] = point.fits
                row["tokens_per_s_per_gpu"] = (point.tokens_per_s / point.n_gpus
                                               if point.fits else 0.0)
                low, median, high = prices[gpu] or (math.nan, math.nan, math.nan)
                row.update(price_low=low, price_median=median, price_high=high)
                rows.append(row)
    return pd.DataFrame(rows)
