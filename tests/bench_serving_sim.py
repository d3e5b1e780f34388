"""Benchmark of ``simulate_serving``: ``python tests/bench_serving_sim.py [--vllm-requests R]``.

Chat-like requests (prompt 50–1,999 tokens, output 1–399, uniform, seed 0) arriving as a Poisson
process at a light load (2/s), the knee (8/s) and an overload (30/s), on a 4,096-block pool
(65,536 tokens) with the step law 6 ms + 0.06 ms per scheduled token + 3 ns per context token.
Prints the wall time of 10,000 and 100,000 requests (best of 3 for 10,000), then for R requests
(default 1,000) the wall time of vLLM 0.33's own v1 Scheduler on the same workload beside ours,
their ratio, and whether the runs agree step for step.
"""
from __future__ import annotations

import argparse
import gc
import time
from functools import partial

import numpy as np

from kvlib.engines.scheduler import LinearStepTime, simulate_serving

LAW = LinearStepTime(6e-3, 6e-5, 3e-9)
POOL_BLOCKS = 4096
RATES = {"light (2/s)": 2.0, "knee (8/s)": 8.0, "overload (30/s)": 30.0}


def chat(n: int, rate: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    req = np.column_stack((rng.integers(50, 2000, n), rng.integers(1, 400, n)))
    gaps = rng.exponential(1 / rate, n)
    gaps[0] = 0.0
    return req, np.cumsum(gaps)


def timed(fn, repeat: int = 1):
    best, out = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-requests", type=int, default=1000)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    args = ap.parse_args()
    print(f"{'load':<16} {'requests':>9} {'steps':>10} {'preempt':>8} {'wall s':>8}")
    for n in args.sizes:
        for name, rate in RATES.items():
            req, arr = chat(n, rate)
            wall, run = timed(partial(simulate_serving, req, arr, pool_blocks=POOL_BLOCKS,
                                      step_time=LAW), repeat=3 if n <= 10_000 else 1)
            print(f"{name:<16} {n:>9,} {run.steps:>10,} {run.preemptions:>8,} {wall:>8.2f}")
    if args.vllm_requests:
        from kvlib.engines.vllm_oracle import vllm_serving_run

        vllm_serving_run(*chat(5, 1.0), pool_blocks=POOL_BLOCKS, step_time=LAW)   # imports
        n = args.vllm_requests
        print(f"\n{'load':<16} {'requests':>9} {'vLLM s':>8} {'ours s':>8} {'ratio':>7}  same")
        for name, rate in RATES.items():
            req, arr = chat(n, rate)
            kw = dict(pool_blocks=POOL_BLOCKS, step_time=LAW)
            t_vllm, theirs = timed(partial(vllm_serving_run, req, arr, **kw))
            t_ours, ours = timed(partial(simulate_serving, req, arr, **kw), repeat=3)
            same = (ours.steps == theirs.steps and ours.preemptions == theirs.preemptions
                    and np.allclose(ours.e2e_s, theirs.e2e_s, rtol=1e-9, atol=1e-9))
            print(f"{name:<16} {n:>9,} {t_vllm:>8.2f} {t_ours:>8.3f} {t_vllm / t_ours:>6.0f}×  "
                  f"{same}")


if __name__ == "__main__":
    main()
