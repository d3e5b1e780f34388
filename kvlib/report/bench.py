"""Benchmarks: ``python -m kvlib.bench [N ...] [--chat-sessions S] [--trace-requests R]``.

Paging: ShareGPT-like requests (kvlib.workloads.sharegpt, seed 0), all arriving at step 0, served
by continuous batching from a 458,752-token pool in 16-token blocks (Llama-3.1-8B on an H100 at
gpu-memory-utilization 0.9, the source article's example). Prints wall time, requests/s and
simulated token-steps/s (one running request for one step) for each N.

Prefix caching: (1) multi-turn chat (``kvlib.prompts.multi_turn_chat``, S conversations of 8
turns behind 4 system prompts, answers cached) replayed by ``kvlib.replay_prefix_cache`` and by
vLLM's own ``KVCacheManager`` (``kvlib.vllm_oracle``, needs requirements-vllm.txt) on the same
requests, unbounded and through a pool of a quarter of the blocks, with identical hits required;
(2) R requests of trace form — Mooncake's conversation trace tiled with fresh ids for every
copy — through a 16,000-block (512-token) cache.
"""
from __future__ import annotations

import argparse
import gc
import time

import numpy as np

from ..engines.allocator import SimResult, simulate
from ..engines.prefix import BlockTrace, mooncake_conversation, replay_prefix_cache
from ..engines.prompts import PromptWorkload, multi_turn_chat
from ..engines.workloads import sharegpt

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


def main(argv: list[str] | None = None) -> None:
    """Run the benchmarks and print one line per measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[100_000, 1_000_000],
                        help="requests for the paging simulation (default: 100000 1000000; 0 skips)")
    parser.add_argument("--chat-sessions", type=int, default=300,
                        help="conversations in the kvlib-vs-vLLM replay (default 300; 0 skips)")
    parser.add_argument("--trace-requests", type=int, default=1_000_000,
                        help="requests in the trace-form replay (default 1000000; 0 skips)")
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


if __name__ == "__main__":
    main()
