"""A continuous-batching serving simulator that schedules as vLLM v1 does (vLLM 0.33.0).

``simulate_serving`` replays requests arriving over time on one engine, on a virtual clock that
advances by ``step_time(batch)`` after every step, and returns the latencies ``vllm bench serve``
reports. Each step follows ``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule()`` with its
defaults (FCFS policy, chunked prefill, prefix caching optional, no speculative decoding,
``long_prefill_token_threshold`` 0, watermark 0, ``scheduler_reserve_full_isl`` on):

1. every request whose arrival time has passed joins the back of the WAITING queue; with nothing
   waiting or running the clock jumps to the next arrival;
2. RUNNING requests, in order, while the token budget ``max_num_batched_tokens`` lasts: each gets
   ``min(tokens it still needs, budget left)`` — 1 for a decode, the rest of its prompt (or a
   chunk of it) for a prefill. A request holds ``ceil(computed tokens / block_size)`` blocks and
   allocates for the tokens scheduled this step; when the pool cannot give them, vLLM preempts the
   LAST running request (recompute: its blocks are freed, its computed tokens reset to 0, it goes
   to the FRONT of the waiting queue) and retries, until the allocation succeeds or the request
   preempted itself, which ends the running pass;
3. only if nothing was preempted this step: WAITING requests in FCFS order while budget is left
   and fewer than ``max_num_seqs`` run. The head is admitted only if the free blocks hold its
   whole sequence so far (prompt + tokens already generated, for a preempted one), and gets
   ``min(that sequence, budget left)`` tokens; a head that does not fit stops admission (no
   skipping);
4. after the step, every scheduled request whose computed tokens reached its sequence samples one
   token (its first token, after the step that completes its prompt); a request that has sampled
   ``output`` tokens finishes and frees its blocks. The last sampled token never enters the cache,
   so a request holds at most ``ceil((prompt + output - 1) / block_size)`` blocks.

Times: TTFT = first token − arrival (a preempted request keeps its first-token time), E2E = finish −
arrival, TPOT = (finish − first token) ÷ (output − 1), defined as 0 for a one-token output (as
``vllm bench serve`` does for its goodput; its TPOT statistics leave those requests out, and so
does ``ServingRun.summary``). ITL: the time between a request's consecutive tokens.

Checked against vLLM's own scheduler (``kvlib.engines.vllm_oracle.vllm_serving_run``, driven on
the same virtual clock): the same steps, preemptions and latencies to rounding
(``tests/test_serving_sim_oracle.py``).

Speed: runs of pure decode steps (every running request decoding, nothing admissible) advance
many steps at once, up to the first finish, the last step the pool has blocks for, or the next
arrival; a ``step_time`` with a ``decode_steps(computed, n_steps)`` method (``LinearStepTime``
has one) gives a run's step times in one call, any other callable is called once per step with
the same batches and gives the same result. Below ``LIST_BELOW`` running requests the state is
kept in Python lists, above ``TABLE_ABOVE`` in a numpy table (numpy's cost per call outweighs a
short loop); both give the same run. 10,000 chat requests take under a second.

Prefix caching (``prefix_ids``, vLLM's ``enable_prefix_caching``) runs the same steps one at a
time over a ``kvlib.engines.prefix.VllmBlockPool`` (``_PrefixEngine``): hits at admission, blocks
shared between running requests, cached blocks kept free until evicted; checked against vLLM's
scheduler with prefix caching on, hits included.

SGLang's policy (``prefill_first``; its scheduler runs "prefill first if possible" with
``enable_mixed_chunk`` off): a step is a prefill batch of prompt tokens alone — a part-way prompt
first, then waiting heads that fit, up to ``max_num_batched_tokens`` (its
``chunked_prefill_size``) — whenever there is one to run, the decodes paused; otherwise every
running request decodes. The same bookkeeping runs on the table only; prefix caching is not
combined with it. TensorRT-LLM's admission (``reserve_output``, its default
``GUARANTEED_NO_EVICT``): a waiting request is admitted only when the blocks its whole prompt +
output will hold fit beside the running requests' same reservations, so nothing is preempted
(its prompts are still chunked as vLLM chunks them). Not simulated: priority scheduling,
speculative decoding, KV connectors, ``long_prefill_token_threshold``, a watermark, and
``max_model_len`` (a request is assumed to fit it).
"""
from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.checks import number, positive_integer
from .prefix import VllmBlockPool

StepTime = Callable[[NDArray[np.int64]], float]


@dataclass(frozen=True)
class LinearStepTime:
    """A step-time law: ``base_s`` + ``per_token_s`` × tokens scheduled + ``per_context_token_s`` ×
    tokens already computed, summed over the batch (seconds).

    ``LinearStepTime(6e-3, 6e-5, 3e-9)`` (6 ms + 0.06 ms per scheduled token + 3 ns per context
    token; roughly an 8B model on one H100) gives a 4-request decode batch at 1,000 tokens of
    context each 6 + 4 × 0.06 + 4,000 × 3e-6 = 6.252 ms.
    """

    base_s: float
    per_token_s: float
    per_context_token_s: float = 0.0

    def __post_init__(self) -> None:
        number("base_s", self.base_s, positive=True)
        number("per_token_s", self.per_token_s, minimum=0.0)
        number("per_context_token_s", self.per_context_token_s, minimum=0.0)

    def _time(self, scheduled: int | NDArray[np.int64], context: int | NDArray[np.int64]) -> Any:
        return self.base_s + self.per_token_s * scheduled + self.per_context_token_s * context

    def __call__(self, batch: ArrayLike) -> float:
        """Seconds for one step; ``batch`` rows are (tokens scheduled, tokens already computed)."""
        scheduled, context = np.asarray(batch, dtype=np.int64).reshape(-1, 2).sum(axis=0).tolist()
        return float(self._time(scheduled, context))

    def decode_steps(self, computed: NDArray[np.int64], n_steps: int) -> NDArray[np.float64]:
        """Seconds of ``n_steps`` consecutive decode steps of the requests holding ``computed``
        tokens at the first (each schedules 1 token a step; the same numbers ``__call__`` gives)."""
        k = len(computed)
        start = int(computed.sum())
        return self._time(k, np.arange(start, start + k * n_steps, k, dtype=np.int64)[:n_steps])


def _weighted_percentile(values: NDArray[np.float64], weights: NDArray[np.int64],
                         q: float) -> float:
    """``np.percentile(np.repeat(values, weights), q)`` (linear), without the repeat."""
    order = np.argsort(values, kind="stable")
    v, cum = values[order], np.cumsum(weights[order])
    h = (cum[-1] - 1) * q / 100.0
    lo, hi = math.floor(h), math.ceil(h)
    x_lo = v[np.searchsorted(cum, lo, side="right")]
    x_hi = v[np.searchsorted(cum, hi, side="right")]
    return float(x_lo + (x_hi - x_lo) * (h - lo))


@dataclass(frozen=True, eq=False)
class ServingRun:
    """One simulated serving run; arrays are per request, in request order, in seconds.

    ``itl_s`` / ``itl_weight``: the distinct inter-token latencies and how many tokens saw each
    (``np.repeat(itl_s, itl_weight)`` is ``vllm bench serve``'s list of ITLs).
    """

    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    arrival_s: NDArray[np.float64]
    ttft_s: NDArray[np.float64]
    tpot_s: NDArray[np.float64]
    e2e_s: NDArray[np.float64]
    itl_s: NDArray[np.float64]
    itl_weight: NDArray[np.int64]
    preemptions: int          # recompute preemptions, all requests together
    steps: int                # engine steps that scheduled tokens
    duration_s: float         # first arrival to last finish
    cached_tokens: NDArray[np.int64] | None = None   # prefix caching: prompt tokens hit at
                                                      # each request's first admission

    def summary(self, percentiles: tuple[float, ...] = (90, 99)) -> dict[str, float]:
        """The numbers ``vllm bench serve`` prints (its ``--save-result`` keys): completed,
        duration (s), request/output/total-token throughput (per s), and mean, median and
        ``p{q}`` of ttft, tpot, itl and e2el in ms (TPOT over requests of 2 or more tokens)."""
        n = len(self.arrival_s)
        out_tok = int(self.output_tokens.sum())
        result: dict[str, float] = {
            "completed": n, "duration": self.duration_s,
            "request_throughput": n / self.duration_s,
            "output_throughput": out_tok / self.duration_s,
            "total_token_throughput": (out_tok + int(self.prompt_tokens.sum())) / self.duration_s,
        }
        multi = self.output_tokens > 1
        series = {"ttft": (self.ttft_s, None), "tpot": (self.tpot_s[multi], None),
                  "itl": (self.itl_s, self.itl_weight), "e2el": (self.e2e_s, None)}
        for name, (values, weights) in series.items():
            if len(values) == 0:
                values, weights = np.zeros(1), None
            if weights is None:
                result[f"mean_{name}_ms"] = float(np.mean(values)) * 1e3
                result[f"median_{name}_ms"] = float(np.median(values)) * 1e3
                for q in percentiles:
                    result[f"p{q:g}_{name}_ms"] = float(np.percentile(values, q)) * 1e3
            else:
                result[f"mean_{name}_ms"] = float(values @ weights / weights.sum()) * 1e3
                result[f"median_{name}_ms"] = _weighted_percentile(values, weights, 50) * 1e3
                for q in percentiles:
                    result[f"p{q:g}_{name}_ms"] = _weighted_percentile(values, weights, q) * 1e3
        return result


def check_serving_inputs(requests: ArrayLike, arrival_s: ArrayLike
                         ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Prompt tokens, output tokens and arrival times of ``simulate_serving``'s inputs, checked:
    (n ≥ 1, 2) integers ≥ 1 and n finite, non-decreasing times (ValueError naming the problem)."""
    req = np.asarray(requests)
    if req.ndim != 2 or req.shape[1] != 2 or len(req) == 0:
        raise ValueError(f"requests must be an (n, 2) array of prompt and output tokens, n >= 1; "
                         f"got shape {req.shape}")
    if not np.issubdtype(req.dtype, np.integer):
        raise ValueError(f"requests must hold integers, got {req.dtype}")
    req = req.astype(np.int64)
    if (req < 1).any():
        raise ValueError("every request needs at least 1 prompt token and 1 output token")
    arr = np.asarray(arrival_s, dtype=np.float64)
    if arr.shape != (len(req),):
        raise ValueError(f"arrival_s must hold one time per request ({len(req)}), "
                         f"got shape {arr.shape}")
    if not np.isfinite(arr).all() or (np.diff(arr) < 0).any():
        raise ValueError("arrival_s must be finite and non-decreasing")
    return req[:, 0].copy(), req[:, 1].copy(), arr


def simulate_serving(requests: ArrayLike, arrival_s: ArrayLike, *, pool_blocks: int,
                     block_size: int = 16, step_time: StepTime, max_num_seqs: int = 256,
                     max_num_batched_tokens: int = 8192,
                     prefix_ids: Sequence[Sequence[int]] | None = None,
                     prefill_first: bool = False, reserve_output: bool = False) -> ServingRun:
    """Serve ``requests`` ((n, 2) prompt and output tokens) arriving at ``arrival_s`` (seconds,
    non-decreasing) on a pool of ``pool_blocks`` blocks of ``block_size`` tokens, scheduled as vLLM
    v1 does (module docstring). ``step_time(batch)`` → seconds of one step, given a (k, 2) int
    array of (tokens scheduled this step, tokens already computed) per scheduled request, running
    requests first, in scheduling order.

    One request alone (prompt 100, output 3, ``LinearStepTime(6e-3, 6e-5)``): a 100-token step
    (12 ms, first token) and 2 decode steps (6.06 ms each): TTFT 12 ms, E2E 24.12 ms.
    ``prefix_ids`` turns on vLLM's prefix caching (``enable_prefix_caching``): per request, the
    ids of its prompt's full blocks (⌊prompt / block_size⌋ ints ≥ 0, equal where two prompts'
    blocks and everything before them are equal: ``kvlib.engines.prefix.prompt_block_ids`` of
    token ids, or ``shared_prefix_ids``); the run's ``cached_tokens`` gives each request's hit.
    ``prefill_first`` schedules as SGLang does instead (its scheduler runs "prefill first if
    possible", ``enable_mixed_chunk`` off): whenever a prompt is part-way or the waiting head
    fits, the step is a prefill batch of prompt tokens alone — ``max_num_batched_tokens`` of them
    (SGLang's ``chunked_prefill_size``), running decodes paused — otherwise every running request
    decodes. ``reserve_output`` admits as TensorRT-LLM's default capacity policy does
    (``GUARANTEED_NO_EVICT``): a waiting request only when the blocks its whole prompt + output
    will hold are free of every running request's same reservation, so nothing is ever
    preempted. Raises ValueError for a request the pool could never hold.
    """
    prompt, output, arrival = check_serving_inputs(requests, arrival_s)
    pool = positive_integer("pool_blocks", pool_blocks)
    bs = positive_integer("block_size", block_size)
    max_seqs = positive_integer("max_num_seqs", max_num_seqs)
    budget_max = positive_integer("max_num_batched_tokens", max_num_batched_tokens)
    if budget_max < max_seqs and not prefill_first:
        raise ValueError(f"max_num_batched_tokens ({budget_max:,}) must be >= max_num_seqs "
                         f"({max_seqs:,}), as vLLM requires")
    if not callable(step_time):
        raise ValueError(f"step_time must be callable, got {step_time!r}")
    need = -(-(prompt + output - 1) // bs)
    if (need > pool).any():
        i = int(np.argmax(need > pool))
        raise ValueError(f"request {i} ({int(prompt[i]):,} + {int(output[i]):,} tokens) needs "
                         f"{int(need[i]):,} blocks of {bs}; the pool has {pool:,}")
    if prefix_ids is not None:
        if prefill_first or reserve_output:
            raise ValueError("prefix caching is simulated with vLLM's scheduling only, not with "
                             "prefill_first (SGLang's) or reserve_output (TensorRT-LLM's)")
        ids = _checked_prefix_ids(prefix_ids, prompt, bs)
        return _PrefixEngine(prompt, output, arrival, pool, bs, step_time, max_seqs, budget_max,
                             ids).run()
    return _Engine(prompt, output, arrival, pool, bs, step_time, max_seqs, budget_max,
                   prefill_first=bool(prefill_first), reserve_output=bool(reserve_output)).run()


def _cdiv(x: int, d: int) -> int:
    return -(-x // d)


ID, COMP, SEQ, REM = range(4)      # columns of the running table
LIST_BELOW, TABLE_ABOVE = 24, 48   # running requests: lists below, a numpy table above
_SAMPLED = np.array((1, -1))       # a sampled token: sequence + 1, tokens to sample − 1


class _Engine:
    """The state of one run. ``run_`` (k × 4 ints; ``rows`` as lists when few run) holds the
    running requests in vLLM's running order: id, computed tokens, sequence (prompt + tokens
    sampled), tokens still to sample; ``last`` (``last_l``) their last token times. ``held`` =
    Σ ceil(computed / block size), the blocks in use.
    """

    def __init__(self, prompt: NDArray[np.int64], output: NDArray[np.int64],
                 arrival: NDArray[np.float64], pool: int, bs: int, step_time: StepTime,
                 max_seqs: int, budget: int, prefill_first: bool = False,
                 reserve_output: bool = False) -> None:
        self.prompt, self.output, self.arrival = prompt, output, arrival
        self.n = len(prompt)
        self.pool, self.bs, self.max_seqs, self.budget = pool, bs, max_seqs, budget
        self.list_below, self.table_above = LIST_BELOW, TABLE_ABOVE
        self.step_time = step_time
        self.decode_steps = getattr(step_time, "decode_steps", None)
        self.held = 0
        self.clock = float(arrival[0])
        self.steps = 0
        self.preemptions = 0
        self.produced = [0] * self.n          # tokens sampled; kept for requests not running
        self.last_out = [0.0] * self.n        # last token time; likewise
        self.first = np.full(self.n, np.nan)
        self.finish = np.full(self.n, np.nan)
        self.itl_one: list[NDArray[np.float64]] = []          # ITLs seen by one token each
        self.itl_v: list[float] = []                           # ITLs seen by itl_k tokens each
        self.itl_k: list[int] = []
        self.waiting: deque[int] = deque()
        self.next_arrival = 0
        self.run_ = np.zeros((0, 4), dtype=np.int64)
        self.last = np.zeros(0)
        self.all_decode = True        # every running request decodes (1 token, not its first)
        self.unfirst = 0              # running requests still without their first token
        # below list_below running requests the state moves to lists (rows, last_l), above
        # table_above back to the table: numpy's cost per call outweighs a short loop
        self.rows: list[list[int]] | None = None
        self.last_l: list[float] = []
        self.itl_one_f: list[float] = []
        self.prefill_first = prefill_first      # SGLang's policy (``simulate_serving``)
        self.reserve_output = reserve_output    # TensorRT-LLM's admission (``simulate_serving``)
        self.full = -(-(prompt + output - 1) // bs)   # blocks each request holds at its end
        self.reserved = 0             # Σ full of the running requests (``reserve_output``)

    def _arrive(self) -> None:
        i = self.next_arrival
        if i < self.n and self.arrival[i] <= self.clock:
            j = int(np.searchsorted(self.arrival, self.clock, side="right"))
            self.waiting.extend(range(i, j))
            self.next_arrival = j

    def _time(self, batch: NDArray[np.int64]) -> float:
        dt = self.step_time(batch)
        if not (isinstance(dt, (int, float, np.floating, np.integer)) and math.isfinite(dt)
                and dt > 0):
            raise ValueError(f"step_time must return a positive finite number of seconds, "
                             f"got {dt!r}")
        return float(dt)

    def _head_admissible(self, k: int) -> bool:
        if not self.waiting or k >= self.max_seqs or k >= self.budget:
            return False
        h = self.waiting[0]
        if self.reserve_output and int(self.full[h]) > self.pool - self.reserved:
            return False
        return _cdiv(int(self.prompt[h]) + self.produced[h], self.bs) <= self.pool - self.held

    def _prefill_first_step(self, k: int) -> int:
        """One step of SGLang's policy: a prefill batch alone while a prompt is part-way or the
        waiting head fits (pool and ``max_num_seqs``), else a run of decode steps of every
        running request."""
        if self.rows is not None:        # SGLang's steps run on the table only
            self._to_table()
        head_fits = bool(self.waiting) and k < self.max_seqs and _cdiv(
            int(self.prompt[self.waiting[0]]) + self.produced[self.waiting[0]],
            self.bs) <= self.pool - self.held
        if head_fits or not self.all_decode:
            return self._step(prefill_only=True)
        return self._decode_run()

    def _held(self, comp: NDArray[np.int64]) -> int:
        return int(((comp + (self.bs - 1)) // self.bs).sum())

    def run(self) -> ServingRun:
        done = 0
        while done < self.n:
            self._arrive()
            k = len(self.run_) if self.rows is None else len(self.rows)
            if not k and not self.waiting:
                self.clock = max(self.clock, float(self.arrival[self.next_arrival]))
                continue
            if self.rows is None and k < self.list_below and not self.prefill_first:
                self._to_lists()
            elif self.rows is not None and k > self.table_above:
                self._to_table()
            if self.prefill_first:
                done += self._prefill_first_step(k)
                continue
            decode = (self.all_decode and 0 < k <= self.budget
                      and not self._head_admissible(k))
            if self.rows is not None:
                done += self._decode_run_py() if decode else self._step_py()
            else:
                done += self._decode_run() if decode else self._step()
        assert self.unfirst == 0 and not self.held, "a request left running"
        first, finish, arrival, output = self.first, self.finish, self.arrival, self.output
        if not np.isfinite(finish).all():
            raise ValueError("step_time gave a time that is not finite")
        multi = output > 1
        tpot = np.zeros(self.n)
        tpot[multi] = (finish[multi] - first[multi]) / (output[multi] - 1)
        ones = np.concatenate(self.itl_one + [np.asarray(self.itl_one_f, dtype=np.float64)])
        itl_v = np.concatenate([ones, np.asarray(self.itl_v, dtype=np.float64)])
        itl_w = np.concatenate([np.ones(len(ones), dtype=np.int64),
                                np.asarray(self.itl_k, dtype=np.int64)])
        return ServingRun(self.prompt, output, arrival, first - arrival, tpot,
                          finish - arrival, itl_v, itl_w, self.preemptions,
                          self.steps, float(finish.max() - arrival[0]))

    def _run_times(self, comp: NDArray[np.int64], m: int
                   ) -> tuple[int, NDArray[np.float64], NDArray[np.float64]]:
        """Steps of a decode run of the requests holding ``comp`` tokens (at most ``m``; with
        nothing waiting, only those starting before the next arrival), their seconds and the
        clock at each step's start and end (``ends[j]``: start of step j)."""
        t_next = (float(self.arrival[self.next_arrival])
                  if not self.waiting and self.next_arrival < self.n else math.inf)
        if self.decode_steps is not None:
            dt = np.asarray(self.decode_steps(comp, m), dtype=np.float64)
            if not dt.min() > 0:
                raise ValueError("step_time.decode_steps must return positive seconds")
            ends = np.cumsum(np.concatenate(([self.clock], dt)))
            if t_next < math.inf:      # step j starts at ends[j]; keep those starting before
                m = min(m, int(np.searchsorted(ends[1:m], t_next, side="left")) + 1)
            return m, dt, ends
        times: list[float] = []
        t = self.clock
        ones = np.ones(len(comp), dtype=np.int64)
        while len(times) < m and (not times or t < t_next):
            d = self._time(np.column_stack((ones, comp + len(times))))
            times.append(d)
            t += d
        dt = np.asarray(times)
        return len(times), dt, np.cumsum(np.concatenate(([self.clock], dt)))

    def _decode_run(self) -> int:
        """Advance m ≥ 1 steps in which every running request decodes one token and nothing is
        admitted: up to the first finish, the last step whose blocks the pool still has, and
        (with nothing waiting) the last step that starts before the next arrival."""
        run, bs = self.run_, self.bs
        comp = run[:, COMP]
        k = len(run)
        free = self.pool - self.held
        m = m_finish = int(run[:, REM].min())
        if k * ((m - 1) // bs + 1) > free:     # the blocks may run out: count them
            # a request needs a new block on the steps where its computed tokens are a
            # multiple of bs
            hist = np.bincount(comp % bs, minlength=bs)
            demand = np.cumsum(hist[(-np.arange(m)) % bs])
            m = int(np.searchsorted(demand, free, side="right"))
            if m == 0:
                return self._step()
        m, dt, ends = self._run_times(comp, m)
        run = run + np.array((0, m, m, -m))
        self.run_ = run
        self.held = self._held(run[:, COMP])
        self.itl_one.append(ends[1] - self.last)
        if m > 1:
            self.itl_v += dt[1:m].tolist()
            self.itl_k += [k] * (m - 1)
        self.clock = float(ends[m])
        self.last = np.full(k, self.clock)
        self.steps += m
        return self._finish(run[:, REM] == 0) if m == m_finish else 0

    def _finish(self, fin: NDArray[np.bool_]) -> int:
        """Retire the running requests ``fin`` marks, which sampled their last token now."""
        if not fin.any():
            return 0
        run = self.run_
        gone = run[fin]
        self.finish[gone[:, ID]] = self.clock
        self.held -= self._held(gone[:, COMP])
        if self.reserve_output:
            self.reserved -= int(self.full[gone[:, ID]].sum())
        keep = ~fin
        self.run_, self.last = run[keep], self.last[keep]
        return len(gone)

    def _step(self, prefill_only: bool = False) -> int:
        """One general step: vLLM's running pass, then its waiting pass, then sampling. With
        ``prefill_only`` (SGLang's prefill batch) the running requests that decode get no token;
        under ``prefill_first`` a step with nothing to prefill decodes every running request."""
        bs, budget = self.bs, self.budget
        run = self.run_
        preempted = False
        k = len(run)
        paused = False
        if self.prefill_first and not prefill_only:
            budget = max(budget, k)          # SGLang's decode batch is every running request
        if k:
            comp = run[:, COMP]
            needs = run[:, SEQ] - comp
            if prefill_only:                 # decodes (a later token, first token had) wait
                decoding = (needs == 1) & ~np.isnan(self.first[run[:, ID]])
                paused = bool(decoding.any())
                needs = np.where(decoding, 0, needs)
            total = int(needs.sum())
            if total <= budget:                             # every request gets what it needs
                sched = needs
            else:                                           # the budget runs out on the way
                before = np.cumsum(needs) - needs
                sched = np.minimum(needs, np.maximum(budget - before, 0))
                total = budget
            held = self._held(comp + sched)
            if held > self.pool:
                sched, preempted = self._running_with_preemption(sched)
                run = self.run_
                total = int(sched.sum())
            else:
                self.held = held
            left = budget - total
        else:
            sched = np.zeros(0, dtype=np.int64)
            left = budget
        k0, unfirst0 = len(run), self.unfirst      # before admission
        decode_only = self.prefill_first and not prefill_only   # SGLang admits in prefill batches
        if not preempted and left > 0 and self.waiting and not decode_only:
            rows: list[tuple[int, int, int, int]] = []
            adm_sched: list[int] = []
            adm_last: list[float] = []
            waiting, prompt, produced, output = self.waiting, self.prompt, self.produced, \
                self.output
            n_run = len(run)
            free = self.pool - self.held
            while left > 0 and waiting and n_run < self.max_seqs:
                h = waiting[0]
                p_h = produced[h]
                s_h = int(prompt[h]) + p_h
                if _cdiv(s_h, bs) > free:
                    break
                if self.reserve_output:
                    if int(self.full[h]) > self.pool - self.reserved:
                        break
                    self.reserved += int(self.full[h])
                waiting.popleft()
                s = min(s_h, left)
                free -= _cdiv(s, bs)
                left -= s
                rows.append((h, 0, s_h, int(output[h]) - p_h))
                adm_sched.append(s)
                adm_last.append(self.last_out[h])
                n_run += 1
                self.unfirst += not p_h
            self.held = self.pool - free
            if rows:
                run = np.concatenate((run, np.array(rows, dtype=np.int64)))
                self.last = np.concatenate((self.last, adm_last))
                sched = np.concatenate((sched, adm_sched)).astype(np.int64, copy=False)
        if left > 0 and not preempted and not paused:   # every request got its tokens
            on = None
            batch = np.empty((len(run), 2), dtype=np.int64)
            batch[:, 0] = sched
            batch[:, 1] = run[:, COMP]
        else:
            on = sched > 0
            if not on.any():
                if prefill_only:             # the prompt preempted itself: decode instead
                    return self._step()
                raise RuntimeError("no request could be scheduled (a bug: the pool holds each "
                                   "request alone)")
            batch = np.column_stack((sched[on], run[on, COMP]))
        self.clock += self._time(batch)
        self.steps += 1
        run[:, COMP] += sched                  # (the table is this engine's own: in place)
        sampled = run[:, COMP] == run[:, SEQ]
        if on is not None:
            sampled &= on
        every = bool(sampled.all())            # then each needs 1 token next
        if every and not unfirst0 and self.unfirst - unfirst0 == len(run) - k0:
            # the common step: all sampled, the running requests a later token each, the
            # admitted ones (all new) their first
            run[:, SEQ:] += _SAMPLED
            if k0:
                self.itl_one.append(self.clock - self.last[:k0])
            if len(run) > k0:
                self.first[run[k0:, ID]] = self.clock
                self.unfirst = 0
            self.last = np.full(len(run), self.clock)
            s_id = None
        elif every:
            run[:, SEQ:] += _SAMPLED
            s_id = run[:, ID]
            was = self.last
            self.last = np.full(len(run), self.clock)
        elif sampled.any():
            run[sampled, SEQ] += 1
            run[sampled, REM] -= 1
            s_id = run[sampled, ID]
            was = self.last[sampled]
            self.last = self.last.copy()
            self.last[sampled] = self.clock
        else:
            s_id = None
        self.run_ = run
        if s_id is not None:
            firsts = np.isnan(self.first[s_id]) if self.unfirst else None
            if firsts is None or not firsts.any():
                self.itl_one.append(self.clock - was)
            elif firsts.all():
                self.first[s_id] = self.clock
                self.unfirst -= len(s_id)
            else:
                self.first[s_id[firsts]] = self.clock
                self.unfirst -= int(firsts.sum())
                self.itl_one.append(self.clock - was[~firsts])
        done = self._finish(run[:, REM] == 0)
        run = self.run_
        # a decode run needs every request to need 1 token and to have its first token (a
        # prompt's last token left alone is not a decode: it gives the first token)
        self.all_decode = not self.unfirst and (
            every or bool((run[:, SEQ] - run[:, COMP] == 1).all()))
        return done

    def _running_with_preemption(self, sched: NDArray[np.int64]
                                 ) -> tuple[NDArray[np.int64], bool]:
        """vLLM's running pass when blocks run out: each request in order allocates its blocks,
        preempting the last running request until it can (or until it preempted itself). The
        requests that fit are found a stretch at a time; preemptions go one by one."""
        bs = self.bs
        run = self.run_
        comp = run[:, COMP]
        grown = (comp + sched + (bs - 1)) // bs - (comp + (bs - 1)) // bs
        # past the last scheduled request the budget is spent: the pass stopped (decodes a
        # prefill batch pauses are 0 before it)
        nonzero = np.flatnonzero(sched)
        stop = int(nonzero[-1]) + 1 if len(nonzero) else 0
        n_run = len(run)
        free = self.pool - self.held
        i = 0
        while i < min(stop, n_run):
            cum = np.cumsum(grown[i:min(stop, n_run)])
            fit = int(np.searchsorted(cum, free, side="right"))   # the next `fit` fit
            if fit:
                free -= int(cum[fit - 1])
                i += fit
            if i >= min(stop, n_run):
                break
            grow = int(grown[i])
            while grow > free:
                n_run -= 1                      # preempt the last running request
                victim = int(run[n_run, ID])
                free += _cdiv(int(run[n_run, COMP]), bs)
                self.preemptions += 1
                self.produced[victim] = int(run[n_run, SEQ]) - int(self.prompt[victim])
                self.unfirst -= not self.produced[victim]
                self.last_out[victim] = float(self.last[n_run])
                self.waiting.appendleft(victim)
                if n_run == i:                  # it preempted itself: the pass ends
                    break
            if n_run == i:
                break
            free -= grow
            i += 1
        self.held = self.pool - free
        self.run_, self.last = run[:n_run], self.last[:n_run]
        out = sched[:n_run].copy()
        out[i:] = 0
        return out, True

    # --- the same steps on Python lists, faster for a few running requests --------------------
    def _to_lists(self) -> None:
        self.rows, self.last_l = self.run_.tolist(), self.last.tolist()

    def _to_table(self) -> None:
        assert self.rows is not None
        self.run_ = np.array(self.rows, dtype=np.int64).reshape(-1, 4)
        self.last = np.array(self.last_l, dtype=np.float64)
        self.rows = None

    def _decode_run_py(self) -> int:
        """``_decode_run`` on lists."""
        rows, bs = self.rows, self.bs
        assert rows is not None
        k = len(rows)
        free = self.pool - self.held
        m = m_finish = min(r[REM] for r in rows)
        if k * ((m - 1) // bs + 1) > free:     # the blocks may run out: count them
            m = _steps_that_fit([r[COMP] for r in rows], m, bs, free)
            if m == 0:
                return self._step_py()
        comp = np.array([r[COMP] for r in rows], dtype=np.int64)
        m, dt, ends = self._run_times(comp, m)
        held = 0
        for r in rows:
            r[COMP] += m
            r[SEQ] += m
            r[REM] -= m
            held += (r[COMP] + bs - 1) // bs
        self.held = held
        e1 = float(ends[1])
        self.itl_one_f += [e1 - t for t in self.last_l]
        if m > 1:
            self.itl_v += dt[1:m].tolist()
            self.itl_k += [k] * (m - 1)
        self.clock = float(ends[m])
        self.last_l = [self.clock] * k
        self.steps += m
        return self._finish_py() if m == m_finish else 0

    def _finish_py(self) -> int:
        rows = self.rows
        assert rows is not None
        if all(r[REM] for r in rows):
            return 0
        keep, last, done, bs = [], [], 0, self.bs
        for r, t in zip(rows, self.last_l):
            if r[REM]:
                keep.append(r)
                last.append(t)
            else:
                self.finish[r[ID]] = self.clock
                self.held -= (r[COMP] + bs - 1) // bs
                if self.reserve_output:
                    self.reserved -= int(self.full[r[ID]])
                done += 1
        self.rows, self.last_l = keep, last
        return done

    def _step_py(self) -> int:
        """``_step`` (running pass with its preemptions, waiting pass, sampling) on lists."""
        rows, last_l = self.rows, self.last_l
        assert rows is not None
        bs, left = self.bs, self.budget
        free = self.pool - self.held
        sched: list[int] = []
        n_run = len(rows)
        preempted = False
        i = 0
        while i < n_run and left > 0:
            r = rows[i]
            c = r[COMP]
            s = r[SEQ] - c
            if s > left:
                s = left
            grow = (c + s + bs - 1) // bs - (c + bs - 1) // bs
            while grow > free:
                n_run -= 1                      # preempt the last running request
                v = rows[n_run]
                free += -(-v[COMP] // bs)
                self.preemptions += 1
                preempted = True
                self.produced[v[ID]] = v[SEQ] - int(self.prompt[v[ID]])
                self.unfirst -= not self.produced[v[ID]]
                self.last_out[v[ID]] = last_l[n_run]
                self.waiting.appendleft(v[ID])
                if n_run == i:
                    break
            if n_run == i:
                break
            free -= grow
            left -= s
            sched.append(s)
            i += 1
        if preempted:
            del rows[n_run:]
            del last_l[n_run:]
        pairs = [(s, r[COMP]) for s, r in zip(sched, rows)]
        if not preempted and left > 0 and self.waiting:
            waiting, prompt, produced, output = self.waiting, self.prompt, self.produced, \
                self.output
            while left > 0 and waiting and n_run < self.max_seqs:
                h = waiting[0]
                p_h = produced[h]
                s_h = int(prompt[h]) + p_h
                if -(-s_h // bs) > free:
                    break
                if self.reserve_output:
                    if int(self.full[h]) > self.pool - self.reserved:
                        break
                    self.reserved += int(self.full[h])
                waiting.popleft()
                s = min(s_h, left)
                free -= -(-s // bs)
                left -= s
                rows.append([h, 0, s_h, int(output[h]) - p_h])
                last_l.append(self.last_out[h])
                self.unfirst += not p_h
                sched.append(s)
                pairs.append((s, 0))
                n_run += 1
        self.held = self.pool - free
        if not pairs:
            raise RuntimeError("no request could be scheduled (a bug: the pool holds each "
                               "request alone)")
        clock = self.clock = self.clock + self._time(np.array(pairs, dtype=np.int64))
        self.steps += 1
        first, itl = self.first, self.itl_one_f
        decodes = len(sched) == len(rows)      # a decode run may follow (checked below)
        ending = False
        for j, s in enumerate(sched):
            r = rows[j]
            c = r[COMP] + s
            r[COMP] = c
            if c == r[SEQ]:
                r[SEQ] = c + 1
                r[REM] -= 1
                ending = ending or not r[REM]
                rid = r[ID]
                if math.isnan(first[rid]):
                    first[rid] = clock
                    self.unfirst -= 1
                else:
                    itl.append(clock - last_l[j])
                last_l[j] = clock
            else:
                decodes = False                 # still prefilling
        done = self._finish_py() if ending else 0
        # every request decodes next: each sampled (its first token included) and needs 1
        self.all_decode = decodes or (not self.unfirst
                                      and all(r[SEQ] - r[COMP] == 1 for r in self.rows or ()))
        return done


# --- prefix caching: the same schedule over vLLM's shared block pool ---------------------------

def _checked_prefix_ids(prefix_ids: Sequence[Sequence[int]], prompt: NDArray[np.int64],
                        bs: int) -> list[list[int]]:
    """``prefix_ids`` checked: one list of ⌊prompt / block_size⌋ ints ≥ 0 per request."""
    if len(prefix_ids) != len(prompt):
        raise ValueError(f"prefix_ids has {len(prefix_ids)} entries for {len(prompt)} requests")
    out = []
    for i, (ids, p) in enumerate(zip(prefix_ids, prompt.tolist())):
        ids = [x if type(x) is int else _block_id(i, x) for x in ids]
        if len(ids) != p // bs or (ids and min(ids) < 0):
            raise ValueError(f"request {i}: prefix_ids needs {p // bs} ids >= 0 (one per full "
                             f"{bs}-token block of its {p} prompt tokens), got {len(ids)}")
        out.append(ids)
    return out


def _block_id(i: int, x: Any) -> int:
    """One of request ``i``'s ``prefix_ids`` as an int: ValueError unless it is an integer (a
    whole float too: ``int(2.7)`` would silently merge different blocks)."""
    if not isinstance(x, bool) and isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) \
            and x == int(x):
        return int(x)
    raise ValueError(f"request {i}: prefix_ids must hold integers, got {x!r}")


class _PrefixEngine(_Engine):
    """``simulate_serving`` with prefix caching: vLLM's steps (module docstring) over a
    ``VllmBlockPool`` that names each request's blocks. Admission looks up the longest cached
    run of the request's blocks short of its last token, needs free blocks for the rest of its
    sequence plus the free blocks the hit takes off the free queue, starts with computed
    tokens = the hit, and takes new blocks only for the tokens it schedules. Every allocation
    caches the full blocks it completes (so a request admitted later in the same step can hit
    them); finished and preempted requests free their blocks tail first, cached ones kept until
    evicted. Blocks past the prompt's full ones (output tokens) are the request's own.

    Runs of pure decode steps advance at once as in ``_Engine`` (their new blocks come off the
    free queue together: the blocks they cache are in use, so the order of the takes changes
    no eviction), and a waiting head that cannot be admitted stays so during such a run (free
    blocks only fall, and an eviction only shortens its hit)."""

    def __init__(self, prompt: NDArray[np.int64], output: NDArray[np.int64],
                 arrival: NDArray[np.float64], pool: int, bs: int, step_time: StepTime,
                 max_seqs: int, budget: int, ids: list[list[int]]) -> None:
        super().__init__(prompt, output, arrival, pool, bs, step_time, max_seqs, budget)
        n = self.n
        self.p, self.o = prompt.tolist(), output.tolist()
        self.blocks_pool = VllmBlockPool(pool)
        self.ids = ids
        self.stride = max(_cdiv(p + o, bs) for p, o in zip(self.p, self.o)) + 1
        self.base = max((max(x) for x in ids if x), default=-1) + 1   # output blocks' ids
        self.comp = [0] * n
        self.blocks: list[list[int]] = [[] for _ in range(n)]
        self.hashed = [0] * n                 # leading blocks of each request already cached
        self.cached = np.full(n, -1, dtype=np.int64)
        self.last_t = [0.0] * n
        self.running: list[int] = []

    def _id(self, i: int, j: int) -> int:
        ids = self.ids[i]
        return ids[j] if j < len(ids) else self.base + i * self.stride + j

    def _allocate(self, i: int, tokens: int) -> None:
        """Give request ``i`` blocks for ``tokens`` tokens and cache its full ones."""
        blocks = self.blocks[i]
        grow = _cdiv(tokens, self.bs) - len(blocks)
        if grow > 0:
            blocks += self.blocks_pool.take(grow)
        self._cache(i, tokens)

    def _cache(self, i: int, tokens: int) -> None:
        full = tokens // self.bs
        if full > self.hashed[i]:
            blocks, cache, ids = self.blocks[i], self.blocks_pool.cache, self.ids[i]
            own = self.base + i * self.stride            # _id past the prompt's blocks
            for j in range(self.hashed[i], full):
                cache(blocks[j], ids[j] if j < len(ids) else own + j)
            self.hashed[i] = full

    def _free(self, i: int) -> None:
        self.blocks_pool.release(self.blocks[i])
        self.blocks[i], self.hashed[i] = [], 0

    def _lookup(self, h: int) -> tuple[int, list[int]]:
        """The waiting request ``h``'s tokens and the blocks its lookup hits."""
        tokens = self.p[h] + self.produced[h]
        ids, limit = self.ids[h], (tokens - 1) // self.bs
        if limit > len(ids):                   # a preempted request: its output blocks too
            ids = ids + [self._id(h, j) for j in range(len(ids), limit)]
        return tokens, self.blocks_pool.lookup(ids[:limit])

    def _admissible(self, h: int) -> tuple[int, list[int]] | None:
        tokens, hit = self._lookup(h)
        pool = self.blocks_pool
        if _cdiv(tokens, self.bs) - len(hit) + pool.idle(hit) > pool.free_blocks:
            return None
        return tokens, hit

    def _decodes_only(self) -> bool:
        """Every running request decodes one token (after its first) and none is admitted."""
        running, comp, p, produced = self.running, self.comp, self.p, self.produced
        if not running or len(running) > self.budget or not all(
                produced[i] and comp[i] == p[i] + produced[i] - 1 for i in running):
            return False
        return (not self.waiting or len(running) >= min(self.max_seqs, self.budget)
                or self._admissible(self.waiting[0]) is None)

    def _decode_run(self) -> int:
        """``_Engine._decode_run`` over named blocks."""
        running, bs, pool = self.running, self.bs, self.blocks_pool
        comp = [self.comp[i] for i in running]
        k = len(running)
        free = pool.free_blocks
        m = m_finish = min(self.o[i] - self.produced[i] for i in running)
        if k * ((m - 1) // bs + 1) > free:     # the blocks may run out: count them
            m = _steps_that_fit(comp, m, bs, free)
            if m == 0:
                return self._step()
        m, dt, ends = self._run_times(np.asarray(comp, dtype=np.int64), m)
        grow = [_cdiv(c + m, bs) - len(self.blocks[i]) for i, c in zip(running, comp)]
        taken = pool.take(sum(grow))
        at = 0
        clock = float(ends[m])
        e1 = float(ends[1])
        for i, c, g in zip(running, comp, grow):
            self.blocks[i] += taken[at:at + g]
            at += g
            self._cache(i, c + m)
            self.comp[i] = c + m
            self.produced[i] += m
            self.itl_one_f.append(e1 - self.last_t[i])
            self.last_t[i] = clock
        if m > 1:
            self.itl_v += dt[1:m].tolist()
            self.itl_k += [k] * (m - 1)
        self.clock = clock
        self.steps += m
        if m < m_finish:
            return 0
        done = [i for i in running if self.produced[i] == self.o[i]]
        return self._retire(done)

    def _retire(self, done: list[int]) -> int:
        for i in done:
            self.finish[i] = self.clock
            self._free(i)
        if done:
            gone = set(done)
            self.running = [i for i in self.running if i not in gone]
        return len(done)

    def _step(self) -> int:
        bs, pool, comp, blocks = self.bs, self.blocks_pool, self.comp, self.blocks
        running, left = self.running, self.budget
        batch: list[tuple[int, int]] = []
        sched: list[tuple[int, int]] = []
        preempted = False
        k = 0
        while k < len(running) and left > 0:
            i = running[k]
            s = min(self.p[i] + self.produced[i] - comp[i], left)
            grow = _cdiv(comp[i] + s, bs) - len(blocks[i])
            while grow > pool.free_blocks:
                v = running.pop()              # preempt the last running request
                self._free(v)
                comp[v] = 0
                self.preemptions += 1
                preempted = True
                self.waiting.appendleft(v)
                if v == i:
                    break
            if k == len(running):              # it preempted itself: the pass ends
                break
            self._allocate(i, comp[i] + s)
            batch.append((s, comp[i]))
            sched.append((i, s))
            left -= s
            k += 1
        while not preempted and left > 0 and self.waiting and len(running) < self.max_seqs:
            h = self.waiting[0]
            fit = self._admissible(h)
            if fit is None:
                break
            tokens, hit = fit
            self.waiting.popleft()
            pool.touch(hit)
            blocks[h], self.hashed[h] = hit, len(hit)
            comp[h] = len(hit) * bs
            if self.cached[h] < 0:
                self.cached[h] = comp[h]
            s = min(tokens - comp[h], left)
            self._allocate(h, comp[h] + s)
            running.append(h)
            batch.append((s, comp[h]))
            sched.append((h, s))
            left -= s
        if not batch:
            raise RuntimeError("no request could be scheduled (a bug: the pool holds each "
                               "request alone)")
        clock = self.clock = self.clock + self._time(np.array(batch, dtype=np.int64))
        self.steps += 1
        done = []
        for i, s in sched:
            comp[i] += s
            if comp[i] == self.p[i] + self.produced[i]:
                if math.isnan(self.first[i]):
                    self.first[i] = clock
                else:
                    self.itl_one_f.append(clock - self.last_t[i])
                self.last_t[i] = clock
                self.produced[i] += 1
                if self.produced[i] == self.o[i]:
                    done.append(i)
        return self._retire(done)

    def run(self) -> ServingRun:
        n, arrival = self.n, self.arrival
        done = 0
        while done < n:
            self._arrive()
            if not self.running and not self.waiting:
                self.clock = max(self.clock, float(arrival[self.next_arrival]))
                continue
            done += self._decode_run() if self._decodes_only() else self._step()
        if not np.isfinite(self.finish).all():
            raise ValueError("step_time gave a time that is not finite")
        output = self.output
        multi = output > 1
        tpot = np.zeros(n)
        tpot[multi] = (self.finish[multi] - self.first[multi]) / (output[multi] - 1)
        itl_v = np.concatenate([np.asarray(self.itl_one_f, dtype=np.float64),
                                np.asarray(self.itl_v, dtype=np.float64)])
        itl_w = np.concatenate([np.ones(len(self.itl_one_f), dtype=np.int64),
                                np.asarray(self.itl_k, dtype=np.int64)])
        return ServingRun(self.prompt, output, arrival, self.first - arrival, tpot,
                          self.finish - arrival, itl_v, itl_w, self.preemptions, self.steps,
                          float(self.finish.max() - arrival[0]), self.cached)


def _steps_that_fit(computed: list[int], steps: int, block_size: int, free: int) -> int:
    """How many of ``steps`` decode steps of requests with ``computed`` tokens fit in ``free``
    blocks: step j (0-based) takes a new block for each request whose computed count is then a
    multiple of ``block_size``."""
    hist = [0] * block_size
    for c in computed:
        hist[c % block_size] += 1
    demand = fits = 0
    for j in range(steps):
        demand += hist[-j % block_size]
        if demand > free:
            break
        fits = j + 1
    return fits
