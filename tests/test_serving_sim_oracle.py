"""``simulate_serving`` against vLLM 0.33's own v1 ``Scheduler`` (``kvlib.engines.vllm_oracle``).

Both are fed the same requests, arrival times and pool, and the same step law (6 ms + 0.06 ms per
scheduled token + 3 ns per context token: an 8B model on one H100, roughly), on a virtual clock.
Issue 19 asks for p50/p90/p99 TTFT, TPOT and E2E within 5% (or 2 ms) and throughput within 2%;
the simulator reproduces vLLM's schedule step for step, so the test also requires the same step
and preemption counts. Workloads are small (60–300 requests) to keep the file near 30 s.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlib.engines.scheduler import LinearStepTime, ServingRun, simulate_serving

LAW = LinearStepTime(6e-3, 6e-5, 3e-9)


def vllm_run(*args, **kwargs) -> ServingRun:
    """vLLM's scheduler, or a skip where requirements-vllm.txt is not installed."""
    pytest.importorskip("vllm")
    from kvlib.engines.vllm_oracle import vllm_serving_run

    return vllm_serving_run(*args, **kwargs)


def chat(n: int, rate: float, *, seed: int = 0, cv: float = 1.0,
         prompt: tuple[int, int] = (50, 2000), output: tuple[int, int] = (1, 400)):
    """``n`` requests (uniform prompt and output lengths) arriving at ``rate`` per second:
    Poisson, or gamma gaps with coefficient of variation ``cv`` (bursty when above 1)."""
    rng = np.random.default_rng(seed)
    req = np.column_stack((rng.integers(*prompt, n), rng.integers(*output, n)))
    shape = 1 / cv**2
    gaps = rng.gamma(shape, 1 / (rate * shape), n)
    gaps[0] = 0.0
    return req, np.cumsum(gaps)


def assert_agrees(ours: ServingRun, theirs: ServingRun) -> None:
    """Issue 19's tolerances: percentiles within 5% or 2 ms, throughput within 2%."""
    for run in (ours, theirs):
        assert np.isfinite(run.ttft_s).all() and np.isfinite(run.e2e_s).all()
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        a, b = getattr(ours, name), getattr(theirs, name)
        for q in (50, 90, 99):
            x, y = np.percentile(a, q), np.percentile(b, q)
            assert abs(x - y) <= max(0.05 * abs(y), 2e-3), (name, q, x, y)
    sa, sb = ours.summary(), theirs.summary()
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        assert sa[key] == pytest.approx(sb[key], rel=0.02), key
    # stricter than the issue: the same schedule, step for step
    assert (ours.steps, ours.preemptions) == (theirs.steps, theirs.preemptions)
    np.testing.assert_allclose(ours.e2e_s, theirs.e2e_s, rtol=1e-9, atol=1e-9)


# (requests, rate per s, gamma CV, pool blocks of 16 tokens, max_num_batched_tokens)
WORKLOADS = {
    "light load": (60, 2.0, 1.0, 4096, 8192),
    "the knee": (300, 8.0, 1.0, 4096, 8192),
    "overload": (300, 30.0, 1.0, 4096, 8192),
    "bursty (gamma, CV 3)": (300, 6.0, 3.0, 4096, 8192),
    "small pool, preempting": (200, 6.0, 1.0, 600, 8192),
    "budget 2,048 at the knee": (300, 8.0, 1.0, 4096, 2048),
    "budget 2,048, small pool": (200, 10.0, 1.0, 600, 2048),
}


@pytest.mark.parametrize("name", WORKLOADS)
def test_same_latencies_as_vllm_scheduler(name):
    n, rate, cv, pool, budget = WORKLOADS[name]
    req, arr = chat(n, rate, cv=cv)
    kw = dict(pool_blocks=pool, step_time=LAW, max_num_batched_tokens=budget)
    theirs = vllm_run(req, arr, **kw)
    ours = simulate_serving(req, arr, **kw)
    assert_agrees(ours, theirs)
    if "preempting" in name:
        assert ours.preemptions > 0, "the small pool was meant to preempt"


def test_max_num_seqs_and_block_size_as_vllm():
    """A cap on running requests and 32-token blocks, under overload."""
    req, arr = chat(150, 20.0, seed=3)
    kw = dict(pool_blocks=400, block_size=32, step_time=LAW, max_num_seqs=16,
              max_num_batched_tokens=1024)
    assert_agrees(simulate_serving(req, arr, **kw), vllm_run(req, arr, **kw))


@settings(max_examples=8, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), rate=st.floats(0.5, 200.0), cv=st.sampled_from([0.5, 1.0, 4.0]),
       pool=st.integers(80, 1000), budget=st.sampled_from([64, 256, 2048, 8192]),
       seqs=st.sampled_from([4, 64]), seed=st.integers(0, 2**16))
def test_generated_workloads_as_vllm(n, rate, cv, pool, budget, seqs, seed):
    req, arr = chat(n, rate, seed=seed, cv=cv, prompt=(1, 1000), output=(1, 200))
    kw = dict(pool_blocks=pool, step_time=LAW, max_num_batched_tokens=budget,
              max_num_seqs=seqs)
    assert_agrees(simulate_serving(req, arr, **kw), vllm_run(req, arr, **kw))


def shared_prefix_workload(kind: str, seed: int = 0):
    """Token ids for ``kind``: "system" (150 requests behind one of 3 system prompts of 1,000,
    600 and 200 tokens, then 20–400 tokens of their own, 10 per s) or "multi-turn" (30
    conversations of 5 turns, each turn's prompt the previous one plus 50–300 new tokens,
    turns 4 s apart). Returns requests, arrivals and each request's prompt tokens."""
    rng = np.random.default_rng(seed)
    if kind == "system":
        n = 150
        conv = rng.integers(0, 3, n)
        shared = np.array([1000, 600, 200])[conv]
        own = rng.integers(20, 400, n)
        arrival = np.cumsum(rng.exponential(1 / 10, n))
    else:
        n_conv, turns = 30, 5
        conv = np.repeat(np.arange(n_conv), turns)
        turn = np.tile(np.arange(turns), n_conv)
        shared = np.cumsum(rng.integers(50, 300, (n_conv, turns)), axis=1).reshape(-1)
        own = np.zeros_like(shared)
        arrival = rng.uniform(0, 10, n_conv)[conv] + 4.0 * turn + rng.uniform(0, 1, len(conv))
        order = np.argsort(arrival, kind="stable")
        conv, shared, own, arrival = conv[order], shared[order], own[order], arrival[order]
    output = rng.integers(1, 120, len(conv))
    texts = [rng.integers(1, 50_000, 5000) for _ in range(int(conv.max()) + 1)]
    tokens = [np.concatenate((texts[c][:s], rng.integers(50_000, 100_000, o)))
              for c, s, o in zip(conv, shared, own)]
    return np.column_stack((shared + own, output)), arrival - arrival[0], tokens


# (workload, pool blocks): the system prompts' pool is small enough to preempt and evict
PREFIX_WORKLOADS = {"shared system prompt": ("system", 200), "multi-turn": ("multi-turn", 1200)}


@pytest.mark.parametrize("name", PREFIX_WORKLOADS)
def test_prefix_caching_as_vllm_scheduler(name):
    """vLLM's Scheduler with enable_prefix_caching and sha256 block hashes of real token ids
    against simulate_serving with kvlib's own block ids of the same tokens."""
    from kvlib.engines.prefix import block_requests, prompt_block_ids

    kind, pool = PREFIX_WORKLOADS[name]
    req, arr, tokens = shared_prefix_workload(kind)
    theirs = vllm_run(req, arr, pool_blocks=pool, step_time=LAW, prompt_token_ids=tokens)
    ours = simulate_serving(req, arr, pool_blocks=pool, step_time=LAW,
                            prefix_ids=prompt_block_ids(block_requests(tokens, 16)))
    assert_agrees(ours, theirs)
    np.testing.assert_array_equal(ours.cached_tokens, theirs.cached_tokens)
    assert ours.cached_tokens.sum() > 0.1 * req[:, 0].sum(), "the workload was meant to hit"
    if kind == "system":
        assert ours.preemptions > 0, "the small pool was meant to preempt"
