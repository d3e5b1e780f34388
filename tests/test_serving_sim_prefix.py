"""``simulate_serving(prefix_ids=...)`` and ``VllmBlockPool``: known answers worked by hand."""
from __future__ import annotations

import numpy as np
import pytest

from kvlib.engines.prefix import (VllmBlockCache, VllmBlockPool, block_level, block_requests,
                                  prompt_block_ids, shared_prefix_ids)
from kvlib.engines.scheduler import LinearStepTime, simulate_serving

FLAT = LinearStepTime(1e-3, 0.0)            # every step 1 ms


def test_a_second_request_hits_the_shared_full_blocks_but_not_the_last_token():
    # two 100-token prompts sharing all 100 tokens, the second arriving after the first ended:
    # 6 full blocks (96 tokens) are cached; a hit may cover at most ⌊(100 − 1) / 16⌋ = 6
    # blocks, so the second computes 4 tokens, on top of 96 computed ones
    seen = []

    def law(batch):
        seen.append(np.asarray(batch).tolist())
        return 1e-3

    ids = shared_prefix_ids([7, 7], [100, 100], [100, 100])
    assert ids[0] == ids[1] and len(ids[0]) == 6
    r = simulate_serving(np.array([[100, 2], [100, 2]]), np.array([0.0, 1.0]), pool_blocks=64,
                         step_time=law, prefix_ids=ids)
    assert r.cached_tokens.tolist() == [0, 96]
    assert seen == [[[100, 0]], [[1, 100]], [[4, 96]], [[1, 100]]]
    # a 32-token prompt (2 full blocks) sent twice hits 1 block: the last token is recomputed
    r = simulate_serving(np.array([[32, 1], [32, 1]]), np.array([0.0, 1.0]), pool_blocks=64,
                         step_time=FLAT, prefix_ids=shared_prefix_ids([0, 0], [32, 32], [32, 32]))
    assert r.cached_tokens.tolist() == [0, 16]


def test_a_request_admitted_in_the_same_step_hits_blocks_scheduled_before_it():
    # both arrive at once with the same 64-token prompt: the first is scheduled (and its 4 full
    # blocks cached at allocation, as vLLM does) before the second is looked up: hit 48 tokens
    ids = shared_prefix_ids([0, 0], [64, 64], [64, 64])
    r = simulate_serving(np.array([[64, 1], [64, 1]]), np.zeros(2), pool_blocks=64,
                         step_time=FLAT, prefix_ids=ids)
    assert r.cached_tokens.tolist() == [0, 48] and r.steps == 1


def test_cached_blocks_are_free_and_evicted_least_recently_freed_first():
    # pool of 4 blocks: A (prefix 0, 32 tokens + 1 output) caches 2 blocks and frees them;
    # B (prefix 1, 64 tokens) needs all 4 blocks, evicting A's; A's prefix sent again then misses
    ids = shared_prefix_ids([0, 1, 0], [32, 64, 32], [33, 64, 33])
    r = simulate_serving(np.array([[33, 1], [64, 1], [33, 1]]), np.array([0.0, 1.0, 2.0]),
                         pool_blocks=4, step_time=FLAT, prefix_ids=ids)
    assert r.cached_tokens.tolist() == [0, 0, 0]
    # with 7 blocks A's 2 survive B's 4: the third request hits 32 tokens
    r = simulate_serving(np.array([[33, 1], [64, 1], [33, 1]]), np.array([0.0, 1.0, 2.0]),
                         pool_blocks=7, step_time=FLAT, prefix_ids=ids)
    assert r.cached_tokens.tolist() == [0, 0, 32]


def test_without_shared_blocks_the_run_is_the_plain_schedule():
    # unique ids and a pool that never preempts: no hits, so the same schedule as without
    rng = np.random.default_rng(1)
    n = 120
    req = np.column_stack((rng.integers(1, 900, n), rng.integers(1, 150, n)))
    arr = np.cumsum(rng.exponential(0.05, n))
    kw = dict(pool_blocks=20_000, step_time=LinearStepTime(6e-3, 6e-5, 3e-9))
    plain = simulate_serving(req, arr, **kw)
    cached = simulate_serving(req, arr, prefix_ids=shared_prefix_ids(np.arange(n), np.zeros(n),
                                                                     req[:, 0]), **kw)
    assert cached.cached_tokens.sum() == 0 and cached.steps == plain.steps
    np.testing.assert_array_equal(cached.e2e_s, plain.e2e_s)
    np.testing.assert_array_equal(cached.ttft_s, plain.ttft_s)


def test_shared_prefix_ids_and_token_ids_give_the_same_blocks():
    # a 40-token system prompt shared by 3 requests with their own 30 tokens after it:
    # ⌊70 / 16⌋ = 4 full blocks each; the first 2 (32 tokens) are shared
    rng = np.random.default_rng(0)
    system = rng.integers(1, 1000, 40)
    tokens = [np.concatenate((system, rng.integers(1000, 9000, 30))) for _ in range(3)]
    by_tokens = prompt_block_ids(block_requests(tokens, 16))
    by_prefix = shared_prefix_ids([5, 5, 5], [40, 40, 40], [70, 70, 70])
    same = [[a == b for a, b in zip(x, y)] for x in by_tokens for y in by_tokens]
    assert same == [[c == d for c, d in zip(x, y)] for x in by_prefix for y in by_prefix]
    assert by_prefix[0][:2] == by_prefix[2][:2] and by_prefix[0][2] != by_prefix[2][2]


def test_the_block_pool_one_request_at_a_time_is_the_block_cache():
    # VllmBlockPool driven as replay_prefix_cache drives VllmBlockCache: the same hits
    rng = np.random.default_rng(2)
    systems = [rng.integers(1, 500, 200) for _ in range(4)]
    prompts = [np.concatenate((systems[rng.integers(4)][:rng.integers(0, 200)],
                               rng.integers(500, 9000, rng.integers(1, 60)))) for _ in range(150)]
    cache = VllmBlockCache(40)
    pool = VllmBlockPool(40)
    for ids, limit, alloc, _ in block_level(prompts, 16):
        want = cache.serve(ids, limit, alloc)
        hit = pool.lookup(ids[:limit])
        pool.touch(hit)
        blocks = hit + pool.take(alloc - len(hit))
        for j in range(len(hit), len(ids)):
            pool.cache(blocks[j], ids[j])
        pool.release(blocks)
        assert len(hit) == want
    assert pool.evicted_blocks == cache.evicted_blocks > 0 and pool.free_blocks == 40


@pytest.mark.parametrize("ids, match", [
    ([[0] * 6], "2 entries|1 entries"),
    ([[0] * 5, [0] * 6], "needs 6 ids"),
    ([[-1] * 6, [0] * 6], ">= 0"),
])
def test_bad_prefix_ids_are_refused(ids, match):
    with pytest.raises(ValueError, match=match):
        simulate_serving(np.array([[100, 2], [100, 2]]), np.zeros(2), pool_blocks=64,
                         step_time=FLAT, prefix_ids=ids)


def test_bad_shared_prefixes_are_refused():
    with pytest.raises(ValueError, match="between 0 and"):
        shared_prefix_ids([0], [200], [100])
    with pytest.raises(ValueError, match="one value per request"):
        shared_prefix_ids([0, 1], [10], [100])


@pytest.mark.parametrize("pool", [60, 5000])
def test_decode_runs_give_the_step_by_step_run(monkeypatch, pool):
    # runs of decode steps advanced at once against one step at a time, with a pool small
    # enough to preempt and evict (60 blocks) and one that never does
    from kvlib.engines import scheduler

    rng = np.random.default_rng(4)
    n = 80
    req = np.column_stack((rng.integers(20, 300, n), rng.integers(1, 80, n)))
    arr = np.cumsum(rng.exponential(0.02, n))
    ids = shared_prefix_ids(rng.integers(0, 3, n), np.minimum(req[:, 0], 100), req[:, 0])
    kw = dict(pool_blocks=pool, step_time=LinearStepTime(6e-3, 6e-5, 3e-9), prefix_ids=ids,
              max_num_batched_tokens=512)
    fast = simulate_serving(req, arr, **kw)
    monkeypatch.setattr(scheduler._PrefixEngine, "_decodes_only", lambda self: False)
    slow = simulate_serving(req, arr, **kw)
    assert (fast.steps, fast.preemptions) == (slow.steps, slow.preemptions)
    np.testing.assert_array_equal(fast.cached_tokens, slow.cached_tokens)
    np.testing.assert_allclose(fast.e2e_s, slow.e2e_s, rtol=1e-12)
    np.testing.assert_allclose(fast.ttft_s, slow.ttft_s, rtol=1e-12)
    assert fast.summary()["p99_itl_ms"] == pytest.approx(slow.summary()["p99_itl_ms"])
    assert fast.cached_tokens.sum() > 0
    if pool == 60:
        assert fast.preemptions > 0
