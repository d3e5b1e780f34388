"""Tests for kvlib.engines.allocator and kvlib.engines.workloads: known answers, the block-level reference
(kvlib.engines.allocator_reference), properties."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvlib.engines.allocator import (
    BlockAllocator,
    BuddyAllocator,
    ContiguousAllocator,
    OutOfBlocksError,
    prefix_reuse_lost,
    reserved_tokens,
    simulate,
)
from kvlib.engines.allocator_reference import simulate_reference
from kvlib.engines.workloads import (
    alpaca,
    alpaca_dists,
    fixed,
    from_arrays,
    poisson_arrivals,
    published_stats,
    sharegpt,
    sharegpt_dists,
)

POLICIES = ("paged", "reserve_oracle", "reserve_pow2", "reserve_max")


# --- known answers on hand-worked traces -----------------------------------------------------

def test_single_request_paged_known_answer():
    # prompt 3 + output 2, blocks of 4, pool 8 tokens (2 blocks).
    # step 0: prefill, 3 tokens in 1 block (4 slots); step 1: 4 tokens, 1 block;
    # step 2: 5 tokens, 2 blocks (8 slots), finishes.  ΣS = 3+4+5 = 12, ΣR = 4+4+8 = 16.
    # Internal waste: F = 5, last block ends at 8, so 3 never-written slots in step 2 only.
    # Reservation waste: 16 − 12 − 3 = 1 (slot 4, reserved at step 0, written at step 1).
    res = simulate([[3, 2]], pool_tokens=8, policy="paged", block_size=4)
    assert (res.steps, res.completed, res.token_steps, res.max_slack_tokens) == (3, 1, 3, 3)
    assert res.token_utilization == 12 / 16
    assert res.internal_waste == 3 / 16
    assert res.reservation_waste == 1 / 16
    assert res.pool_token_share == 12 / (3 * 8)
    assert res.peak_pool_reserved_share == 1.0 and res.peak_pool_token_share == 5 / 8
    assert res.mean_batch == 1.0 and res.completed_per_step == 1 / 3
    # Pool token-steps: 3 steps × 8 = 24; reserved 16 → free 8/24.
    assert res.pool_breakdown() == pytest.approx({"token_states": 12 / 24, "reservation": 1 / 24,
                                                  "internal": 3 / 24, "free": 8 / 24})


@pytest.mark.parametrize("policy, reserved_per_step, util", [
    # prompt 3 + output 3: states 3, 4, 5, 6 over 4 steps, ΣS = 18.
    ("reserve_oracle", 6, 18 / 24),   # reserves exactly 6
    ("reserve_pow2", 7, 18 / 28),     # 3 + next_pow2(3) = 3 + 4 = 7 (Orca (Pow2) rounds the output)
    ("reserve_max", 8, 18 / 32),      # max_model_len = 8
])
def test_reservation_known_answers(policy, reserved_per_step, util):
    res = simulate([[3, 3]], pool_tokens=8, policy=policy, max_model_len=8)
    assert res.steps == 4
    assert res.pool_reserved_share == 4 * reserved_per_step / (4 * 8)
    assert res.token_utilization == util
    assert res.internal_waste == (reserved_per_step - 6) / reserved_per_step


def test_reserved_tokens_follow_the_paper():
    # §6.1: Orca (Pow2) "if the true output length is 25, it reserves 32 positions for outputs".
    assert reserved_tokens(100, 25, "reserve_pow2") == 132
    assert reserved_tokens(100, 32, "reserve_pow2") == 132
    assert reserved_tokens(100, 33, "reserve_pow2", max_model_len=150) == 150  # capped
    assert reserved_tokens(100, 25, "reserve_oracle") == 125
    assert reserved_tokens(100, 25, "reserve_max", max_model_len=2048) == 2048
    with pytest.raises(ValueError, match="not a reservation policy"):
        reserved_tokens(100, 25, "paged")


def test_paged_same_request_block_4():
    # Same 3 + 3 request paged with blocks of 4: blocks 1, 1, 2, 2 → slots 4+4+8+8 = 24.
    res = simulate([[3, 3]], pool_tokens=8, policy="paged", block_size=4)
    assert res.token_utilization == 18 / 24


def test_preemption_known_answer():
    # Pool of 2 blocks × 2 tokens; two requests of 2 + 2.
    # step 0: both admitted (1 block each, pool full).
    # step 1: both need a 2nd block, none free → preempt r1 (latest admitted), r0 grows to 3.
    # step 2: r0 holds 4 tokens in 2 blocks and finishes.
    # step 3: r1 re-admitted, prefill of its 2 tokens again; step 4: 3; step 5: 4, finishes.
    # ΣS = 4 + 3 + 4 + 2 + 3 + 4 = 20; ΣR (slots) = 4 + 4 + 4 + 2 + 4 + 4 = 22.
    res = simulate([[2, 2], [2, 2]], pool_tokens=4, policy="paged", block_size=2)
    assert (res.steps, res.preemptions, res.recomputed_tokens, res.completed) == (6, 1, 2, 2)
    assert res.token_utilization == 20 / 22
    assert res.token_steps == 7 and res.max_batch == 2
    assert simulate_reference([[2, 2], [2, 2]], pool_tokens=4, policy="paged", block_size=2) == res


def test_external_fragmentation_known_answer():
    # Pool of 10 slots, Orca (Oracle). A = 3+1 at [0, 4), B = 2+2 at [4, 8); C = 4+1 needs 5.
    # step 0: hole [8, 10) of 2 → C waits.  A finishes at step 1 → holes [0, 4) and [8, 10):
    # 6 slots free but no 5 contiguous → C still waits at step 2 (external fragmentation).
    # B finishes at step 2 → C admitted at step 3, finishes at step 4: 5 steps in all.
    res = simulate([[3, 1], [2, 2], [4, 1]], pool_tokens=10, policy="reserve_oracle")
    assert res.steps == 5 and res.max_batch == 2
    # ΣS = (3+2) + (4+3) + 4 + 4 + 5 = 25 and ΣR = 8 + 8 + 4 + 5 + 5 = 30.
    assert res.token_utilization == 25 / 30


def test_buddy_allocation_known_answer():
    # Oracle reservations of 5 and 2 tokens in an 8-slot pool.  Buddy: A's 5 tokens take the
    # whole 8-slot chunk, so B waits until A finishes (steps 0-2) and runs at steps 3-4.
    # ΣS = (3+4+5) + (1+2) = 15; ΣR (the policy's reservation) = 5·3 + 2·2 = 19;
    # rounding = (8 − 5)·3 = 9 slot-steps of 5 steps × 8 slots.  First-fit runs both at once.
    res = simulate([[3, 2], [1, 1]], pool_tokens=8, policy="reserve_oracle", allocator="buddy")
    assert (res.steps, res.max_batch, res.allocator) == (5, 1, "buddy")
    assert res.token_utilization == 15 / 19 and res.pool_rounding_share == 9 / 40
    assert res.pool_breakdown()["free"] == 1 - 19 / 40  # rounding counts with the free share
    first_fit = simulate([[3, 2], [1, 1]], pool_tokens=8, policy="reserve_oracle")
    assert (first_fit.steps, first_fit.max_batch, first_fit.pool_rounding_share) == (3, 2, 0.0)


def test_buddy_allocator_splits_merges_and_carves():
    alloc = BuddyAllocator(16)
    assert alloc.allocate(3) == 0       # 16 → 8 + 8 → 4 + 4: [0, 4)
    assert alloc.allocate(5) == 8       # needs 8: the free upper half
    assert alloc.allocate(4) == 4
    assert alloc.allocate(1) is None and alloc.held_tokens == 16 and alloc.used_tokens == 12
    with pytest.raises(ValueError, match="no chunk"):
        alloc.free(4, 9)                # 9 tokens would have needed a 16-slot chunk
    alloc.free(0, 3)
    alloc.free(4, 4)                    # buddies [0, 4) and [4, 8) merge into [0, 8)
    alloc.free(8, 5)                    # ... and [0, 8) with [8, 16)
    assert alloc.free_chunks[4] == {0} and not any(alloc.free_chunks[:4])
    # The vLLM paper's OPT-13B pool: 15,728 slots = 8,192 + 4,096 + 2,048 + 1,024 + 256 + 64 + 32 + 16.
    pool = BuddyAllocator(15_728)
    assert sorted(1 << k for k, starts in enumerate(pool.free_chunks) for _ in starts) == \
        [16, 32, 64, 256, 1024, 2048, 4096, 8192]
    # Seven 2,048-token chunks, smallest free chunk first (Orca (Max)'s 7 slots), then none.
    assert [pool.allocate(2048) for _ in range(8)] == [12288, 8192, 10240, 0, 2048, 4096, 6144, None]
    assert BuddyAllocator.chunk_tokens(2048) == 2048 and BuddyAllocator.chunk_tokens(2049) == 4096


def test_buddy_rejects_what_no_chunk_holds():
    # A 600-token pool carves 512 + 64 + 16 + 8: a 513-token reservation fits no chunk.
    res = simulate([[500, 13], [10, 10]], pool_tokens=600, policy="reserve_oracle", allocator="buddy")
    assert (res.rejected, res.completed) == (1, 1)


def test_arrival_steps_and_idle_steps():
    # One request 1 + 1 arriving at step 5: steps 0-4 idle, admitted at 5, finishes at 6.
    res = simulate([[1, 1]], pool_tokens=4, policy="paged", block_size=2, arrival_steps=[5])
    assert res.steps == 7 and res.mean_batch == 2 / 7
    assert res.pool_token_share == (1 + 2) / (7 * 4)


def test_max_batch_caps_running():
    res = simulate(fixed(5, 1, 1), pool_tokens=100, block_size=1, max_batch=2)
    # batches of 2, 2, 1, each alive 2 steps (1 prefill + 1 decode), next batch admitted after.
    assert res.max_batch == 2 and res.steps == 6


def test_rejected_requests_are_reported_not_looped():
    # 3 + 2 = 5 tokens fit 6 slots, but with blocks of 4 the pool has 1 block (4 tokens).
    res = simulate([[3, 2], [1, 1]], pool_tokens=6, policy="paged", block_size=4)
    assert (res.rejected, res.completed) == (1, 1)
    # max_model_len 16 > pool 10: reserve_max can never admit anything.
    res = simulate([[3, 2]], pool_tokens=10, policy="reserve_max", max_model_len=16)
    assert (res.rejected, res.completed, res.steps, res.token_utilization) == (1, 0, 0, 0.0)


def test_prefix_reuse_lost():
    # A 1,000-token system prompt: 1000 mod 16 = 8 tokens recomputed; 1000 mod 256 = 232.
    assert [prefix_reuse_lost(1000, b) for b in (1, 16, 128, 256)] == [0, 8, 1000 - 896, 232]
    with pytest.raises(ValueError, match="block_size"):
        prefix_reuse_lost(10, 0)
    with pytest.raises(ValueError, match="prefix_tokens"):
        prefix_reuse_lost(-1, 16)


@pytest.mark.parametrize("kwargs, match", [
    ({"requests": [[-1, 5]]}, "prompt_tokens must be >= 1"),
    ({"requests": [[4, 0]]}, "output_tokens must be >= 1"),
    ({"requests": [[4, 1.5]]}, "whole token counts"),
    ({"requests": [4, 5]}, r"\(n, 2\)"),
    ({"requests": np.zeros((0, 2))}, r"\(n, 2\)"),
    ({"pool_tokens": 8}, "smaller than one block"),
    ({"pool_tokens": 0, "policy": "reserve_oracle"}, "smaller than one block"),
    ({"policy": "lru"}, "unknown policy"),
    ({"block_size": 0}, "block_size"),
    ({"block_size": -16}, "block_size"),
    ({"requests": [[600, 600]]}, "more than pool_tokens"),
    ({"max_model_len": 10}, "more than max_model_len"),
    ({"policy": "reserve_max"}, "needs max_model_len"),
    ({"arrival_rate": 0.0}, "arrival rate"),
    ({"arrival_rate": float("nan")}, "arrival rate"),
    ({"arrival_steps": [-1]}, "arrival_steps"),
    ({"max_batch": 0}, "max_batch"),
    ({"pool_tokens": 1024.0}, "pool_tokens must be an integer"),
    ({"block_size": 10**9, "pool_tokens": 2 * 10**9}, "block_size must be <= 65,536"),
    ({"requests": [[2**62, 2**62]], "pool_tokens": 2**64},
     "request 0 has more than 4,503,599,627,370,496 prompt or output tokens"),
    ({"block_size": np.float64(16)}, "block_size must be an integer"),
    ({"arrival_rate": "fast"}, "arrival rate"),
    ({"allocator": "slab", "policy": "reserve_oracle"}, "unknown allocator"),
    ({"allocator": "buddy"}, "paged blocks need none"),
])
def test_bad_input_raises_value_error(kwargs, match):
    args = {"requests": [[10, 10]], "pool_tokens": 1024} | kwargs
    with pytest.raises(ValueError, match=match):
        simulate(**args)


# --- fast simulator == block-level reference ---------------------------------------------------

@st.composite
def traces(draw):
    n = draw(st.integers(1, 10))
    reqs = [[draw(st.integers(1, 20)), draw(st.integers(1, 20))] for _ in range(n)]
    policy = draw(st.sampled_from(POLICIES))
    block_size = draw(st.sampled_from([1, 2, 3, 4, 8])) if policy == "paged" else 16
    longest = max(p + o for p, o in reqs)
    max_model_len = longest + draw(st.integers(0, 8)) if policy == "reserve_max" or draw(
        st.booleans()) else None
    smallest = max(longest, block_size if policy == "paged" else 1)
    pool = draw(st.integers(smallest, max(smallest, 3 * longest)))
    arrival = [draw(st.integers(0, 12)) for _ in range(n)]
    max_batch = draw(st.none() | st.integers(1, 4))
    allocator = "first_fit" if policy == "paged" else draw(st.sampled_from(["first_fit", "buddy"]))
    return {"requests": reqs, "pool_tokens": pool, "policy": policy, "block_size": block_size,
                "max_model_len": max_model_len, "arrival": arrival, "max_batch": max_batch,
                "allocator": allocator}


@settings(max_examples=300, deadline=None)
@given(traces())
def test_fast_simulator_matches_block_reference(trace):
    arrival = trace.pop("arrival")
    expected = simulate_reference(**trace, arrival_steps=arrival)
    got = simulate(**trace, arrival_steps=arrival)
    assert got == expected


@pytest.mark.parametrize("policy, block_size, allocator", [
    ("paged", 16, "first_fit"), ("paged", 1, "first_fit"), ("paged", 7, "first_fit"),
    ("reserve_oracle", 16, "first_fit"), ("reserve_pow2", 16, "first_fit"),
    ("reserve_max", 16, "first_fit"), ("reserve_oracle", 16, "buddy"), ("reserve_pow2", 16, "buddy")])
def test_fast_matches_reference_on_sharegpt_with_poisson(policy, block_size, allocator):
    # 150 ShareGPT-like requests at 0.5 requests/step into a 6,144-token pool: queueing,
    # first-fit or buddy holes and (paged) preemptions all happen.
    reqs = sharegpt(150, seed=3)
    got = simulate(reqs, 6144, policy, block_size, max_model_len=2048, seed=5, arrival_rate=0.5,
                   allocator=allocator)
    expected = simulate_reference(reqs, 6144, policy, block_size, max_model_len=2048,
                                  arrival_steps=poisson_arrivals(150, 0.5, seed=5), allocator=allocator)
    assert got == expected
    if policy == "paged" and block_size == 16:
        assert got.preemptions > 0  # the trace exercises preemption


# --- properties of simulate ------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(traces())
def test_simulate_properties(trace):
    arrival = trace.pop("arrival")
    res = simulate(**trace, arrival_steps=arrival)
    assert res.completed + res.rejected == res.requests
    for share in (res.token_utilization, res.pool_token_share, res.pool_reserved_share,
                  res.peak_pool_token_share, res.peak_pool_reserved_share):
        assert 0.0 <= share <= 1.0
    if res.completed:
        assert math.isclose(res.token_utilization + res.reservation_waste + res.internal_waste, 1.0)
        assert res.pool_token_share <= res.pool_reserved_share
        assert math.isclose(sum(res.pool_breakdown().values()), 1.0)
    if trace["policy"] == "paged":
        assert res.max_slack_tokens <= trace["block_size"] - 1
    else:
        assert res.preemptions == 0


# --- stateful: the block allocator and the first-fit allocator -------------------------------

class BlockAllocatorMachine(RuleBasedStateMachine):
    """Random prefills, token appends and frees against a model of token counts."""

    @initialize(num_blocks=st.integers(1, 12), block_size=st.integers(1, 5))
    def setup(self, num_blocks, block_size):
        self.alloc = BlockAllocator(num_blocks, block_size)
        self.tokens: dict[int, int] = {}
        self.next_id = 0

    @rule(n_tokens=st.integers(1, 30))
    def prefill(self, n_tokens):
        req, self.next_id = self.next_id, self.next_id + 1
        if self.alloc.can_allocate(n_tokens):
            self.alloc.allocate(req, n_tokens)
            self.tokens[req] = n_tokens
        else:
            with pytest.raises(OutOfBlocksError):
                self.alloc.allocate(req, n_tokens)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def append(self, data):
        req = data.draw(st.sampled_from(sorted(self.tokens)))
        if self.alloc.needs_block(req) and self.alloc.num_free == 0:
            with pytest.raises(OutOfBlocksError):
                self.alloc.append_token(req)
        else:
            self.alloc.append_token(req)
            self.tokens[req] += 1

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):  # a finished or preempted request returns every block it held
        req = data.draw(st.sampled_from(sorted(self.tokens)))
        expected = self.alloc.blocks_for(self.tokens.pop(req))
        free_before = self.alloc.num_free
        assert self.alloc.free(req) == expected
        assert self.alloc.num_free == free_before + expected
        assert req not in self.alloc.block_tables

    @invariant()
    def blocks_are_conserved(self):
        if not hasattr(self, "alloc"):
            return
        held = [b for table in self.alloc.block_tables.values() for b in table]
        everything = held + self.alloc.free_list
        assert len(everything) == len(set(everything)) == self.alloc.num_blocks  # no double use, none lost
        assert self.alloc.num_free + self.alloc.num_used == self.alloc.num_blocks
        for req, n in self.tokens.items():
            assert len(self.alloc.block_tables[req]) == self.alloc.blocks_for(n)
            assert 0 <= self.alloc.slack(req) <= self.alloc.block_size - 1


class ContiguousAllocatorMachine(RuleBasedStateMachine):
    """Random first-fit allocations and frees: regions and holes tile the pool."""

    @initialize(pool=st.integers(1, 64))
    def setup(self, pool):
        self.alloc = ContiguousAllocator(pool)
        self.regions: dict[int, int] = {}

    @rule(size=st.integers(1, 20))
    def allocate(self, size):
        fits = any(s >= size for s in self.alloc.hole_sizes)
        start = self.alloc.allocate(size)
        assert (start is not None) == fits
        if start is not None:
            self.regions[start] = size

    @precondition(lambda self: self.regions)
    @rule(data=st.data())
    def free(self, data):
        start = data.draw(st.sampled_from(sorted(self.regions)))
        self.alloc.free(start, self.regions.pop(start))

    @precondition(lambda self: self.regions)
    @rule(data=st.data())
    def double_free_is_refused(self, data):
        start = data.draw(st.sampled_from(sorted(self.regions)))
        self.alloc.free(start, self.regions[start])
        with pytest.raises(ValueError, match="not an allocated range"):
            self.alloc.free(start, self.regions.pop(start))

    @invariant()
    def regions_and_holes_tile_the_pool(self):
        if not hasattr(self, "alloc"):
            return
        pieces = sorted(list(self.regions.items()) + list(zip(self.alloc.hole_starts,
                                                              self.alloc.hole_sizes)))
        pos = 0
        for start, size in pieces:
            assert start == pos and size >= 1
            pos += size
        assert pos == self.alloc.pool_tokens
        assert self.alloc.used_tokens == sum(self.regions.values())
        starts, sizes = self.alloc.hole_starts, self.alloc.hole_sizes
        assert all(a + s < b for a, s, b in zip(starts, sizes, starts[1:]))  # holes coalesced


class BuddyAllocatorMachine(RuleBasedStateMachine):
    """Random buddy allocations and frees: aligned power-of-two chunks tile the pool, coalesced."""

    @initialize(pool=st.integers(1, 100))
    def setup(self, pool):
        self.alloc = BuddyAllocator(pool)
        self.chunks: dict[int, int] = {}  # start → tokens requested

    @rule(size=st.integers(1, 40))
    def allocate(self, size):
        need = BuddyAllocator.chunk_tokens(size)
        fits = any(starts and 1 << k >= need for k, starts in enumerate(self.alloc.free_chunks))
        start = self.alloc.allocate(size)
        assert (start is not None) == fits
        if start is not None:
            self.chunks[start] = size

    @precondition(lambda self: self.chunks)
    @rule(data=st.data())
    def free(self, data):
        start = data.draw(st.sampled_from(sorted(self.chunks)))
        self.alloc.free(start, self.chunks.pop(start))
        with pytest.raises(ValueError, match="no chunk"):
            self.alloc.free(start, 1)   # a double free is refused

    @invariant()
    def chunks_tile_the_pool(self):
        if not hasattr(self, "alloc"):
            return
        held = [(s, BuddyAllocator.chunk_tokens(n)) for s, n in self.chunks.items()]
        free = [(s, 1 << k) for k, starts in enumerate(self.alloc.free_chunks) for s in starts]
        pos = 0
        for start, size in sorted(held + free):
            assert start == pos and start % size == 0  # disjoint, gapless, aligned to its size
            pos += size
        assert pos == self.alloc.pool_tokens
        assert self.alloc.used_tokens == sum(self.chunks.values())
        assert self.alloc.held_tokens == sum(size for _, size in held)
        if not self.chunks:  # everything returned: back to the initial carving
            assert self.alloc.free_chunks == BuddyAllocator(self.alloc.pool_tokens).free_chunks


TestBlockAllocator = BlockAllocatorMachine.TestCase
TestBlockAllocator.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestContiguousAllocator = ContiguousAllocatorMachine.TestCase
TestContiguousAllocator.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
TestBuddyAllocator = BuddyAllocatorMachine.TestCase
TestBuddyAllocator.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)


def test_block_allocator_tables_and_free_list():
    # 4 blocks of 16 tokens: a 20-token prefill takes blocks 0 and 1 (12 slots of slack).
    alloc = BlockAllocator(num_blocks=4, block_size=16)
    assert alloc.allocate(7, 20) == [0, 1] and alloc.slack(7) == 12
    for _ in range(12):
        alloc.append_token(7)
    assert alloc.block_tables[7] == [0, 1] and alloc.needs_block(7)
    alloc.append_token(7)  # token 33 opens block 2
    assert alloc.block_tables[7] == [0, 1, 2] and alloc.num_free == 1
    assert alloc.free(7) == 3 and alloc.num_free == 4
    with pytest.raises(ValueError):
        BlockAllocator(0, 16)


# --- workloads --------------------------------------------------------------------------------

def test_published_workload_statistics():
    stats = published_stats()
    # vLLM paper Fig. 11 legends; §6.1 says ShareGPT is 8.4× longer in, 5.8× longer out.
    assert stats[("sharegpt", "mean_prompt_tokens")] == 161.31
    assert stats[("sharegpt", "mean_output_tokens")] == 337.99
    assert stats[("alpaca", "mean_prompt_tokens")] == 19.31
    assert stats[("alpaca", "mean_output_tokens")] == 58.45
    assert round(161.31 / 19.31, 1) == stats[("sharegpt_vs_alpaca", "prompt_ratio")]
    assert round(337.99 / 58.45, 1) == stats[("sharegpt_vs_alpaca", "output_ratio")]


@pytest.mark.parametrize("dists, means", [(sharegpt_dists, (161.31, 337.99)),
                                          (alpaca_dists, (19.31, 58.45))])
def test_synthetic_lengths_match_published_means(dists, means):
    for dist, mean in zip(dists(), means):
        assert math.isclose(dist.mean(), mean, abs_tol=1e-6)  # exact by construction
        values, probs = dist.pmf()
        assert values[0] == 4 and values[-1] == 1024 and math.isclose(probs.sum(), 1.0)


def test_sampled_workloads_are_seeded_and_close_to_the_means():
    a = sharegpt(200_000, seed=1)
    assert np.array_equal(a, sharegpt(200_000, seed=1))
    assert not np.array_equal(a[:100], sharegpt(100, seed=2))
    assert np.allclose(a.mean(axis=0), [161.31, 337.99], rtol=0.01)
    assert np.allclose(alpaca(200_000, seed=1).mean(axis=0), [19.31, 58.45], rtol=0.01)
    assert a.min() >= 4 and a.max() <= 1024 and (a.sum(axis=1) <= 2048).all()


def test_sharegpt_output_tail_option():
    # Outputs up to 2,044 tokens (the sampler's 2,048 total minus a 4-token prompt); pairs over
    # 2,048 are drawn again, so totals stay within OPT's context and the means stay close.
    a = sharegpt(100_000, seed=1, output_sigma=0.88, max_output_tokens=2044)
    assert a[:, 1].max() > 1024 and (a.sum(axis=1) <= 2048).all() and a.min() >= 4
    assert np.allclose(a.mean(axis=0), [161.31, 337.99], rtol=0.015)
    assert np.array_equal(a, sharegpt(100_000, seed=1, output_sigma=0.88, max_output_tokens=2044))
    assert sharegpt_dists(0.88, 2044)[1].max_tokens == 2044
    for bad in (512, 2045):
        with pytest.raises(ValueError, match="max_output_tokens"):
            sharegpt(10, max_output_tokens=bad)


def test_fixed_and_user_arrays():
    assert fixed(3, 10, 5).tolist() == [[10, 5]] * 3
    assert from_arrays([1, 2], [3, 4]).tolist() == [[1, 3], [2, 4]]
    with pytest.raises(ValueError, match="equal length"):
        from_arrays([1, 2], [3])
    with pytest.raises(ValueError, match="output_tokens"):
        from_arrays([1, 2], [3, -4])


def test_poisson_arrivals():
    arr = poisson_arrivals(100_000, 2.0, seed=0)
    assert np.array_equal(arr, poisson_arrivals(100_000, 2.0, seed=0))
    assert (np.diff(arr) >= 0).all()
    # 100,000 arrivals at 2 per step span ≈ 50,000 steps (±1%).
    assert math.isclose(arr[-1], 50_000, rel_tol=0.01)


def test_paged_beats_reservation_on_sharegpt():
    # The vLLM paper's Fig. 2 ordering: Max < Pow2 < Oracle < paged in token-state share.
    reqs = sharegpt(3000, seed=0)
    util = {p: simulate(reqs, 65_536, p, 16, max_model_len=2048).token_utilization
            for p in POLICIES}
    assert util["reserve_max"] < util["reserve_pow2"] < util["reserve_oracle"] < util["paged"]
    assert util["paged"] > 0.95


def test_numpy_integer_arguments_are_integers():
    args = {"requests": [[10, 10], [30, 5]], "policy": "paged"}
    assert simulate(**args, pool_tokens=np.int64(1024), block_size=np.int32(16)) == \
        simulate(**args, pool_tokens=1024, block_size=16)


def test_huge_requests_are_summed_exactly():
    """2⁵² + 2⁵² tokens: every token-step sum exceeds int64 and is kept in Python ints."""
    p = o = 2**52
    res = simulate([[p, o]], pool_tokens=2**53, policy="reserve_oracle")
    # holds p, p+1, …, p+o tokens over o+1 steps: Σ = (o+1)(2p+o)/2; reserved (p+o)(o+1)
    assert res.steps == o + 1 and res.token_steps == o + 1
    assert res.token_utilization == ((o + 1) * (2 * p + o) // 2) / ((p + o) * (o + 1))  # 0.75
    paged = simulate([[p, o]], pool_tokens=2**53, policy="paged", block_size=16)
    assert paged.steps == o + 1 and paged.internal_waste == 0.0  # 2⁵³ is a multiple of 16
