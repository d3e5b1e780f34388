"""Tests for kvlib.engines.paging: closed forms against the simulator, sweeps, throughput trade-offs, data."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kvlib.engines import paging
from kvlib.report import recheck
from kvlib.engines.allocator import simulate
from kvlib.engines.workloads import fixed, sharegpt

POOL = 15_728  # the vLLM paper's OPT-13B on an A100-40GB: 12 GiB / 800 KiB per token (Table 1)


def test_time_weighted_lengths_known_answer():
    # 3 + 2: holds 3, 4, 5 over 3 steps; 1 + 1: holds 1, 2 over 2 steps.
    # held = (3+4+5 + 1+2) / 5 = 3; final = (5·3 + 2·2) / 5 = 3.8.
    assert paging.time_weighted_lengths([[3, 2], [1, 1]]) == (3.0, 3.8)


def test_reserve_max_closed_form_matches_the_simulator():
    # 12 slots of 32 tokens... pool 100 → ⌊100/32⌋ = 3 slots, 4 tokens free (4%).
    reqs = fixed(3000, 10, 5)
    shares = paging.reserve_max_shares(reqs, 100, 32)
    # held = 10 + 5/2 = 12.5, final 15: 3·12.5/100, 3·2.5/100, 3·17/100, 4/100.
    assert shares == pytest.approx({"token_states": 0.375, "reservation": 0.075,
                                    "internal": 0.51, "free": 0.04})
    sim = simulate(reqs, 100, "reserve_max", max_model_len=32).pool_breakdown()
    assert sim == pytest.approx(shares, rel=1e-3)  # the last batch drains: 1 step in 6,000
    with pytest.raises(ValueError, match="max_model_len"):
        paging.reserve_max_shares(reqs, 100, 200)


def test_reserve_max_matches_fig2_on_the_fitted_workload():
    # Kwon et al. Fig. 2, Orca (Max): 20.4% token states, 13.3% reservation, 57.3% internal,
    # 8.9% other: 7 slots of 2,048 in 15,728 leave 1,392 free = 8.85%.
    reqs = sharegpt(20_000, 0, output_sigma=0.88, max_output_tokens=2044)
    shares = paging.reserve_max_shares(reqs, POOL, 2048)
    assert math.isclose(shares["free"], 1392 / POOL)
    for key, paper in (("token_states", 0.204), ("reservation", 0.133), ("internal", 0.573)):
        assert abs(shares[key] - paper) < 0.01, (key, shares[key])


def test_reserve_max_by_context_one_row_per_length():
    # pool 100, lengths 32 and 50: ⌊100/32⌋ = 3 and ⌊100/50⌋ = 2 reservations; each row is
    # reserve_max_shares at that length
    reqs = fixed(3000, 10, 5)
    df = paging.reserve_max_by_context(reqs, 100, [32, 50])
    assert df["max_model_len"].tolist() == [32, 50] and df["reservations"].tolist() == [3, 2]
    assert df.iloc[0][list(paging.reserve_max_shares(reqs, 100, 32))].to_dict() == pytest.approx(
        paging.reserve_max_shares(reqs, 100, 32))
    assert df.loc[1, "free"] == pytest.approx(0.0)  # 2 × 50 fill the pool
    with pytest.raises(ValueError, match="max_model_len"):
        paging.reserve_max_by_context(reqs, 100, [200])


def test_compare_policies_rows_and_order():
    reqs = sharegpt(2000, seed=1)
    df = paging.compare_policies(reqs, POOL, 2048)
    assert df["policy"].tolist() == ["reserve_max", "reserve_pow2", "reserve_oracle", "paged"]
    assert df["allocator"].tolist() == ["buddy", "buddy", "buddy", "none"]
    assert np.allclose(df[list(paging.BREAKDOWN)].sum(axis=1), 1.0)
    assert (df["rounding"] <= df["free"] + 1e-12).all() and df["rounding"].iloc[-1] == 0
    assert df["token_states"].is_monotonic_increasing  # Fig. 2's order: Max < Pow2 < Oracle < paged
    assert math.isclose(df["mean_batch"].iloc[0], 7, rel_tol=0.01)


def test_block_size_sweep_waste_grows_with_block_size():
    reqs = sharegpt(1500, seed=2)
    df = paging.block_size_sweep(reqs, POOL, [1, 4, 16, 64, 256])
    assert df["block_size"].tolist() == [1, 4, 16, 64, 256]
    assert df["waste"].iloc[0] == 0.0  # 1-token blocks never hold an empty slot
    assert df["waste"].is_monotonic_increasing and df["mean_batch"].is_monotonic_decreasing


def test_offered_load_sweep():
    reqs = sharegpt(1500, seed=3)
    df = paging.offered_load_sweep(reqs, POOL, [0.5, 3.0], "paged", block_size=16)
    saturated = simulate(reqs, POOL, "paged", 16)
    assert math.isclose(df["arrival_rate"].iloc[0], 0.5 * saturated.completed_per_step)
    # Half the load keeps about half the batch (Little's law); overload approaches saturation.
    assert 0.4 < df["mean_batch"].iloc[0] / saturated.mean_batch < 0.6
    assert df["mean_batch"].iloc[1] > 0.9 * saturated.mean_batch
    with pytest.raises(ValueError, match="load"):
        paging.offered_load_sweep(reqs, POOL, [0.0], "paged")


def test_relative_throughput_and_breakeven():
    assert paging.relative_throughput(2, 1, 0.0) == 2.0
    assert paging.relative_throughput(2, 1, 1.0) == 1.0
    assert paging.relative_throughput(2, 1, 0.5, attention_share=0.5) == 2 / 1.25
    assert paging.breakeven_penalty(2.5, 1) == 1.5
    assert math.isclose(paging.breakeven_penalty(0.98, 1), -0.02)
    b, b0 = 33.5, 13.3
    assert math.isclose(paging.relative_throughput(b, b0, paging.breakeven_penalty(b, b0, 0.4), 0.4), 1)
    for bad in ({"kernel_penalty": -0.1}, {"attention_share": 1.5}):
        with pytest.raises(ValueError):
            paging.relative_throughput(1, 1, **({"kernel_penalty": 0.1} | bad))
    grid = paging.penalty_grid(pd.DataFrame({"block_size": [1, 16], "mean_batch": [10.0, 9.0]}),
                               10.0, [0.0, 0.2])
    assert grid["relative_throughput"].tolist() == pytest.approx([1.0, 1 / 1.2, 0.9, 0.9 / 1.2])


def test_simulated_quantities_and_errors():
    kw = {"n_requests": 500, "max_model_len": 2048}
    share = paging.simulated("token_states", POOL, "paged", **kw)
    assert math.isclose(paging.simulated("waste", POOL, "paged", **kw), 1 - share)
    direct = simulate(sharegpt(500, 0), POOL, "paged", 16, 2048)
    assert share == direct.pool_breakdown()["token_states"]
    assert paging.simulated("mean_batch", POOL, "paged", **kw) == direct.mean_batch
    with pytest.raises(ValueError, match="unknown quantity"):
        paging.simulated("policy", POOL, "paged", **kw)
    with pytest.raises(ValueError, match="unknown workload"):
        paging.simulated("mean_batch", POOL, "paged", workload="lmsys", **kw)
    with pytest.raises(ValueError, match="sharegpt"):
        paging.simulated("mean_batch", POOL, "paged", workload="alpaca", output_sigma=0.5)


def test_engine_block_sizes_are_sourced():
    df = paging.engine_block_sizes()
    assert df["source_url"].str.startswith("https://").all() and (df["accessed"] != "").all()
    assert paging.engine_block_size("vllm") == 16 and paging.engine_block_size("sglang") == 1
    assert paging.engine_block_size("tensorrt-llm") == 32
    assert paging.engine_block_size("tensorrt-llm", "0.9.0.dev2024040900") == 128
    with pytest.raises(KeyError, match="known"):
        paging.engine_block_size("lmdeploy")


def test_chapter3_claims_recheck_without_errors():
    results = recheck.recheck_all()
    ours = results[results["file"] == "ch03_paging.csv"].set_index("id")
    assert len(ours) == 12 and (ours["verdict"] != "error").all(), ours["reason"]
