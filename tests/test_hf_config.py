"""The one config reader: every key a decision, refusals that name the field, bad input that
ends in ValueError/KeyError (never a traceback, a hang or a silent wrong size)."""
from __future__ import annotations

import copy
import json
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvlib
from kvlib import Model, count_params
from kvlib.model import hf_config
from kvlib.engines.capacity import kv_pool
from kvlib.model.hf_config import (CACHE_RELATED, IGNORED_KEYS, MAX_LAYERS, READ_KEYS, REFUSED_KEYS,
                             read_config, text_config)

LLAMA = {  # meta-llama/Llama-3.1-8B config.json (fields that matter)
    "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 128256, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}


def _registry_configs():
    return [(slug, kvlib.model_record(slug)["config"]) for slug in kvlib.model_slugs()]


# --- every key is a decision ------------------------------------------------------------------

def test_every_registry_key_is_read_or_deliberately_ignored():
    undecided = set()
    for slug, config in _registry_configs():
        inner = text_config(config)
        for cfg in (config, inner):
            undecided |= {(slug, key) for key in cfg
                          if key not in READ_KEYS and key not in IGNORED_KEYS}
    assert not undecided, (
        f"config keys neither read nor ignored by kvlib.model.hf_config: {sorted(undecided)}; add each "
        "to READ_KEYS (and read it) or to IGNORED_KEYS with the reason it changes no shape")


def test_key_lists_are_disjoint_and_ignored_keys_have_reasons():
    assert not READ_KEYS & set(IGNORED_KEYS)
    assert not (READ_KEYS | set(IGNORED_KEYS)) & set(REFUSED_KEYS)
    assert all(len(reason) > 10 for reason in IGNORED_KEYS.values())


def test_the_reader_reads_only_listed_keys():
    # _Fields refuses to read a key READ_KEYS lacks: a programming error, caught here
    fields = hf_config._Fields({"foo": 1}, "toy")
    with pytest.raises(AssertionError, match="READ_KEYS"):
        fields.get("foo")


# --- refusals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("key", sorted(REFUSED_KEYS))
def test_refused_fields_name_the_field_and_the_model(key):
    with pytest.raises(ValueError, match=rf"Llama-x: config field '{key}' \(.*\) changes what "
                                         "is cached"):
        Model.from_hf_config({**LLAMA, key: 8}, name="Llama-x")


@pytest.mark.parametrize("key", ["swa_layers", "kv_sharing_interval", "compress_ratio",
                                 "recurrent_state_size", "layer_pattern", "global_attn_every",
                                 "sparse_block_size", "local_attention_window"])
def test_unknown_cache_like_keys_are_refused(key):
    assert CACHE_RELATED.search(key)
    with pytest.raises(ValueError, match=rf"'{key}' \(unknown to kvlib"):
        Model.from_hf_config({**LLAMA, key: 4})


def test_unknown_keys_that_look_harmless_and_unset_cache_keys_pass():
    m = Model.from_hf_config({**LLAMA, "my_training_note": "x", "swa_layers": None,
                              "num_kv_shared_layers": 0, "attention_k_eq_v": False})
    assert m.kv_bytes_per_token() == 131_072


@pytest.mark.parametrize("update,match", [
    ({"num_key_value_heads": 64}, "64 KV heads cannot serve 32 query heads"),
    ({"num_key_value_heads": 5}, "5 KV heads cannot serve 32 query heads"),
    ({"layer_types": [["full_attention"]] * 32}, "layer_types' must hold layer type names"),
    ({"layer_types": "full_attention"}, "layer_types' must be a list"),
    ({"hybrid_override_pattern": 42}, "hybrid_override_pattern' must be a string"),
    ({"num_hidden_layers": 10**30}, "num_hidden_layers' must be an integer >= 1 and <= 10,000"),
    ({"num_hidden_layers": 100_000_000}, "<= 10,000"),
    ({"num_hidden_layers": np.float64(32.5)}, "num_hidden_layers"),
    ({"multi_query": "yes"}, "multi_query' must be true or false"),
    ({"mlp_only_layers": 3, "num_local_experts": 8}, "mlp_only_layers' must be a list"),
    ({"sliding_window": 4096, "sliding_window_size": 2048, "model_type": "gemma2"}, "disagree"),
])
def test_impossible_or_malformed_configs(update, match):
    with pytest.raises(ValueError, match=match):
        Model.from_hf_config({**LLAMA, **update})


def test_huge_layer_counts_are_refused_at_once():
    start = time.perf_counter()
    for n in (10**30, 100_000_000, MAX_LAYERS + 1):
        with pytest.raises(ValueError, match="num_hidden_layers"):
            read_config({**LLAMA, "num_hidden_layers": n})
    assert time.perf_counter() - start < 1.0


def test_numpy_numbers_are_numbers():
    # numpy integers, and floats that are whole numbers, read as ints
    cfg = {**LLAMA, "num_hidden_layers": np.int64(32), "num_key_value_heads": np.int32(8),
           "hidden_size": np.float64(4096.0)}
    assert Model.from_hf_config(cfg).kv_bytes_per_token() == 131_072
    assert count_params(cfg).total == count_params(LLAMA).total


def test_recurrent_geometry_must_divide():
    nemotron = {"hidden_size": 2688, "num_hidden_layers": 2, "num_attention_heads": 32,
                "num_key_value_heads": 2, "head_dim": 128, "hybrid_override_pattern": "M*",
                "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128,
                "n_groups": 8, "conv_kernel": 4}
    with pytest.raises(ValueError, match="64 mamba heads cannot be shared by 6 groups"):
        Model.from_hf_config({**nemotron, "n_groups": 6})


def test_tp_rules_are_the_same_in_kv_pool_as_in_kv():
    # Falcon-7B: 71 query heads; vLLM refuses tp=2, and so do kv and kv_pool
    falcon = kvlib.load_model("falcon-7b")
    with pytest.raises(ValueError, match="71 query heads cannot be split across tp=2"):
        falcon.kv_bytes_per_token(tp=2)
    with pytest.raises(ValueError, match="71 query heads cannot be split across tp=2"):
        kv_pool(falcon, "h100-sxm", n_gpus=2)
    assert not falcon.supports_tp(2) and falcon.supports_tp(1)
    # Nemotron-3-Nano: 8 mamba groups cannot be split over 16 GPUs
    with pytest.raises(ValueError, match="8 mamba groups cannot be split across tp=16"):
        kv_pool("nemotron-3-nano-30b-a3b", "h100-sxm", n_gpus=16)


# --- any JSON-ish input: a result or a ValueError/KeyError, quickly ----------------------------

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(-(10**40), 10**40),
    st.sampled_from([0, 1, 2, 16, 64, 128, 4096, 10**6, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([32.0, 0.5, -1.0]),
    st.text(max_size=8), st.sampled_from(["full_attention", "mamba", "M*-E", "bfloat16"]),
    st.builds(np.int64, st.integers(-5, 5000)), st.builds(np.float64, st.floats(-10, 5000)),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12)
_KEYS = st.one_of(st.sampled_from(sorted(READ_KEYS)), st.sampled_from(sorted(IGNORED_KEYS)),
                  st.text(max_size=12))
_MUTATION = st.one_of(st.tuples(st.just("set"), _KEYS, _VALUES),
                      st.tuples(st.just("delete"), _KEYS, st.none()))
_SLUGS = kvlib.model_slugs()


@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_SLUGS), st.lists(_MUTATION, min_size=1, max_size=4))
def test_arbitrary_configs_give_a_result_or_a_clear_error(slug, mutations):
    config = copy.deepcopy(kvlib.model_record(slug)["config"])
    target = text_config(config)
    for op, key, value in mutations:
        if op == "set":
            target[key] = value
        else:
            target.pop(key, None)
    start = time.perf_counter()
    try:
        model = Model.from_hf_config(config)
        assert model.kv_bytes_per_token() >= 0
        assert model.kv_bytes(1000, state_dtype="bf16") >= 0
    except (ValueError, KeyError) as exc:
        assert str(exc)
    try:
        assert count_params(config).total >= 0
    except (ValueError, KeyError) as exc:
        assert str(exc)
    assert time.perf_counter() - start < 1.0


def test_expert_blocks_without_an_expert_count():
    # CI's fuzz case: Nemotron-H's pattern has "E" (MoE) blocks; without n_routed_experts the
    # KV is still known (experts cache nothing), the weights are not: a clear error, no assert
    config = copy.deepcopy(kvlib.model_record("nemotron-3-nano-30b-a3b")["config"])
    text_config(config).pop("n_routed_experts")
    assert Model.from_hf_config(config).kv_bytes_per_token() == Model.from_hf_config(
        kvlib.model_record("nemotron-3-nano-30b-a3b")["config"]).kv_bytes_per_token()
    with pytest.raises(ValueError, match="expert .MoE. blocks but no expert count"):
        count_params(config)


def test_registry_configs_read_unchanged():
    # reading never mutates the config it is given
    for _, config in _registry_configs():
        before = json.dumps(config, sort_keys=True)
        read_config(config)
        assert json.dumps(config, sort_keys=True) == before


# --- cache-changing fields are refused, harmless ones are not (a user's trial, Dec 2026) -------

def test_hunyuan_cross_layer_attention_is_refused():
    # use_cla: groups of cla_share_factor layers share one layer's K/V (Hunyuan CLA); vLLM 0.33
    # reads it only to skip weights (hy_v3_mtp.py _get_cla_factor), transformers 5.24 not at all
    qwen = kvlib.model_record("qwen3-8b")["config"]
    with pytest.raises(ValueError, match=r"config field 'use_cla' \(Hunyuan cross-layer "
                                         r"attention.*\) changes what is cached"):
        Model.from_hf_config({**qwen, "use_cla": True, "cla_share_factor": 2})
    # without use_cla the factor is not read (_get_cla_factor returns 1): 2 × 36 × 8 × 128 × 2
    off = Model.from_hf_config({**qwen, "use_cla": False, "cla_share_factor": 2})
    assert off.kv_bytes_per_token() == 2 * 36 * 8 * 128 * 2 == 147_456


def test_v_head_dim_without_mla_is_refused_unless_it_is_the_head_dim():
    with pytest.raises(ValueError, match=r"config field 'v_head_dim' \(value heads of 256 beside "
                                         r"key heads of 128 and no MLA latent\) changes what is "
                                         "cached"):
        Model.from_hf_config({**LLAMA, "v_head_dim": 256})
    # equal to the head dim (4,096 / 32 = 128) it changes nothing: 2 × 32 × 8 × 128 × 2
    assert Model.from_hf_config({**LLAMA, "v_head_dim": 128}).kv_bytes_per_token() == 131_072


def test_multi_query_is_read_only_where_the_engine_reads_it():
    # Llama (transformers LlamaAttention, vLLM's base get_total_num_kv_heads) ignores the key:
    # still 8 KV heads, 2 × 32 × 8 × 128 × 2 = 131,072 B, not 1 head's 16,384 B
    assert Model.from_hf_config({**LLAMA, "multi_query": True}).kv_bytes_per_token() == 131_072
    # GPT-BigCode (StarCoder: 40 layers, 48 heads of 6,144 / 48 = 128) reads it, and defaults to
    # it: one KV head, 2 × 40 × 1 × 128 × 2 = 20,480 B; multi_query false: 48 heads, 983,040 B
    bigcode = {"model_type": "gpt_bigcode", "n_embd": 6144, "n_head": 48, "n_layer": 40}
    assert Model.from_hf_config(bigcode).kv_bytes_per_token() == 2 * 40 * 1 * 128 * 2 == 20_480
    assert Model.from_hf_config({**bigcode, "multi_query": True}).kv_bytes_per_token() == 20_480
    assert (Model.from_hf_config({**bigcode, "multi_query": False}).kv_bytes_per_token()
            == 2 * 40 * 48 * 128 * 2 == 983_040)
    # Falcon-40B's new decoder architecture overrides the flag (8 KV heads of 64)
    falcon = {"model_type": "falcon", "hidden_size": 8192, "num_attention_heads": 128,
              "num_hidden_layers": 60, "num_kv_heads": 8, "new_decoder_architecture": True}
    assert Model.from_hf_config(falcon).kv_bytes_per_token() == 2 * 60 * 8 * 64 * 2 == 122_880
    # the flag is still checked everywhere
    with pytest.raises(ValueError, match="multi_query' must be true or false"):
        Model.from_hf_config({**LLAMA, "multi_query": "yes"})
    transformers = pytest.importorskip("transformers")
    assert transformers.GPTBigCodeConfig(n_embd=6144, n_head=48).num_key_value_heads == 1
    assert transformers.FalconConfig().multi_query is True


@pytest.mark.parametrize("key,value", [
    ("rope_local_base_freq", 10_000),  # Gemma-3: the sliding layers' RoPE base
    ("clip_qkv", 8.0),                 # OLMo: a clamp on q, k and v
    ("use_qkv_bias", True),            # StableLM-2: biases on q, k and v
])
def test_harmless_keys_that_look_cache_related_are_accepted(key, value):
    assert CACHE_RELATED.search(key)  # the name-pattern guess would have refused each
    assert Model.from_hf_config({**LLAMA, key: value}).kv_bytes_per_token() == 131_072


def test_use_qkv_bias_adds_the_biases_to_the_count():
    # q 32 × 128 + k, v 2 × 8 × 128 = 6,144 bias values per layer × 32 layers = 196,608
    # (transformers 5.24 stablelm: q/k/v_proj bias=config.use_qkv_bias; vLLM 0.33 stablelm.py)
    plain, biased = count_params(LLAMA), count_params({**LLAMA, "use_qkv_bias": True})
    assert biased.total - plain.total == 32 * (4096 + 2 * 1024) == 196_608


def test_unknown_expert_keys_refuse_the_count_not_the_cache():
    # an unknown key named like routed experts: experts cache nothing, so the cache is sized;
    # the parameter count would silently be a dense one, so it is refused naming the keys
    cfg = {**LLAMA, "moe_experts_total": 64, "moe_top": 6}
    assert Model.from_hf_config(cfg).kv_bytes_per_token() == 131_072
    with pytest.raises(ValueError, match=r"config fields 'moe_experts_total' \(unknown to kvlib; "
                                         r"its name suggests routed experts\), 'moe_top' .* "
                                         "change the weights"):
        count_params(cfg)
    # ERNIE's spelling outside ERNIE-4.5 MoE is such a key too
    with pytest.raises(ValueError, match=r"'moe_num_experts' \(unknown to kvlib"):
        count_params({**LLAMA, "moe_num_experts": 64, "moe_k": 6})


@pytest.mark.parametrize("update,match", [
    ({"num_experts_per_tok": 16}, r"'num_experts_per_tok' \(16\) asks for more experts per token "
                                  r"than the 8 routed experts \('num_local_experts'\)"),
    ({"num_experts_per_tok": 0}, r"'num_experts_per_tok' must be an integer >= 1, got 0"),
    ({"num_experts_per_tok": None}, r"'num_experts_per_tok' / 'experts_per_token' is missing"),
])
def test_experts_per_token_is_checked_when_the_config_is_read(update, match):
    mixtral = kvlib.model_record("mixtral-8x7b")["config"]
    with pytest.raises(ValueError, match=match):
        Model.from_hf_config({**mixtral, **update})


@pytest.mark.parametrize("update,match", [
    ({"torch_dtype": "xx"}, r"config field 'torch_dtype' must be one of float32, float16, "
                            r"bfloat16 \(or auto\), got 'xx'"),
    ({"torch_dtype": None, "dtype": 16}, "config field 'dtype' must be one of"),
    ({"mamba_ssm_cache_dtype": "fp32"}, "config field 'mamba_ssm_cache_dtype' must be one of"),
])
def test_an_unknown_dtype_is_refused_naming_the_field(update, match):
    with pytest.raises(ValueError, match=match):
        Model.from_hf_config({**LLAMA, **update})


def test_auto_dtype_is_the_checkpoints_own():
    assert Model.from_hf_config({**LLAMA, "torch_dtype": "auto"}).dtype is None
    assert Model.from_hf_config({**LLAMA, "torch_dtype": "float16"}).dtype == "fp16"
