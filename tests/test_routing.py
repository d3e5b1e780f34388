"""Tests for kvlib.serve.routing: known answers, the load bound, and one replica = one replay."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlib.engines import prompts
from kvlib.engines.prefix import block_requests, replay_prefix_cache
from kvlib.serve.routing import POLICIES, route_requests

# Two conversations of two turns, 8-token blocks. Turn 2 resends turn 1 (16 tokens = 2 blocks)
# plus 8 new tokens; it may hit ⌊23 / 8⌋ = 2 blocks = 16 tokens on the replica that served turn 1.
A1, B1 = list(range(16)), list(range(100, 116))
A2, B2 = A1 + list(range(200, 208)), B1 + list(range(300, 308))
REQS = [A1, A2, B1, B2]
SESSIONS = [0, 0, 1, 1]


def test_round_robin_scatters_turns():
    # replicas 0, 1, 0, 1: each second turn lands where its first turn is not → no hits.
    res = route_requests(REQS, 2, "round_robin", block_size=8)
    assert res.replica.tolist() == [0, 1, 0, 1]
    assert res.hit_tokens.tolist() == [0, 0, 0, 0] and res.imbalance == 1.0


@pytest.mark.parametrize("policy", ["session", "prefix"])
def test_affinity_and_prefix_routing_keep_turns_together(policy):
    res = route_requests(REQS, 2, policy, block_size=8, sessions=SESSIONS)
    assert res.hit_tokens.tolist() == [0, 16, 0, 16]
    assert res.replica[0] == res.replica[1] and res.replica[2] == res.replica[3]
    # hit rate: 32 cached of 16 + 24 + 16 + 24 = 80 prompt tokens
    assert res.hit_rate == 32 / 80


def test_prefix_routing_without_a_match_goes_to_the_least_loaded():
    # A1 → replica 0 (all empty, ties to the lowest index); B1 matches nothing → replica 1.
    res = route_requests([A1, B1], 2, "prefix", block_size=8)
    assert res.replica.tolist() == [0, 1]


def test_one_replica_is_the_plain_replay():
    w = prompts.multi_turn_chat(8, turns=3, system_tokens=60, user_tokens=20, output_tokens=20)
    trace = block_requests(w.prompts, 8, w.outputs)
    plain = replay_prefix_cache(trace, block_size=8, capacity_blocks=80)
    for policy in POLICIES:
        res = route_requests(trace, 1, policy, block_size=8, capacity_blocks=80, sessions=w.sessions)
        assert res.hit_tokens.tolist() == plain.hit_tokens.tolist(), policy


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8), st.sampled_from([1.0, 1.25, 2.0]), st.integers(0, 50))
def test_load_bound_caps_every_replica(n_replicas, bound, seed):
    w = prompts.system_prompt_chat(60, system_tokens=32, user_tokens=10, output_tokens=5,
                                   n_system_prompts=2, seed=seed)
    res = route_requests(w.prompts, n_replicas, "prefix", block_size=8, load_bound=bound)
    # a replica is skipped once it has c·(i+1)/R requests, unless every replica is at its cap
    assert res.requests_per_replica.max() <= bound * len(w) / n_replicas + 1
    free = route_requests(w.prompts, n_replicas, "prefix", block_size=8)
    assert free.hit_rate >= 0 and res.requests_per_replica.sum() == len(w)


def test_routing_refuses_bad_input():
    with pytest.raises(ValueError, match="unknown policy"):
        route_requests(REQS, 2, "random")
    with pytest.raises(ValueError, match="needs sessions"):
        route_requests(REQS, 2, "session")
    with pytest.raises(ValueError, match="one id per request"):
        route_requests(REQS, 2, "session", sessions=[0, 1])
    with pytest.raises(ValueError, match="applies to the 'prefix' policy"):
        route_requests(REQS, 2, "round_robin", load_bound=1.5)
    with pytest.raises(ValueError, match="load_bound"):
        route_requests(REQS, 2, "prefix", load_bound=0.5)
    with pytest.raises(ValueError, match="n_replicas"):
        route_requests(REQS, 0, "prefix")
    with pytest.raises(ValueError, match="request 1: "):
        route_requests(REQS, 1, "round_robin", block_size=8, capacity_blocks=2)


def test_imbalance_measures():
    res = route_requests(REQS, 4, "session", block_size=8, sessions=SESSIONS)
    counts = res.requests_per_replica
    assert counts.sum() == 4 and res.imbalance == counts.max() / 1.0
    assert np.isclose(res.computed_per_replica.sum(), 80 - res.hit_tokens.sum())
