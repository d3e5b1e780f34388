"""The engine advice of the book's source article, rechecked by simulation (``bench_serve``).

``budget_trade`` serves one workload at each token budget (``--max-num-batched-tokens``): the
saturated rate and, at one offered rate, what ``vllm bench serve`` reports. ``best_budget`` picks
the budget a goal favours — ``"latency"``: the lowest p99 TPOT (inter-token latency, what vLLM's
tuning guide means by latency here); ``"throughput"``: the highest saturated rate.
``pool_preemptions`` counts the preemptions of a run at a pool of each size. The claims rows
(``data/claims``, computations ``serving_budget`` and ``pool_preemptions``) describe the workload
in plain values; runs are cached per process (by deployment, requests, rate and seed), so
the claims that share a workload share its simulations.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from ..core.checks import number, positive_integer
from ..deployment import Deployment
from ..deployment import deployment as as_deployment
from ..engines.capacity import kv_pool
from ..engines.workloads import random_lengths
from ..engines.scheduler import ServingRun
from .load import bench_serve, run_row, saturated_rps

GOALS = ("latency", "throughput")


@lru_cache(maxsize=32)
def _bench(d: Deployment, requests: bytes, n: int, rate: float, seed: int) -> ServingRun:
    """``bench_serve`` of ``n`` requests given as int64 bytes, cached per process."""
    return bench_serve(d, np.frombuffer(requests, dtype=np.int64).reshape(n, 2),
                       request_rate=rate, seed=seed)


def _run(d: Deployment, requests: Any, rate: float = math.inf, seed: int = 0) -> ServingRun:
    req = np.ascontiguousarray(requests, dtype=np.int64)
    if req.ndim != 2 or req.shape[1] != 2 or len(req) == 0:
        raise ValueError("requests must be an (n, 2) array of prompt and output tokens")
    return _bench(d, req.tobytes(), len(req), float(rate), int(seed))


def budget_trade(deployment: Deployment | Any, requests: Any, budgets: Any, *,
                 load_share: float = 0.7, seed: int = 0) -> pd.DataFrame:
    """Per token budget (index ``budget``, tokens): ``saturated`` (requests/s with every request
    sent at once) and ``run_row``'s columns at ``load_share`` × the saturated rate of
    ``deployment`` as given (the same offered rate for every budget; Poisson, seeded)."""
    d = as_deployment(deployment).resolved()
    share = number("load_share", load_share, positive=True)
    rate = share * saturated_rps(_run(d, requests))
    rows = []
    for budget in budgets:
        b = d.with_(max_num_batched_tokens=positive_integer("budget", budget))
        rows.append({"budget": int(budget), "saturated": saturated_rps(_run(b, requests)),
                     **run_row(_run(b, requests, rate, seed))})
    return pd.DataFrame(rows).set_index("budget")


def best_budget(trade: pd.DataFrame, goal: str) -> int:
    """The budget of ``budget_trade``'s table that ``goal`` favours (tokens)."""
    if goal not in GOALS:
        raise ValueError(f"unknown goal {goal!r}; one of {', '.join(GOALS)}")
    column = trade["p99_tpot_s"] if goal == "latency" else -trade["saturated"]
    return int(column.idxmin())


def pool_preemptions(deployment: Deployment | Any, requests: Any, utilizations: Any, *,
                     load_share: float = 0.9, seed: int = 0) -> pd.DataFrame:
    """Per ``gpu_memory_utilization`` (index ``utilization``): the pool's tokens and a run at
    ``load_share`` × the saturated rate of ``deployment`` as given (``run_row``'s columns)."""
    d = as_deployment(deployment).resolved()
    rate = number("load_share", load_share, positive=True) * saturated_rps(_run(d, requests))
    rows = []
    for u in utilizations:
        sized = d.with_(gpu_memory_utilization=float(u))
        rows.append({"utilization": float(u), "pool_tokens": int(kv_pool(sized).tokens),
                     **run_row(_run(sized, requests, rate, seed))})
    return pd.DataFrame(rows).set_index("utilization")


def _cached(kind: str, model: str, gpu: str, tp: int, weights: str, kv: str, n_requests: int,
            input_len: int, output_len: int, range_ratio: float, seed: int, values: tuple,
            load_share: float) -> pd.DataFrame:
    d = Deployment(model, gpu, tp=tp, weights=weights, kv=kv)
    requests = random_lengths(n_requests, input_len, output_len, range_ratio, seed=seed)
    table = budget_trade if kind == "budget" else pool_preemptions
    return table(d, requests, values, load_share=load_share, seed=seed)


def _workload(model: str, gpu: str, n_requests: int, input_len: int, output_len: int,
              tp: int = 1, weights: str | None = None, kv: str = "bf16", range_ratio: float = 0.0,
              seed: int = 0) -> tuple:
    return (model, gpu, int(tp), weights, kv, int(n_requests), int(input_len), int(output_len),
            float(range_ratio), int(seed))


def serving_budget(goal: str, budgets: Any, load_share: float = 0.7, **workload: Any) -> float:
    """The budget ``goal`` favours among ``budgets`` for ``vllm bench serve``'s random dataset
    (``workload``: model, gpu, n_requests, input_len, output_len; optional tp, weights, kv,
    range_ratio, seed) on that deployment (tokens)."""
    if goal not in GOALS:
        raise ValueError(f"unknown goal {goal!r}; one of {', '.join(GOALS)}")
    trade = _cached("budget", *_workload(**workload), tuple(int(b) for b in budgets),
                    float(load_share))
    return float(best_budget(trade, goal))


def preemptions_with_pool(small_utilization: float, utilization: float, load_share: float = 0.9,
                          **workload: Any) -> float:
    """Preemptions of a run at ``load_share`` × the saturated rate once the pool of
    ``small_utilization`` grows to that of ``utilization``; ValueError if the small pool does
    not preempt (then the run says nothing about preemption)."""
    table = _cached("pool", *_workload(**workload),
                    (float(small_utilization), float(utilization)), float(load_share))
    small, large = table["preemptions"].tolist()
    if not small:
        raise ValueError(f"the pool at utilization {small_utilization} does not preempt at "
                         f"{load_share:.0%} of the saturated rate: nothing to recheck")
    if not math.isfinite(large):
        raise ValueError("the run did not finish")
    return float(large)
