"""What-if models built from published geometries, with hand-derived bytes."""
from __future__ import annotations

import math

import pytest

import kvlib
from kvlib.model import whatif
from kvlib.core.units import GIB, KIB, MIB


def test_as_mha_gives_every_query_head_its_own_kv_head():
    l70 = kvlib.load_model("llama-2-70b")  # 80 layers, 64 query heads, 8 KV heads of 128
    mha = whatif.as_mha(l70)
    # 2 (K and V) × 80 layers × 64 KV heads × 128 × 2 bytes = 2,621,440 B: 8× Llama-2-70B's
    assert mha.kv_bytes_per_token("bf16") == 2 * 80 * 64 * 128 * 2 == 2_621_440
    assert mha.kv_bytes_per_token() == 8 * l70.kv_bytes_per_token()
    assert (mha.n_layers, mha.n_heads, mha.attention) == (80, 64, "MHA")


def test_as_mha_refuses_what_it_cannot_widen():
    with pytest.raises(ValueError, match="all full attention"):
        whatif.as_mha(kvlib.load_model("gemma-2-9b"))  # sliding layers
    with pytest.raises(ValueError, match="all full attention"):
        whatif.as_mha(kvlib.load_model("deepseek-v3"))  # MLA


def test_attention_ladder_bytes_per_token_and_state():
    ladder = whatif.attention_ladder(kvlib.load_model("llama-2-70b"))
    assert list(ladder) == list(whatif.LADDER)
    per_token = {name: m.kv_bytes_per_token("bf16") for name, m in ladder.items()}
    assert per_token["MHA (64 KV heads)"] == 2 * 80 * 64 * 128 * 2
    assert per_token["GQA-8"] == 2 * 80 * 8 * 128 * 2 == 327_680
    assert per_token["MQA"] == 2 * 80 * 1 * 128 * 2 == 40_960
    assert per_token["MLA 512 + 64"] == 80 * (512 + 64) * 2 == 92_160
    # Gated DeltaNet, 60 of 80 layers: conv 3 × (2·32·128 + 64·128) + state 64·128·128 elements
    assert ladder["Gated DeltaNet 3:1 + GQA-8"].state_bytes() == 60 * 2 * (3 * 16_384 + 1_048_576)
    # Mamba-2, 72 of 80 layers: conv 3 × (128·64 + 2·8·128) + state 128·64·128 elements
    assert ladder["Mamba-2 9:1 + GQA-8"].state_bytes() == 72 * 2 * (3 * 10_240 + 1_048_576)
    assert all(m.n_layers == 80 for m in ladder.values())


def test_ladder_windows_save_more_at_long_context():
    ladder = whatif.attention_ladder(kvlib.load_model("llama-2-70b"))
    table = whatif.cache_table(ladder, [4096, 131_072], baseline=ladder["MHA (64 KV heads)"])
    s = table.set_index("model")
    # 3:1 local:global at W 128: 20 global layers hold all T, 60 local ones 127 tokens, each
    # layer-token 2·8·128·2 = 4,096 B, against MHA's 80·T layer-tokens of 32,768 B
    t = 131_072
    expected = 80 * t * 32_768 / ((20 * t + 60 * 127) * 4_096)
    assert math.isclose(s.loc["GQA-8, 3:1 local:global, W 128", "saving_at_128k"], expected)
    assert s.loc["GQA-8", "saving_at_4k"] == s.loc["GQA-8", "saving_at_128k"] == 8
    assert s.loc["MHA (64 KV heads)", "gib_at_128k"] == 80 * t * 32_768 / GIB == 320


def test_attention_ladder_needs_a_plain_base():
    with pytest.raises(ValueError, match="divisible"):
        whatif.attention_ladder(kvlib.load_model("llama-3.1-8b"))  # 32 layers: not ÷ 10


def test_kexaone_from_its_model_card():
    ke = whatif.kexaone(128)
    assert ke.layer_counts() == {"sliding": 36, "full": 12}
    # 2 × 48 layers × 8 KV heads × 128 × 2 bytes per token below the window
    assert ke.kv_bytes_per_token("bf16") == 196_608
    # at 32K: 12 global layers hold 32,768 tokens, 36 windowed ones 127, 4,096 B each
    assert ke.kv_bytes(32_768) == (12 * 32_768 + 36 * 127) * 4_096
    assert whatif.kexaone(None).layer_counts() == {"full": 48}


def test_falcon_h1_7b_geometry():
    f = whatif.falcon_h1_7b()
    # attention on all 44 layers: 2 × 2 KV heads × 128 × 2 bytes = 1,024 B per layer-token
    assert f.kv_bytes_per_token("bf16") == 44 * 1_024 == 45_056
    # Mamba-2 per layer: conv 3 × (24·128 + 2·1·256) + state 24·128·256 elements, × 2 bytes
    assert f.state_bytes() == 44 * 2 * (3 * 3_584 + 786_432) == 70_152_192


def test_cache_table_columns_and_units():
    m = kvlib.load_model("llama-3.1-8b")  # 128 KiB per token, no state
    table = whatif.cache_table([m], [1024, 8192])
    row = table.iloc[0]
    assert list(table.columns) == ["model", "attention", "kv_kib_per_token", "state_mib",
                                   "gib_at_1k", "gib_at_8k"]
    assert (row["model"], row["kv_kib_per_token"], row["state_mib"]) == (m.name, 128, 0)
    assert row["gib_at_8k"] == 8192 * 128 * KIB / GIB == 1.0
    nano = whatif.cache_table({"nano": kvlib.load_model("nemotron-3-nano-30b-a3b")}, [1024])
    assert nano.iloc[0]["state_mib"] == kvlib.load_model("nemotron-3-nano-30b-a3b").state_bytes() / MIB
    with pytest.raises(ValueError, match="at least one"):
        whatif.cache_table([m], [])
    with pytest.raises(ValueError, match="positive"):
        whatif.cache_table([m], [0])
