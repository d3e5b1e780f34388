"""kvlib.fit.validation: the book's own memory error against engine start-up logs."""
from __future__ import annotations

import pandas as pd
import pytest

from kvlib.fit import validation


@pytest.fixture(scope="module")
def memory() -> pd.DataFrame:
    return validation.memory_validation()


# --- memory ----------------------------------------------------------------------------------

def test_at_least_15_logs_are_predicted(memory):
    assert memory["id"].nunique() >= 15
    assert set(memory["check"]) == {"full", "layout"}
    assert memory["error"].notna().all()


def test_block_arithmetic_matches_every_log(memory):
    layout = memory[memory["check"] == "layout"]
    assert len(layout) >= 4
    assert layout["error"].abs().max() < 0.02


def test_layout_tokens_by_hand():
    # Llama-3.1-8B: 131,072 B/token, 16-token blocks of 2 MiB; 3.81 GiB → ⌊1950.72⌋ = 1950 blocks
    tokens = validation._layout_tokens("llama-3.1-8b", round(3.81 * 2**30), 1, "bf16", 16)
    assert tokens == 1950 * 16
    # SGLang page of 1 token, Qwen3-235B at TP 4: 94 layers × 2 × 1 head × 128 × 2 B = 48,128 B
    assert validation._layout_tokens("qwen3-235b-a22b", 48_128 * 1000, 4, "bf16", 1) == 1000


def test_dense_models_median_within_three_percent(memory):
    dense = memory[(memory["check"] == "full") & memory["dense"]]
    assert len(dense) >= 8
    assert dense["error"].abs().median() <= 0.03
    # the 2023 TP-4 pair brackets the prediction: the fixed profiler allocated less, the old more
    err = dense.set_index("id")["error"]
    assert err["el30"] > 0 > err["vl02"]


def test_is_dense():
    assert validation.is_dense("llama-3.1-8b")
    assert not validation.is_dense("gpt-oss-20b")  # MoE with sliding windows
    assert not validation.is_dense("deepseek-v3")  # MLA, MoE


def test_every_memory_miss_reason_is_computed_from_the_logs():
    reasons = validation.memory_miss_reasons()
    assert set(reasons) == {"el01", "el02", "el07", "el30", "vl02"}
    # PR #2031: 31,615 blocks of 16 tokens before the fix
    assert validation.PRE_PR2031_TOKENS == 505_840 and "505,840" in reasons["el30"]
    assert "RTX 3090" in reasons["el01"] and reasons["el30"] == reasons["vl02"]
    misses = validation.memory_validation()
    full = misses[misses["check"] == "full"]
    beyond = set(full.loc[full["error"].abs() > 0.10, "id"])
    assert beyond <= set(reasons), beyond - set(reasons)
