"""Paging economics on top of the allocator simulator: sweeps, closed forms, throughput trade-offs.

Everything here calls ``kvlib.engines.allocator.simulate`` (or is exact arithmetic on request lengths) and
returns plain numbers or small DataFrames for the paging chapter:

- ``time_weighted_lengths`` / ``reserve_max_shares``: the closed form of Orca (Max) at saturation,
  which the vLLM paper's Fig. 2 bar can be read back through;
- ``compare_policies``, ``block_size_sweep``, ``offered_load_sweep``: simulate() over policies,
  block sizes and arrival rates, one row per run;
- ``relative_throughput`` / ``breakeven_penalty``: a paged kernel that is slower by a fraction
  against the larger batch paging fits (throughput ∝ batch / step time);
- ``simulated``: one quantity of one cached run, the ``sim`` computation of ``kvlib.recheck``;
- ``engine_block_sizes``: the engines' default block sizes from ``data/engine_block_sizes.csv``.
"""
from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from .allocator import POLICIES, SimResult, simulate
from ..core.data import csv_path
from .workloads import alpaca, as_requests, sharegpt

#: Shares of pool token-steps in the vLLM paper's Fig. 2 order (SimResult.pool_breakdown keys).
BREAKDOWN = ("token_states", "reservation", "internal", "free")
#: Synthetic workloads ``simulated`` can draw (kvlib.engines.workloads).
WORKLOADS = ("sharegpt", "alpaca")


def time_weighted_lengths(requests: ArrayLike) -> tuple[float, float]:
    """(held, final): tokens a running request holds, and its final length, averaged per request-step.

    A request of p prompt and o output tokens is resident for o + 1 steps holding p, p+1, …, p+o
    tokens, so long requests weigh more: held = Σ(p(o+1) + o(o+1)/2) / Σ(o+1) and
    final = Σ(p+o)(o+1) / Σ(o+1) (tokens).
    """
    reqs = as_requests(requests).astype(np.float64)
    p, o = reqs[:, 0], reqs[:, 1]
    steps = o + 1
    held = float((p * steps + o * steps / 2).sum() / steps.sum())
    final = float(((p + o) * steps).sum() / steps.sum())
    return held, final


def reserve_max_shares(requests: ArrayLike, pool_tokens: int, max_model_len: int) -> dict[str, float]:
    """Orca (Max) at saturation, in closed form: shares of the pool, as ``SimResult.pool_breakdown``.

    ⌊pool / max_model_len⌋ slots are always full (a queue never lets one idle), each holding the
    time-weighted ``held`` tokens of state, ``final − held`` reserved for tokens still to come and
    ``max_model_len − final`` never written; the remainder of the pool is free.
    """
    if max_model_len < 1 or pool_tokens < max_model_len:
        raise ValueError(f"need 1 <= max_model_len <= pool_tokens, got {max_model_len} and {pool_tokens}")
    held, final = time_weighted_lengths(requests)
    if final > max_model_len:
        raise ValueError(f"requests average {final:.0f} tokens, more than max_model_len ({max_model_len})")
    slots = pool_tokens // max_model_len
    return {"token_states": slots * held / pool_tokens,
            "reservation": slots * (final - held) / pool_tokens,
            "internal": slots * (max_model_len - final) / pool_tokens,
            "free": 1 - slots * max_model_len / pool_tokens}


def reserve_max_by_context(requests: ArrayLike, pool_tokens: int,
                           context_lengths: Sequence[int]) -> pd.DataFrame:
    """Orca (Max) on one pool at several ``max_model_len``: one row each with the reservations that
    fit (⌊pool / max_model_len⌋) and ``reserve_max_shares`` (fractions of the pool).

    E.g. a 419,760-token pool at 131,072 tokens holds 3 reservations.
    """
    return pd.DataFrame([{"max_model_len": int(m), "reservations": int(pool_tokens // m),
                          **reserve_max_shares(requests, pool_tokens, int(m))}
                         for m in context_lengths])


def _row(res: SimResult, **labels: Any) -> dict[str, Any]:
    return {**labels, **res.pool_breakdown(), "token_utilization": res.token_utilization,
            "rounding": res.pool_rounding_share, "mean_batch": res.mean_batch,
            "completed_per_step": res.completed_per_step, "preemptions": res.preemptions,
            "steps": res.steps, "rejected": res.rejected}


def compare_policies(requests: ArrayLike, pool_tokens: int, max_model_len: int, *,
                     block_size: int = 16, allocator: str = "buddy",
                     policies: Sequence[str] = POLICIES, **kwargs: Any) -> pd.DataFrame:
    """One simulate() row per policy: pool shares (``BREAKDOWN``), utilization, batch, throughput.

    Reservation policies use ``allocator`` (the paper's Orca: ``"buddy"``); paged uses
    ``block_size``. Extra ``kwargs`` go to simulate() (``arrival_rate``, ``seed``, ...).
    """
    rows = []
    for policy in policies:
        alloc = "first_fit" if policy == "paged" else allocator
        res = simulate(requests, pool_tokens, policy, block_size, max_model_len,
                       allocator=alloc, **kwargs)
        rows.append(_row(res, policy=policy, allocator=alloc if policy != "paged" else "none"))
    return pd.DataFrame(rows)


def block_size_sweep(requests: ArrayLike, pool_tokens: int, block_sizes: Iterable[int],
                     **kwargs: Any) -> pd.DataFrame:
    """One paged simulate() row per block size; ``waste`` = 1 − token_utilization (of reserved slots)."""
    rows = [_row(simulate(requests, pool_tokens, "paged", int(bs), **kwargs), block_size=int(bs))
            for bs in block_sizes]
    df = pd.DataFrame(rows)
    df["waste"] = 1 - df["token_utilization"]
    return df


def offered_load_sweep(requests: ArrayLike, pool_tokens: int, loads: Iterable[float], policy: str, *,
                       seed: int = 0, **kwargs: Any) -> pd.DataFrame:
    """Poisson arrivals at ``load`` × the policy's saturated throughput, one row per load.

    The saturated throughput (requests/step) is ``completed_per_step`` with every request queued
    at step 0; a load above 1 is an overloaded server whose queue only grows.
    """
    capacity = simulate(requests, pool_tokens, policy, **kwargs).completed_per_step
    rows = []
    for load in loads:
        if not load > 0:
            raise ValueError(f"load must be > 0, got {load}")
        res = simulate(requests, pool_tokens, policy, seed=seed, arrival_rate=load * capacity, **kwargs)
        rows.append(_row(res, policy=policy, load=float(load), arrival_rate=load * capacity))
    return pd.DataFrame(rows)


def relative_throughput(batch: float, baseline_batch: float, kernel_penalty: float,
                        attention_share: float = 1.0) -> float:
    """Throughput of a paged engine over a contiguous one: (B / B₀) / (1 + a · penalty).

    Throughput ∝ batch / step time, with the step slowed only in its attention share ``a`` of
    time by a kernel that is ``kernel_penalty`` (a fraction: 0.2 = 20%) slower, and the step
    time otherwise independent of batch (memory-bound decode dominated by weight reads).
    """
    if batch < 0 or baseline_batch <= 0:
        raise ValueError(f"need batch >= 0 and baseline_batch > 0, got {batch} and {baseline_batch}")
    if kernel_penalty < 0 or not 0 <= attention_share <= 1:
        raise ValueError(f"need kernel_penalty >= 0 and attention_share in [0, 1], "
                         f"got {kernel_penalty} and {attention_share}")
    return (batch / baseline_batch) / (1 + attention_share * kernel_penalty)


def breakeven_penalty(batch: float, baseline_batch: float, attention_share: float = 1.0) -> float:
    """Kernel slowdown (fraction) at which paging stops paying: (B / B₀ − 1) / a; negative = never pays."""
    if baseline_batch <= 0 or not 0 < attention_share <= 1:
        raise ValueError(f"need baseline_batch > 0 and attention_share in (0, 1], "
                         f"got {baseline_batch} and {attention_share}")
    return (batch / baseline_batch - 1) / attention_share


def penalty_grid(batches: pd.DataFrame, baseline_batch: float, penalties: Iterable[float],
                 attention_share: float = 1.0) -> pd.DataFrame:
    """``relative_throughput`` for every (block_size, mean_batch) row of ``batches`` × penalty."""
    return pd.DataFrame([
        {"block_size": int(row.block_size), "kernel_penalty": float(p),
         "relative_throughput": relative_throughput(row.mean_batch, baseline_batch, p, attention_share)}
        for row in batches.itertuples() for p in penalties])


@lru_cache(maxsize=64)
def _cached_run(workload: str, n_requests: int, workload_seed: int, output_sigma: float | None,
                max_output_tokens: int | None, pool_tokens: int, policy: str, block_size: int,
                max_model_len: int | None, allocator: str, arrival_rate: float | None,
                seed: int) -> SimResult:
    if workload == "sharegpt":
        requests = sharegpt(n_requests, workload_seed, output_sigma=output_sigma,
                            max_output_tokens=max_output_tokens)
    elif workload == "alpaca":
        if output_sigma is not None or max_output_tokens is not None:
            raise ValueError("output_sigma and max_output_tokens apply to the sharegpt workload")
        requests = alpaca(n_requests, workload_seed)
    else:
        raise ValueError(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS)}")
    return simulate(requests, pool_tokens, policy, block_size, max_model_len, seed, arrival_rate,
                    allocator=allocator)


def simulated(quantity: str, pool_tokens: int, policy: str = "paged", *, workload: str = "sharegpt",
              n_requests: int = 10_000, workload_seed: int = 0, output_sigma: float | None = None,
              max_output_tokens: int | None = None, block_size: int = 16,
              max_model_len: int | None = None, allocator: str = "first_fit",
              arrival_rate: float | None = None, seed: int = 0) -> float:
    """One quantity of one simulated run (runs are cached), for claims rechecked by simulation.

    ``quantity``: a ``pool_breakdown`` share (``token_states``, ``reservation``, ``internal``,
    ``free``), ``waste`` (1 − token_states: the pool not holding token state), or a numeric
    ``SimResult`` field (``mean_batch``, ``token_utilization``, ...). Shares are fractions.
    """
    res = _cached_run(workload, n_requests, workload_seed, output_sigma, max_output_tokens,
                      pool_tokens, policy, block_size, max_model_len, allocator, arrival_rate, seed)
    shares = res.pool_breakdown()
    if quantity in shares:
        return shares[quantity]
    if quantity == "waste":
        return 1 - shares["token_states"]
    value = getattr(res, quantity, None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"unknown quantity {quantity!r}: a pool share ({', '.join(BREAKDOWN)}), "
                         f"'waste' or a numeric SimResult field")
    return float(value)


@lru_cache(maxsize=1)
def _engine_rows() -> tuple[dict[str, str], ...]:
    with open(csv_path("engine_block_sizes.csv"), encoding="utf-8", newline="") as f:
        return tuple(csv.DictReader(f))


def engine_block_sizes() -> pd.DataFrame:
    """``data/engine_block_sizes.csv``: each engine's default KV block (page) size, per version, sourced."""
    df = pd.DataFrame(list(_engine_rows()))
    df["default_tokens"] = df["default_tokens"].astype(int)
    return df


def engine_block_size(engine: str, version: str = "current") -> int:
    """Default tokens per KV block of ``engine`` at ``version`` (KeyError naming the known pairs)."""
    for row in _engine_rows():
        if row["engine"] == engine and row["version"] == version:
            return int(row["default_tokens"])
    known = ", ".join(f"{r['engine']}@{r['version']}" for r in _engine_rows())
    raise KeyError(f"no default block size for {engine}@{version}; known: {known}")
