"""Tests for kvlib.engines.prefix: known answers, vLLM's own KVCacheManager as an oracle, properties,
the stored Mooncake trace, and prefix sharing inside kvlib.simulate (against the block-level
reference, kvlib.engines.allocator_reference)."""
from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvlib
from kvlib.engines import prompts
from kvlib.engines.allocator import simulate
from kvlib.engines.allocator_reference import simulate_reference
from kvlib.engines.prefix import (
    MOONCAKE_BLOCK_TOKENS,
    BlockTrace,
    RadixCache,
    VllmBlockCache,
    block_requests,
    load_trace,
    mooncake_conversation,
    prompt_block_ids,
    read_trace_csv,
    replay_prefix_cache,
)
from kvlib.engines.workloads import sharegpt


def vllm_hits(*args, **kwargs):
    """vLLM 0.33.0's KVCacheManager, or a skip where requirements-vllm.txt is not installed."""
    pytest.importorskip("vllm")
    from kvlib.engines.vllm_oracle import vllm_prefix_hits

    return vllm_prefix_hits(*args, **kwargs)


# --- known answers ---------------------------------------------------------------------------

def test_shared_system_prompt_known_answer():
    # 100 shared tokens + 30 own tokens. vLLM, 16-token blocks: ⌊100 / 16⌋ = 6 blocks = 96 tokens;
    # SGLang, 1-token pages: all 100 (the prompt is 130, so the n − 1 cap does not bite).
    rng = np.random.default_rng(0)
    system = rng.integers(0, 1000, 100)
    reqs = [np.concatenate([system, rng.integers(1000, 2000, 30)]) for _ in range(3)]
    assert replay_prefix_cache(reqs).hit_tokens.tolist() == [0, 96, 96]
    assert replay_prefix_cache(reqs, engine="sglang", block_size=1).hit_tokens.tolist() == [0, 100, 100]
    assert vllm_hits(reqs).tolist() == [0, 96, 96]


def test_last_token_is_never_a_hit():
    # The same 128-token prompt (8 full blocks of 16) twice: vLLM looks up ⌊127 / 16⌋ = 7 blocks,
    # 112 tokens; SGLang matches 127 tokens. The prompt's last block is recomputed.
    prompt = list(range(128))
    assert replay_prefix_cache([prompt, prompt]).hit_tokens.tolist() == [0, 112]
    assert replay_prefix_cache([prompt, prompt], engine="sglang", block_size=1).hit_tokens[1] == 127
    assert vllm_hits([prompt, prompt]).tolist() == [0, 112]


def test_eviction_known_answer():
    # 4-token blocks, a pool of 3 blocks. A = tokens 0-7 (2 full blocks a1, a2; looks up ⌊7/4⌋ = 1).
    # After A the free queue is [unused block][a2, a1]: A's tail block a2 is freed first, so it is
    # evicted first. B = tokens 100-107 takes the unused block, then evicts a2.
    # C = tokens 0-8 may hit ⌊8/4⌋ = 2 blocks: a1 is cached, a2 is not → 4 tokens; C holds
    # ⌈9/4⌉ = 3 blocks, so besides a1 it takes B's two blocks: 1 + 2 = 3 evictions in all.
    # With 5 blocks nothing is evicted and C hits 8.
    a, b, c = list(range(8)), list(range(100, 108)), list(range(9))
    small = replay_prefix_cache([a, b, c], block_size=4, capacity_blocks=3)
    assert small.hit_tokens.tolist() == [0, 0, 4] and small.evicted_blocks == 3
    assert replay_prefix_cache([a, b, c], block_size=4, capacity_blocks=5).hit_tokens.tolist() == [0, 0, 8]
    assert vllm_hits([a, b, c], block_size=4, capacity_blocks=3).tolist() == [0, 0, 4]


def test_outputs_are_cached_with_the_prompt():
    # Turn 1: 20 prompt tokens, 10 output tokens; the engine caches prompt + 9 outputs = 29 tokens
    # = 7 full 4-token blocks. Turn 2 resends all 30 + 5 new = 35 tokens: it may hit ⌊34/4⌋ = 8
    # blocks, 7 are cached → 28 tokens. Without outputs only ⌊20/4⌋ = 5 blocks were cached → 20.
    p1, o1 = list(range(20)), list(range(500, 510))
    p2 = p1 + o1 + list(range(900, 905))
    with_out = replay_prefix_cache([p1, p2], block_size=4, outputs=[o1, [7]])
    assert with_out.hit_tokens.tolist() == [0, 28]
    assert replay_prefix_cache([p1, p2], block_size=4).hit_tokens.tolist() == [0, 20]
    assert vllm_hits([p1, p2], block_size=4, outputs=[o1, [7]]).tolist() == [0, 28]


def test_mooncake_readme_example():
    # FAST25-release/README.md: the samples share 12 ids → 12 × 512 = 6,144 tokens.
    trace = BlockTrace.from_lists([list(range(46, 58)) + [2353, 2354], list(range(46, 58)) + [2366]],
                                  [6955, 6472], 512)
    assert replay_prefix_cache(trace, block_size=512).hit_tokens.tolist() == [0, 6144]
    assert replay_prefix_cache(trace, engine="sglang", block_size=512).hit_tokens.tolist() == [0, 6144]


# --- vLLM's own KVCacheManager as the oracle --------------------------------------------------

def _small_workloads():
    return [
        prompts.system_prompt_chat(40, system_tokens=150, user_tokens=40, output_tokens=20,
                                   n_system_prompts=3),
        prompts.multi_turn_chat(8, turns=4, system_tokens=120, user_tokens=30, output_tokens=40),
        prompts.few_shot(40, shots=3, shot_tokens=30, query_tokens=20, output_tokens=10, pool=6),
        prompts.rag(40, n_documents=12, docs_per_request=3, doc_tokens=40, question_tokens=15,
                    output_tokens=10),
        prompts.agent_loop(5, steps=4, system_tokens=80, n_tools=4, tool_tokens=30, task_tokens=20,
                           call_tokens=15, observation_tokens=40),
    ]


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("pool", ["unbounded", "tight", "roomy"])
def test_identical_hits_to_vllm_kv_cache_manager(block_size, pool):
    # Five workload shapes (answers cached with their prompts) through kvlib and through vLLM's
    # KVCacheManager; "tight" = the longest request's blocks + 8, so almost everything is evicted.
    for w in _small_workloads():
        longest = max(-(-(len(p) + len(o) - 1) // block_size) for p, o in zip(w.prompts, w.outputs))
        capacity = {"unbounded": None, "tight": longest + 8, "roomy": 4 * longest}[pool]
        ours = replay_prefix_cache(w.prompts, block_size=block_size, capacity_blocks=capacity,
                                   outputs=w.outputs)
        theirs = vllm_hits(w.prompts, block_size=block_size, capacity_blocks=capacity, outputs=w.outputs)
        assert ours.hit_tokens.tolist() == theirs.tolist(), (w.name, block_size, pool)
        if pool == "tight":
            assert ours.evicted_blocks > 0


@st.composite
def token_requests(draw, max_requests=25):
    """Prompts built from a few shared stems over a tiny vocabulary: many partial matches,
    repeated prompts (duplicate blocks) and prompts that end on a block boundary."""
    stems = draw(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=40), min_size=1, max_size=5))
    reqs = []
    for _ in range(draw(st.integers(1, max_requests))):
        stem = draw(st.sampled_from(stems))
        cut = draw(st.integers(0, len(stem)))
        tail = draw(st.lists(st.integers(0, 3), min_size=0 if cut else 1, max_size=20))
        reqs.append(stem[:cut] + tail)
    return reqs


@settings(max_examples=60, deadline=None)
@given(token_requests(), st.sampled_from([1, 2, 4, 8]), st.integers(0, 30))
def test_random_workloads_match_vllm(reqs, block_size, slack):
    longest = max(-(-len(r) // block_size) for r in reqs)
    for capacity in (None, longest + slack):
        ours = replay_prefix_cache(reqs, block_size=block_size, capacity_blocks=capacity)
        assert ours.hit_tokens.tolist() == vllm_hits(reqs, block_size=block_size,
                                                     capacity_blocks=capacity).tolist()


# --- properties ------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(token_requests(40), st.sampled_from([1, 2, 3, 4, 8]), st.integers(0, 40),
       st.sampled_from(["vllm", "sglang"]))
def test_hit_bounds(reqs, block_size, slack, engine):
    longest = max(-(-len(r) // block_size) for r in reqs)
    bounded = replay_prefix_cache(reqs, engine=engine, block_size=block_size,
                                  capacity_blocks=longest + slack)
    free = replay_prefix_cache(reqs, engine=engine, block_size=block_size)
    n = np.array([len(r) for r in reqs])
    assert (bounded.prompt_tokens == n).all()
    assert (bounded.hit_tokens >= 0).all() and (bounded.hit_tokens <= n - 1).all()
    assert (bounded.hit_tokens % block_size == 0).all()
    assert (bounded.hit_tokens <= free.hit_tokens).all(), "nothing beats keeping every block"
    assert free.evicted_blocks == 0 and 0 <= bounded.hit_rate <= free.hit_rate <= 1


@settings(max_examples=100, deadline=None)
@given(token_requests(30), st.sampled_from([1, 2, 4, 8]))
def test_unbounded_engines_agree_and_radix_is_the_longest_common_prefix(reqs, page):
    # Unbounded, a radix tree at page size P and vLLM's blocks of P tokens hit the same
    # (whole pages of the longest cached prefix of the prompt without its last token).
    vllm = replay_prefix_cache(reqs, block_size=page).hit_tokens
    radix = replay_prefix_cache(reqs, engine="sglang", block_size=page).hit_tokens
    assert vllm.tolist() == radix.tolist()
    expected, seen = [], []
    for r in reqs:
        key = r[:-1]
        best = max((next((i for i, (x, y) in enumerate(zip(s, key)) if x != y), min(len(s), len(key)))
                    for s in seen), default=0)
        expected.append(best // page * page if page == 1 else
                        min(best, max((len(s) // page * page for s in seen), default=0)) // page * page)
        seen.append(r)
    if page == 1:
        assert radix.tolist() == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=80), st.integers(1, 10))
def test_lru_hits_are_monotone_in_capacity_for_one_block_requests(keys, capacity):
    # Requests of one full 4-token block + 1 token touch one cached block each: vLLM's queue is
    # then a plain LRU list, a stack algorithm, so a larger pool never hits less.
    reqs = [[k] * 4 + [99] for k in keys]
    small = replay_prefix_cache(reqs, block_size=4, capacity_blocks=capacity + 1)
    large = replay_prefix_cache(reqs, block_size=4, capacity_blocks=capacity + 2)
    assert (small.hit_tokens <= large.hit_tokens).all()


@settings(max_examples=100, deadline=None)
@given(token_requests(30), st.integers(0, 30))
def test_radix_tree_stays_within_capacity(reqs, slack):
    tree = RadixCache(max(len(r) for r in reqs) + slack)
    for r in reqs:
        tree.serve(list(r), len(r) - 1, len(r))
        assert tree.size <= tree.capacity_units
        assert tree.size == _tree_units(tree.root)


def _tree_units(node) -> int:
    return sum(len(c.key) + _tree_units(c) for c in node.children.values())


def test_block_trace_form_equals_token_form():
    w = prompts.multi_turn_chat(10, turns=4, system_tokens=100, user_tokens=30, output_tokens=40, seed=3)
    trace = block_requests(w.prompts, 8, w.outputs)
    assert trace.ids_cover_output
    for cap in (None, 60):
        tokens = replay_prefix_cache(w.prompts, block_size=8, capacity_blocks=cap, outputs=w.outputs)
        blocks = replay_prefix_cache(trace, block_size=8, capacity_blocks=cap)
        assert tokens.hit_tokens.tolist() == blocks.hit_tokens.tolist()
    # coarsening the 8-token trace to 16 gives what hashing 16-token blocks gives
    coarse = replay_prefix_cache(trace, block_size=16)
    direct = replay_prefix_cache(w.prompts, block_size=16, outputs=w.outputs)
    assert coarse.hit_tokens.tolist() == direct.hit_tokens.tolist()
    # prompt ids: one per full prompt block
    ids = prompt_block_ids(trace)
    assert [len(i) for i in ids] == [len(p) // 8 for p in w.prompts]


def test_replay_refuses_bad_input():
    with pytest.raises(ValueError, match="unknown engine"):
        replay_prefix_cache([[1, 2]], engine="trt")
    with pytest.raises(ValueError, match="block_size"):
        replay_prefix_cache([[1, 2]], block_size=0)
    with pytest.raises(ValueError, match="capacity_blocks"):
        replay_prefix_cache([[1, 2]], capacity_blocks=0)
    with pytest.raises(ValueError, match="request 1: a request of 3 blocks does not fit 2 blocks"):
        replay_prefix_cache([[1], list(range(9))], block_size=4, capacity_blocks=2)
    with pytest.raises(ValueError, match="does not fit"):
        replay_prefix_cache([list(range(9))], engine="sglang", block_size=1, capacity_blocks=5)
    with pytest.raises(ValueError, match="non-empty"):
        replay_prefix_cache([[]])
    with pytest.raises(ValueError, match="integer token ids"):
        replay_prefix_cache([[1.5, 2.0]])
    with pytest.raises(ValueError, match="no requests"):
        replay_prefix_cache([])
    with pytest.raises(ValueError, match="2 outputs for 1 requests"):
        replay_prefix_cache([[1, 2]], outputs=[[1], [2]])
    trace = BlockTrace.from_lists([[0]], [4], 4)
    with pytest.raises(ValueError, match="outputs apply to token sequences"):
        replay_prefix_cache(trace, block_size=4, outputs=[[1]])
    with pytest.raises(ValueError, match="not a multiple"):
        replay_prefix_cache(trace, block_size=6)
    with pytest.raises(ValueError, match="hash ids for 9 tokens"):
        BlockTrace.from_lists([[0]], [9], 4)  # 9 tokens need 2 or 3 ids
    with pytest.raises(ValueError, match=">= 0"):
        BlockTrace.from_lists([[-1]], [4], 4)


# --- the stored trace ------------------------------------------------------------------------

def test_mooncake_conversation_trace():
    trace = mooncake_conversation()
    # FAST25-release/README.md: 12,031 requests, average input 12,035 and output 343 tokens.
    assert len(trace) == 12_031 and trace.block_size == MOONCAKE_BLOCK_TOKENS == 512
    assert round(trace.input_tokens.mean()) == 12_035 and round(trace.output_tokens.mean()) == 343
    counts = np.diff(trace.offsets)
    assert (counts == -(-trace.input_tokens // 512)).all(), "one id per (partial) block"
    # an unbounded cache by hand: the longest run of seen ids among the first ⌊(T−1)/512⌋
    seen: set[int] = set()
    hits = 0
    for i, n in enumerate(trace.input_tokens.tolist()):
        ids = trace.ids(i).tolist()
        k = 0
        while k < (n - 1) // 512 and ids[k] in seen:
            k += 1
        hits += 512 * k
        seen.update(ids[:n // 512])
    assert replay_prefix_cache(trace, block_size=512).hit_tokens.sum() == hits


def test_trace_readers_agree(tmp_path):
    rows = [{"timestamp": 0, "input_length": 1030, "output_length": 5, "hash_ids": [0, 1, 2]},
            {"timestamp": 7, "input_length": 1500, "output_length": 9, "hash_ids": [0, 1, 9]}]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("timestamp_ms,input_tokens,output_tokens,hash_id_runs\n"
                        "0,1030,5,0-2\n7,1500,9,0-1 9\n")
    a, b = load_trace(jsonl, 512), read_trace_csv(csv_path, 512)
    for field in ("hash_ids", "offsets", "input_tokens", "output_tokens", "timestamps_ms"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    # request 2 may hit ⌊1499/512⌋ = 2 blocks, ids 0 and 1 are cached → 1,024 tokens
    assert replay_prefix_cache(b, block_size=512).hit_tokens.tolist() == [0, 1024]


# --- prefix sharing inside simulate ----------------------------------------------------------

@st.composite
def shared_traces(draw):
    n = draw(st.integers(1, 10))
    bs = draw(st.sampled_from([1, 2, 3, 4]))
    stems = draw(st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=6), min_size=1, max_size=3))
    reqs, ids = [], []
    counter = itertools.count(1000)
    for _ in range(n):
        stem = draw(st.sampled_from(stems))
        cut = draw(st.integers(0, len(stem)))
        own = draw(st.integers(0, 3))
        blocks = [hash(tuple(stem[:j + 1])) % 997 for j in range(cut)] + [next(counter) for _ in range(own)]
        blocks = blocks or [next(counter)]
        p = len(blocks) * bs + draw(st.integers(0, bs - 1))
        reqs.append([p, draw(st.integers(1, 12))])
        ids.append(blocks)
    longest = max(p + o for p, o in reqs)
    pool = draw(st.integers(max(longest, bs), 3 * longest + bs))
    arrival = [draw(st.integers(0, 10)) for _ in range(n)]
    max_batch = draw(st.none() | st.integers(1, 4))
    return reqs, pool, bs, ids, arrival, max_batch


@settings(max_examples=300, deadline=None)
@given(shared_traces())
def test_simulate_prefix_sharing_matches_block_reference(case):
    # Every field: steps, preemptions, batch, hits and prefill, and the token and reservation
    # shares (a shared block counted once per reader, its peak once per block held).
    reqs, pool, bs, ids, arrival, max_batch = case
    expected = simulate_reference(reqs, pool, "paged", bs, arrival_steps=arrival, max_batch=max_batch,
                                  prefix_ids=ids)
    got = simulate(reqs, pool, "paged", bs, arrival_steps=arrival, max_batch=max_batch, prefix_ids=ids)
    assert got == expected


def test_simulate_with_unique_prefixes_is_simulate_without():
    # No two requests share a block: every admission misses, so blocks, steps and preemptions
    # are those of the plain paged simulation.
    reqs = sharegpt(300, seed=3)
    counter = itertools.count()
    ids = [[next(counter) for _ in range(p // 16)] for p in reqs[:, 0]]
    for kw in ({}, {"arrival_rate": 0.5, "seed": 5}, {"max_batch": 20}):
        plain = simulate(reqs, 6144, "paged", 16, **kw)
        shared = simulate(reqs, 6144, "paged", 16, prefix_ids=ids, **kw)
        assert dataclasses.replace(shared, prefix_hit_tokens=0, prefix_prompt_tokens=0,
                                   prefix_prefill_tokens=0) == plain
        assert shared.prefix_prompt_tokens == int(reqs[:, 0].sum())
        assert plain.prefix_hit_rate == 0.0


def test_simulate_prefix_known_answer():
    # Two requests of 8 prompt + 2 output tokens sharing both 4-token prompt blocks, queued at
    # step 0 in a 40-token pool. The first is admitted and caches blocks h1, h2; the second, in
    # the same step, may hit ⌊7/4⌋ = 1 block → 4 tokens. Prefilled: 8 + (8 − 4) = 12 tokens.
    res = simulate([[8, 2], [8, 2]], 40, "paged", 4, prefix_ids=[[1, 2], [1, 2]])
    assert (res.prefix_hit_tokens, res.prefix_prompt_tokens, res.prefix_prefill_tokens) == (4, 16, 12)
    assert res.prefix_hit_rate == 4 / 16
    assert simulate_reference([[8, 2], [8, 2]], 40, "paged", 4, prefix_ids=[[1, 2], [1, 2]]) == res


def test_simulate_prefix_ids_refused():
    with pytest.raises(ValueError, match="need the paged policy"):
        simulate([[8, 2]], 40, "reserve_oracle", prefix_ids=[[1, 2]])
    with pytest.raises(ValueError, match="entries for 1 requests"):
        simulate([[8, 2]], 40, "paged", 4, prefix_ids=[[1, 2], [3]])
    with pytest.raises(ValueError, match="need 2"):
        simulate([[8, 2]], 40, "paged", 4, prefix_ids=[[1]])


def test_vllm_block_cache_match_does_not_change_state():
    cache = VllmBlockCache(8)
    cache.serve([1, 2, 3], 3, 4)
    before = list(cache._lru)
    assert cache.match([1, 2, 9], 3) == 2 and cache.match([1, 2, 3], 2) == 2
    assert list(cache._lru) == before == [3, 2, 1], "released tail first: 3 is evicted first"


def test_public_names():
    assert kvlib.replay_prefix_cache is replay_prefix_cache
    assert kvlib.BlockTrace is BlockTrace


def test_shared_prefix_ids_refuses_values_that_are_not_whole_numbers():
    from kvlib.engines.prefix import shared_prefix_ids

    # 16.7 and 64.9 tokens were truncated to 16 and 64 without a word; NaN failed deep in numpy
    with pytest.raises(ValueError) as info:
        shared_prefix_ids([0], [16.7], [64.9])
    assert str(info.value) == "prefix_tokens must hold integers; value 0 is 16.7"
    for args, message in [
        (([0], [float("nan")], [64]), "prefix_tokens must hold integers; value 0 is nan"),
        (([0, 0], [16, 16], [64, float("inf")]),
         "prompt_tokens must hold integers; value 1 is inf"),
        (([0.5], [16], [64]), "prefix_id must hold integers; value 0 is 0.5"),
        ((["a"], [16], [64]), "prefix_id must hold integers; value 0 is 'a'"),
        (([0], [True], [64]), "prefix_tokens must hold integers; value 0 is True"),
        (([0, 0], [16, None], [64, 64]), "prefix_tokens must hold integers; value 1 is None"),
    ]:
        with pytest.raises(ValueError) as info:
            shared_prefix_ids(*args)
        assert str(info.value) == message
    # whole numbers, as floats or numpy integers, give the same ids as ints
    assert shared_prefix_ids([0, 0], [16.0, 16.0], np.array([40, 70], dtype=np.int32)) == \
        shared_prefix_ids([0, 0], [16, 16], [40, 70]) == [[0, 1], [0, 2, 3, 4]]
