"""The config corpus (data/config_corpus/): 67 published config.json files of 2025-2026 models
that the reader was not written for, and Gemma-3n-E4B as transformers' own defaults describe it. Each must be sized, or refused by name for a field that
really changes the cache (or, for the one listed below, the weights); a refusal may never rest on
a name-pattern guess alone. Each verdict rests on the model type's modeling code in transformers
5.24.0 or vLLM 0.33.0."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvlib import Model
from kvlib.model.hf_config import PARAMETER_REFUSED_KEYS, REFUSED_KEYS

CORPUS = Path(__file__).resolve().parent.parent / "data" / "config_corpus"
FILES = sorted(CORPUS.glob("*.json"))
RECORDS = {path.stem: json.loads(path.read_text()) for path in FILES}

#: Refused for a field that changes the cache, with the field (checked against the modeling code
#: of transformers 5.24.0 / vLLM 0.33.0).
CACHE_REFUSALS = {
    **dict.fromkeys(["deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4-flash-nvfp4",
                     "deepseek-v4-pro-nvfp4", "deepseek-v4-flash-nvfp4-fp8"], "compress_ratios"),
    "kimi-k3": "linear_attn_config",
    "minimax-m3": "sparse_attention_config",
}
#: Refused for a field that changes the weights but not the cache (kvlib's records describe one
#: expert width).
WEIGHT_REFUSALS = {
    "nemotron-3-ultra-550b-a55b": "moe_latent_size",
}


def test_the_corpus_is_there_and_apart_from_the_registry():
    assert len(FILES) >= 60
    registry = {p.stem for p in (CORPUS.parent / "models").glob("*.json")}
    assert not registry & set(RECORDS)
    for slug, record in RECORDS.items():
        assert record["slug"] == slug
        # a Hugging Face page, the model maker's own GitHub repository (MiniMax-M1), or
        # transformers' configuration class (Gemma-3n-E4B's defaults)
        assert record["source"]["url"].startswith(("https://huggingface.co/",
                                                   "https://github.com/MiniMax-AI/",
                                                   "https://github.com/huggingface/transformers/"))
        assert record["source"]["note"] and record["source"]["accessed"]


@pytest.mark.parametrize("slug", sorted(RECORDS))
def test_each_config_is_sized_or_refused_for_a_named_field(slug):
    config = RECORDS[slug]["config"]
    if slug in CACHE_REFUSALS or slug in WEIGHT_REFUSALS:
        with pytest.raises(ValueError) as info:
            Model.from_hf_config(config, slug)
        message = str(info.value)
        assert "unknown to kvlib" not in message  # no name-pattern guess
        named = re.findall(r"'([a-z_]+)' \(", message)
        if slug in CACHE_REFUSALS:
            assert CACHE_REFUSALS[slug] in named
            assert set(named) <= set(REFUSED_KEYS)
            assert "changes what is cached" in message or "change what is cached" in message
        else:
            assert named == [WEIGHT_REFUSALS[slug]]
            assert "the parameter count would not" in message
    else:
        model = Model.from_hf_config(config, slug)
        assert model.kv_bytes_per_token("bf16") > 0


@pytest.mark.parametrize("slug,expected", [
    # Qwen3-0.6B: 2 (K and V) × 28 layers × 8 KV heads × 128 head dim × 2 bytes
    ("qwen3-0.6b", 2 * 28 * 8 * 128 * 2),
    # Qwen3-VL-32B (text_config): 2 × 64 layers × 8 × 128 × 2
    ("qwen3-vl-32b-instruct", 2 * 64 * 8 * 128 * 2),
    # DeepSeek-V3.1, MLA: 61 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes
    ("deepseek-v3.1", 61 * (512 + 64) * 2),
    # Kimi-K2.5 (text_config DeepSeek-V3 MLA), the wrapper's vision flags ignored: 61 × 576 × 2
    ("kimi-k2.5", 61 * (512 + 64) * 2),
    # GLM-5, MLA + lightning indexer on all 78 layers: 78 × 576 × 2 + 78 × (128 fp8 + 4 scale)
    ("glm-5", 78 * (512 + 64) * 2 + 78 * (128 + 4)),
    # Qwen3.5-122B-A10B: only the 12 full_attention layers grow: 2 × 12 × 2 KV heads × 256 × 2
    ("qwen3.5-122b-a10b", 2 * 12 * 2 * 256 * 2),
    # Nemotron-3.5-Lightning (layers_block_type): 6 attention blocks × 2 × 2 KV heads × 128 × 2
    ("nemotron-3.5-lightning-30b-a3b-nvfp4", 2 * 6 * 2 * 128 * 2),
    # Muse-Glimmer-30B, below its 2,048-token window: 2 × 52 layers × 2 KV heads × 128 × 2
    ("muse-glimmer-30b", 2 * 52 * 2 * 128 * 2),
    # MiniMax-M1, attn_type_list: only its 10 softmax layers (every 8th) grow per token:
    # 2 × 10 × 8 KV heads × 128 × 2 B = 40,960 (the 70 lightning layers add nothing per token)
    ("minimax-m1", 2 * 10 * 8 * 128 * 2),
    # Gemma-4-31B: 50 sliding layers × 2 × 16 KV heads × 256 × 2 B + 10 global layers with their
    # own geometry (global_head_dim 512, num_global_key_value_heads 4): 10 × 2 × 4 × 512 × 2 B
    ("gemma-4-31b-it-nvfp4", 50 * 2 * 16 * 256 * 2 + 10 * 2 * 4 * 512 * 2),
    # Gemma-4-26B-A4B: 25 × 2 × 8 × 256 × 2 + 5 × 2 × 2 × 512 × 2 = 225,280
    ("gemma-4-26b-a4b-nvfp4", 25 * 2 * 8 * 256 * 2 + 5 * 2 * 2 * 512 * 2),
    # GLM-5.2 (IndexCache): the MLA latent on all 78 layers, the indexer keys only on the 21 layers
    # vLLM builds an indexer on (index_skip_topk_offset 3, index_topk_freq 4: 0, 1, 2, 6, …, 74):
    # 78 × 576 × 2 + 21 × (128 + 4) = 89,856 + 2,772 = 92,628
    ("glm-5.2", 78 * (512 + 64) * 2 + 21 * (128 + 4)),
    ("glm-5.3-fp8", 78 * (512 + 64) * 2 + 21 * (128 + 4)),
    # MiMo-V2-Flash (hybrid_layer_pattern): 9 full layers × 4 KV heads × (K 192 + V 128) × 2 B +
    # 39 sliding layers with their swa_* geometry, 8 × (192 + 128) × 2 B
    ("mimo-v2-flash", 9 * 4 * (192 + 128) * 2 + 39 * 8 * (192 + 128) * 2),
    ("gemma-4-26b-a4b", 25 * 2 * 8 * 256 * 2 + 5 * 2 * 2 * 512 * 2),
    # Nemotron-Super-49B (block_configs): 49 blocks with attention of 64 / 8 = 8 KV heads × 128,
    # 31 blocks without (attention.no_op): 49 × 2 × 8 × 128 × 2 = 200,704
    ("llama-3.3-nemotron-super-49b-v1", 49 * 2 * 8 * 128 * 2),
    # Gemma-3n-E4B (num_kv_shared_layers 15): only layers 0-19 cache, 16 sliding + 4 full, each
    # 2 × 2 KV heads × 256 × 2 B; the last 15 read layer 18's or 19's K/V: 20 × 2,048 = 40,960
    ("gemma-3n-e4b", 20 * 2 * 2 * 256 * 2),
])
def test_exact_bytes_per_token(slug, expected):
    assert Model.from_hf_config(RECORDS[slug]["config"], slug).kv_bytes_per_token("bf16") == expected


def test_layers_block_type_and_the_pattern_spelling_agree():
    config = RECORDS["nemotron-3.5-lightning-30b-a3b-nvfp4"]["config"]
    letters = {"mamba": "M", "attention": "*", "moe": "E", "mlp": "-"}
    pattern = "".join(letters[t] for t in config["layers_block_type"])
    legacy = {k: v for k, v in config.items() if k != "layers_block_type"}
    legacy["hybrid_override_pattern"] = pattern
    assert (Model.from_hf_config(config).layers == Model.from_hf_config(legacy).layers)
    without_count = {k: v for k, v in config.items() if k != "num_hidden_layers"}
    assert Model.from_hf_config(without_count).layers == Model.from_hf_config(config).layers
    with pytest.raises(ValueError, match="unknown entries"):
        Model.from_hf_config({**config, "layers_block_type": ["mamba", "conv"] * 26})


def test_family_knowledge_does_not_leak_to_other_families():
    base = RECORDS["qwen3-0.6b"]["config"]
    # a vision flag ignored for kimi_k25 wrappers is still a pattern-matched unknown elsewhere
    with pytest.raises(ValueError, match="'use_unified_vision_chunk' \\(unknown to kvlib"):
        Model.from_hf_config({**base, "use_unified_vision_chunk": True})
    # qk_head_dim without an MLA latent would be a K head dim unlike V's
    with pytest.raises(ValueError, match="'qk_head_dim' without an MLA latent"):
        Model.from_hf_config({**base, "qk_head_dim": 192})
    glm = RECORDS["glm-5"]["config"]
    with pytest.raises(ValueError, match="is not qk_nope_head_dim \\+ qk_rope_head_dim"):
        Model.from_hf_config({**glm, "qk_head_dim": 255})


def test_minimax_m1_lightning_attention_keeps_a_constant_state():
    config = RECORDS["minimax-m1"]["config"]
    m = Model.from_hf_config(config, "minimax-m1")
    # attn_type_list: 0 lightning (linear) attention, 1 softmax; every 8th layer is softmax
    assert m.layer_counts() == {"lightning": 70, "full": 10}
    assert [i for i, lay in enumerate(m.layers) if lay.kind == "full"] == list(range(7, 80, 8))
    # per lightning layer, one K^T V state per head: 64 heads × 128 × 128 × 2 B (bf16)
    # = 2,097,152 B; 70 layers → 146,800,640 B (140 MiB) per sequence, at any length. The
    # config gives no torch_dtype, so the state dtype must be named (bf16, the checkpoint's)
    assert m.layers[0].state_bytes(1, "bf16") == 64 * 128 * 128 * 2 == 2_097_152
    assert m.state_bytes(state_dtype="bf16") == 70 * 2_097_152 == 146_800_640
    with pytest.raises(ValueError, match="no torch_dtype"):
        m.state_bytes()
    # tp = 8: 8 heads per GPU → 70 × 8 × 128 × 128 × 2 = 18,350,080 B per GPU
    assert m.state_bytes(tp=8, state_dtype="bf16") == 18_350_080
    # a 131,072-token sequence: 131,072 × 40,960 + 146,800,640 = 5,515,509,760 B
    assert m.kv_bytes(131_072, state_dtype="bf16") == 131_072 * 40_960 + 146_800_640
    # 456 B parameters (MiniMax-M1's published total: 456 B, 45.9 B active)
    from kvlib.model.params import count_architecture
    assert round(count_architecture(m.architecture).total / 1e9) == 456
    with pytest.raises(ValueError, match="attn_type_list has entries 2"):
        Model.from_hf_config({**config, "attn_type_list": [2] * 80})


def test_minimax_m2_lists_softmax_attention_everywhere():
    config = RECORDS["minimax-m2.7"]["config"]
    assert set(config["attn_type_list"]) == {1}  # MiniMax-M2: softmax attention everywhere
    assert set(Model.from_hf_config(config).layer_counts()) == {"full"}
    with pytest.raises(ValueError, match="describes 3 layers"):
        Model.from_hf_config({**config, "attn_type_list": [1, 1, 1]})


def test_mtp_layers_are_read_and_not_counted():
    # vLLM 0.33 caches an MTP layer only in the draft model of speculative decoding by MTP
    # (deepseek_mtp.py; the target model is make_layers(num_hidden_layers)): kvlib serves
    # without it, so num_nextn_predict_layers adds no cache, no weights and no refusal
    from kvlib.model.hf_config import READ_KEYS
    assert "num_nextn_predict_layers" in READ_KEYS and "num_nextn_predict_layers" not in REFUSED_KEYS
    config = RECORDS["deepseek-v3.1"]["config"]
    assert config["num_nextn_predict_layers"] == 1
    m = Model.from_hf_config(config, "deepseek-v3.1")
    assert "multi-token-prediction layers not counted" in m.architecture.notes
    # 61 layers (num_hidden_layers), not 62: 61 × 576 × 2 B
    assert m.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2
    without = {k: v for k, v in config.items() if k != "num_nextn_predict_layers"}
    assert Model.from_hf_config(without).layers == m.layers


def test_parameter_refusals_are_listed():
    assert set(PARAMETER_REFUSED_KEYS) == {"moe_latent_size"}
    laguna = RECORDS["laguna-xs.2-fp8"]["config"]
    # per-layer query heads change the weights, never the cache: 2 × 40 × 8 × 128 × 2 either way
    same_heads = {**laguna, "num_attention_heads_per_layer": [48] * 40}
    assert (Model.from_hf_config(same_heads).kv_bytes_per_token("bf16")
            == Model.from_hf_config(laguna).kv_bytes_per_token("bf16") == 2 * 40 * 8 * 128 * 2)
    # outside Laguna, differing per-layer query heads are still refused (for the weights)
    qwen = RECORDS["qwen3-0.6b"]["config"]
    with pytest.raises(ValueError, match=r"'num_attention_heads_per_layer' \(query heads"):
        Model.from_hf_config({**qwen, "num_attention_heads_per_layer": [16, 8] * 14})


def test_family_lists_do_not_overlap_the_global_decisions():
    from kvlib.model.hf_config import FAMILY_IGNORED_KEYS, IGNORED_KEYS, READ_KEYS
    family = set().union(*map(set, FAMILY_IGNORED_KEYS.values()))
    assert not family & (READ_KEYS | set(IGNORED_KEYS) | set(REFUSED_KEYS)
                         | set(PARAMETER_REFUSED_KEYS))
    assert not set(PARAMETER_REFUSED_KEYS) & (READ_KEYS | set(IGNORED_KEYS) | set(REFUSED_KEYS))
    assert all(len(reason) > 10 for keys in FAMILY_IGNORED_KEYS.values()
               for reason in keys.values())
    # keys read for one family only: never read or ignored globally, never also ignored for
    # the family; each read-for-one-family key that changes the cache stays refused elsewhere
    from kvlib.model.hf_config import FAMILY_READ_KEYS
    for family, keys in FAMILY_READ_KEYS.items():
        assert not keys & (READ_KEYS | set(IGNORED_KEYS) | set(FAMILY_IGNORED_KEYS.get(family, {})))
    assert {"block_configs", "global_head_dim", "hybrid_layer_pattern", "indexer_types",
            "index_topk_freq"} <= set(REFUSED_KEYS)
