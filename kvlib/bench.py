"""Benchmark of the paging simulator: ``python -m kvlib.bench [N ...]``.

ShareGPT-like requests (kvlib.workloads.sharegpt, seed 0), all arriving at step 0, served by
continuous batching from a 458,752-token pool in 16-token blocks (Llama-3.1-8B on an H100 at
gpu-memory-utilization 0.9, the source article's example). Prints wall time, requests/s and
simulated token-steps/s (one running request for one step) for each N.
"""
from __future__ import annotations

import argparse
import time

from .allocator import SimResult, simulate
from .workloads import sharegpt

POOL_TOKENS = 458_752  # tokens
BLOCK_SIZE = 16        # tokens per block


def run(n_requests: int) -> tuple[float, SimResult]:
    """(wall seconds spent in simulate, its result) for ``n_requests`` ShareGPT-like requests."""
    requests = sharegpt(n_requests, seed=0)
    start = time.perf_counter()
    result = simulate(requests, POOL_TOKENS, "paged", BLOCK_SIZE)
    return time.perf_counter() - start, result


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark for each requested size and print one line per size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[100_000, 1_000_000],
                        help="numbers of requests (default: 100000 1000000)")
    for n in parser.parse_args(argv).sizes:
        seconds, res = run(n)
        print(f"{n:>9,} requests: {seconds:6.2f} s, {n / seconds:>9,.0f} requests/s, "
              f"{res.token_steps / seconds:>13,.0f} token-steps/s "
              f"({res.steps:,} steps, mean batch {res.mean_batch:,.0f}, "
              f"{res.preemptions:,} preemptions, token utilization {res.token_utilization:.4f})")


if __name__ == "__main__":
    main()
