"""``kvlib.engines.scheduler``: known answers worked by hand (arithmetic in the comments)."""
from __future__ import annotations

import numpy as np
import pytest

from kvlib.engines import scheduler
from kvlib.engines.scheduler import LinearStepTime, _weighted_percentile, simulate_serving

MS = 1e-3
FLAT = LinearStepTime(1e-3, 0.0)            # every step 1 ms, whatever it holds


def run(requests, arrival=None, **kw):
    requests = np.asarray(requests)
    if arrival is None:
        arrival = np.zeros(len(requests))
    kw.setdefault("pool_blocks", 4096)
    kw.setdefault("step_time", FLAT)
    return simulate_serving(requests, arrival, **kw)


def test_one_request_alone():
    # prompt 100, output 3, 6 ms + 0.06 ms per scheduled token:
    # step 1 prefills 100 tokens: 6 + 100 × 0.06 = 12 ms → first token at 12 ms;
    # steps 2 and 3 decode 1 token each: 6.06 ms → E2E 12 + 2 × 6.06 = 24.12 ms;
    # TPOT (24.12 − 12) / (3 − 1) = 6.06 ms
    r = run([[100, 3]], step_time=LinearStepTime(6e-3, 6e-5))
    assert r.steps == 3 and r.preemptions == 0
    assert r.ttft_s[0] == pytest.approx(12 * MS)
    assert r.e2e_s[0] == pytest.approx(24.12 * MS)
    assert r.tpot_s[0] == pytest.approx(6.06 * MS)
    assert r.duration_s == pytest.approx(24.12 * MS)


def test_context_tokens_are_the_tokens_already_computed():
    # prompt 100, output 3, 3 ns per context token on top of the 1 ms steps:
    # step 1 has 0 computed, step 2 has 100, step 3 has 101 → 3 ms + 201 × 3 ns
    r = run([[100, 3]], step_time=LinearStepTime(1e-3, 0.0, 3e-9))
    assert r.e2e_s[0] == pytest.approx(3e-3 + 201 * 3e-9, rel=1e-12)


def test_long_prompt_is_prefilled_in_chunks_of_the_budget():
    # 5,000 tokens with a 2,048-token budget: chunks 2,048 + 2,048 + 904 → 3 steps, the first
    # token after the third: 3 × 6 ms + 5,000 × 0.06 ms = 318 ms; one output token: TPOT 0
    r = run([[5000, 1]], step_time=LinearStepTime(6e-3, 6e-5), max_num_batched_tokens=2048)
    assert r.steps == 3
    assert r.ttft_s[0] == pytest.approx(318 * MS)
    assert r.e2e_s[0] == r.ttft_s[0]
    assert r.tpot_s[0] == 0.0


def test_step_time_sees_each_chunk_and_its_computed_tokens():
    seen = []

    def law(batch):
        seen.append(np.asarray(batch).tolist())
        return 1e-3

    run([[5000, 2]], step_time=law, max_num_batched_tokens=2048)
    # three chunks (tokens scheduled, tokens computed before), then one decode at 5,000
    assert seen == [[[2048, 0]], [[2048, 2048]], [[904, 4096]], [[1, 5000]]]


def test_running_requests_go_first_and_a_waiting_prompt_is_chunked_into_what_is_left():
    seen = []

    def law(batch):
        seen.append(np.asarray(batch).tolist())
        return 1e-3

    # A (prompt 10, 3 tokens) is decoding when B (prompt 100) arrives with budget 50:
    # step 1: A's prompt; step 2 (B has arrived at 0.5 ms): A decodes 1, B gets 50 − 1 = 49;
    # step 3: A's last decode 1, B 49 more (98); step 4: B's last 2 tokens → B's first token
    run([[10, 3], [100, 2]], [0.0, 0.5e-3], step_time=law, max_num_batched_tokens=50,
        max_num_seqs=2)
    assert seen[:4] == [[[10, 0]], [[1, 10], [49, 0]], [[1, 11], [49, 49]], [[2, 98]]]


def test_two_requests_prefill_together_and_share_every_step():
    # both prompts fit one 8,192 budget: step 1 prefills 300 + 500 tokens together:
    # 6 + 800 × 0.06 = 54 ms for both first tokens; then two-request decodes of
    # 6 + 2 × 0.06 = 6.12 ms: A (4 tokens) ends after 3 of them, B (2 tokens) after 1
    r = run([[300, 4], [500, 2]], step_time=LinearStepTime(6e-3, 6e-5))
    np.testing.assert_allclose(r.ttft_s, [54 * MS, 54 * MS])
    # B: 54 + 6.12; A: 54 + 6.12 (with B) + 2 × 6.06 (alone)
    np.testing.assert_allclose(r.e2e_s, [(54 + 6.12 + 2 * 6.06) * MS, (54 + 6.12) * MS])
    assert r.steps == 4


def test_max_num_seqs_makes_the_second_request_wait():
    # one running request at a time, 1 ms steps: A runs steps 1–5 (prompt, then 4 decodes);
    # B is admitted in step 6 → first token at 6 ms, last at 10 ms
    r = run([[10, 5], [10, 5]], max_num_seqs=1)
    np.testing.assert_allclose(r.ttft_s, [1 * MS, 6 * MS])
    np.testing.assert_allclose(r.e2e_s, [5 * MS, 10 * MS])


def test_arrival_after_an_idle_gap_is_measured_from_its_arrival():
    # A (1 ms steps) is done at 3 ms; B arrives at 10 s: the clock jumps, B's TTFT is 1 ms
    r = run([[10, 3], [10, 3]], [0.0, 10.0])
    np.testing.assert_allclose(r.ttft_s, [1 * MS, 1 * MS])
    np.testing.assert_allclose(r.e2e_s, [3 * MS, 3 * MS])
    assert r.duration_s == pytest.approx(10.003)


def test_admission_needs_blocks_for_the_whole_prompt_not_only_the_first_chunk():
    # pool 10 blocks of 16, budget 50, 1 ms steps. A (prompt 80, 3 tokens): chunks 50 + 30 in
    # steps 1–2 (first token at 2 ms, 5 blocks), decodes in steps 3–4 (6 blocks), done at 4 ms.
    # B (prompt 100, 1 token) arrives at 0.5 ms and needs ceil(100/16) = 7 blocks to be
    # admitted: 10 − 5 = 5 free in step 2, 4 in steps 3–4, although its first chunk (20 tokens
    # in step 2: 2 blocks) would fit (vLLM's scheduler_reserve_full_isl). Admitted in step 5:
    # chunks 50 + 50 → its token at 6 ms, 5.5 ms after its arrival
    r = run([[80, 3], [100, 1]], [0.0, 0.5e-3], pool_blocks=10, max_num_batched_tokens=50,
            max_num_seqs=2)
    np.testing.assert_allclose(r.e2e_s, [4 * MS, 6 * MS - 0.5e-3])
    assert r.steps == 6


def test_recompute_preemption_of_the_last_running_request():
    # pool 4 blocks of 16; A and B: prompt 16, 20 output tokens (KV up to 16 + 19 = 35 tokens,
    # 3 blocks each). Step 1 prefills both (1 block each); step 2 gives each a 2nd block (pool
    # full). Step k decodes from 14 + k computed tokens, so step 18 (32 computed) needs a 3rd
    # block: A, first in the running list, preempts B (the last): B's 2 blocks are freed and
    # B leaves with 17 tokens sampled (steps 1–17). A samples its 20th token in step 20 and
    # frees 3 blocks; B needs ceil((16 + 17)/16) = 3 blocks to come back: step 21 recomputes
    # its 33 tokens and samples its 18th token; steps 22–23 its 19th and 20th.
    r = run([[16, 20], [16, 20]], pool_blocks=4)
    assert r.preemptions == 1 and r.steps == 23
    np.testing.assert_allclose(r.ttft_s, [1 * MS, 1 * MS])       # B keeps its first token
    np.testing.assert_allclose(r.e2e_s, [20 * MS, 23 * MS])
    np.testing.assert_allclose(r.tpot_s, [19 / 19 * MS, 22 / 19 * MS])
    # B's token after the preemption came 21 − 17 = 4 ms after its previous one
    itl = np.repeat(r.itl_s, r.itl_weight)
    assert sorted(itl)[-1] == pytest.approx(4 * MS)
    assert len(itl) == 2 * 19                                     # output − 1 per request


def test_a_fast_step_law_and_a_plain_callable_give_the_same_run():
    rng = np.random.default_rng(7)
    n = 300
    req = np.column_stack((rng.integers(1, 1500, n), rng.integers(1, 300, n)))
    arr = np.cumsum(rng.exponential(1 / 12, n))
    law = LinearStepTime(6e-3, 6e-5, 3e-9)
    kw = dict(pool_blocks=700, max_num_batched_tokens=2048)
    fast = simulate_serving(req, arr, step_time=law, **kw)
    plain = simulate_serving(req, arr, step_time=lambda b: law(b), **kw)
    assert fast.preemptions > 0
    assert (fast.steps, fast.preemptions) == (plain.steps, plain.preemptions)
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(plain, name))
    np.testing.assert_allclose(np.sort(np.repeat(fast.itl_s, fast.itl_weight)),
                               np.sort(np.repeat(plain.itl_s, plain.itl_weight)))


def test_summary_in_the_shape_of_vllm_bench_serve():
    # A: prompt 100, 3 tokens; B: prompt 100, 1 token (left out of TPOT, as vLLM does);
    # step 1: both prompts (6 + 200 × 0.06 = 18 ms), steps 2–3 A alone (6.06 ms each)
    r = run([[100, 3], [100, 1]], step_time=LinearStepTime(6e-3, 6e-5))
    s = r.summary()
    assert s["completed"] == 2
    assert s["duration"] == pytest.approx(30.12 * MS)
    assert s["request_throughput"] == pytest.approx(2 / 30.12e-3)
    assert s["output_throughput"] == pytest.approx(4 / 30.12e-3)
    assert s["total_token_throughput"] == pytest.approx(204 / 30.12e-3)
    assert s["median_ttft_ms"] == pytest.approx(18)
    assert s["mean_tpot_ms"] == pytest.approx(6.06)            # A only
    assert s["p99_itl_ms"] == pytest.approx(6.06)
    assert s["mean_e2el_ms"] == pytest.approx((30.12 + 18) / 2)
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert {f"mean_{metric}_ms", f"median_{metric}_ms", f"p90_{metric}_ms",
                f"p99_{metric}_ms"} <= s.keys()


@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_weighted_percentile_is_numpys_on_the_repeated_values(q):
    rng = np.random.default_rng(q)
    values, weights = rng.random(30), rng.integers(1, 5, 30)
    assert _weighted_percentile(values, weights, q) == pytest.approx(
        np.percentile(np.repeat(values, weights), q))


@pytest.mark.parametrize("requests, arrival, kw, match", [
    ([[10, 1]], [0.0], dict(pool_blocks=0), "pool_blocks"),
    ([[4000, 100]], [0.0], dict(pool_blocks=100), "needs 257 blocks"),
    ([[10, 0]], [0.0], {}, "at least 1"),
    ([10, 1], [0.0], {}, r"\(n, 2\)"),
    ([[10, 1], [10, 1]], [1.0, 0.0], {}, "non-decreasing"),
    ([[10, 1]], [0.0, 1.0], {}, "one time per request"),
    ([[10, 1]], [0.0], dict(step_time=lambda b: 0.0), "positive"),
    ([[10, 1]], [0.0], dict(max_num_batched_tokens=0), "max_num_batched_tokens"),
    ([[10, 1]], [0.0], dict(max_num_batched_tokens=128), "as vLLM requires"),
])
def test_bad_input_is_refused(requests, arrival, kw, match):
    kw = {"pool_blocks": 4096, "step_time": FLAT, **kw}
    with pytest.raises(ValueError, match=match):
        simulate_serving(np.asarray(requests), np.asarray(arrival), **kw)


def test_step_law_refuses_a_zero_base():
    with pytest.raises(ValueError, match="base_s"):
        LinearStepTime(0.0, 1e-5)


@pytest.mark.parametrize("lists_below, table_above", [(0, 0), (10**9, 10**9), (3, 5)])
def test_list_and_table_states_give_the_same_run(monkeypatch, lists_below, table_above):
    # the engine keeps few running requests in lists and many in a numpy table; all lists,
    # all table, and switching back and forth often must give the default's run exactly
    rng = np.random.default_rng(11)
    n = 400
    req = np.column_stack((rng.integers(1, 1500, n), rng.integers(1, 300, n)))
    arr = np.cumsum(rng.gamma(0.25, 4 / 15, n))          # bursty, 15 requests/s
    kw = dict(pool_blocks=900, max_num_batched_tokens=2048, max_num_seqs=64,
              step_time=LinearStepTime(6e-3, 6e-5, 3e-9))
    default = simulate_serving(req, arr, **kw)
    monkeypatch.setattr(scheduler, "LIST_BELOW", lists_below)
    monkeypatch.setattr(scheduler, "TABLE_ABOVE", table_above)
    other = simulate_serving(req, arr, **kw)
    assert default.preemptions > 0
    assert (other.steps, other.preemptions) == (default.steps, default.preemptions)
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        np.testing.assert_array_equal(getattr(other, name), getattr(default, name))
    np.testing.assert_array_equal(np.sort(np.repeat(other.itl_s, other.itl_weight)),
                                  np.sort(np.repeat(default.itl_s, default.itl_weight)))


@pytest.mark.parametrize("lists_below", [0, 10**9])
def test_a_last_prompt_chunk_of_one_token_gives_the_first_token(monkeypatch, lists_below):
    # 2,049 tokens, budget 2,048: step 1 computes 2,048, step 2 the last prompt token and
    # samples the first output token (2 ms); 2 decodes more → 4 ms
    monkeypatch.setattr(scheduler, "LIST_BELOW", lists_below)
    monkeypatch.setattr(scheduler, "TABLE_ABOVE", lists_below)
    alone = run([[2049, 3]], max_num_batched_tokens=2048)
    assert (alone.ttft_s[0], alone.e2e_s[0]) == pytest.approx((2 * MS, 4 * MS))
    r = run([[2049, 3], [10, 5]], max_num_batched_tokens=2048)
    # B (10 tokens) waits behind A's first chunk (budget spent): admitted in step 2 with A's
    # last prompt token, first token at 2 ms, 4 more → 6 ms
    np.testing.assert_allclose(r.ttft_s, [2 * MS, 2 * MS])
    np.testing.assert_allclose(r.e2e_s, [4 * MS, 6 * MS])


def test_prefill_first_pauses_the_decodes_for_an_arriving_prompt():
    # SGLang's policy, 6 ms + 0.06 ms per scheduled token, chunk 1,000: two prompts of 100
    # arrive at 0 and prefill together (6 + 200 × 0.06 = 18 ms: first tokens at 18 ms); they
    # decode 2 tokens a step (6.12 ms) at 18 and 24.12 ms; the third prompt, arrived at 30 ms,
    # is prefilled alone at 30.24 ms (6 + 100 × 0.06 = 12 ms: TTFT 42.24 − 30 = 12.24 ms) while
    # the two wait; with vLLM's mixed step (102 tokens, 12.12 ms) its TTFT is 12.36 ms
    kw = dict(step_time=LinearStepTime(6e-3, 6e-5), max_num_batched_tokens=1000)
    three, arrival = [[100, 10]] * 3, [0, 0, 0.03]
    sg = run(three, arrival, prefill_first=True, **kw)
    vllm = run(three, arrival, **kw)
    assert sg.ttft_s == pytest.approx([18 * MS, 18 * MS, 12.24 * MS])
    assert vllm.ttft_s[2] == pytest.approx(12.36 * MS)
    # the first two: 9 intervals = 2 steps of 6.12, the 12 ms prefill, 7 steps of 3 decodes
    # (6.18 ms): (2 × 6.12 + 12 + 7 × 6.18) / 9
    assert sg.tpot_s[:2] == pytest.approx([(2 * 6.12 + 12 + 7 * 6.18) / 9 * MS] * 2)


def test_prefill_first_runs_a_closed_loop_of_one_length_in_waves():
    # 8 prompts of 1,000 at once, chunk 2,000: 4 prefill batches of 2 prompts (6 + 2,000 × 0.06
    # = 126 ms each) before any decode — first tokens at 126, 252, 378 and 504 ms, mean
    # (4 + 1) / 2 × 126 = 315 ms (roofline.LockstepSteps.ttft_wave_share); then 49 decode steps
    # of 8 (6.48 ms): the first pair's TPOT carries the 3 batches after its first token
    kw = dict(step_time=LinearStepTime(6e-3, 6e-5), max_num_batched_tokens=2000)
    r = run([[1000, 50]] * 8, prefill_first=True, **kw)
    assert sorted(r.ttft_s) == pytest.approx([126 * MS] * 2 + [252 * MS] * 2 + [378 * MS] * 2
                                             + [504 * MS] * 2)
    assert r.ttft_s.mean() == pytest.approx(315 * MS)
    assert r.tpot_s.max() == pytest.approx((3 * 126 + 49 * 6.48) / 49 * MS)
    assert r.tpot_s.min() == pytest.approx(6.48 * MS)


def test_prefill_first_takes_a_chunk_below_max_num_seqs_and_refuses_prefix_caching():
    # SGLang's chunk bounds prompt tokens alone, so it may be smaller than the running cap
    r = run([[100, 2]] * 4, prefill_first=True, max_num_seqs=256, max_num_batched_tokens=128)
    assert r.steps == 4 + 1        # 4 prefill batches of 100 + 28, 72 + 56, … then 1 decode
    with pytest.raises(ValueError, match="prefill_first"):
        run([[100, 2]], prefill_first=True, prefix_ids=[[0] * 6])


def test_reserve_output_admits_only_what_can_finish_and_never_preempts():
    # TensorRT-LLM's GUARANTEED_NO_EVICT: two requests of 100 + 100 tokens need ⌈199 / 16⌉ = 13
    # blocks each at the end; a 20-block pool reserves one, so the second waits for the first
    # (1 ms steps: prefill at 1 ms, 99 decodes, done at 100 ms; the second's prefill ends at
    # 101 ms, TTFT 101 ms, E2E 200 ms). vLLM admits both on their prompts' 7 blocks each and
    # preempts the second when 2 × 11 blocks no longer fit.
    two = [[100, 100]] * 2
    vllm = run(two, pool_blocks=20)
    trt = run(two, pool_blocks=20, reserve_output=True)
    assert vllm.preemptions == 1 and vllm.ttft_s == pytest.approx([1 * MS, 1 * MS])
    assert trt.preemptions == 0 and trt.steps == 200
    assert trt.ttft_s == pytest.approx([1 * MS, 101 * MS])
    assert trt.e2e_s == pytest.approx([100 * MS, 200 * MS])
    # the same on the numpy table (above TABLE_ABOVE = 48 running requests): 50 reserved, 10 wait
    many = [[100, 100]] * 60
    table = run(many, pool_blocks=13 * 50, reserve_output=True)
    assert table.preemptions == 0 and np.isfinite(table.e2e_s).all()
    assert (np.sort(table.ttft_s)[:50] < 2 * MS).all() and (np.sort(table.ttft_s)[50:] > 99 * MS).all()


def test_prefix_ids_must_be_integers_not_truncated():
    # int(2.7) would have silently merged block 2.7 with block 2
    base = run([[40, 2]] * 2, prefix_ids=[[0, 1], [0, 1]])
    whole = run([[40, 2]] * 2, prefix_ids=[[0.0, 1.0], [np.int64(0), np.int32(1)]])
    assert whole.cached_tokens.tolist() == base.cached_tokens.tolist()
    for bad in (2.7, float("nan"), "1", True, None):
        with pytest.raises(ValueError, match=r"^request 1: prefix_ids must hold integers, got "):
            run([[40, 2]] * 2, prefix_ids=[[0, 1], [0, bad]])
