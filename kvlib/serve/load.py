"""Requests arriving over time: what ``vllm bench serve`` would measure, and the load a latency
target allows.

``bench_serve`` sends requests to one replica of a ``Deployment`` as ``vllm bench serve`` does —
open loop at ``request_rate`` (gamma-distributed gaps of shape ``burstiness``, vLLM's definition:
1 is Poisson, below 1 burstier, ``inf`` evenly spaced; an infinite rate sends everything at once)
or closed loop at ``concurrency`` (``--max-concurrency``: a new request is sent when one finishes)
— and serves them with vLLM's scheduling (``kvlib.engines.scheduler``), the KV pool and limits
of the deployment's own engine (``engine_start``: vLLM's 16-token blocks and ``max_num_seqs``,
SGLang's 1-token pages and ``max_running_requests``, TensorRT-LLM's 32-token blocks and
``max_batch_size``; SGLang's and TensorRT-LLM's own schedulers are not modelled) and the speed
model's step times with that engine's step cost (``roofline.StepTimer``).

``max_rate_at_slo`` searches the highest request rate whose ``percentile`` TTFT and TPOT stay
within an ``SLO``; Little's law turns it into users in flight (rate × mean time in system).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core.checks import integer, number, positive_integer
from ..deployment import ENGINE_NAMES, Deployment
from ..deployment import deployment as as_deployment
from ..engines.capacity import NoKVMemory, derived_max_model_len
from ..engines.pools import engine_start
from ..engines.scheduler import ServingRun, check_serving_inputs, simulate_serving
from ..speed.roofline import PREFILL_FIRST_ENGINES, StepTimer
from .cost import cost_per_million_tokens


def _rate(name: str, value: Any) -> float:
    """A positive number, or infinity (``float("inf")``: at once / evenly spaced)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
            and value == math.inf:
        return math.inf
    return number(name, value, positive=True)


#: The latest send time ``arrival_times`` gives (s, about 32 years): float64 still resolves
#: 0.12 µs there, so latencies of milliseconds keep their digits; a rate so low that the
#: requests spread past it is refused (at 10⁻²⁰⁰ requests/s every latency would read 0).
MAX_ARRIVAL_S = 1e9


def arrival_times(n: int, request_rate: float, burstiness: float = 1.0,
                  seed: int = 0) -> np.ndarray:
    """Send times (s) of ``n`` requests at ``request_rate`` per second, as ``vllm bench serve``
    draws them: gaps from a gamma distribution of shape ``burstiness`` and mean 1 ÷ rate (the
    first request waits one gap too); an infinite rate sends every request at 0, an infinite
    burstiness spaces them evenly. Seeded: the same seed gives the same gaps at every rate, only
    scaled, so latencies grow monotonically with the rate. A rate that spreads the requests
    past ``MAX_ARRIVAL_S`` is a ValueError."""
    n = positive_integer("requests", n)
    rate = _rate("request_rate", request_rate)
    shape = _rate("burstiness", burstiness)
    if rate == math.inf:
        return np.zeros(n)
    with np.errstate(over="ignore"):
        if shape == math.inf:
            times = np.arange(1, n + 1) / rate
        else:
            gaps = np.random.default_rng(integer("seed", seed, 0)).gamma(shape, 1.0 / shape,
                                                                         size=n)
            times = np.cumsum(gaps) / rate
    if not times[-1] <= MAX_ARRIVAL_S:
        raise ValueError(f"request_rate {rate:g}/s spreads {n:,} requests over {times[-1]:.3g} s, "
                         f"past {MAX_ARRIVAL_S:.0e} s (32 years), where float64 send times lose "
                         "the precision of the latencies: raise the rate")
    return times


#: Engines that admit a request only when its whole prompt + output fits beside the running
#: requests' same reservations: TensorRT-LLM (``SchedulerConfig.capacity_scheduler_policy``
#: defaults to ``GUARANTEED_NO_EVICT``, "only accepts new requests if they can complete without
#: eviction"; TensorRT-LLM documentation, SchedulerConfig, 1.3.0rc27).
RESERVING_ENGINES = ("tensorrt-llm",)


def _refuse_speculation(d: Deployment, caller: str) -> None:
    """ValueError for a speculative deployment: the load simulator decodes one token a step."""
    if d.speculative is not None:
        raise ValueError(f"{caller} simulates decoding without speculation: for speculative "
                         "decoding use kvlib.speculative_decode")


def _check_lengths(d: Deployment, prompt: np.ndarray, output: np.ndarray) -> None:
    """ValueError naming the first request longer than the engine accepts: the deployment's
    ``max_model_len``, else the model's maximum context (``derived_max_model_len``) unless
    ``allow_long_max_model_len`` (the rule of ``serving_point``)."""
    total = prompt + output
    engine = ENGINE_NAMES[d.engine]
    if d.max_model_len is not None:
        limit, what, hint = d.max_model_len, f"max_model_len {d.max_model_len:,}", ""
    else:
        limit = None if d.allow_long_max_model_len else derived_max_model_len(d.model)
        what = f"{d.model.name}'s maximum context of {limit or 0:,} tokens"
        hint = " (override with allow_long_max_model_len=True)"
    if limit is not None and (total > limit).any():
        i = int(np.argmax(total > limit))
        raise ValueError(f"request {i} ({int(prompt[i]):,} + {int(output[i]):,} = "
                         f"{int(total[i]):,} tokens) exceeds {what}: {engine} refuses it{hint}")


def bench_serve(deployment: Deployment | Any, requests: Any, *, request_rate: float | None = None,
                concurrency: int | None = None, burstiness: float = 1.0, seed: int = 0,
                prefix_ids: Any = None, **deployment_keywords: Any) -> ServingRun:
    """What ``vllm bench serve`` would measure for ``requests`` ((n, 2) prompt and output tokens)
    on one replica of ``deployment``: open loop at ``request_rate``, closed loop at
    ``concurrency``, or both (requests sent at the rate, at most ``concurrency`` in flight).
    Latencies run from the moment the client sends a request. vLLM and TensorRT-LLM put prompt
    chunks inside decode steps, up to the engine's tokens per step; SGLang
    (``roofline.PREFILL_FIRST_ENGINES``) runs them first, as batches of up to its
    ``chunked_prefill_size`` prompt tokens alone (``simulate_serving(prefill_first=True)``);
    TensorRT-LLM (``RESERVING_ENGINES``) admits a request only when its whole output fits
    (``reserve_output``). ``prefix_ids`` (the ids of each prompt's full blocks,
    ``kvlib.engines.prefix.shared_prefix_ids``) turns on prefix caching. ``deployment`` may
    be a model with ``gpu=`` and the deployment's keywords. A request longer than the engine
    accepts (``max_model_len``, else the model's maximum context) and a speculative deployment
    (``kvlib.speculative_decode`` prices those) are ValueErrors."""
    gpu = deployment_keywords.pop("gpu", None)
    d = _engine_deployment(as_deployment(deployment, gpu, **deployment_keywords)
                           if deployment_keywords or gpu is not None
                           else as_deployment(deployment))
    _refuse_speculation(d, "bench_serve")
    reqs = np.asarray(requests)
    if reqs.ndim != 2 or reqs.shape[1] != 2 or len(reqs) == 0:
        raise ValueError("requests must be an (n, 2) array of prompt and output tokens")
    _check_lengths(d, *check_serving_inputs(reqs, np.zeros(len(reqs)))[:2])
    if request_rate is None and concurrency is None:
        request_rate = math.inf
    sent = (arrival_times(len(reqs), request_rate, burstiness, seed) if request_rate is not None
            else np.zeros(len(reqs)))
    try:
        start = engine_start(d)
    except NoKVMemory as refused:
        raise ValueError(f"{d.model.name} on {d.tp} × {d.gpu.name}: the KV pool is empty "
                         f"({refused.terms})") from None
    seqs = start.max_running
    if d.engine == "tensorrt-llm":  # a step carries at most max_num_tokens tokens, decodes too
        seqs = min(seqs, start.max_batched_tokens)
    if concurrency is not None:
        seqs = min(seqs, positive_integer("concurrency", concurrency))
    pool = start.pool
    if pool.num_blocks <= 0:
        raise ValueError(f"{d.model.name} on {d.tp} × {d.gpu.name}: the KV pool is empty "
                         "(the weights and start-up buffers fill the memory)")
    first = d.engine in PREFILL_FIRST_ENGINES
    run = simulate_serving(reqs, sent, pool_blocks=pool.num_blocks, block_size=pool.block_size,
                           step_time=StepTimer(d), max_num_seqs=seqs,
                           max_num_batched_tokens=(start.max_batched_tokens if first
                                                   else start.step_tokens(seqs)),
                           prefix_ids=prefix_ids, prefill_first=first,
                           reserve_output=d.engine in RESERVING_ENGINES)
    if concurrency is None or concurrency >= len(reqs):
        return run
    return _closed_loop(run, sent, concurrency)


def _engine_deployment(d: Deployment) -> Deployment:
    """A vLLM deployment ``resolved()``; SGLang's and TensorRT-LLM's as given, their pools
    reading ``None`` as those engines' own defaults."""
    return d.resolved() if d.engine == "vllm" else d


def _closed_loop(run: ServingRun, sent: np.ndarray, concurrency: int) -> ServingRun:
    """A run served with at most ``concurrency`` requests admitted, its latencies taken from the
    moment a closed-loop client would have sent each request: when the k-th earlier request
    finished (k = index − concurrency + 1, in the engine's first-come order), or at its own send
    time if later."""
    finish = run.arrival_s + run.e2e_s
    slot = np.concatenate((np.full(concurrency, -np.inf), np.sort(finish)[:-concurrency]))
    send = np.maximum(sent, slot)
    shift = send - run.arrival_s
    return ServingRun(run.prompt_tokens, run.output_tokens, send, run.ttft_s - shift, run.tpot_s,
                      run.e2e_s - shift, run.itl_s, run.itl_weight, run.preemptions, run.steps,
                      float(finish.max() - send.min()), run.cached_tokens)


#: The share of a run's requests, by send order, left out at each end when a latency target is
#: judged (``steady``): the first arrive at an idle engine, the last leave it emptying.
EDGE_SHARE = 0.1


def steady(run: ServingRun) -> np.ndarray:
    """Which requests of ``run`` were sent in its steady middle: all but the first and last
    ``EDGE_SHARE`` in send order (every request when there are fewer than ten)."""
    n = len(run.arrival_s)
    keep = np.ones(n, dtype=bool)
    edge = int(n * EDGE_SHARE)
    if n >= 10 and edge:
        order = np.argsort(run.arrival_s, kind="stable")
        keep[order[:edge]] = keep[order[n - edge:]] = False
    return keep


def saturated_rps(run: ServingRun) -> float:
    """Requests/s a replica completes while its queue is full, from a run with every request
    sent at once: the output tokens emitted between the ``EDGE_SHARE`` and the half-way
    completion (each request's first token at its TTFT, the rest spread evenly to its end),
    over the time between them, ÷ the mean output tokens per request (the first leave before
    the engine is full, the last while it empties). Tokens, not completions: requests of one
    length finish in waves, and a window of completions that cuts a wave miscounts by up to a
    third (two waves of 51, a window holding 82 completions over one wave's time: +37%).
    Every request over the whole run when there are fewer than ten, or the window is empty."""
    finish = np.sort(run.arrival_s + run.e2e_s)
    n = len(finish)
    a, b = int(n * EDGE_SHARE), n // 2
    if n < 10 or finish[b] <= finish[a]:
        return n / run.duration_s
    start, stop = finish[a], finish[b]
    first = run.arrival_s + run.ttft_s
    end = run.arrival_s + run.e2e_s
    out = run.output_tokens.astype(float)
    spread = np.clip(np.minimum(end, stop) - np.maximum(first, start), 0.0, None)
    tokens = (spread / np.maximum(end - first, 1e-12) * (out - 1)).sum() \
        + ((first >= start) & (first <= stop)).sum()
    return float(tokens / (stop - start) / out.mean())


@dataclass(frozen=True)
class SLO:
    """A latency target: the ``percentile`` (above 0, at most 100) of time to first token within
    ``ttft_s`` and of time per output token within ``tpot_s`` (seconds; None: no bound on it). A
    per-user speed of 20 tokens/s is ``tpot_s=0.05``."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    percentile: float = 99.0

    def __post_init__(self) -> None:
        if self.ttft_s is None and self.tpot_s is None:
            raise ValueError("an SLO bounds TTFT, TPOT or both")
        for name in ("ttft_s", "tpot_s"):
            if getattr(self, name) is not None:
                number(name, getattr(self, name), positive=True)
        if number("percentile", self.percentile, maximum=100) <= 0:
            raise ValueError(f"percentile must lie in (0, 100], got {self.percentile!r}")

    def observed(self, run: ServingRun) -> tuple[float, float]:
        """The run's TTFT and TPOT at the percentile (seconds; TPOT over requests of 2 tokens or
        more, as ``vllm bench serve`` counts it), over its ``steady`` requests."""
        keep = steady(run)
        multi = keep & (run.output_tokens > 1)
        tpot = float(np.percentile(run.tpot_s[multi], self.percentile)) if multi.any() else 0.0
        return float(np.percentile(run.ttft_s[keep], self.percentile)), tpot

    def met(self, run: ServingRun) -> bool:
        ttft, tpot = self.observed(run)
        return ((self.ttft_s is None or ttft <= self.ttft_s)
                and (self.tpot_s is None or tpot <= self.tpot_s))


@dataclass(frozen=True)
class SLOCapacity:
    """What one replica sustains within an SLO (``max_rate_at_slo``).

    rate_rps: the highest request rate found within the SLO (requests/s; 0 when even one request
    at a time misses it); saturated_rps: what the replica completes with its queue full
    (``saturated_rps``); concurrency: requests in flight at that rate (Little's law: rate × mean
    E2E of the steady requests); utilization: output throughput ÷ the saturated one; ttft_s /
    tpot_s: the run's values at the SLO's percentile over its steady requests;
    output_tokens_per_s, input_tokens_per_s: throughput at that rate;
    n_gpus: GPUs of one replica; tolerance: the search stops when its bounds are within this
    share of each other; run: the run at ``rate_rps``.
    """

    deployment: Deployment
    slo: SLO
    rate_rps: float
    saturated_rps: float
    concurrency: float
    utilization: float
    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    n_gpus: int
    tolerance: float
    run: ServingRun | None

    def _met(self) -> None:
        """ValueError when no rate meets the SLO (``rate_rps`` 0): nothing to price or scale."""
        if self.rate_rps <= 0:
            raise ValueError("no request rate meets this SLO on this deployment: a replica "
                             "misses it even with one request at a time")

    def replicas_for(self, target_rps: float) -> int:
        """Replicas a peak of ``target_rps`` requests/s needs (ValueError when none suffices)."""
        target = number("target_rps", target_rps, positive=True)
        self._met()
        return math.ceil(target / self.rate_rps)

    def gpus_for(self, target_rps: float) -> int:
        """GPUs a peak of ``target_rps`` requests/s needs: replicas × GPUs per replica."""
        return self.replicas_for(target_rps) * self.n_gpus

    def dollars_per_million_output(self, dollars_per_gpu_hour: float) -> float:
        """$ per 10⁶ output tokens at this load, every GPU-second charged to output tokens."""
        price = number("dollars_per_gpu_hour", dollars_per_gpu_hour, positive=True)
        self._met()
        return cost_per_million_tokens(price * self.n_gpus, self.output_tokens_per_s)

    def dollars_per_million_tokens(self, dollars_per_gpu_hour: float) -> float:
        """$ per 10⁶ tokens, input and output together, at this load."""
        price = number("dollars_per_gpu_hour", dollars_per_gpu_hour, positive=True)
        self._met()
        return cost_per_million_tokens(price * self.n_gpus,
                                       self.output_tokens_per_s + self.input_tokens_per_s)

    def dollars_per_user_hour(self, dollars_per_gpu_hour: float) -> float:
        """$ per hour of one user in flight: the replica's price ÷ the users it serves."""
        price = number("dollars_per_gpu_hour", dollars_per_gpu_hour, positive=True)
        self._met()
        if self.concurrency <= 0:
            raise ValueError("no user is served within this SLO")
        return price * self.n_gpus / self.concurrency


def max_rate_at_slo(deployment: Deployment | Any, requests: Any, slo: SLO, *,
                    burstiness: float = 1.0, seed: int = 0,
                    tolerance: float = 0.02) -> SLOCapacity:
    """The highest request rate one replica of ``deployment`` sustains with ``requests`` sent
    open loop (``bench_serve``, seeded) and the SLO met, found by bisection on the rate between
    a thousandth of the saturated rate and the saturated rate itself (what the replica completes
    with every request sent at once: no higher rate is sustained), to within ``tolerance`` (a
    share, e.g. 0.02).
    Latency grows with the rate for a fixed seed (the gaps only scale), so the search is
    monotone; the same inputs give the same answer. ``tolerance`` below ``MIN_TOLERANCE`` is a
    ValueError."""
    _refuse_speculation(as_deployment(deployment), "max_rate_at_slo")
    return max_rates_at_slos(deployment, requests, [slo], burstiness=burstiness, seed=seed,
                             tolerance=tolerance)[0]


#: The finest ``tolerance`` of the rate search (a share): 1e-6 already costs ~23 bisection runs;
#: finer ones only split rates whose runs the simulator cannot tell apart, and below float64's
#: 2.2e-16 the bounds can never come that close, so the search would never end.
MIN_TOLERANCE = 1e-6


def max_rates_at_slos(deployment: Deployment | Any, requests: Any, slos: Any, *,
                      burstiness: float = 1.0, seed: int = 0,
                      tolerance: float = 0.02) -> list[SLOCapacity]:
    """``max_rate_at_slo`` for each SLO of ``slos``, in order, sharing the saturated run and
    every trial run between the searches (each search tries the same rates it would alone, so
    each answer is ``max_rate_at_slo``'s; searches that agree for a while cost one)."""
    d = _engine_deployment(as_deployment(deployment))
    _refuse_speculation(d, "max_rates_at_slos")
    slos = list(slos)
    for slo in slos:
        if not isinstance(slo, SLO):
            raise TypeError(f"slo must be an SLO, got {type(slo).__name__}")
    tol = number("tolerance", tolerance, positive=True, maximum=1)
    if tol < MIN_TOLERANCE:
        raise ValueError(f"tolerance must be >= {MIN_TOLERANCE:g}, got {tolerance!r}: finer "
                         "shares split rates the simulator cannot tell apart, and below 2.2e-16 "
                         "the bisection never ends")
    reqs = np.asarray(requests)
    saturated = bench_serve(d, reqs, request_rate=math.inf)
    sat_rps = saturated_rps(saturated)
    sat_out = sat_rps * float(saturated.output_tokens.mean())
    runs: dict[float, ServingRun] = {}

    def trial(rate: float) -> ServingRun:
        if rate not in runs:
            runs[rate] = bench_serve(d, reqs, request_rate=rate, burstiness=burstiness,
                                     seed=seed)
        return runs[rate]

    return [_search(d, slo, trial, sat_rps, sat_out, tol) for slo in slos]


def _search(d: Deployment, slo: SLO, trial: Any, sat_rps: float, sat_out: float,
            tol: float) -> SLOCapacity:
    """One bisection of ``max_rate_at_slo`` with ``trial(rate)`` giving the run at a rate."""
    lo, hi = sat_rps / 1000, sat_rps  # no rate above what the replica completes is sustained
    low_run = trial(lo)
    if not slo.met(low_run):
        ttft, tpot = slo.observed(low_run)
        return SLOCapacity(d, slo, 0.0, sat_rps, 0.0, 0.0, ttft, tpot, 0.0, 0.0, d.n_gpus, tol,
                           None)
    best = low_run
    high_run = trial(hi)
    if slo.met(high_run):
        lo, best = hi, high_run
    else:
        while hi / lo > 1 + tol:
            mid = math.sqrt(lo * hi)
            run = trial(mid)
            if slo.met(run):
                lo, best = mid, run
            else:
                hi = mid
    ttft, tpot = slo.observed(best)
    keep = steady(best)
    out_tps = lo * float(best.output_tokens.mean())
    in_tps = lo * float(best.prompt_tokens.mean())
    little = lo * float(best.e2e_s[keep].mean())
    return SLOCapacity(d, slo, lo, sat_rps, little, out_tps / sat_out, ttft, tpot, out_tps,
                       in_tps, d.n_gpus, tol, best)


def run_row(run: ServingRun, **labels: Any) -> dict[str, Any]:
    """One row of a sweep: ``labels``, then what ``vllm bench serve`` reports of ``run`` in
    seconds and per second (p50/p90/p99 TTFT, TPOT and E2E; request and output throughput), the
    users in flight by Little's law (completed rate × mean E2E), the preemptions and, with
    prefix caching, ``cached_share`` (prompt tokens hit ÷ prompt tokens)."""
    s = run.summary()
    row = dict(labels)
    for metric in ("ttft", "tpot", "e2el"):
        for stat in ("median", "p90", "p99"):
            row[f"{stat}_{metric.removesuffix('l')}_s"] = s[f"{stat}_{metric}_ms"] / 1000
    row.update(request_throughput=s["request_throughput"],
               output_throughput=s["output_throughput"],
               in_flight=s["request_throughput"] * float(run.e2e_s.mean()),
               preemptions=run.preemptions)
    if run.cached_tokens is not None:      # prefix caching: prompt tokens served from the cache
        row["cached_share"] = float(run.cached_tokens.sum() / run.prompt_tokens.sum())
    return row


def rate_sweep(deployment: Deployment | Any, requests: Any, rates: Any, *,
               burstiness: float = 1.0, seed: int = 0, prefix_ids: Any = None) -> pd.DataFrame:
    """``bench_serve`` at each request rate of ``rates`` (requests/s), one ``run_row`` each
    (column ``request_rate``)."""
    d = _engine_deployment(as_deployment(deployment))
    rates = [_rate("rates", r) for r in rates]
    return pd.DataFrame([run_row(bench_serve(d, requests, request_rate=r,
                                             burstiness=burstiness, seed=seed,
                                             prefix_ids=prefix_ids),
                                 request_rate=r) for r in rates])
