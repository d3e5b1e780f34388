"""Benchmarks: ``python -m kvlib.report.bench [N ...] [--chat-sessions S] [--trace-requests R]
[--serving-requests N ...] [--vllm-requests V]``.

Paging: ShareGPT-like requests (kvlib.engines.workloads.sharegpt, seed 0), all arriving at step 0, served
by continuous batching from a 458,752-token pool in 16-token blocks (Llama-3.1-8B on an H100 at
gpu-memory-utilization 0.9, the source article's example). Prints wall time, requests/s and
simulated token-steps/s (one running request for one step) for each N.

Prefix caching: (1) multi-turn chat (``kvlib.engines.prompts.multi_turn_chat``, S conversations of 8
turns behind 4 system prompts, answers cached) replayed by ``kvlib.replay_prefix_cache`` and by
vLLM's own ``KVCacheManager`` (``kvlib.engines.vllm_oracle``, needs requirements-vllm.txt) on the same
requests, unbounded and through a pool of a quarter of the blocks, with identical hits required;
(2) R requests of trace form — Mooncake's conversation trace tiled with fresh ids for every
copy — through a 16,000-block (512-token) cache.

Serving under load: chat-like requests (prompts 50–1,999 tokens, outputs 1–399, uniform, seed 0)
arriving as a Poisson process at a light load (2/s), the knee (8/s) and an overload (30/s), on a
4,096-block pool with the step law 6 ms + 0.06 ms per scheduled token + 3 ns per context token,
through ``kvlib.simulate_serving`` (10,000 and 100,000 requests) and, for V requests, through
vLLM's own v1 Scheduler (``kvlib.engines.vllm_oracle``) beside it, the runs required identical;
then ``kvlib.bench_serve`` with the speed model's own step times and ``kvlib.max_rate_at_slo``
for the article's Llama-3.1-70B FP8 on two H100s.
"""
from __future__ import annotations

import argparse
import gc
import math
import time
from functools import partial

import numpy as np

from ..engines.allocator import SimResult, simulate
from ..engines.prefix import BlockTrace, mooncake_conversation, replay_prefix_cache
from ..engines.prompts import PromptWorkload, multi_turn_chat
from ..deployment import Deployment
from ..engines.scheduler import LinearStepTime, simulate_serving
from ..engines.workloads import random_lengths, sharegpt
from ..serve.load import SLO, bench_serve, max_rate_at_slo

POOL_TOKENS = 458_752  # tokens
BLOCK_SIZE = 16        # tokens per block
TRACE_CACHE_BLOCKS = 16_000  # 512-token blocks for the trace replay


def run(n_requests: int) -> tuple[float, SimResult]:
    """(wall seconds spent in simulate, its result) for ``n_requests`` ShareGPT-like requests."""
    requests = sharegpt(n_requests, seed=0)
    start = time.perf_counter()
    result = simulate(requests, POOL_TOKENS, "paged", BLOCK_SIZE)
    return time.perf_counter() - start, result


def chat(n_sessions: int) -> PromptWorkload:
    """The benchmark's multi-turn chat: ``n_sessions`` conversations of 8 turns, seeded."""
    return multi_turn_chat(n_sessions, turns=8, system_tokens=1000, user_tokens=150,
                           output_tokens=300, n_system_prompts=4, seed=0)


def prefix_vs_vllm(workload: PromptWorkload,
                   capacity_blocks: int | None) -> tuple[tuple[float, float], tuple[float, float]]:
    """((kvlib wall, CPU seconds), (vLLM KVCacheManager wall, CPU seconds)) replaying
    ``workload``; hits must agree. CPU time is the fairer measure on a shared machine."""
    from ..engines.vllm_oracle import vllm_prefix_hits

    vllm_prefix_hits(workload.prompts[:2], block_size=BLOCK_SIZE)  # import and warm vLLM
    gc.collect()
    gc.freeze()  # the imports' objects out of the collector's way, for both replays alike
    start = (time.perf_counter(), time.process_time())
    ours = replay_prefix_cache(workload.prompts, block_size=BLOCK_SIZE, capacity_blocks=capacity_blocks,
                               outputs=workload.outputs)
    mid = (time.perf_counter(), time.process_time())
    theirs = vllm_prefix_hits(workload.prompts, block_size=BLOCK_SIZE, capacity_blocks=capacity_blocks,
                              outputs=workload.outputs)
    end = (time.perf_counter(), time.process_time())
    if not np.array_equal(ours.hit_tokens, theirs):
        raise AssertionError("kvlib and vLLM disagree on the hits")
    return ((mid[0] - start[0], mid[1] - start[1]), (end[0] - mid[0], end[1] - mid[1]))


def tiled_trace(n_requests: int) -> BlockTrace:
    """``n_requests`` requests: Mooncake's conversation trace repeated, each copy with ids and
    timestamps shifted past the previous copy's (so copies share nothing)."""
    base = mooncake_conversation()
    copies = -(-n_requests // len(base))
    id_step = int(base.hash_ids.max()) + 1
    span = int(base.timestamps_ms[-1]) + 1  # type: ignore[index]
    counts = np.diff(base.offsets)
    ids = np.concatenate([base.hash_ids + c * id_step for c in range(copies)])
    offsets = np.concatenate([[0], np.cumsum(np.tile(counts, copies))])
    stamps = np.concatenate([base.timestamps_ms + c * span for c in range(copies)])  # type: ignore[operator]
    trace = BlockTrace(ids, offsets, np.tile(base.input_tokens, copies), base.block_size,
                       np.tile(base.output_tokens, copies), stamps)
    return trace.head(n_requests)


#: The serving benchmark's step law, pool and loads (requests/s).
SERVING_LAW = LinearStepTime(6e-3, 6e-5, 3e-9)
SERVING_POOL_BLOCKS = 4096
SERVING_RATES = {"light (2/s)": 2.0, "knee (8/s)": 8.0, "overload (30/s)": 30.0}


def serving_workload(n: int, rate: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` chat-like requests and their Poisson arrival times (s) at ``rate`` per second."""
    rng = np.random.default_rng(seed)
    requests = np.column_stack((rng.integers(50, 2000, n), rng.integers(1, 400, n)))
    gaps = rng.exponential(1 / rate, n)
    gaps[0] = 0.0
    return requests, np.cumsum(gaps)


def timed(fn, repeat: int = 1):
    """(best wall seconds of ``repeat`` calls, the last result)."""
    best, out = math.inf, None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def serving(sizes: list[int], vllm_requests: int) -> None:
    """The serving-under-load benchmarks (module docstring), one line each."""
    kw = dict(pool_blocks=SERVING_POOL_BLOCKS, step_time=SERVING_LAW)
    for n in sizes:
        for name, rate in SERVING_RATES.items():
            req, arr = serving_workload(n, rate)
            wall, run = timed(partial(simulate_serving, req, arr, **kw), 3 if n <= 10_000 else 1)
            print(f"simulate_serving, {name}, {n:,} requests: {wall:.2f} s "
                  f"({run.steps:,} steps, {run.preemptions:,} preemptions)")
    if vllm_requests:
        from ..engines.vllm_oracle import vllm_serving_run

        vllm_serving_run(*serving_workload(5, 1.0), **kw)  # import and warm vLLM
        for name, rate in SERVING_RATES.items():
            req, arr = serving_workload(vllm_requests, rate)
            t_vllm, theirs = timed(partial(vllm_serving_run, req, arr, **kw))
            t_ours, ours = timed(partial(simulate_serving, req, arr, **kw), 3)
            if not (ours.steps == theirs.steps and ours.preemptions == theirs.preemptions
                    and np.allclose(ours.e2e_s, theirs.e2e_s, rtol=1e-9, atol=1e-9)):
                raise AssertionError(f"kvlib and vLLM's scheduler disagree at {name}")
            print(f"vLLM's v1 Scheduler vs simulate_serving, {name}, {vllm_requests:,} requests: "
                  f"{t_vllm:.2f} s vs {t_ours:.3f} s, {t_vllm / t_ours:.0f}x faster (same run)")
    d = Deployment("llama-3.1-70b", "h100-sxm", tp=2, weights="fp8", kv="fp8")
    for n in sizes:
        reqs = random_lengths(n, 2000, 300, 0.5, seed=0)
        wall, _ = timed(partial(bench_serve, d, reqs, request_rate=3.0))
        print(f"bench_serve, {d.model.name} FP8 on 2 x H100, {n:,} requests at 3/s: {wall:.2f} s")
    reqs = random_lengths(1_000, 2000, 300, 0.5, seed=0)
    wall, cap = timed(partial(max_rate_at_slo, d, reqs, SLO(ttft_s=2.0, tpot_s=0.05)))
    print(f"max_rate_at_slo, same deployment, 1,000 requests, p99 TTFT <= 2 s and TPOT <= 50 ms: "
          f"{wall:.2f} s ({cap.rate_rps:.2f} requests/s within the target)")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmarks and print one line per measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[100_000, 1_000_000],
                        help="requests for the paging simulation (default: 100000 1000000; 0 skips)")
    parser.add_argument("--chat-sessions", type=int, default=300,
                        help="conversations in the kvlib-vs-vLLM replay (default 300; 0 skips)")
    parser.add_argument("--trace-requests", type=int, default=1_000_000,
                        help="requests in the trace-form replay (default 1000000; 0 skips)")
    parser.add_argument("--serving-requests", type=int, nargs="*", default=[10_000, 100_000],
                        help="requests per simulate_serving run (default 10000 100000; none skips "
                             "the serving benchmarks)")
    parser.add_argument("--vllm-requests", type=int, default=1_000,
                        help="requests for the comparison with vLLM's scheduler (default 1000; 0 "
                             "skips)")
    args = parser.parse_args(argv)
    for n in (n for n in args.sizes if n > 0):
        seconds, res = run(n)
        print(f"{n:>9,} requests: {seconds:6.2f} s, {n / seconds:>9,.0f} requests/s, "
              f"{res.token_steps / seconds:>13,.0f} token-steps/s "
              f"({res.steps:,} steps, mean batch {res.mean_batch:,.0f}, "
              f"{res.preemptions:,} preemptions, token utilization {res.token_utilization:.4f})")
    if args.chat_sessions:
        w = chat(args.chat_sessions)
        tokens = int(w.prompt_tokens.sum() + w.output_tokens.sum())
        blocks = int(sum(-(-(len(p) + len(o) - 1) // BLOCK_SIZE) for p, o in zip(w.prompts, w.outputs)))
        for capacity in (None, blocks // 4):
            ours, theirs = prefix_vs_vllm(w, capacity)
            label = "unbounded" if capacity is None else f"{capacity:,} blocks"
            print(f"multi-turn chat, {len(w):,} requests, {tokens:,} prompt+output tokens, pool {label}: "
                  f"kvlib {ours[0]:.2f} s ({ours[1]:.2f} s CPU), vLLM KVCacheManager {theirs[0]:.2f} s "
                  f"({theirs[1]:.2f} s CPU): {theirs[1] / ours[1]:.1f}x faster in CPU time, "
                  f"{theirs[0] / ours[0]:.1f}x in wall time (identical hits)")
    if args.trace_requests:
        trace = tiled_trace(args.trace_requests)
        start, cpu = time.perf_counter(), time.process_time()
        res = replay_prefix_cache(trace, block_size=trace.block_size, capacity_blocks=TRACE_CACHE_BLOCKS)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"trace form: {len(trace):,} requests, {trace.hash_ids.size:,} block ids, "
              f"{TRACE_CACHE_BLOCKS:,}-block cache: {seconds:.1f} s ({cpu:.1f} s CPU), "
              f"{len(trace) / seconds:,.0f} requests/s, hit rate {res.hit_rate:.4f}, "
              f"{res.evicted_blocks:,} evictions")
    if args.serving_requests:
        serving(args.serving_requests, args.vllm_requests)


if __name__ == "__main__":
    main()
