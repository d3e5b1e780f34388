"""Load and latency targets (kvlib.serve.load) and the mixed-step time they run on
(kvlib.speed.roofline.step_time / StepTimer): known answers, the closed loop, the SLO search."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kvlib
from kvlib.engines import workloads
from kvlib.serve import load
from kvlib.speed import roofline

D8 = kvlib.Deployment("llama-3.1-8b", "h100-sxm")


def test_step_time_is_the_roofline_step_for_uniform_batches() -> None:
    # 32 decodes at 4,000 tokens: exactly decode_step's KV reads and attention FLOPs
    assert roofline.step_time(D8, [(1, 4000)] * 32) == kvlib.decode_step(
        D8, batch=32, context_tokens=4000).time_s
    # one 2,048-token prompt: prefill_step samples 8 positions, step_time sums them exactly
    assert roofline.step_time(D8, [(2048, 0)]) == pytest.approx(
        kvlib.prefill_step(D8, batch=1, prompt_tokens=2048).time_s, rel=1e-4)
    # a sliding-window model: windows cap the context in both
    g = kvlib.Deployment("gemma-3-27b", "h100-sxm")
    assert roofline.step_time(g, [(1, 30_000)] * 8) == pytest.approx(
        kvlib.decode_step(g, batch=8, context_tokens=30_000).time_s, rel=1e-12)


def test_decode_steps_equal_step_by_step_calls() -> None:
    for d in (D8, kvlib.Deployment("qwen3-next-80b-a3b", "h100-sxm", tp=4)):
        timer = roofline.StepTimer(d)
        computed = np.array([0, 5, 100, 1023, 4000, 9000])
        fast = timer.decode_steps(computed, 40)
        slow = [timer(np.column_stack((np.ones(6, dtype=int), computed + j))) for j in range(40)]
        np.testing.assert_allclose(fast, slow, rtol=1e-12)


def test_step_time_refuses_empty_or_negative_batches() -> None:
    with pytest.raises(ValueError, match="at least one token"):
        roofline.step_time(D8, [])
    with pytest.raises(ValueError, match="at least one token"):
        roofline.step_time(D8, [(0, 10)])


def test_arrival_times() -> None:
    assert (load.arrival_times(5, math.inf) == 0).all()
    # evenly spaced at 4 requests/s: 0.25, 0.5, 0.75, 1.0
    np.testing.assert_allclose(load.arrival_times(4, 4.0, burstiness=math.inf),
                               [0.25, 0.5, 0.75, 1.0])
    a, b = load.arrival_times(2000, 10.0, seed=3), load.arrival_times(2000, 20.0, seed=3)
    np.testing.assert_allclose(a, 2 * b)          # the same gaps, scaled: monotone in the rate
    assert np.diff(a).mean() == pytest.approx(0.1, rel=0.1)
    bursty = np.diff(load.arrival_times(2000, 10.0, burstiness=0.25, seed=3))
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.15)  # CV = 1/√shape
    with pytest.raises(ValueError, match="request_rate"):
        load.arrival_times(3, 0.0)


def test_closed_loop_keeps_at_most_concurrency_in_flight() -> None:
    reqs = workloads.fixed(40, 500, 50)
    one = load.bench_serve(D8, reqs, concurrency=1)
    # one at a time: every request sees the same TTFT and E2E, and they add up to the run
    assert np.ptp(one.ttft_s) == pytest.approx(0, abs=1e-12)
    assert one.e2e_s.sum() == pytest.approx(one.duration_s, rel=1e-9)
    four = load.bench_serve(D8, reqs, concurrency=4)
    start, end = four.arrival_s, four.arrival_s + four.e2e_s
    in_flight = [((start <= t) & (end > t)).sum() for t in np.linspace(0, end.max(), 400)]
    assert max(in_flight) <= 4
    assert four.duration_s < one.duration_s


def test_little_law_and_run_row() -> None:
    run = load.bench_serve(D8, workloads.sharegpt(300, seed=1), request_rate=10.0)
    row = load.run_row(run, request_rate=10.0)
    assert row["in_flight"] == pytest.approx(row["request_throughput"] * run.e2e_s.mean())
    assert row["p99_ttft_s"] >= row["median_ttft_s"] > 0


def test_slo_checks() -> None:
    with pytest.raises(ValueError, match="bounds TTFT, TPOT or both"):
        load.SLO()
    with pytest.raises(ValueError, match="percentile"):
        load.SLO(ttft_s=1.0, percentile=120)
    with pytest.raises(ValueError, match="tpot_s"):
        load.SLO(tpot_s=-1)


def test_max_rate_at_slo_is_monotone_and_reproducible() -> None:
    d = kvlib.Deployment("llama-3.1-70b", "h100-sxm", tp=2, weights="fp8", kv="fp8")
    reqs = workloads.random_lengths(400, 2000, 200, 0.5, seed=0)
    tight = load.max_rate_at_slo(d, reqs, load.SLO(tpot_s=0.03))
    loose = load.max_rate_at_slo(d, reqs, load.SLO(tpot_s=0.06))
    assert 0 < tight.rate_rps <= loose.rate_rps <= loose.saturated_rps
    assert tight.tpot_s <= 0.03 and loose.tpot_s <= 0.06
    again = load.max_rate_at_slo(d, reqs, load.SLO(tpot_s=0.03))
    assert again.rate_rps == tight.rate_rps
    # replicas for 10 requests/s: ceil(10 / rate); GPUs: replicas × 2
    assert loose.replicas_for(10) == math.ceil(10 / loose.rate_rps)
    assert loose.gpus_for(10) == 2 * loose.replicas_for(10)
    never = load.max_rate_at_slo(d, reqs, load.SLO(tpot_s=1e-4))
    assert never.rate_rps == 0 and never.run is None
    with pytest.raises(ValueError, match="no request rate meets this SLO"):
        never.replicas_for(1)


def test_bench_serve_refuses_a_deployment_with_no_pool() -> None:
    d = kvlib.Deployment("llama-3.1-70b", "h100-sxm")  # 16-bit 70B weights on one 80 GB GPU
    with pytest.raises(ValueError, match="KV pool is empty"):
        load.bench_serve(d, workloads.fixed(2, 10, 10))


def test_measured_error_table_by_band() -> None:
    import pandas as pd

    from kvlib.serve import measured

    # two light points missing TPOT by +10% and −30%, one past saturation by +50%
    errors = pd.DataFrame({"band": ["light", "light", "past"], "not_replayed": ["", "", ""],
                           **{f"{s}_error": [0.1, -0.3, 0.5] for _, s, _ in measured.COMPARED}})
    table = measured.error_table(errors)
    assert table.loc["all", "median_tpot_s median |error|"] == pytest.approx(0.3)
    assert table.loc["light", "median_tpot_s median |error|"] == pytest.approx(0.2)
    assert table.loc["past", "request_throughput points"] == 1
    assert measured.signed_median(errors, "median_tpot_s") == pytest.approx(0.1)


def test_bench_serve_uses_the_deployments_own_engine():
    # a request longer than the pool (its last token is never cached: 499,999 tokens) is refused
    # in the engine's own pages: SGLang's 1-token pages (419,358 tokens on one H100 for
    # Llama-3.1-8B), TensorRT-LLM's 32-token blocks (past the model's 131,072-token context:
    # allowed explicitly, as VLLM_ALLOW_LONG_MAX_MODEL_LEN allows it)
    sg = kvlib.Deployment("llama-3.1-8b", "h100-sxm", engine="sglang",
                          allow_long_max_model_len=True)
    with pytest.raises(ValueError, match=r"needs 499,999 blocks of 1; the pool has 419,358$"):
        load.bench_serve(sg, [[499_999, 1]])
    with pytest.raises(ValueError, match=r"blocks of 32; the pool has"):
        load.bench_serve(sg.with_(engine="tensorrt-llm"), [[499_999, 1]])
    # SGLang's --max-running-requests 2: of 6 requests sent at once the third starts only when
    # one of the first two has finished
    run = load.bench_serve(sg.with_(max_num_seqs=2), [[100, 10]] * 6)
    assert np.sort(run.ttft_s)[2] > np.sort(run.e2e_s)[0]


def test_max_rates_at_slos_are_max_rate_at_slo_each() -> None:
    d = kvlib.Deployment("llama-3.1-8b", "h100-sxm")
    reqs = workloads.random_lengths(30, 1000, 100, 0.5, seed=0)
    slos = [load.SLO(ttft_s=0.5), load.SLO(tpot_s=0.02, percentile=50)]
    shared = load.max_rates_at_slos(d, reqs, slos)
    alone = [load.max_rate_at_slo(d, reqs, s) for s in slos]
    assert [c.rate_rps for c in shared] == [c.rate_rps for c in alone]
    assert [c.concurrency for c in shared] == [c.concurrency for c in alone]


def test_saturated_rate_counts_tokens_not_completions_of_a_wave():
    from kvlib.engines.scheduler import ServingRun
    # 20 requests sent at once in two lockstep waves of 10: the first emits its first token at
    # 1 s and its 10th at 10 s, the second from 11 s to 20 s — one request per second. The
    # window runs from the 2nd to the 10th completion (10 s to 20 s): no token of wave 1, all
    # 10 of each of wave 2's requests: 100 tokens ÷ 10 s ÷ 10 per request = 1.0 (counting the
    # 8 completions in it would say 0.8)
    n = 20
    ttft = np.r_[np.full(10, 1.0), np.full(10, 11.0)]
    e2e = np.r_[np.full(10, 10.0), np.full(10, 20.0)]
    run = ServingRun(prompt_tokens=np.full(n, 100), output_tokens=np.full(n, 10),
                     arrival_s=np.zeros(n), ttft_s=ttft, tpot_s=(e2e - ttft) / 9, e2e_s=e2e,
                     itl_s=np.array([1.0]), itl_weight=np.array([9 * n]), preemptions=0,
                     steps=20, duration_s=20.0)
    assert load.saturated_rps(run) == pytest.approx(1.0)


# --- input validation: a one-line error naming the argument, never a hang or a wrong answer ---

def test_a_tolerance_below_the_floor_is_refused_before_any_run() -> None:
    # 1e-17: 1 + 1e-17 == 1 in float64, so the bisection's bounds never met and the search hung
    reqs = workloads.fixed(100, 1024, 128)
    for tol in (1e-17, 1e-7):
        with pytest.raises(ValueError, match=r"^tolerance must be >= 1e-06, got .*never ends$"):
            load.max_rate_at_slo(D8, reqs, kvlib.SLO(ttft_s=0.2), tolerance=tol)
        with pytest.raises(ValueError, match=r"^tolerance must be >= 1e-06"):
            load.max_rates_at_slos(D8, reqs, [kvlib.SLO(ttft_s=0.2)], tolerance=tol)
    assert load.MIN_TOLERANCE == 1e-6


def test_a_speculative_deployment_is_refused_as_serving_point_refuses_it() -> None:
    spec = D8.with_(speculative="eagle:3:0.7")
    reqs = workloads.fixed(10, 100, 10)
    tail = "simulates decoding without speculation: for speculative decoding use " \
           "kvlib.speculative_decode"
    with pytest.raises(ValueError, match=f"^bench_serve {tail}$"):
        load.bench_serve(spec, reqs, request_rate=5)
    with pytest.raises(ValueError, match=f"^max_rate_at_slo {tail}$"):
        load.max_rate_at_slo(spec, reqs, kvlib.SLO(ttft_s=0.2))
    with pytest.raises(ValueError, match=f"^max_rates_at_slos {tail}$"):
        load.max_rates_at_slos(spec, reqs, [kvlib.SLO(ttft_s=0.2)])
    with pytest.raises(ValueError, match=f"^bench_serve {tail}$"):
        load.rate_sweep(spec, reqs, [1.0])
    with pytest.raises(ValueError, match="for speculative decoding use kvlib.speculative_decode"):
        kvlib.serving_point(spec, input_tokens=100, output_tokens=10)


def test_a_request_longer_than_the_engine_accepts_is_refused() -> None:
    with pytest.raises(ValueError) as info:
        load.bench_serve(D8, [[200_000, 10]], request_rate=5)
    assert str(info.value) == ("request 0 (200,000 + 10 = 200,010 tokens) exceeds "
                               "Llama-3.1-8B's maximum context of 131,072 tokens: vLLM refuses "
                               "it (override with allow_long_max_model_len=True)")
    with pytest.raises(ValueError) as info:
        load.bench_serve(D8.with_(max_model_len=1000), [[10, 10], [990, 10], [2000, 10]],
                         request_rate=5)
    assert str(info.value) == ("request 2 (2,000 + 10 = 2,010 tokens) exceeds max_model_len "
                               "1,000: vLLM refuses it")
    # the first request over it is named; exactly max_model_len is served
    run = load.bench_serve(D8.with_(max_model_len=1000), [[990, 10]] * 3, request_rate=5)
    assert len(run.ttft_s) == 3
    # allowed past the model's context, as VLLM_ALLOW_LONG_MAX_MODEL_LEN allows it
    long = load.bench_serve(D8.with_(allow_long_max_model_len=True), [[200_000, 10]])
    assert long.ttft_s[0] > 0
    with pytest.raises(ValueError, match="exceeds Llama-3.1-8B's maximum context .* SGLang"):
        load.bench_serve(D8.with_(engine="sglang"), [[131_000, 100]])


def test_a_rate_so_low_that_send_times_lose_precision_is_refused() -> None:
    # at 1e-200 requests/s every latency read 0.0 ms: t + 0.01 == t at t ~ 1e200 s
    for rate in (1e-200, 1e-320):
        with pytest.raises(ValueError, match=r"^request_rate .* past 1e\+09 s .*raise the rate$"):
            load.bench_serve(D8, workloads.sharegpt(20), request_rate=rate)
    with pytest.raises(ValueError, match="^request_rate"):
        load.arrival_times(3, 1e-12, burstiness=math.inf)
    # a low rate that stays within the bound is served with its latencies intact
    slow = load.bench_serve(D8, workloads.fixed(3, 100, 10), request_rate=1e-8,
                            burstiness=math.inf)
    fast = load.bench_serve(D8, workloads.fixed(3, 100, 10), request_rate=1e-3,
                            burstiness=math.inf)
    # the third request is sent at 2 ÷ 1e-8 = 2e8 s, where a float64 time is exact to one ulp,
    # 2**27 × 2**-52 ≈ 3.0e-8 s: its latency, a difference of two such times, to about 1e-7 s
    np.testing.assert_allclose(slow.e2e_s, fast.e2e_s, rtol=0, atol=1e-7)
    assert (slow.e2e_s > 0).all()


def test_slo_percentile_must_lie_in_0_exclusive_to_100() -> None:
    for bad in (0, -1, 0.0):
        with pytest.raises(ValueError, match=r"^percentile must lie in \(0, 100\], got"):
            kvlib.SLO(ttft_s=2, percentile=bad)
    assert kvlib.SLO(ttft_s=2, percentile=100).percentile == 100
    assert kvlib.SLO(ttft_s=2, percentile=0.99).percentile == 0.99  # legal (p0.99), kept


def test_every_method_needing_a_rate_says_no_rate_meets_the_slo() -> None:
    never = load.max_rate_at_slo(D8, workloads.fixed(20, 100, 10), kvlib.SLO(tpot_s=1e-5))
    assert never.rate_rps == 0
    message = ("^no request rate meets this SLO on this deployment: a replica misses it even "
               "with one request at a time$")
    for call in (lambda: never.replicas_for(1), lambda: never.gpus_for(1),
                 lambda: never.dollars_per_million_output(2.0),
                 lambda: never.dollars_per_million_tokens(2.0),
                 lambda: never.dollars_per_user_hour(2.0)):
        with pytest.raises(ValueError, match=message):
            call()
    with pytest.raises(ValueError, match="dollars_per_gpu_hour"):  # the argument first
        never.dollars_per_million_output(-1)


def test_bench_serve_takes_a_model_and_a_gpu_keyword() -> None:
    reqs = workloads.fixed(10, 100, 10)
    by_keyword = load.bench_serve("llama-3.1-8b", reqs, request_rate=5, gpu="h100-sxm")
    given = load.bench_serve(D8, reqs, request_rate=5)
    np.testing.assert_array_equal(by_keyword.e2e_s, given.e2e_s)
    with_tp = load.bench_serve("llama-3.1-8b", reqs, request_rate=5, gpu="h100-sxm", tp=1)
    np.testing.assert_array_equal(with_tp.e2e_s, given.e2e_s)
    with pytest.raises(TypeError, match="^a deployment needs a GPU"):
        load.bench_serve("llama-3.1-8b", reqs, request_rate=5)
    with pytest.raises(TypeError, match="^pass a Deployment alone, or a model and a GPU$"):
        load.bench_serve(D8, reqs, request_rate=5, gpu="h100-sxm")


def test_rate_sweep_names_a_rate_that_is_not_a_number() -> None:
    with pytest.raises(ValueError, match="^rates must be a number, got '5'$"):
        load.rate_sweep(D8, workloads.fixed(4, 100, 10), ["5"])
