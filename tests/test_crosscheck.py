"""kvlib against the cache objects transformers builds: the measurement behind chapter 2's table.

The measurement runs here, once per test run: it needs torch 2.13.0 and transformers 5.24.0
(``pip install 'kvlib[crosscheck]'``), is skipped without them, and must equal the committed
``data/validation/crosscheck.csv`` that chapter 2 reads. Models are cut to a few layers that keep
every layer kind with its true geometry. The arithmetic of the conventions, and the file against
kvlib, are tested without torch.
"""
from __future__ import annotations

import os

import pandas as pd
import pytest

import kvlib
from kvlib.model import crosscheck
from kvlib.core.units import KIB

# --- no torch needed ------------------------------------------------------------------------


def test_config_cut_keeps_per_layer_lists():
    cfg = crosscheck.hf_config_dict("qwen3.5-35b-a3b", n_layers=4)
    text = cfg["text_config"]
    assert text["num_hidden_layers"] == 4
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    nem = crosscheck.hf_config_dict("nemotron-3-nano-30b-a3b", n_layers=7)
    assert nem["hybrid_override_pattern"] == "MEMEM*E"
    assert crosscheck.kvlib_model("nemotron-3-nano-30b-a3b", 7).layer_counts() == {
        "mamba2": 3, "none": 3, "full": 1}
    with pytest.raises(ValueError, match="n_layers must be in 1..62"):
        crosscheck.hf_config_dict("gemma-3-27b", n_layers=63)


def test_falcon_rw_config_renamed_for_transformers():
    cfg = crosscheck.hf_config_dict("falcon-7b")
    assert cfg["model_type"] == "falcon" and cfg["num_attention_heads"] == 71
    assert "auto_map" not in cfg and "n_head" not in cfg
    # the renamed config still describes the same cache: 2 × 32 × 1 × 64 × 2 = 8,192 bytes
    assert crosscheck.kvlib_model("falcon-7b").kv_bytes_per_token() == 8_192


def test_transformers_convention_for_recurrent_state():
    # Qwen3.5-35B-A3B cut to 4 layers: 3 Gated DeltaNet + 1 full attention (2 KV heads × 256).
    # transformers: conv 4 taps × (2 × 16 × 128 + 32 × 128) = 32,768 elements in bf16 = 65,536 B
    #               recurrent 32 × 128 × 128 = 524,288 elements in fp32 = 2,097,152 B
    # one token of attention: 2 × 2 × 256 × 2 = 2,048 B
    m = crosscheck.kvlib_model("qwen3.5-35b-a3b", 4)
    assert crosscheck.transformers_convention_bytes(m, 1) == 3 * (65_536 + 2_097_152) + 2_048
    # kvlib (vLLM convention): 3 taps in bf16, recurrent state in the config's fp32
    # (mamba_ssm_dtype): 3 × (24,576 × 2 + 524,288 × 4) + 2,048
    assert m.kv_bytes(1) == 3 * (24_576 * 2 + 524_288 * 4) + 2_048


def test_window_view_bytes():
    # gpt-oss-20b cut to 2 layers (1 sliding W 128, 1 full), 8 KV heads × 64, bf16 = 2,048 B per
    # layer-token. After a 1,000-token prefill the sliding tensor views all 1,000 tokens.
    m = crosscheck.kvlib_model("gpt-oss-20b", 2)
    assert crosscheck.window_view_bytes(m, 1000) == 1000 * 2_048
    assert m.kv_bytes(1000) == (127 + 1000) * 2_048
    assert "views all 1,000" in crosscheck.explain(m, 1000)
    assert crosscheck.explain(kvlib.load_model("llama-3.1-8b"), 10) == "same layout"


# --- the committed measurement ---------------------------------------------------------------

def test_committed_measurement_matches_kvlib():
    # no torch needed: every kvlib column of data/validation/crosscheck.csv is recomputed from the
    # current registry and code; a change to either makes the file stale
    table = crosscheck.load_table()
    assert crosscheck.stale_rows(table) == []
    assert set(table["slug"]) == set(crosscheck.CASES)
    assert table["explained"].all()


def test_known_values():
    row = crosscheck.load_table().set_index(["slug", "n_tokens"])
    # Gemma-3 cut to 6 layers at 5,000 tokens: 1 global × 5,000 + 5 local × 1,023 tokens,
    # each 2 × 16 × 128 × 2 = 8,192 bytes
    assert row.loc[("gemma-3-27b", 5000), "transformers_bytes"] == (5000 + 5 * 1023) * 8192
    # MLA: 4 layers × 300 tokens × (512 + 64) × 2 bytes
    assert row.loc[("deepseek-v3", 300), "transformers_bytes"] == 4 * 300 * 576 * 2
    # Mistral at 5,000 tokens: tensors hold 4,095 tokens, the memory behind them all 5,000
    mistral = row.loc[("mistral-7b-v0.1", 5000)]
    assert mistral["transformers_bytes"] == 2 * 4095 * 128 * KIB // 32
    assert mistral["window_storage_bytes"] == 2 * 5000 * 128 * KIB // 32
    # Llama-4 cut to 4 layers at 9,000 tokens: 3 chunked layers keep 8,191 tokens, the full one
    # 9,000, each 2 × 8 × 128 × 2 = 4,096 bytes: exactly kvlib's bytes
    llama4 = row.loc[("llama-4-scout-17b-16e-instruct", 9000)]
    assert llama4["transformers_bytes"] == llama4["kvlib_bytes"] == (3 * 8191 + 9000) * 4096
    # DeepSeek-V3.2, 2 layers, one token: latent 1,152 B + indexer key 128 × 2 B in bf16
    # (kvlib and vLLM: 132 B in fp8 + scale)
    ds32 = row.loc[("deepseek-v3.2", 1)]
    assert (ds32["transformers_bytes"], ds32["kvlib_bytes"]) == (2 * (1152 + 256),
                                                                 2 * (1152 + 132))
    # hybrids are larger in transformers (conv taps, fp32 state), never smaller
    table = crosscheck.load_table()
    hybrid = table[table["explanation"].str.contains("recurrent")]
    assert (hybrid["ratio"] > 1).all()
    attention_only = table[~table["explanation"].str.contains("recurrent|indexer")]
    assert (attention_only["transformers_bytes"] == attention_only["kvlib_bytes"]).all()


# --- measured against transformers (torch 2.13.0, transformers 5.24.0) ------------------------

def test_measurement_equals_the_committed_file():
    """Build every case in transformers on the meta device and measure its cache. The result
    must equal data/validation/crosscheck.csv; KVLIB_UPDATE_CROSSCHECK=1 rewrites the file."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    measured = crosscheck.measured_table()
    assert measured["explained"].all(), measured.loc[
        ~measured["explained"], ["slug", "n_tokens", "transformers_bytes", "expected_bytes"]]
    if os.environ.get("KVLIB_UPDATE_CROSSCHECK") == "1":
        crosscheck.write_table(measured)
    committed = crosscheck.load_table()
    columns = ["slug", "n_tokens", "layers", "transformers_bytes", "kvlib_bytes",
               "expected_bytes", "window_storage_bytes", "expected_window_storage_bytes",
               "explanation", "torch", "transformers"]
    pd.testing.assert_frame_equal(measured[columns].reset_index(drop=True),
                                  committed[columns].reset_index(drop=True), check_dtype=False)


def test_error_cells_one_per_measurement():
    # 2,000 B measured against 1,000 B: +100%; equal bytes: 0%
    table = pd.DataFrame({"model": ["A", "B"], "n_tokens": [1, 300],
                          "transformers_bytes": [2000, 512], "kvlib_bytes": [1000, 512]})
    cells = crosscheck.error_cells(table)
    assert list(cells.columns) == ["model", "n_tokens", "error_pct"]
    assert cells["error_pct"].tolist() == [100.0, 0.0]
    committed = crosscheck.error_cells(crosscheck.load_table())
    assert len(committed) == len(crosscheck.load_table()) and (committed["error_pct"] >= 0).all()
