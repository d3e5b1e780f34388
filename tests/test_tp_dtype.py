"""Tensor-parallel and KV-format rules, with hand-derived answers (arithmetic in comments).

TP rules follow vLLM: KV heads split, or replicated once tp exceeds them (QKVParallelLinear);
MLA latent replicated; query heads, Mamba-2 heads and Gated DeltaNet heads must divide tp;
Mamba-2 groups divide tp or are a single replicated group. Formats: see kvlib.model.formats; a plain dtype
is one format among them, and every layer kind prices every format (kvlib.model.layers).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvlib
from kvlib import AttentionLayer, GatedDeltaNetLayer, Mamba2Layer, MLALayer, Model
from kvlib.model import formats
from kvlib.core.units import KIB

# --- tensor parallelism: attention ----------------------------------------------------------


@pytest.mark.parametrize("tp,expected", [
    # Llama-3.1-8B: 32 layers, 8 KV heads, head dim 128, bf16: 2 × 32 × (8 / tp) × 128 × 2
    (1, 131_072), (2, 65_536), (4, 32_768), (8, 16_384),
    # tp 16 and 32 > 8 KV heads: each GPU keeps one (replicated) head: 2 × 32 × 1 × 128 × 2
    (16, 16_384), (32, 16_384),
])
def test_gqa_heads_split_then_replicated(tp, expected):
    assert kvlib.load_model("llama-3.1-8b").kv_bytes_per_token("bf16", tp=tp) == expected


def test_gqa_four_kv_heads_flat_from_tp4():
    # Qwen3-30B-A3B: 48 layers, 4 KV heads, 32 query heads. tp=4: 2 × 48 × 1 × 128 × 2 = 24,576
    m = kvlib.load_model("qwen3-30b-a3b")
    assert m.kv_bytes_per_token(tp=2) == 49_152
    assert m.kv_bytes_per_token(tp=4) == m.kv_bytes_per_token(tp=8) == m.kv_bytes_per_token(tp=16)
    assert m.kv_bytes_per_token(tp=4) == 24 * KIB


def test_mla_latent_replicated_on_every_gpu():
    # DeepSeek-V3: 61 × (512 + 64) × 2 = 70,272 bytes on each GPU, whatever the tp
    m = kvlib.load_model("deepseek-v3")
    assert {m.kv_bytes_per_token(tp=tp) for tp in (1, 2, 4, 8, 16, 32)} == {70_272}
    # a 4,096-token sequence on 8 GPUs: 8 copies of 4,096 × 70,272 bytes in the cluster
    assert 8 * m.kv_bytes(4096, tp=8) == 8 * 4096 * 70_272


def test_kv_bytes_per_gpu_with_windows():
    # gpt-oss-20b: 12 sliding (W 128) + 12 full layers, 8 KV heads, head dim 64.
    # tp=4: 2 heads per GPU → 2 × 2 × 64 × 2 = 512 bytes per layer per token.
    # 1,000 tokens: 12 × 127 × 512 + 12 × 1,000 × 512 = 780,288 + 6,144,000
    m = kvlib.load_model("gpt-oss-20b")
    assert m.kv_bytes(1000, tp=4) == 12 * 127 * 512 + 12 * 1000 * 512 == 6_924_288
    assert m.kv_bytes(1000, tp=4) * 4 == m.kv_bytes(1000, tp=1)


@pytest.mark.parametrize("slug,tp,match", [
    ("llama-3.1-8b", 3, "32 query heads"),        # 32% 3 ≠ 0 (vLLM: must be divisible)
    ("falcon-7b", 2, "71 query heads"),           # 71 heads: only tp 1 or 71
    ("llama-3.1-8b", 0, "tp"),
])
def test_tp_refused_like_vllm(slug, tp, match):
    with pytest.raises(ValueError, match=match):
        kvlib.load_model(slug).kv_bytes_per_token(tp=tp)


def test_kv_heads_neither_dividing_nor_divided_is_refused():
    # 6 KV heads on tp 4: neither 6% 4 nor 4% 6 is 0 (QKVParallelLinear's divide fails)
    m = kvlib.model_from_layers("toy", [AttentionLayer(6, 64)], n_heads=12)
    with pytest.raises(ValueError, match="6 KV heads cannot be split across tp=4"):
        m.kv_bytes_per_token(tp=4)


# --- tensor parallelism: recurrent state ----------------------------------------------------

def test_mamba2_state_split():
    # Nemotron-3-Nano mamba layer: 64 heads × 64, 8 groups, state 128, conv 4.
    # tp=1: conv 3 × (4,096 + 2 × 8 × 128) = 18,432; ssm 64 × 64 × 128 = 524,288 → 542,720
    # tp=2: conv 3 × (2,048 + 2 × 4 × 128) = 9,216; ssm 32 × 64 × 128 = 262,144 → 271,360
    layer = Mamba2Layer(n_heads=64, head_dim=64, state_size=128, n_groups=8, conv_kernel=4)
    assert layer.state_elements(1) == 542_720
    assert layer.state_elements(2) == 271_360
    assert layer.conv_elements(8) == 3 * (512 + 2 * 1 * 128)
    # 23 such layers, tp=1, conv in bf16 and SSM state in fp32 (the config's
    # mamba_ssm_cache_dtype): 23 × (18,432 × 2 + 524,288 × 4) = 49,082,368 bytes
    nano = kvlib.load_model("nemotron-3-nano-30b-a3b")
    assert nano.ssm_dtype == "fp32"
    assert nano.state_bytes() == 49_082_368
    # all in bf16 (state_dtype overrides both): 23 × 542,720 × 2 = 24,965,120 bytes
    assert nano.state_bytes("bf16") == 24_965_120


def test_mamba2_groups_must_divide_or_be_one():
    layer = Mamba2Layer(n_heads=64, head_dim=64, state_size=128, n_groups=8, conv_kernel=4)
    with pytest.raises(ValueError, match="8 mamba groups cannot be split across tp=16"):
        layer.state_elements(16)
    # one group: replicated on every GPU. tp=4: conv 3 × (16 × 64 + 2 × 1 × 128) = 3,840
    single = Mamba2Layer(n_heads=64, head_dim=64, state_size=128, n_groups=1, conv_kernel=4)
    assert single.conv_elements(4) == 3_840
    with pytest.raises(ValueError, match="64 mamba heads cannot be split across tp=128"):
        single.state_elements(128)


def test_gated_deltanet_state_split():
    # Qwen3.5-35B-A3B linear layer: 16 key heads, 32 value heads, dims 128, conv 4.
    # tp=2: conv 3 × (2 × 8 × 128 + 16 × 128) = 12,288; recurrent 16 × 128 × 128 = 262,144
    layer = GatedDeltaNetLayer(n_k_heads=16, n_v_heads=32, k_head_dim=128, v_head_dim=128,
                               conv_kernel=4)
    assert layer.state_elements(2) == 12_288 + 262_144
    assert layer.state_elements(1) == 2 * layer.state_elements(2)
    with pytest.raises(ValueError, match="16 linear-attention key heads cannot be split"):
        layer.state_elements(32)


def test_conv_width_override():
    # transformers keeps conv_kernel taps: 4 × (2 × 16 × 128 + 32 × 128) = 32,768
    layer = GatedDeltaNetLayer(16, 32, 128, 128, 4)
    assert layer.conv_elements(width=4) == 32_768 and layer.conv_elements() == 24_576


# --- storage formats and their scales -------------------------------------------------------

LLAMA8 = "llama-3.1-8b"  # 32 layers × 8 KV heads × head dim 128


@pytest.mark.parametrize("fmt,expected", [
    ("bf16", 131_072),                                # 32 × 8 × 2 × 128 × 2
    ("fp8 (vLLM, per-tensor scale)", 65_536),         # 1 byte per element, constant scales
    ("int8 (LMDeploy, per token-head)", 67_584),      # 32 × 8 × 2 × (128 + 2 × 2 scale/zero)
    ("int4 (LMDeploy, per token-head)", 34_816),      # 32 × 8 × 2 × (64 + 4)
    ("nvfp4 (block of 16, fp8 scale)", 36_864),       # 32 × 8 × 2 × (64 + 128 / 16 × 1)
    ("fp16", 131_072), ("fp32", 262_144),             # plain dtypes
])
def test_bytes_per_token_by_format(fmt, expected):
    assert kvlib.load_model(LLAMA8).kv_bytes_per_token(fmt) == expected


def test_scale_split_and_overhead():
    m = kvlib.load_model(LLAMA8)
    # int8: 2,048 of 67,584 bytes are scale + zero point: 32 × 8 × 2 × 4
    int8 = "int8 (LMDeploy, per token-head)"
    assert m.kv_scale_bytes_per_token(int8) == 2_048
    assert m.kv_bytes_per_token(int8) - m.kv_scale_bytes_per_token(int8) == 65_536
    assert m.kv_scale_share("int8 (LMDeploy, per token-head)") == pytest.approx(4 / 132)
    # NVFP4: 0.5 scale bits per 4 data bits → 1/9 of the bytes
    assert m.kv_scale_share("nvfp4 (block of 16, fp8 scale)") == pytest.approx(1 / 9)
    assert m.kv_scale_share("fp8 (vLLM, per-tensor scale)") == 0


def test_flashmla_fp8_layout():
    # FlashMLA README: 512 fp8 + 4 fp32 scales + 64 bf16 RoPE = 512 + 16 + 128 = 656 bytes
    fmt = formats.FORMATS["fp8 FlashMLA (DeepSeek-V3.2)"]
    mla = kvlib.model_from_layers("mla", [MLALayer(512, 64)])
    assert mla.kv_bytes_per_token(fmt) == 656
    # scales: 4 fp32 scales of the 512 latent values = 16 bytes; the bf16 RoPE part has none
    assert mla.kv_scale_bytes_per_token(fmt) == 16
    assert kvlib.load_model("deepseek-v3").kv_bytes_per_token(fmt) == 61 * 656 == 40_016
    with pytest.raises(ValueError, match="MLA latents only"):
        kvlib.load_model(LLAMA8).kv_bytes_per_token(fmt)


def test_generic_formats_on_mla():
    # vLLM fp8 on DeepSeek-V3: 61 × 576 × 1 byte; NVFP4: 61 × (288 + 36 blocks × 1 byte)
    ds3 = kvlib.load_model("deepseek-v3")
    assert ds3.kv_bytes_per_token("fp8 (vLLM, per-tensor scale)") == 61 * 576
    assert ds3.kv_bytes_per_token("nvfp4 (block of 16, fp8 scale)") == 61 * (288 + 36)


def test_formats_with_tp_and_windows():
    # int8, Llama-3.1-8B, tp=4: 2 heads per GPU → 67,584 / 4 = 16,896
    m = kvlib.load_model(LLAMA8)
    assert m.kv_bytes_per_token("int8 (LMDeploy, per token-head)", tp=4) == 16_896
    # gpt-oss-20b int4, 1,000 tokens: 12 × 127 + 12 × 1,000 tokens × 8 heads × 2 × (32 + 4)
    oss = kvlib.load_model("gpt-oss-20b")
    assert oss.kv_bytes(1000, "int4 (LMDeploy, per token-head)") == (
        (12 * 127 + 12 * 1000) * 8 * 2 * 36)
    # recurrent state stays in the model dtype: Qwen3.5-35B-A3B, fp8 cache of one token
    q35 = kvlib.load_model("qwen3.5-35b-a3b")
    assert q35.kv_bytes(1, "fp8 (vLLM, per-tensor scale)") == 10_240 + q35.state_bytes()


def test_deepseek_v2_six_bits():
    # DeepSeek-V2 at 6 bits: 60 × 576 × 6 / 8 = 25,920; DeepSeek 67B bf16: 95 × 2048 × 2 = 389,120
    v2, ds67 = kvlib.load_model("deepseek-v2"), kvlib.load_model("deepseek-67b")
    assert v2.kv_bytes_per_token(formats.KVFormat("6 bits on average", bits=6)) == 25_920
    assert v2.kv_elements_per_token() == 60 * 576
    assert ds67.kv_bytes_per_token("bf16") == 389_120
    assert 1 - 25_920 / 389_120 == pytest.approx(0.9334, abs=5e-5)  # the paper's "93.3%"


def test_bad_formats():
    m = kvlib.load_model(LLAMA8)
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        m.kv_bytes_per_token("int3")
    with pytest.raises(ValueError, match="no KV format has that name"):
        m.kv_bytes(10, ["bf16"])
    with pytest.raises(ValueError, match="whole bytes"):
        formats.KVFormat("odd", bits=4, vector_scale_bits=3)
    with pytest.raises(ValueError, match="bits must be positive"):
        formats.KVFormat("none", bits=0)


@pytest.mark.parametrize("slug", kvlib.model_slugs())
def test_plain_dtype_is_the_unscaled_format(slug):
    # a dtype name and its KVFormat are the same format: bytes = elements × bits / 8, no scales
    # (DeepSeek-V3.2's indexer keys keep vLLM's own fp8 layout, 132 B per layer, in any format)
    m = kvlib.load_model(slug)
    fixed = [layer for layer in m.layers if layer.cache_kind == "indexer"]
    fixed_bytes = sum(layer.bytes_per_token() for layer in fixed)
    for dtype in ("bf16", "fp8", "int4"):
        fmt = formats.plain(dtype)
        assert m.kv_bytes_per_token(fmt) == m.kv_bytes_per_token(dtype)
        elements = m.kv_elements_per_token() - sum(layer.elements_per_token() for layer in fixed)
        assert m.kv_bytes_per_token(dtype) - fixed_bytes == elements * fmt.bits // 8
        assert m.kv_scale_bytes_per_token(dtype) == 4 * len(fixed)
        assert m.kv_bytes(5000, fmt, state_dtype="bf16") == m.kv_bytes(5000, dtype,
                                                                        state_dtype="bf16")


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 64), st.sampled_from([64, 96, 128, 256]), st.integers(1, 4))
def test_scales_never_shrink_a_format(kv_heads, head_dim, layers):
    m = kvlib.model_from_layers("p", [AttentionLayer(kv_heads, head_dim)] * layers)
    for fmt in formats.FORMATS.values():
        if fmt.mla_only:
            continue
        data = m.kv_bytes_per_token(fmt) - m.kv_scale_bytes_per_token(fmt)
        assert m.kv_bytes_per_token(fmt) >= data == m.kv_bytes_per_token("int8") * fmt.bits // 8


# --- Gemma-3's layer pattern (the registry model added with this chapter) ------------------

def test_gemma3_default_pattern_without_layer_types():
    # google/gemma-3-27b-it: text_config has neither sliding_window_pattern nor layer_types;
    # transformers' Gemma3TextConfig defaults to every 6th layer global → 62 layers: 10 full
    # (layers 6, 12, ..., 60) and 52 sliding.
    m = kvlib.load_model("gemma-3-27b")
    assert m.layer_counts() == {"sliding": 52, "full": 10}
    kinds = [layer.kind for layer in m.layers]
    assert kinds[5] == kinds[59] == "full" and kinds[60] == kinds[61] == "sliding"
    # per token: 2 × 62 × 16 × 128 × 2 = 507,904; 5,000 tokens: 10 × 5,000 + 52 × 1,023 tokens
    # × 8,192 bytes per layer-token
    assert m.kv_bytes_per_token() == 507_904
    assert m.kv_bytes(5000) == (10 * 5000 + 52 * 1023) * 8192 == 845_381_632


def test_gemma3_explicit_fields_still_win():
    base = {"model_type": "gemma3_text", "hidden_size": 1024, "num_hidden_layers": 8,
            "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
            "sliding_window": 512}
    assert Model.from_hf_config(base).layer_counts() == {"sliding": 7, "full": 1}
    assert Model.from_hf_config({**base, "sliding_window_pattern": 2}).layer_counts() == {
        "sliding": 4, "full": 4}
    types = ["full_attention"] * 8
    assert Model.from_hf_config({**base, "layer_types": types}).layer_counts() == {"full": 8}
