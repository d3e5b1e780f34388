"""What a prefix-cache hit is worth: prefill time, time to first token, $ per input token, and
when loading a cached prefix from CPU memory or SSD beats computing it again.

Everything is composed from ``kvlib.speed.roofline.prefill_step`` (chapter 4's speed model) and
``kvlib.cost.cost_per_million_tokens``; nothing here has constants of its own.

**Prefill with a cached prefix.** A prompt of T tokens whose first H are cached computes only
the last T − H tokens, but each of them still attends to all the tokens before it, so

* FLOPs = F(T) − F(H), with F(·) the FLOPs of ``prefill_step`` (its linear part is additive in
  tokens, and its causal attention sums per-token costs, so the difference is exact);
* bytes = the bytes ``prefill_step(T − H)`` reads (weights, new KV) + the cached prefix's KV;
* time = the step law of ``roofline.law_seconds`` on those bytes and FLOPs (weights and KV each
  scaled by the bytes' share, matmul and attention math by the FLOPs' share) + its fixed
  per-step overheads.

Time to first token (TTFT) is taken as that prefill time, for one request alone on the GPUs.

**Load or recompute.** Loading a cached H-token prefix over a link of W bytes/s takes
``kv_bytes(H) / W`` (per GPU; tensor-parallel GPUs load their shards over their own links);
recomputing it takes ``prefill_step(H)``. The break-even bandwidth is ``kv_bytes(H) /
prefill_time(H)``: any faster link makes the cache tier pay.
"""
from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.checks import integer, number, positive_integer
from .cost import cost_per_million_tokens
from ..core.data import csv_path
from ..deployment import Deployment
from ..deployment import deployment as as_deployment
from ..hardware.gpus import GPU
from ..model.model import Model
from ..model.registry import resolve_model
from ..speed.roofline import law_seconds, prefill_step


def cached_prefill_time_s(model: Deployment | Model | str, gpu: GPU | str | None = None, *,
                          prompt_tokens: int, cached_tokens: int = 0,
                          **deployment_keywords: Any) -> float:
    """Seconds to prefill a ``prompt_tokens`` prompt whose first ``cached_tokens`` are served
    from the prefix cache (0 ≤ cached < prompt), for a ``Deployment`` (or ``model`` on ``gpu``
    with its keywords): the full prefill's step with the bytes a cached one still moves (the
    suffix, and the cached KV read back) and the FLOPs it still does, through the one law."""
    d = as_deployment(model, gpu, **deployment_keywords)
    t = positive_integer("prompt_tokens", prompt_tokens)
    h = integer("cached_tokens", cached_tokens, 0, t - 1)
    full = prefill_step(d, batch=1, prompt_tokens=t)
    if h == 0:
        return full.time_s
    suffix = prefill_step(d, batch=1, prompt_tokens=t - h)
    prefix = prefill_step(d, batch=1, prompt_tokens=h)
    byte_share = (suffix.bytes + d.model.kv_bytes(h, d.kv, tp=d.tp)) / full.bytes
    flop_share = (full.flops - prefix.flops) / full.flops
    return float(law_seconds(full.weights_s * byte_share, full.kv_s * byte_share,
                             full.compute_s * flop_share, full.fixed_s, full.allreduce_s,
                             full.law, full.attention_s * flop_share))


def prefill_saving(model: Deployment | Model | str, gpu: GPU | str | None = None, *,
                   prompt_tokens: int, cached_tokens: int, **kwargs: Any) -> dict[str, float]:
    """TTFT without and with the cached prefix (seconds) and the fraction of it saved."""
    d = as_deployment(model, gpu, **kwargs)
    cold = cached_prefill_time_s(d, prompt_tokens=prompt_tokens)
    warm = cached_prefill_time_s(d, prompt_tokens=prompt_tokens, cached_tokens=cached_tokens)
    return {"ttft_s": cold, "cached_ttft_s": warm, "saving": 1 - warm / cold}


def input_cost_per_million(model: Deployment | Model | str, gpu: GPU | str | None = None, *,
                           dollars_per_gpu_hour: float, hit_rate: float = 0.0,
                           prompt_tokens: int = 4096, **deployment_keywords: Any) -> float:
    """$ per 10⁶ input tokens when a share ``hit_rate`` of every ``prompt_tokens`` prompt is
    served from the prefix cache: the GPUs' price over the prompt tokens they get through per
    second (cached ones included), prefilling one prompt at a time.

    E.g. ``input_cost_per_million("llama-3.1-8b", "h100-sxm", dollars_per_gpu_hour=2.90,
    hit_rate=0.6)``: what an input token costs with a 60% prefix hit rate.
    """
    d = as_deployment(model, gpu, **deployment_keywords)
    rate = number("hit_rate", hit_rate, minimum=0.0, maximum=1.0)
    t = positive_integer("prompt_tokens", prompt_tokens)
    cached = min(round(rate * t), t - 1)
    seconds = cached_prefill_time_s(d, prompt_tokens=t, cached_tokens=cached)
    price = number("dollars_per_gpu_hour", dollars_per_gpu_hour, positive=True)
    return cost_per_million_tokens(price * d.n_gpus, t / seconds)


def kv_load_time_s(model: Model | str, cached_tokens: int, link_bytes_per_s: float, *,
                   kv_dtype: str = "bf16", n_gpus: int = 1) -> float:
    """Seconds to bring a cached ``cached_tokens`` prefix (its KV, and for hybrids the recurrent
    state at its end) into one GPU over a link of ``link_bytes_per_s``."""
    m = resolve_model(model)
    h = positive_integer("cached_tokens", cached_tokens)
    bandwidth = number("link_bytes_per_s", link_bytes_per_s, positive=True)
    return m.kv_bytes(h, kv_dtype, tp=n_gpus) / bandwidth


def break_even_bandwidth(model: Deployment | Model | str, gpu: GPU | str | None = None, *,
                         cached_tokens: int, **deployment_keywords: Any) -> float:
    """Link bytes/s (per GPU) above which loading a cached ``cached_tokens`` prefix is faster
    than computing it again: ``kv_bytes(H) / prefill_time(H)``."""
    d = as_deployment(model, gpu, **deployment_keywords)
    h = positive_integer("cached_tokens", cached_tokens)
    step = prefill_step(d, batch=1, prompt_tokens=h)
    return d.model.kv_bytes(h, d.kv, tp=d.tp) / step.time_s


# --- data -----------------------------------------------------------------------------------

def _rows(name: str) -> tuple[dict[str, str], ...]:
    """The rows of ``data/<name>`` (of ``$KVLIB_DATA`` when set), checked by
    ``kvlib.core.data.csv_path`` (for cached_input_prices.csv: a cached price at most the
    input price); read again when the file changes."""
    return tuple(row for _, row in _numbered_rows(name))


def _numbered_rows(name: str) -> tuple[tuple[int, dict[str, str]], ...]:
    """``_rows`` with each row's line in the file."""
    path = csv_path(name)
    stat = path.stat()
    return _read_rows(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=None)
def _read_rows(path: Path, mtime_ns: int, size: int) -> tuple[tuple[int, dict[str, str]], ...]:
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        return tuple((reader.line_num, row) for row in reader)


def cached_input_prices() -> pd.DataFrame:
    """``data/cached_input_prices.csv``: API providers' input and cached-input prices ($ per 10⁶
    tokens, dated and sourced), with ``cached_share`` = cached ÷ uncached price. A provider and
    model on two rows is a ValueError naming both lines (``cached_share`` reads one price)."""
    numbered = _numbered_rows("cached_input_prices.csv")
    seen: dict[tuple[str, str], int] = {}
    for line, row in numbered:
        key = (row["provider"], row["model"])
        if key in seen:
            raise ValueError(f"{csv_path('cached_input_prices.csv')}: line {line}, columns "
                             f"provider and model: {key[0]} / {key[1]} repeats line "
                             f"{seen[key]} (keep one price per provider and model)")
        seen[key] = line
    df = pd.DataFrame([row for _, row in numbered])
    for col in ("input_dollars_per_million", "cached_input_dollars_per_million",
                "cache_write_dollars_per_million"):
        df[col] = pd.to_numeric(df[col]) if col in df else float("nan")  # optional column
    df["cached_share"] = df["cached_input_dollars_per_million"] / df["input_dollars_per_million"]
    return df


def cached_share(provider: str, model: str) -> float:
    """Cached-input price ÷ input price of one row of ``data/cached_input_prices.csv``
    (KeyError naming the known rows)."""
    df = cached_input_prices()
    row = df[(df["provider"] == provider) & (df["model"] == model)]
    if row.empty:
        known = "; ".join(f"{p} / {m}" for p, m in zip(df["provider"], df["model"]))
        raise KeyError(f"no cached-input price for {provider} / {model}; known: {known}")
    return float(row["cached_share"].iloc[0])


def offload_links() -> pd.DataFrame:
    """``data/offload_links.csv``: links a KV cache tier is read over, bytes/s per direction."""
    df = pd.DataFrame(list(_rows("offload_links.csv")))
    df["bytes_per_s"] = pd.to_numeric(df["bytes_per_s"])
    return df
