"""Parameter counts from configs: hand-derived known answers, published counts, weight bytes."""
from __future__ import annotations

import json
from dataclasses import replace

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


# --- non-gated MLPs, ERNIE's experts, helpers that refuse what vLLM refuses --------------------

#: EleutherAI/pythia-6.9b config.json (GPT-NeoX: LayerNorms with biases, biased projections,
#: a gelu MLP of two matrices, an untied LM head).
PYTHIA_6_9B = {
    "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
    "hidden_act": "gelu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 16384, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "gpt_neox", "num_attention_heads": 32, "num_hidden_layers": 32,
    "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": True,
    "use_parallel_residual": True, "vocab_size": 50432}
#: bigcode/starcoder2-15b config.json (c_fc/c_proj MLP, use_bias, LayerNorm, GQA 48/4).
STARCODER2_15B = {
    "architectures": ["Starcoder2ForCausalLM"], "attention_dropout": 0.1,
    "residual_dropout": 0.1, "embedding_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 0,
    "hidden_act": "gelu_pytorch_tanh", "hidden_size": 6144, "initializer_range": 0.01275,
    "intermediate_size": 24576, "max_position_embeddings": 16384, "mlp_type": "default",
    "model_type": "starcoder2", "norm_epsilon": 1e-05, "norm_type": "layer_norm",
    "num_attention_heads": 48, "num_hidden_layers": 40, "num_key_value_heads": 4,
    "rope_theta": 100000, "sliding_window": 4096, "torch_dtype": "float32",
    "transformers_version": "4.37.0.dev0", "use_bias": True, "use_cache": True,
    "vocab_size": 49152}
#: baidu/ERNIE-4.5-21B-A3B-PT config.json: experts in ERNIE's own spelling.
ERNIE_45_21B_A3B = {
    "architectures": ["Ernie4_5_MoeForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 2560, "intermediate_size": 12288,
    "max_position_embeddings": 131072, "model_type": "ernie4_5_moe", "num_attention_heads": 20,
    "num_key_value_heads": 4, "num_hidden_layers": 28, "pad_token_id": 0, "rms_norm_eps": 1e-05,
    "use_cache": False, "vocab_size": 103424, "rope_theta": 500000, "use_bias": False,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "moe_num_experts": 64,
    "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_intermediate_size": 1536,
    "moe_capacity": [64, 64, 64], "moe_gate": "topk", "moe_k": 6, "moe_layer_interval": 1,
    "moe_use_aux_free": True, "head_dim": 128}


def test_pythia_6_9b_by_hand_is_the_published_count():
    # embedding and embed_out 2 × 50,432 × 4,096 = 413,138,944
    # per layer: query_key_value 4,096 × 12,288 + 12,288 bias = 50,343,936; dense 4,096² + 4,096
    #            = 16,781,312; MLP (two matrices) 4,096 × 16,384 + 16,384 = 67,125,248 and
    #            16,384 × 4,096 + 4,096 = 67,112,960; two LayerNorms 2 × 2 × 4,096 = 16,384
    #            → 201,379,840; × 32 = 6,444,154,880; final LayerNorm 8,192
    # = 6,857,302,016, the Pythia paper's (Biderman et al. 2023, Table 1) total for 6.9B
    # (a gated MLP would add 32 × 4,096 × 16,384 = 2,147,483,648: the 9.00e9 of the defect)
    p = count_params(PYTHIA_6_9B)
    assert p.total == 6_857_302_016
    assert p.components["mlp"] == 32 * 2 * 4096 * 16384


def test_starcoder2_15b_by_hand():
    # embedding 49,152 × 6,144 = 301,989,888 (tied: Starcoder2Config's default)
    # per layer: q, o 2 × 6,144² + k, v 2 × 6,144 × 512 = 81,788,928 + biases 6,144 + 512 + 512
    #            + 6,144 = 13,312; MLP c_fc/c_proj 2 × 6,144 × 24,576 = 301,989,888 + biases
    #            24,576 + 6,144 = 30,720; two LayerNorms 4 × 6,144 = 24,576 → 383,847,424
    # × 40 = 15,353,896,960 + final LayerNorm 12,288 → 15,655,899,136 (15.7e9, not 21.7e9)
    assert count_params(STARCODER2_15B).total == 15_655_899_136


def test_ernie_45_moe_reads_its_own_expert_keys():
    # embedding 103,424 × 2,560 = 264,765,440 (tied)
    # attention per layer: q, o 2 × 2,560² + k, v 2 × 2,560 × 512 = 15,728,640; × 28
    #   = 440,401,920; norms 28 × 2 × 2,560 + 2,560 = 145,920
    # layer 0 dense (moe_layer_start_index 1): 3 × 2,560 × 12,288 = 94,371,840
    # layers 1-27 MoE: 64 experts × 3 × 2,560 × 1,536 = 754,974,720; 2 shared experts
    #   3 × 2,560 × 3,072 = 23,592,960; router 2,560 × 64 + 64 (e_score_correction_bias)
    #   = 163,904; × 27 = 21,025,752,768
    # total 21,825,437,888 (ERNIE-4.5-21B-A3B: "21B"); active: the experts × 6 / 64
    # = 1,911,029,760 of 20,384,317,440 → 3,352,150,208 ("A3B")
    p = count_params(ERNIE_45_21B_A3B)
    assert (p.n_experts, p.experts_per_token, p.n_moe_layers) == (64, 6, 27)
    assert p.total == 21_825_437_888 and p.active == 3_352_150_208
    # the cache is a plain GQA one: 2 × 28 × 4 × 128 × 2 = 57,344 B
    assert kvlib.Model.from_hf_config(ERNIE_45_21B_A3B).kv_bytes_per_token() == 57_344
    with pytest.raises(ValueError, match=r"'moe_k' \(65\) asks for more experts per token"):
        count_params({**ERNIE_45_21B_A3B, "moe_k": 65})
    # use_moe false: vLLM's ernie45_moe.py builds dense MLPs only
    assert count_params({**ERNIE_45_21B_A3B, "use_moe": False}).n_experts == 0


def test_counts_match_transformers_on_the_meta_device():
    """transformers 5.24 builds each model on the meta device from its config: the parameters
    it holds (tied ones once) are kvlib's count exactly."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for config in (PYTHIA_6_9B, STARCODER2_15B, ERNIE_45_21B_A3B):
        hf = transformers.AutoConfig.for_model(
            **{k: v for k, v in config.items() if k != "architectures"})
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf)
        assert sum(t.numel() for t in model.parameters()) == count_params(config).total


def test_a_gated_mlp_with_biases_counts_three():
    # LlamaMLP with mlp_bias: gate and up biases of 14,336, down of 4,096 → 32,768 per layer,
    # × 32 = 1,048,576; a ReLU Llama is still gated (LlamaMLP always has gate_proj)
    llama = model_record("llama-3.1-8b")["config"]
    plain = count_params(llama)
    assert count_params({**llama, "mlp_bias": True}).total - plain.total == 1_048_576
    assert count_params({**llama, "hidden_act": "relu"}).total == plain.total


def test_weight_helpers_refuse_what_the_kv_functions_refuse():
    p = params_for("llama-3.1-8b")  # 32 query heads, 8 KV heads
    for tp in (3, 1000):
        with pytest.raises(ValueError, match=rf"32 query heads cannot be split across tp={tp}"):
            weight_bytes(p, "fp8", tp=tp)
        with pytest.raises(ValueError, match=rf"32 query heads cannot be split across tp={tp}"):
            loaded_weights("llama-3.1-8b", "fp8", tp=tp)
        assert not kvlib.load_model("llama-3.1-8b").supports_tp(tp)
    # experts alone are spread over tp × dp GPUs by expert parallelism: not a head split
    mixtral = params_for("mixtral-8x7b")
    experts = replace(mixtral, components={"experts": mixtral.components["experts"]})
    assert weight_bytes(experts, "bf16", tp=64) == 2 * mixtral.components["experts"] // 64
    with pytest.raises(KeyError, match=r"unknown GPU 'xx'"):
        loaded_weights("llama-3.1-8b", "fp8", gpu="xx")
    with pytest.raises(KeyError, match="close matches: h100-sxm"):
        loaded_weights("llama-3.1-8b", "fp8", gpu="h100-smx")
    assert loaded_weights("llama-3.1-8b", "fp8", tp=8, gpu=kvlib.load_gpu("h100-sxm")) == (
        loaded_weights("llama-3.1-8b", "fp8", tp=8, gpu="h100-sxm"))
