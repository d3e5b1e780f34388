"""Per-token KV for every attention kind and config convention, with hand-derived answers."""
from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvlib
from kvlib import AttentionLayer, GatedDeltaNetLayer, Mamba2Layer, MLALayer, Model
from kvlib.core.units import GIB, KIB

LLAMA_31_8B = {  # meta-llama/Llama-3.1-8B config.json (fields that matter)
    "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16",
}


def test_gqa_llama_31_8b():
    # 2 (K and V) × 32 layers × 8 KV heads × 128 head dim × 2 bytes = 131,072 B = 128 KiB
    m = Model.from_hf_config(LLAMA_31_8B)
    assert m.kv_bytes_per_token("bf16") == 131_072 == 128 * KIB
    assert m.attention == "GQA"
    # 128K tokens × 128 KiB = 16 GiB
    assert m.kv_bytes(131_072) == 16 * GIB


def test_mha_when_num_key_value_heads_absent():
    # OPT-13B: 40 layers, 40 heads, hidden 5120 → head dim 128, no KV-head field → MHA.
    # 2 × 40 × 40 × 128 × 2 = 819,200 B = 800 KiB (the vLLM paper's "800 KB")
    opt = {"model_type": "opt", "hidden_size": 5120, "num_hidden_layers": 40,
           "num_attention_heads": 40, "torch_dtype": "float16"}
    m = Model.from_hf_config(opt)
    assert m.kv_bytes_per_token("fp16") == 819_200 == 800 * KIB
    assert m.attention == "MHA"


def test_mha_when_num_key_value_heads_is_null():
    cfg = dict(LLAMA_31_8B, num_key_value_heads=None)
    # 2 × 32 × 32 × 128 × 2 = 524,288 = 512 KiB
    assert Model.from_hf_config(cfg).kv_bytes_per_token() == 512 * KIB


def test_mqa_falcon_flags():
    # Falcon-7B (RW format): 32 layers, 71 heads, hidden 4544 → head dim 64; multi_query → K = 1
    # 2 × 32 × 1 × 64 × 2 = 8,192 B
    falcon = {"model_type": "RefinedWebModel", "hidden_size": 4544, "n_layer": 32, "n_head": 71,
              "multi_query": True, "torch_dtype": "bfloat16"}
    m = Model.from_hf_config(falcon)
    assert m.kv_bytes_per_token() == 8_192
    assert m.attention == "MQA"
    # Falcon-40B's new decoder architecture uses num_kv_heads (8): 2 × 60 × 8 × 64 × 2
    falcon40 = {"model_type": "falcon", "hidden_size": 8192, "num_hidden_layers": 60,
                "num_attention_heads": 128, "num_kv_heads": 8, "multi_query": True,
                "new_decoder_architecture": True}
    assert Model.from_hf_config(falcon40).kv_bytes_per_token() == 2 * 60 * 8 * 64 * 2


def test_explicit_head_dim_differs_from_hidden_over_heads():
    # Qwen3-32B: hidden 5120 / 64 heads = 80, but head_dim is 128. 2 × 64 × 8 × 128 × 2 = 256 KiB
    cfg = {"hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 64,
           "num_key_value_heads": 8, "head_dim": 128}
    assert Model.from_hf_config(cfg).kv_bytes_per_token() == 256 * KIB


def test_nested_text_config():
    wrapper = {"model_type": "some_vlm", "vision_config": {"hidden_size": 1152},
               "text_config": dict(LLAMA_31_8B)}
    assert Model.from_hf_config(wrapper).kv_bytes_per_token() == 128 * KIB


def test_sliding_window_from_layer_types():
    # 4 layers: 2 sliding (window 128) + 2 full, 8 KV heads, head dim 64, bf16.
    # per token: 2 × 4 × 8 × 64 × 2 = 8,192 B while T < 127.
    cfg = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 2}
    m = Model.from_hf_config(cfg)
    assert m.kv_bytes_per_token() == 8_192
    per_layer = 2 * 8 * 64 * 2  # 2,048 B per token per layer
    # at T = 1000: sliding layers hold 127 tokens (W − 1), full layers 1000
    assert m.kv_bytes(1000) == 2 * per_layer * 127 + 2 * per_layer * 1000
    assert m.layer_counts() == {"sliding": 2, "full": 2}
    assert m.attention == "MHA+SWA"


def test_sliding_window_pattern_gemma3():
    # Gemma-3 style: every 6th layer global. 12 layers → 2 full (layers 6, 12), 10 sliding.
    cfg = {"model_type": "gemma3_text", "hidden_size": 1024, "num_hidden_layers": 12,
           "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
           "sliding_window": 1024, "sliding_window_pattern": 6}
    m = Model.from_hf_config(cfg)
    assert m.layer_counts() == {"sliding": 10, "full": 2}
    kinds = [lay.kind for lay in m.layers]
    assert kinds[5] == "full" and kinds[11] == "full" and kinds[0] == "sliding"


def test_sliding_window_pattern_string():
    # EXAONE-4 style "LLLG": 8 layers → 6 local, 2 global.
    cfg = {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 64, "sliding_window": 128,
           "sliding_window_pattern": "LLLG"}
    assert Model.from_hf_config(cfg).layer_counts() == {"sliding": 6, "full": 2}


def test_gemma2_alternation_convention():
    # Gemma-2 configs carry no layer_types: even layers local, odd layers global.
    cfg = {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42,
           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
           "sliding_window": 4096}
    m = Model.from_hf_config(cfg)
    assert m.layer_counts() == {"sliding": 21, "full": 21}
    assert m.layers[0].kind == "sliding" and m.layers[1].kind == "full"
    # per token: 2 × 42 × 8 × 256 × 2 = 344,064 B
    assert m.kv_bytes_per_token() == 344_064
    # at 8192 tokens: 21 full layers × 8192 + 21 sliding × 4095, each 2 × 8 × 256 × 2 = 8,192 B
    assert m.kv_bytes(8192) == 21 * 8_192 * 8192 + 21 * 8_192 * 4095


def test_use_sliding_window_false_ignores_window():
    # Qwen2.5 ships sliding_window with use_sliding_window: false → all full attention.
    cfg = dict(LLAMA_31_8B, sliding_window=4096, use_sliding_window=False, max_window_layers=28)
    m = Model.from_hf_config(cfg)
    assert m.layer_counts() == {"full": 32}
    assert m.kv_bytes(100_000) == 100_000 * 128 * KIB


def test_mistral_all_layers_windowed():
    # Mistral-7B-v0.1: sliding_window 4096 on every layer, no layer_types.
    cfg = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "sliding_window": 4096}
    m = Model.from_hf_config(cfg)
    assert m.layer_counts() == {"sliding": 32}
    # beyond the window the sequence stays at 4095 tokens × 128 KiB
    assert m.kv_bytes(10_000) == m.kv_bytes(4095) == 4095 * 128 * KIB


def test_mla_deepseek_v3():
    # 61 layers × (512 latent + 64 rope) × 2 bytes = 70,272 B = 68.625 KiB
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
           "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
           "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
    m = Model.from_hf_config(cfg)
    assert m.kv_bytes_per_token() == 70_272
    assert m.attention == "MLA"
    assert isinstance(m.layers[0], MLALayer)


def test_hybrid_gated_deltanet_layer_types():
    # 8 layers, every 4th full attention (2 full): 2 KV heads × head dim 256.
    # per token: 2 × 2 × 2 × 256 × 2 = 4,096 B
    # linear layer state: conv (4 − 1) × (2 × 16 × 128 + 32 × 128) = 3 × 8,192 = 24,576
    #                     recurrent 32 × 128 × 128 = 524,288 → 548,864 elements per layer
    # 6 linear layers × 548,864 × 2 bytes = 6,586,368 B
    cfg = {"text_config": {
        "hidden_size": 2048, "num_hidden_layers": 8, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "torch_dtype": "bfloat16",
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 2,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}}
    m = Model.from_hf_config(cfg)
    assert m.kv_bytes_per_token() == 4_096
    assert m.state_bytes() == 6_586_368
    assert m.kv_bytes(1000) == 1000 * 4_096 + 6_586_368
    assert m.kv_bytes(0) == 0
    assert m.attention == "GQA+hybrid"
    # full_attention_interval gives the same stack without layer_types
    inner = dict(cfg["text_config"])
    del inner["layer_types"]
    inner["full_attention_interval"] = 4
    assert Model.from_hf_config(inner).layers == m.layers


def test_hybrid_nemotron_pattern():
    # M = Mamba-2, * = attention, - = MLP, E = MoE. "M*ME-" → 2 mamba, 1 attention, 2 stateless.
    # attention: 2 KV heads × 128 → 2 × 2 × 128 × 2 = 1,024 B per token
    # mamba: heads 64 × head dim 64 = 4096; conv (4 − 1) × (4096 + 2 × 8 × 128) = 18,432
    #        ssm 4096 × 128 = 524,288 → 542,720 elements per layer, × 2 layers × 2 bytes
    cfg = {"hidden_size": 2688, "num_hidden_layers": 5, "num_attention_heads": 32,
           "num_key_value_heads": 2, "head_dim": 128, "hybrid_override_pattern": "M*ME-",
           "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
           "conv_kernel": 4, "torch_dtype": "bfloat16"}
    m = Model.from_hf_config(cfg)
    assert m.kv_bytes_per_token() == 1_024
    assert m.state_bytes() == 2 * 542_720 * 2
    assert m.layer_counts() == {"mamba2": 2, "full": 1, "none": 2}


@pytest.mark.parametrize("dtype,expected", [
    ("fp32", 256 * KIB), ("fp16", 128 * KIB), ("bf16", 128 * KIB), ("fp8", 64 * KIB),
    ("int8", 64 * KIB), ("int4", 32 * KIB), ("fp4", 32 * KIB)])
def test_dtypes(dtype, expected):
    # 2 × 32 × 8 × 128 = 65,536 elements per token × bytes per element
    assert Model.from_hf_config(LLAMA_31_8B).kv_bytes_per_token(dtype) == expected


def test_state_dtype_defaults_to_model_dtype_not_kv_dtype():
    layer = Mamba2Layer(n_heads=8, head_dim=8, state_size=16, n_groups=1, conv_kernel=4)
    # conv 3 × (64 + 2 × 16) = 288, ssm 64 × 16 = 1,024 → 1,312 elements
    m = kvlib.model_from_layers("toy", [layer, AttentionLayer(1, 64)], dtype="bf16")
    assert m.kv_bytes(10, dtype="fp8") == 10 * 128 * 1 + 1_312 * 2
    assert m.kv_bytes(10, dtype="fp8", state_dtype="fp32") == 10 * 128 + 1_312 * 4
    no_dtype = kvlib.model_from_layers("toy", [layer], dtype=None)
    with pytest.raises(ValueError, match="state_dtype"):
        no_dtype.kv_bytes(10)


# --- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("config,field", [
    ({}, "empty"),
    ({"hidden_size": 4096}, "num_hidden_layers"),
    ({"num_hidden_layers": 32, "hidden_size": 4096}, "num_attention_heads"),
    (dict(LLAMA_31_8B, num_attention_heads=0), "num_attention_heads"),
    (dict(LLAMA_31_8B, num_key_value_heads=-8), "num_key_value_heads"),
    (dict(LLAMA_31_8B, num_hidden_layers=2.5), "num_hidden_layers"),
    (dict(LLAMA_31_8B, hidden_size=4000, num_attention_heads=24), "not divisible"),
    (dict(LLAMA_31_8B, layer_types=["full_attention"] * 3), "describes 3 layers"),
    (dict(LLAMA_31_8B, layer_types=["weird"] * 32), "unknown entries"),
    (dict(LLAMA_31_8B, layer_types=["sliding_attention"] * 32), "sliding_window"),
    (dict(LLAMA_31_8B, kv_lora_rank=512), "qk_rope_head_dim"),
    ({"num_hidden_layers": 2, "hybrid_override_pattern": "MX"}, "unknown characters"),
])
def test_bad_configs_raise_value_error_naming_the_field(config, field):
    with pytest.raises(ValueError, match=field):
        Model.from_hf_config(config)


def test_bad_arguments():
    m = Model.from_hf_config(LLAMA_31_8B)
    with pytest.raises(ValueError, match="n_tokens"):
        m.kv_bytes(-1)
    with pytest.raises(ValueError, match="unknown dtype 'bf8'"):
        m.kv_bytes_per_token("bf8")
    with pytest.raises(ValueError, match="tp"):
        m.kv_bytes_per_token(tp=0)
    with pytest.raises(ValueError, match="no layers"):
        Model(name="empty", layers=())
    with pytest.raises(ValueError, match="window"):
        AttentionLayer(n_kv_heads=8, head_dim=128, window=0)
    with pytest.raises(ValueError, match="n_kv_heads"):
        AttentionLayer(n_kv_heads=0, head_dim=128)


# --- properties -----------------------------------------------------------------------------

layer_strategy = st.one_of(
    st.builds(AttentionLayer, n_kv_heads=st.integers(1, 64), head_dim=st.integers(1, 256),
              window=st.one_of(st.none(), st.integers(1, 10_000))),
    st.builds(MLALayer, kv_lora_rank=st.integers(1, 1024), rope_dim=st.integers(1, 128)),
    st.builds(GatedDeltaNetLayer, n_k_heads=st.integers(1, 32), n_v_heads=st.integers(1, 64),
              k_head_dim=st.integers(1, 256), v_head_dim=st.integers(1, 256),
              conv_kernel=st.integers(1, 8)),
)
dtype_strategy = st.sampled_from(sorted(kvlib.DTYPE_BITS))


@settings(max_examples=200, deadline=None)
@given(st.lists(layer_strategy, min_size=1, max_size=6), st.integers(0, 200_000),
       st.integers(0, 200_000), dtype_strategy)
def test_kv_bytes_monotone_in_tokens(layers, t1, t2, dtype):
    m = kvlib.model_from_layers("p", layers)
    lo, hi = sorted((t1, t2))
    assert m.kv_bytes(lo, dtype) <= m.kv_bytes(hi, dtype)


@settings(max_examples=200, deadline=None)
@given(st.lists(layer_strategy, min_size=1, max_size=6), st.integers(1, 8),
       st.integers(0, 200_000), dtype_strategy)
def test_kv_bytes_linear_in_layers(layers, copies, n_tokens, dtype):
    one = kvlib.model_from_layers("p", layers)
    many = kvlib.model_from_layers("p", layers * copies)
    assert many.kv_bytes(n_tokens, dtype) == copies * one.kv_bytes(n_tokens, dtype)
    assert many.kv_bytes_per_token(dtype) == copies * one.kv_bytes_per_token(dtype)


@settings(max_examples=100, deadline=None)
@given(st.lists(layer_strategy, min_size=1, max_size=6), st.integers(1, 2_000))
def test_per_token_is_the_slope_below_every_window(layers, n_tokens):
    m = kvlib.model_from_layers("p", layers)
    windows = [lay.window for lay in layers if getattr(lay, "window", None)]
    if windows and n_tokens > min(windows) - 1:
        return
    assert m.kv_bytes(n_tokens) - m.state_bytes() == n_tokens * m.kv_bytes_per_token()


def test_config_is_not_mutated():
    cfg = copy.deepcopy(LLAMA_31_8B)
    Model.from_hf_config(cfg)
    assert cfg == LLAMA_31_8B


def test_cache_layouts_kvlib_does_not_model_are_refused():
    # MiMo-V2 gives sliding layers their own KV-head count; guessing would mis-size the cache.
    cfg = dict(LLAMA_31_8B, hybrid_layer_pattern=[0, 1] * 16, swa_num_key_value_heads=8)
    with pytest.raises(ValueError, match="swa_num_key_value_heads"):
        Model.from_hf_config(cfg)


def test_layer_summary_names_every_kind_in_words():
    # Nemotron-3-Nano: 6 attention layers among 23 Mamba-2 ones (and stateless MLP/MoE layers)
    text = kvlib.load_model("nemotron-3-nano-30b-a3b").layer_summary()
    assert "6 full" in text and "23 Mamba-2" in text and "_" not in text
    assert kvlib.load_model("qwen3.5-27b").layer_summary() == "16 full, 48 Gated DeltaNet"
    assert set(kvlib.model.layers.KIND_NAMES) == set(kvlib.model.layers.LayerKind.__args__)
