"""Parameter counts from configs: hand-derived known answers, published counts, weight bytes."""
from __future__ import annotations

import json

import pytest

import kvlib
from kvlib.model.formats import weight_bits
from kvlib.model.params import ParamCounts, count_params, weight_bytes
from kvlib.model.weights import checkpoint_gap, loaded_weights, params_for
from kvlib.model.registry import model_record, model_slugs
from kvlib.core.units import GIB

#: kvlib's count ÷ the publisher's figure − 1, per registry model (published_params in
#: data/models/*.json; most are the nominal size in the model's name). Models without a
#: published figure are left out. |error| must stay within 10%; the largest are nominal names
#: (Qwen2.5-7B has 7.62e9 parameters, Nemotron-3-Nano 31.6e9, Mistral-7B 7.24e9).
PUBLISHED_ERROR = {
    "deepseek-67b": 0.0063, "deepseek-r1": 0.0000, "deepseek-v2": -0.0011, "deepseek-v3": 0.0000,
    "falcon-7b": -0.0112, "gemma-2-27b": 0.0084, "gemma-2-9b": 0.0269, "gemma-3-27b": 0.0003,
    "gpt-oss-120b": -0.0015, "gpt-oss-20b": -0.0041, "kimi-k2-instruct": 0.0264,
    "llama-2-70b": -0.0146, "llama-2-7b": -0.0374, "llama-3-70b": 0.0079, "llama-3-8b": 0.0038,
    "llama-3.1-405b": 0.0021, "llama-3.1-70b": 0.0079, "llama-3.1-8b": 0.0038,
    "llama-3.3-70b": 0.0079, "llama-65b": 0.0044, "mistral-7b-v0.1": 0.0345,
    "mixtral-8x22b": -0.0027, "mixtral-8x7b": 0.0001, "nemotron-3-nano-30b-a3b": 0.0526,
    "opt-13b": -0.0113, "qwen2.5-72b": 0.0098, "qwen2.5-7b": 0.0879, "qwen3-235b-a22b": 0.0004,
    "qwen3-30b-a3b": 0.0177, "qwen3-32b": 0.0238, "qwen3-8b": 0.0238,
    "qwen3-coder-480b-a35b": 0.0003, "qwen3-next-80b-a3b": -0.0041, "qwen3.5-27b": -0.0039,
    "qwen3.5-35b-a3b": -0.0097,
    # Jamba-v0.1 against AI21's "52B" (the Mamba-1 mixers, 16 MoE layers of 16 experts);
    # Llama-4 Scout against "~109B" (which includes its vision tower); Falcon-Mamba's "7B" and
    # BLOOM's "176B" are nominal
    "jamba-v0.1": -0.0083, "falcon-mamba-7b": 0.0390, "llama-4-scout-17b-16e-instruct": -0.0208,
    "bloomz-mt": 0.0014,
}


def test_llama_31_8b_by_hand():
    # embeddings 128,256 × 4,096 twice (untied) = 1,050,673,152
    # per layer: q 4096² + k, v 2 × 4096 × 1024 + o 4096² = 41,943,040;
    #            MLP 3 × 4096 × 14,336 = 176,160,768; norms 2 × 4096 = 8,192 → 218,112,000
    # 32 layers = 6,979,584,000; + final norm 4,096 → 8,030,261,248
    p = params_for("llama-3.1-8b")
    assert p.total == 8_030_261_248
    assert p.components["embedding"] == p.components["lm_head"] == 525_336_576
    assert p.active == p.total and p.matmul_active == p.total - 525_336_576


def test_tied_embeddings_counted_once():
    # Gemma-2-9B ties its 256,000 × 3,584 embedding to the LM head
    p = params_for("gemma-2-9b")
    assert p.tied_embeddings and p.components["lm_head"] == 0
    assert p.matmul_active == p.active  # the embedding matrix still does the LM-head matmul


def test_wrapper_config_reads_outer_tie_flag():
    # Qwen3.5-27B: text_config has no tie flag, the outer config says false
    model = kvlib.load_model("qwen3.5-27b")
    assert params_for(model).components["lm_head"] == 248_320 * 5_120
    assert params_for(model) == params_for("qwen3.5-27b")


def test_mla_deepseek_v3():
    # DeepSeek-V3: 671,026,419,200 parameters without the MTP layer; 37.55e9 active
    p = params_for("deepseek-v3")
    assert p.total == 671_026_419_200
    assert 37.0e9 < p.active < 38.0e9
    assert "multi-token-prediction layers not counted" in p.notes
    # 58 MoE layers (3 dense first) × 256 experts × 3 × 7,168 × 2,048
    assert p.n_moe_layers == 58 and p.routed_expert_params == 58 * 256 * 3 * 7168 * 2048


def test_moe_active_matches_published_active():
    # Mixtral-8x7B "12.9B used per token"; gpt-oss "5.1B" and "3.6B" active exclude embeddings
    assert round(params_for("mixtral-8x7b").active / 1e9, 1) == 12.9
    assert round(params_for("gpt-oss-120b").matmul_active / 1e9, 1) == 5.1
    assert round(params_for("gpt-oss-20b").matmul_active / 1e9, 1) == 3.6


def test_hybrid_mamba_and_gated_deltanet_counted():
    nemo = params_for("nemotron-3-nano-30b-a3b")
    assert nemo.components["recurrent"] > 0 and nemo.n_experts == 128
    assert round(nemo.total / 1e9, 1) == 31.6  # NVIDIA: "31.6B total parameters"
    nxt = params_for("qwen3-next-80b-a3b")
    assert nxt.components["recurrent"] > 0 and nxt.components["shared_experts"] > 0


@pytest.mark.parametrize("slug", sorted(PUBLISHED_ERROR))
def test_published_counts(slug):
    published = model_record(slug)["published_params"]["value"]
    error = params_for(slug).total / published - 1
    assert abs(error - PUBLISHED_ERROR[slug]) < 5e-5, f"{slug}: {error:+.4f}"
    assert abs(error) < 0.10


def test_every_registry_model_counts():
    for slug in model_slugs():
        assert params_for(slug).total > 1e9, slug


def test_weight_bytes_sharding_and_formats():
    p = params_for("llama-3.1-70b")
    bf16 = weight_bytes(p, "bf16")
    assert bf16 == 2 * p.total
    # TP 2 splits everything but norms: within a few KiB of half
    assert abs(weight_bytes(p, "bf16", tp=2) - bf16 / 2) < 2 * p.components["norms"]
    # fp8: linears 1 byte, embeddings/LM head/norms stay 2 bytes
    emb = p.components["embedding"] + p.components["lm_head"] + p.components["norms"]
    assert weight_bytes(p, "fp8") == (p.total - emb) + 2 * emb
    # a mapping quantizes only the named components
    assert weight_bytes(p, {"mlp": "fp8"}) == 2 * p.total - p.components["mlp"]
    assert weight_bits("mxfp4") == 4.25 and weight_bits("int4-g128") == 4.125


def test_kv_projections_replicate_when_tp_exceeds_kv_heads():
    p = params_for("llama-3.1-70b")  # 8 KV heads
    at8, at16 = weight_bytes(p, "bf16", tp=8), weight_bytes(p, "bf16", tp=16)
    kv = p.kv_proj_params
    # at tp 16 each GPU holds one of the 8 KV heads: kv/8 instead of kv/16
    assert at16 * 2 - at8 == pytest.approx(2 * (kv / 8 - kv / 16) * 2, rel=0.01)


def test_bad_inputs():
    with pytest.raises(ValueError, match="unknown weight format"):
        weight_bits("int3")
    with pytest.raises(ValueError, match="tp"):
        weight_bytes(params_for("llama-3.1-8b"), "bf16", tp=0)
    with pytest.raises(ValueError, match="unknown component 'attn'"):
        weight_bytes(params_for("llama-3.1-8b"), {"attn": "fp8"})
    with pytest.raises(ValueError, match="intermediate_size"):
        count_params({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                      "num_attention_heads": 4, "vocab_size": 100})
    with pytest.raises(ValueError, match="empty"):
        count_params({})
    with pytest.raises(KeyError):
        params_for("no-such-model")
    with pytest.raises(TypeError):
        params_for(42)


def test_counts_are_a_dataclass_of_components():
    p = params_for("llama-2-7b")
    assert isinstance(p, ParamCounts) and sum(p.components.values()) == p.total
    # Llama-2-7B: 6,738,415,616 (MHA, vocab 32,000, untied)
    assert p.total == 6_738_415_616
    assert weight_bytes(p, "int4") / GIB < weight_bytes(p, "int4-g128-zp") / GIB
    json.dumps(dict(p.components))


# --- weights as engines load them -------------------------------------------------------------

def test_bf16_checkpoints_equal_the_count():
    # model.safetensors.index.json total_size = 2 bytes × every counted parameter
    for slug in ("llama-3.1-70b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b"):
        gap = checkpoint_gap(slug)
        assert gap["gap_bytes"] == 0 and gap["checkpoint_bytes"] == 2 * params_for(slug).total
    with pytest.raises(KeyError, match="no published checkpoint size"):
        checkpoint_gap("llama-3.1-8b")


def test_gpt_oss_checkpoint_gap_is_its_bf16_expert_biases():
    # 36 layers × 128 experts × (2 × 2,880 + 2,880) = 39,813,120 bias values, stored in bf16 but
    # counted at mxfp4's 4.25 bits: 39,813,120 × (16 − 4.25) / 8 = 58,475,520 bytes
    gap = checkpoint_gap("gpt-oss-120b")
    assert gap["checkpoint_bytes"] == 65_248_815_744
    assert gap["gap_bytes"] == 58_475_520 and "unexplained" not in gap["explanation"]


def test_gpt_oss_120b_loads_padded_on_an_h100():
    # Marlin pads each expert to I' = 2,944 (2,880 → ×128) and H' = 3,072 (2,880 → ×256):
    # per expert 3 × (3,072 × 2,944 − 2,880²) = 2,248,704 more values × 4.25 bits + the bf16
    # biases' (2 × 64 + 192) × 16 bits = 9,562,112 bits; × 36 × 128 experts / 8 = 5,507,776,512 B
    w = loaded_weights("gpt-oss-120b", {"experts": "mxfp4"}, tp=1, gpu="h100-sxm")
    assert w.checkpoint_bytes == 65_248_815_744 and w.padding_bytes == 5_507_776_512
    # 70,756,592,256 B = 65.90 GiB; vLLM logs 65.97 GiB with Marlin (vllm#23278, el06)
    assert round(w.total_bytes / GIB, 2) == 65.90
    # a B200 runs MXFP4 natively: the checkpoint as published
    assert loaded_weights("gpt-oss-120b", {"experts": "mxfp4"}, 1, "b200").total_bytes == (
        65_248_815_744)
    # another format than the checkpoint's: the count
    bf16 = loaded_weights("gpt-oss-120b", "bf16", 1, "h100-sxm")
    assert bf16.checkpoint_bytes is None and bf16.total_bytes == weight_bytes(
        params_for("gpt-oss-120b"), "bf16")
