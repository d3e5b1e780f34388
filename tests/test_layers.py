"""Each layer kind owns its cache: bytes per token in any KV format and TP degree, state bytes,
page size for a block size, pages one request needs, tokens held and attention FLOPs.
Hand-computed answers, arithmetic in comments."""
from __future__ import annotations

import pytest

from kvlib.model import formats
from kvlib.model.layers import (AttentionLayer, GatedDeltaNetLayer, Mamba2Layer, MLALayer,
                          StatelessLayer)

GQA = AttentionLayer(n_kv_heads=8, head_dim=128)
SWA = AttentionLayer(n_kv_heads=8, head_dim=64, window=128)
MLA = MLALayer(kv_lora_rank=512, rope_dim=64)
MAMBA = Mamba2Layer(n_heads=64, head_dim=64, state_size=128, n_groups=8, conv_kernel=4)
GDN = GatedDeltaNetLayer(n_k_heads=16, n_v_heads=32, k_head_dim=128, v_head_dim=128,
                         conv_kernel=4)
NONE = StatelessLayer()
ALL = [GQA, SWA, MLA, MAMBA, GDN, NONE]


def test_attention_bytes_pages_and_flops():
    # GQA 8 × 128, bf16: 8 × (128 + 128) × 2 = 4,096 B per token; tp=2: 2,048; tp=16: one
    # replicated head, 512
    assert [GQA.bytes_per_token("bf16", tp) for tp in (1, 2, 16)] == [4_096, 2_048, 512]
    # a page of 16 tokens in fp8: 16 × 8 × 256 × 1 = 32,768 B
    assert GQA.page_bytes(16, "fp8") == 32_768
    # a 131,072-token request: 131,072 / 16 = 8,192 pages
    assert GQA.pages_per_request(131_072, 8192, 16) == 8_192
    # 32 query heads attending 1,000 tokens on tp=2: 2 × 32 × 256 × 1,000 / 2
    assert GQA.attention_flops_per_token(1000, 2, query_heads=32) == 8_192_000
    assert GQA.tokens_held(10**30) == 10**30  # exact integers, no float rounding


def test_sliding_window_holds_w_minus_one():
    assert SWA.tokens_held(1000) == 127 and SWA.tokens_held(50) == 50
    # vLLM SlidingWindowSpec: min(127 + 8,192, L) tokens → ceil(8,319 / 16) + 1 = 521 pages
    assert SWA.pages_per_request(131_072, 8192, 16) == 521
    assert SWA.pages_per_request(100, 8192, 16) == 8  # ceil(100 / 16) + 1
    # FLOPs capped at the window: 2 × 64 × 128 × 127
    assert SWA.attention_flops_per_token(100_000, 1, query_heads=64) == 2 * 64 * 128 * 127


def test_mla_latent_replicated_and_absorbed_flops():
    # 512 + 64 = 576 elements, bf16 1,152 B on every GPU; page of 16 tokens: 18,432 B
    assert {MLA.bytes_per_token("bf16", tp) for tp in (1, 8, 32)} == {1_152}
    assert MLA.page_bytes(16, "bf16", tp=8) == 18_432
    # absorbed attention: 2 × 128 heads × (2 × 512 + 64) × 1,000 tokens
    assert MLA.attention_flops_per_token(1000, 1, query_heads=128) == 278_528_000


def test_recurrent_state_pages_hold_one_sequence():
    # Nemotron-H Mamba-2: conv 3 × (4,096 + 2 × 8 × 128) = 18,432 in bf16, SSM 64 × 64 × 128
    # = 524,288 in fp32 → 36,864 + 2,097,152 = 2,134,016 B, whatever the KV format or block
    assert MAMBA.state_bytes(1, "bf16", "fp32") == 2_134_016
    assert MAMBA.page_bytes(16, "fp8", 1, "bf16", "fp32") == MAMBA.page_bytes(
        1568, "bf16", 1, "bf16", "fp32") == 2_134_016
    assert MAMBA.pages_per_request(131_072, 8192, 16) == 1
    assert MAMBA.bytes_per_token("bf16") == MAMBA.tokens_held(10**6) == 0
    # ≈ 4 FLOPs per state element: 4 × (18,432 + 524,288)
    assert MAMBA.attention_flops_per_token(10**6) == 4 * 542_720
    # transformers keeps all 4 conv taps: 4 × 6,144 = 24,576 elements
    assert MAMBA.state_bytes(1, "bf16", "fp32", all_conv_taps=True) == 24_576 * 2 + 2_097_152
    # GDN: conv 3 × (2 × 16 × 128 + 32 × 128) = 24,576, recurrent 32 × 128 × 128 = 524,288
    assert GDN.state_bytes(2, "bf16") == (24_576 + 524_288) // 2 * 2


@pytest.mark.parametrize("fmt", [*formats.FORMATS, "fp16", "fp8", "int4"])
def test_every_kind_prices_every_format(fmt):
    f = formats.kv_format(fmt)
    for layer in ALL:
        if f.mla_only and layer.cache_kind in ("full", "sliding"):
            with pytest.raises(ValueError, match="MLA latents only"):
                layer.bytes_per_token(fmt)
            continue
        total, scales = layer.bytes_per_token(fmt), layer.scale_bytes_per_token(fmt)
        assert 0 <= scales <= total
        assert (total > 0) == (layer.cache_kind in ("full", "sliding", "mla"))
        assert layer.page_bytes(16, fmt, 1, "bf16") >= 0


def test_stateless_layer_holds_nothing():
    assert (NONE.bytes_per_token("bf16"), NONE.state_bytes(), NONE.page_bytes(16),
            NONE.pages_per_request(10, 10, 16), NONE.attention_flops_per_token(10)) == (
        0, 0, 0, 0, 0.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="tp"):
        GQA.bytes_per_token("bf16", 0)
    with pytest.raises(ValueError, match="block_size"):
        GQA.page_bytes(0)
    with pytest.raises(ValueError, match="n_tokens"):
        SWA.tokens_held(-1)
    with pytest.raises(ValueError, match="no KV format has that name"):
        MAMBA.bytes_per_token("fp7")


def test_a_format_answers_to_its_first_word_when_no_dtype_has_it():
    # "nvfp4" names one format and no dtype; "fp8" and "int8" stay the plain dtypes, and a word
    # no format starts with stays unknown
    assert formats.kv_format("nvfp4") is formats.FORMATS["nvfp4 (block of 16, fp8 scale)"]
    assert formats.kv_format("fp8").name == "fp8" and formats.kv_format("int8").name == "int8"
    with pytest.raises(ValueError, match="unknown dtype 'nvfp'"):
        formats.kv_format("nvfp")
