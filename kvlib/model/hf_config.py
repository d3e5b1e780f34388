"""The one reader of a Hugging Face ``config.json``: a typed, immutable architecture record.

``read_config(config, name)`` turns a published config (as a dict) into an :class:`Architecture`:
one :class:`LayerSpec` per decoder layer (which mixer it runs, which feed-forward block) and the
shared geometry of each mixer kind (attention, MLA, Mamba-2, Gated DeltaNet, MiniMax lightning
attention), the MLP/MoE shapes,
vocabulary, embeddings, norms and dtypes. A layer whose geometry departs from the shared one
carries its own (Gemma-4's global layers, MiMo-V2's sliding layers, Nemotron-NAS blocks, GLM-5.2's
layers without an indexer), read from keys listed per family in ``FAMILY_READ_KEYS``.
``kvlib.model`` (the cache), ``kvlib.model.params`` (the
parameter counts), ``kvlib.engines.capacity`` (the activation width, the vocabulary) and
``kvlib.model.crosscheck`` all work from this record; no other module reads config keys.

Field spellings follow what transformers reads (``n_head``/``num_attention_heads``, ...); where a
published config omits a field that transformers fills in with a class default, the default is
applied here, once, with the transformers file it comes from. A field that is present but not a
positive integer, or a layer pattern that disagrees with ``num_hidden_layers``, raises ValueError
naming the model and the field.
"""
from __future__ import annotations

import copy
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..core.checks import integer, number, positive_integer
from ..core.units import HF_DTYPE_NAMES

#: The most decoder layers a config may declare. Far above any published decoder (Llama-3.1-405B
#: has 126); a larger count is refused at once instead of building millions of layer records.
MAX_LAYERS = 10_000

Mixer = Literal["full", "sliding", "chunked", "mla", "mamba1", "mamba2", "gated_deltanet",
                "lightning", "parallel", "none"]
FeedForwardKind = Literal["dense", "moe", "none"]

#: transformers class defaults for fields some published configs omit: Gemma-3's text config has
#: no ``vocab_size`` (``Gemma3TextConfig``: 262,208), no ``hidden_activation`` and no
#: ``max_position_embeddings`` (131,072, which vLLM then reads from the loaded config)
#: (transformers 5.24.0, models/gemma3/configuration_gemma3.py).
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "hidden_activation": "gelu_pytorch_tanh",
                    "max_position_embeddings": 131_072},
    # GPTNeoXConfig (gpt_neox/configuration_gpt_neox.py): biases on query_key_value and dense,
    # an LM head of its own (Pythia's configs say so; others may not)
    "gpt_neox": {"attention_bias": True, "tie_word_embeddings": False},
    # Starcoder2Config (starcoder2/configuration_starcoder2.py): biases on q/k/v/o, c_fc, c_proj
    "starcoder2": {"use_bias": True},
    # GPTBigCodeConfig and FalconConfig default to multi-query attention (one KV head), and so
    # does vLLM's RWConfig for Falcon's RefinedWebModel configs
    # (vllm/transformers_utils/configs/falcon.py, 0.33.0)
    **dict.fromkeys(("gpt_bigcode", "falcon", "RefinedWebModel"), {"multi_query": True}),
    # Ernie4_5_MoeConfig (ernie4_5_moe/configuration_ernie4_5_moe.py), which vLLM 0.33's
    # ernie45_moe.py reads through: 2 shared experts, MoE from layer 1 on (its 64 experts and 6
    # per token: _ERNIE_EXPERTS, as the generic spellings may stand for them)
    "ernie4_5_moe": {"moe_num_shared_experts": 2, "moe_layer_start_index": 1,
                     "moe_layer_interval": 1, "moe_intermediate_size": 1536},
}

_LAYER_TYPE_NAMES: dict[str, Mixer] = {
    "full_attention": "full", "attention": "full", "global": "full",
    "sliding_attention": "sliding", "sliding_window": "sliding", "local": "sliding",
    "chunked_attention": "chunked", "linear_attention": "gated_deltanet", "mamba": "mamba2",
}
#: model types whose Mamba layers are Mamba-1 (selective scan over d_inner channels, no heads).
_MAMBA1_TYPES = ("jamba", "falcon_mamba", "mamba")
#: Nemotron-H ``hybrid_override_pattern``: M Mamba-2, * attention, - MLP, E MoE; each character is a
#: block holding a mixer or a feed-forward part, never both.
_NEMOTRON_BLOCKS: dict[str, tuple[Mixer, FeedForwardKind]] = {
    "M": ("mamba2", "none"), "*": ("full", "none"), "-": ("none", "dense"), "E": ("none", "moe")}
_MULTIMODAL_REASON = "multimodal wrapper: the vision tower is not described (text_config only)"

#: Nemotron-H / Nemotron-3 ``layers_block_type``, the list spelling of ``hybrid_override_pattern``
#: (transformers 5.24.0 nemotron_h/configuration_nemotron_h.py converts the pattern into it and maps
#: the legacy names mamba/attention to linear_attention/full_attention): one block per entry.
_NEMOTRON_BLOCK_NAMES: dict[str, str] = {
    "mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*",
    "mlp": "-", "moe": "E"}
#: Fields that change what is cached in ways kvlib does not model, with what they describe: a
#: config that sets one is refused rather than silently mis-sized.
REFUSED_KEYS: dict[str, str] = {
    "hybrid_layer_pattern": "per-layer attention kinds with their own geometry (read for MiMo-V2 "
                            "only)",
    "swa_num_key_value_heads": "a separate KV-head count for the sliding-window layers (read for "
                               "MiMo-V2 only)",
    "swa_head_dim": "a separate head dim for the sliding-window layers (read for MiMo-V2 only)",
    "global_head_dim": "a separate head dim for the global layers (read for Gemma-4 only)",
    "num_global_key_value_heads": "a separate KV-head count for the global layers (read for "
                                  "Gemma-4 only)",
    "attention_k_eq_v": "keys reused as values (read for Gemma-4 only)",
    "num_kv_shared_layers": "layers that reuse another layer's KV cache (the last N layers read an "
                            "earlier layer's K/V and cache nothing; read for Gemma-3n only)",
    "index_topk_freq": "a DeepSeek-V3.2 indexer on only some layers (IndexCache; read for "
                       "GLM-5 and DeepSeek-V3.2 only)",
    "index_topk_pattern": "a DeepSeek-V3.2 indexer on only some layers (IndexCache; read for "
                          "GLM-5 and DeepSeek-V3.2 only)",
    "index_skip_topk_offset": "a DeepSeek-V3.2 indexer on only some layers (IndexCache; read for "
                              "GLM-5 and DeepSeek-V3.2 only)",
    "attn_layer_indices": "Falcon-H1 attention on only some layers (vLLM puts it on every layer)",
    "indexer_types": "a DeepSeek-V3.2-style indexer on only some layers ('shared' layers reuse "
                     "the previous layer's top-k and keep no indexer keys; read for GLM-5 and "
                     "DeepSeek-V3.2 only)",
    "compress_ratios": "DeepSeek-V4's per-layer attention kinds: sliding window only (0), compressed "
                       "sparse (4: one entry per 4 tokens) or heavily compressed (128)",
    "linear_attn_config": "Kimi-Linear's KDA (linear attention, recurrent state) layers beside MLA layers",
    "sparse_attention_config": "MiniMax-M3's block-sparse attention with an index-key cache on some "
                               "layers",
    "block_configs": "per-layer blocks: attention layers without a cache, per-layer KV heads "
                     "and FFN widths (read for Nemotron-NAS only)",
    # Hunyuan's cross-layer attention: vLLM 0.33 reads it only to skip weights
    # (hy_v3_mtp.py, _get_cla_factor), transformers 5.24's hunyuan_v1_* not at all
    "use_cla": "Hunyuan cross-layer attention: groups of cla_share_factor layers share one "
               "layer's K/V",
}

_MIMO_TYPES = ("mimo_v2_flash", "mimo_v2")
#: Gemma-3n keys that add weights kvlib's records do not describe (transformers 5.24
#: gemma3n/modeling_gemma3n.py): its cache is sized, its parameter count refused naming them.
_GEMMA3N_WEIGHT_KEYS: dict[str, str] = {
    "altup_num_inputs": "AltUp's parallel copies of the hidden state, with their projections",
    "laurel_rank": "LAuReL's low-rank residual projections in every layer",
    "hidden_size_per_layer_input": "per-layer input embeddings and their projections",
    "vocab_size_per_layer_input": "the per-layer embedding table's vocabulary",
}
#: Per-family knowledge of keys that are read for that ``model_type`` only (each checked against
#: the family's modeling code); in any other family the same name is judged by REFUSED_KEYS.
FAMILY_READ_KEYS: dict[str, frozenset[str]] = {
    # Gemma-4 (transformers 5.24 gemma4/configuration_gemma4.py builds per_layer_config from
    # these; vLLM 0.33 gemma4.py sizes each layer's attention from per_layer_config)
    "gemma4_text": frozenset({
        "global_head_dim", "num_global_key_value_heads", "attention_k_eq_v", "enable_moe_block",
        "top_k_experts", "expert_intermediate_size", "use_bidirectional_attention",
        "hidden_size_per_layer_input", "vocab_size_per_layer_input", "use_double_wide_mlp"}),
    # GLM-5.2/5.3 and DeepSeek-V3.2: IndexCache, an indexer on only some layers (vLLM 0.33
    # deepseek_v2.py, DeepseekV2MLAAttention; _shared_indexer_layers)
    **dict.fromkeys(("glm_moe_dsa", "deepseek_v32"), frozenset({
        "index_topk_freq", "index_topk_pattern", "index_skip_topk_offset", "indexer_types"})),
    # MiMo-V2-Flash (vLLM 0.33 mimo_v2.py, MiMoV2DecoderLayer; transformers 5.24 mimo_v2_flash)
    **dict.fromkeys(_MIMO_TYPES, frozenset({
        "hybrid_layer_pattern", "swa_num_attention_heads", "swa_num_key_value_heads",
        "swa_head_dim", "swa_v_head_dim", "add_swa_attention_sink_bias",
        "add_full_attention_sink_bias"})),
    # Laguna (transformers 5.24 laguna/modeling_laguna.py, vLLM 0.33 laguna.py): its output gate
    "laguna": frozenset({"gating"}),
    # Llama-Nemotron NAS / DeciLM (vLLM 0.33 nemotron_nas.py, DeciLMDecoderLayer)
    "nemotron-nas": frozenset({"block_configs"}),
    # Gemma-3n (transformers 5.24 gemma3n/modeling_gemma3n.py, vLLM 0.33 gemma3n.py): the shared
    # KV layers, and the keys that add weights kvlib does not count (read to refuse the count)
    "gemma3n_text": frozenset(_GEMMA3N_WEIGHT_KEYS) | {"num_kv_shared_layers"},
    # ERNIE-4.5 MoE's own spelling of its experts (transformers 5.24 ernie4_5_moe: attribute_map
    # num_experts → moe_num_experts, num_experts_per_tok → moe_k; Ernie4_5_MoeDecoderLayer and
    # vLLM 0.33 ernie45_moe.py put experts on layer i when (i + 1) % moe_layer_interval == 0 and
    # moe_layer_start_index <= i <= moe_layer_end_index)
    "ernie4_5_moe": frozenset({
        "moe_num_experts", "moe_k", "moe_num_shared_experts", "moe_layer_start_index",
        "moe_layer_end_index", "moe_layer_interval", "use_moe"}),
}

#: Fields that change no cache but change the weights in a way kvlib's records do not describe: a
#: config that sets one is refused too, rather than given a wrong parameter count.
PARAMETER_REFUSED_KEYS: dict[str, str] = {
    "moe_latent_size": "Nemotron-3 experts working in a narrower latent width, with projections to "
                       "and from it (transformers nemotron_h)",
}

#: Per-family knowledge, each checked against the family's modeling code (transformers 5.24.0,
#: vLLM 0.33.0): keys of that ``model_type`` (outer wrapper or text config) that change neither
#: what is cached nor the weights kvlib counts. They are neither read nor refused for that family
#: only; in any other family the same name is still judged by REFUSED_KEYS and CACHE_RELATED.
FAMILY_IGNORED_KEYS: dict[str, dict[str, str]] = {
    # GLM-5 / 5.1: MLA + a DeepSeek-V3.2 indexer (vLLM deepseek_v2.py runs GlmMoeDsaForCausalLM);
    # its qk_head_dim is read and checked (_check_per_layer_fields)
    "glm_moe_dsa": {
        "rope_interleave": "RoPE layout of the rope slice: no shape",
        "indexer_rope_interleave": "RoPE layout of the indexer's rope slice: no shape",
        "index_share_for_mtp_iteration": "the MTP layer reuses the indexer's top-k: MTP is not counted",
        "moe_router_dtype": "router numerics: no shape",
    },
    # Kimi-K2.5 / K2.6 / K2.7: a vision wrapper around a DeepSeek-V3 text config
    "kimi_k25": {
        "use_unified_vision_chunk": "vision-input chunking of the wrapper: the vision tower is not "
                                    "described",
        "media_placeholder_token_id": _MULTIMODAL_REASON,
        "video_placeholder": _MULTIMODAL_REASON,
        "ignore_index": "the training loss's ignored label: no shape",
    },
    # MiniMax-M1 (the reference modeling_minimax_m1.py of MiniMax-AI/MiniMax-M1, vLLM
    # minimax_text_01.py up to 0.23, transformers 5.24 models/minimax): attn_type_list is read
    # (0 lightning attention, 1 softmax attention); these keys change no shape
    "minimax_m1": {
        **dict.fromkeys((
            "layernorm_full_attention_alpha", "layernorm_full_attention_beta",
            "layernorm_linear_attention_alpha", "layernorm_linear_attention_beta",
            "layernorm_mlp_alpha", "layernorm_mlp_beta"),
            "DeepNorm residual scales (hidden · alpha + output · beta): no shape"),
        "postnorm": "residual taken after the norm instead of before: same norms, no shape",
        "shared_moe_mode": "how a shared expert's output is mixed (sigmoid gate); "
                           "shared_intermediate_size (read) says whether there is one",
        "router_jitter_noise": "training-time router noise: no shape",
    },
    # MiMo-V2-Flash (vLLM 0.33 mimo_v2.py): hybrid_layer_pattern and the swa_* geometry are read
    "mimo_v2_flash": {
        "swa_rope_theta": "RoPE base of the sliding-window layers: no shape",
        "attention_value_scale": "a scale on V before attention: no shape",
    },
    # Gemma-3n (transformers 5.24 gemma3n): AltUp routing numerics and the MLP's run-time top-k;
    # the keys that add weights are read (_GEMMA3N_WEIGHT_KEYS)
    "gemma3n_text": {
        **dict.fromkeys(("altup_active_idx", "altup_coef_clip", "altup_correct_scale"),
                        "AltUp routing numerics: no shape"),
        "altup_lr_multiplier": "a training learning-rate multiplier for AltUp: no shape",
        "activation_sparsity_pattern": "a top-k over each MLP's activations at run time: no "
                                       "shape",
    },
    # Laguna (transformers 5.24 laguna/modeling_laguna.py): routing numerics of its experts
    "laguna": {
        **dict.fromkeys(("moe_routed_scaling_factor", "moe_router_logit_softcapping",
                         "moe_apply_router_weight_on_input"), "routing numerics: no shape"),
    },
    # ERNIE-4.5 MoE: training knobs of the original Paddle code, read by neither transformers
    # 5.24 (ernie4_5_moe) nor vLLM 0.33 (ernie45_moe.py); its e_score_correction_bias is built
    # whatever moe_use_aux_free says
    "ernie4_5_moe": {
        "moe_capacity": "token-dropping capacity of training: no shape",
        "moe_gate": "the training gate's kind (top-k): no shape",
        "moe_use_aux_free": "bias-based load balancing in training; the bias is built anyway",
        "moe_norm_min": "routing numerics: no shape",
    },
    # Nemotron-H / Nemotron-3: the layer pattern is read from layers_block_type
    "nemotron_h": {
        "mtp_layers_block_type": "the multi-token-prediction block's layer kinds: MTP is not counted",
        "moe_shared_expert_overlap": "a kernel schedule (shared expert overlapped with routing)",
    },
}


#: Every config key the reader interprets (``_Fields`` refuses to read any other).
READ_KEYS = frozenset({
    # identity, layer count and layer pattern
    "_name_or_path", "model_type", "text_config", "num_hidden_layers", "n_layer", "num_layers",
    "layer_types", "hybrid_override_pattern", "layers_block_type", "full_attention_interval",
    "attn_type_list",
    "sliding_window_pattern", "use_sliding_window", "max_window_layers", "sliding_window",
    "sliding_window_size",
    # softmax attention
    "hidden_size", "d_model", "n_embd", "n_embed", "num_attention_heads", "n_head", "num_heads",
    "num_key_value_heads", "num_kv_heads", "multi_query", "new_decoder_architecture", "head_dim",
    "attention_bias", "qkv_bias", "use_qkv_bias", "bias", "use_qk_norm", "qk_norm_type",
    "attn_output_gate", "num_attention_heads_per_layer",
    # MLA and the DeepSeek-V3.2 indexer
    "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "qk_head_dim",
    "index_n_heads", "index_head_dim", "index_topk",
    # chunked local attention (Llama-4)
    "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval",
    # recurrent mixers: Mamba-2 (Nemotron-H spelling, then Falcon-H1/Granite-4.0-H spelling)
    "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel",
    "use_conv_bias", "mamba_proj_bias", "use_bias", "mamba_n_heads", "mamba_d_head",
    "mamba_d_state", "mamba_n_groups", "mamba_d_conv", "mamba_conv_bias", "mamba_d_ssm",
    "mamba_expand", "mamba_rms_norm", "projectors_bias",
    # Mamba-1 (Jamba spelling, Falcon-Mamba spelling) and Jamba's layer periods
    "mamba_dt_rank", "state_size", "time_step_rank", "attn_layer_period", "attn_layer_offset",
    "expert_layer_period", "expert_layer_offset",
    # Gated DeltaNet
    "linear_num_key_heads", "linear_num_value_heads",
    "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
    # feed-forward blocks
    "intermediate_size", "ffn_dim", "mlp_bias", "hidden_act", "hidden_activation",
    "activation_function", "mlp_hidden_act", "num_local_experts", "num_experts",
    "n_routed_experts", "num_experts_per_tok", "experts_per_token", "moe_intermediate_size",
    "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
    "shared_intermediate_size", "n_shared_experts", "mlp_only_layers", "first_k_dense_replace",
    "decoder_sparse_step", "moe_layer_freq", "use_routing_bias", "topk_method",
    "interleave_moe_layer_step", "moe_layers", "intermediate_size_mlp", "mlp_layer_types",
    # embeddings, norms, dtypes, checkpoint
    "vocab_size", "tie_word_embeddings", "word_embed_proj_dim", "max_position_embeddings",
    "_remove_final_layer_norm", "torch_dtype", "dtype", "mamba_ssm_cache_dtype",
    "mamba_ssm_dtype", "quantization_config",
    # multi-token prediction: read for the draft of speculative decoding by MTP
    # (``Architecture.mtp_layers``; kvlib.engines.speculative), not counted in the model itself.
    # vLLM 0.33 builds the target model from num_hidden_layers alone (deepseek_v2.py:
    # make_layers(config.num_hidden_layers, ...)) and
    # skips the MTP layers' weights when loading it; the MTP layers (indices num_hidden_layers ..
    # num_hidden_layers + num_nextn_predict_layers − 1, deepseek_mtp.py DeepSeekMultiTokenPredictor)
    # are built, loaded and given KV cache only in the draft model, which exists only when the
    # engine is started with speculative decoding by MTP (config/speculative.py
    # hf_config_override, method "mtp"). Without speculative decoding they hold no cache and no
    # weights here (tests/test_config_corpus.py checks it); with it, the pool adds them.
    "num_nextn_predict_layers", "mtp_num_hidden_layers", "use_mtp",
    # the longest context an engine accepts (vLLM's derived max_model_len)
    "n_positions", "max_seq_len", "seq_length", "model_max_length", "max_target_positions",
    "max_sequence_length", "max_seq_length", "seq_len", "rope_scaling", "rope_parameters",
})

_TRAINING = "training only (dropout, initialisation, auxiliary losses)"
_NUMERICS = "numerics that change no shape (norm epsilons, RoPE, soft-capping, routing scales)"
_METADATA = "metadata, token ids or a kernel choice: no shape"
_MULTIMODAL = _MULTIMODAL_REASON
#: Config keys the reader deliberately ignores, with the reason: none changes what is cached or
#: the parameter count. tests/test_hf_config.py checks that every key of every registry config is
#: in ``READ_KEYS`` or here, so a new key is a decision, not an accident.
IGNORED_KEYS: dict[str, str] = {
    **dict.fromkeys(("attention_dropout", "activation_dropout", "dropout", "hidden_dropout",
                     "layerdrop", "initializer_range", "init_std", "rescale_prenorm_residual",
                     "aux_loss_alpha", "router_aux_loss_coef", "output_router_logits", "seq_aux",
                     "ep_size", "pretraining_tp", "time_step_floor", "time_step_max",
                     "time_step_min", "time_step_init_scheme"), _TRAINING),
    **dict.fromkeys(("rms_norm_eps", "layer_norm_epsilon", "norm_eps", "rope_theta",
                     "partial_rotary_factor", "rotary_dim",
                     "use_mrope", "initial_context_length", "attn_logit_softcapping",
                     "final_logit_softcapping", "query_pre_attn_scalar", "swiglu_limit",
                     "routed_scaling_factor", "scoring_func", "norm_topk_prob", "n_group",
                     "topk_group", "residual_in_fp32", "mamba_hidden_act", "alibi",
                     "attention_softmax_in_fp32", "mixer_rms_eps", "time_step_scale",
                     "time_step_limit", "mamba_norm_before_gate", "attn_temperature_tuning",
                     "floor_scale", "attn_scale", "embedding_multiplier", "lm_head_multiplier",
                     "key_multiplier", "mlp_multipliers", "ssm_multipliers", "ssm_in_multiplier",
                     "ssm_out_multiplier", "attention_in_multiplier", "attention_out_multiplier",
                     "logits_scaling", "residual_multiplier", "attention_multiplier",
                     "position_embedding_type"), _NUMERICS),
    # Gemma-3/3n: transformers 5.24 (gemma3/configuration_gemma3.py) pops it into
    # rope_parameters["sliding_attention"]["rope_theta"]
    "rope_local_base_freq": "RoPE base of the sliding-window layers: no shape",
    # OLMo: query/key/value clamped to ±clip_qkv (transformers 5.24 olmo/modeling_olmo.py)
    "clip_qkv": "a clamp on q, k and v activations: no shape",
    "cla_share_factor": "Hunyuan's cross-layer attention group, used only with use_cla (refused; "
                        "vLLM 0.33 hy_v3_mtp.py _get_cla_factor)",
    **dict.fromkeys(("architectures", "transformers_version", "auto_map", "use_cache",
                     "bos_token_id", "eos_token_id", "pad_token_id", "num_logits_to_keep",
                     "use_mamba_kernels", "prefix", "masked_softmax_fusion",
                     "slow_but_exact"), _METADATA),
    **dict.fromkeys(("vision_config", "image_token_id", "image_token_index", "video_token_id",
                     "vision_start_token_id", "vision_end_token_id", "boi_token_index",
                     "eoi_token_index", "mm_tokens_per_image"), _MULTIMODAL),
    **dict.fromkeys(("mtp_transformer_layers", "mtp_use_dedicated_embeddings",
                     "num_mtp_modules"), "multi-token-prediction modules: loaded only for "
                    "speculative decoding, not counted"),
    "cache_implementation": "transformers' cache class; kvlib reads the layer pattern itself",
    "chunk_size": "Nemotron-H: the Mamba-2 scan's chunk length (compute only, no cache)",
    "mamba_chunk_size": "Falcon-H1, Granite-4.0-H: the Mamba-2 scan's chunk length (compute "
                        "only; vLLM's prefix-caching block size is not modelled)",
    "expand": "Nemotron-H: Mamba-2 expansion; the inner width is mamba_num_heads × mamba_head_dim",
    "parallel_attn": "Falcon's parallel attention/MLP block: same shapes (norms follow the "
                     "RW/new-decoder convention)",
    "apply_residual_connection_post_layernorm": "residual wiring: no shape",
    "do_layer_norm_before": "OPT: norm placement, same norms",
    "output_projection": "OPT: its LM head (tie_word_embeddings says whether it is shared)",
}

#: The fallback for keys no list above decides: an unknown key whose name matches this looks like
#: it describes a cache layout (a window, a chunk, a recurrent state, a layer pattern, a latent, a
#: KV-sharing scheme): it is refused. Families checked against their modeling code say instead,
#: by name, what they read (READ_KEYS), refuse (REFUSED_KEYS, PARAMETER_REFUSED_KEYS) and ignore
#: (FAMILY_IGNORED_KEYS); tests/test_config_corpus.py holds the published configs they were
#: checked on, none of which is refused on a name-pattern guess.
CACHE_RELATED = re.compile(
    r"window|chunk|mamba|ssm|state|linear_|hybrid|layer_type|lora|index_|swa|kv|key_value|"
    r"attn_layer|attention_layer|attention_type|local|global|sparse|nope|conv|cache|compress|"
    r"latent|recurr|delta|block_|pattern|period|offset|sink|head_dim|heads")
#: The same fallback for the weights: an unknown key whose name matches this looks like it
#: describes routed experts (how many, how many a token uses, which layers hold them: ERNIE's
#: moe_num_experts and moe_k before kvlib read them). Experts cache nothing, so the cache is
#: sized and the parameter count refused, naming the key (``Architecture.weights_unmodelled``).
MOE_RELATED = re.compile(r"expert|moe")


# --- the record -------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer: its token mixer and its feed-forward block.

    mixer: ``full``/``sliding``/``chunked`` softmax attention (all tokens, a sliding window,
    or the current chunk of ``attention_chunk_size`` tokens), ``mla`` latent attention,
    ``mamba1``/``mamba2``/``gated_deltanet``/``lightning`` recurrent mixers, ``parallel`` (softmax attention
    and a Mamba-2 mixer side by side, Falcon-H1), ``none`` (an MLP/MoE-only block); ffn:
    ``dense`` MLP, ``moe`` routed experts, ``none`` (a mixer-only block). Where one layer
    departs from the shared geometry: attention, its own softmax-attention geometry (Gemma-4's
    global layers, Nemotron-NAS's per-layer KV heads); intermediate_size, its own dense MLP width;
    norms, its own count of norm vectors (None: the shared one); shared_indexer: an MLA layer
    that reuses an earlier layer's DeepSeek-V3.2 top-k and has no indexer of its own (IndexCache);
    kv_shared: an attention layer that reads the K/V an earlier layer of its kind cached and
    caches none itself (Gemma-3n's last ``num_kv_shared_layers`` layers).
    """

    mixer: Mixer
    ffn: FeedForwardKind
    attention: Attention | None = None
    intermediate_size: int | None = None
    norms: int | None = None
    shared_indexer: bool = False
    kv_shared: bool = False


@dataclass(frozen=True)
class Attention:
    """Softmax attention shared by the attention layers (MHA/GQA/MQA, full or windowed).

    n_heads: query heads; n_kv_heads: KV heads (K); head_dim: H; sliding_window: W of the
    ``sliding`` layers (tokens), None without one; chunk_size: the chunk of the ``chunked``
    layers (Llama-4 ``attention_chunk_size``); qkv_bias/o_bias: projection biases; qk_norm:
    ``per_head`` (a norm of H values on q and on k) or ``per_layer`` (over all heads, MiniMax);
    sinks: one learned sink logit per head (gpt-oss); output_gate: a gated output
    (Qwen3-Next/3.5: q projection twice as wide); k_eq_v: the values are the keys' projection
    (Gemma-4 global layers: no V weights, but K and V are both normed and cached); v_head_dim:
    a V head dim unlike K's (MiMo-V2: 192 and 128), None when they are equal; head_gate: one
    output-gate value per query head (Laguna's g_proj, hidden → heads).
    """

    n_heads: int
    n_kv_heads: int
    head_dim: int
    sliding_window: int | None = None
    chunk_size: int | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: Literal["per_head", "per_layer"] | None = None
    sinks: bool = False
    output_gate: bool = False
    k_eq_v: bool = False
    v_head_dim: int | None = None
    head_gate: bool = False


@dataclass(frozen=True)
class Indexer:
    """DeepSeek-V3.2's lightning indexer: n_heads query heads of head_dim, top-k selection."""

    n_heads: int
    head_dim: int
    topk: int | None = None


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): n_heads query heads, an optional
    q low-rank (q_lora_rank), the KV latent (kv_lora_rank), per-head no-RoPE and RoPE q/k dims,
    the per-head V dim, and the V3.2 indexer when present."""

    n_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int | None
    qk_rope_head_dim: int
    v_head_dim: int | None
    indexer: Indexer | None = None


@dataclass(frozen=True)
class Mamba1:
    """A Mamba-1 mixer (Jamba, Falcon-Mamba): d_inner channels, state_size per channel, a causal
    conv of conv_kernel taps (+ conv_bias), a dt projection of rank dt_rank, projection biases,
    and (Jamba) RMS norms on dt, B and C (bcdt_norms)."""

    d_inner: int
    state_size: int
    conv_kernel: int
    dt_rank: int
    conv_bias: bool = True
    proj_bias: bool = False
    bcdt_norms: bool = False


@dataclass(frozen=True)
class Mamba2:
    """A Mamba-2 mixer (Nemotron-H, Falcon-H1, Granite-4.0-H): n_heads × head_dim = d_inner
    channels, state_size per head, n_groups B/C groups, a causal conv of conv_kernel taps
    (+ conv_bias), biases on the input (proj_bias) and output (out_bias) projections, a gated RMS
    norm over d_inner (gated_norm)."""

    n_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    conv_bias: bool = True
    proj_bias: bool = False
    out_bias: bool = False
    gated_norm: bool = True

    @property
    def d_inner(self) -> int:
        return self.n_heads * self.head_dim


@dataclass(frozen=True)
class GatedDeltaNet:
    """A Gated DeltaNet linear-attention mixer (Qwen3-Next, Qwen3.5)."""

    n_k_heads: int
    n_v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int


@dataclass(frozen=True)
class Lightning:
    """MiniMax lightning attention (linear attention, MiniMax-Text-01 / MiniMax-M1): n_heads
    heads of head_dim; each keeps a constant head_dim × head_dim state (the running K^T V),
    no per-token cache and no convolution."""

    n_heads: int
    head_dim: int


@dataclass(frozen=True)
class MLP:
    """The dense feed-forward block: intermediate size (None when the config gives none),
    gated (three matrices, SiLU/GELU-gated) or not (two), with biases or not."""

    intermediate_size: int | None
    gated: bool
    bias: bool = False


@dataclass(frozen=True)
class MoE:
    """Routed experts: n_experts per MoE layer, experts_per_token used, each of
    intermediate_size (gated like the MLP); shared experts of shared_intermediate_size in total
    (None: none), with a sigmoid gate (shared_gate); a router bias; expert biases (gpt-oss);
    dense_beside: a dense MLP beside the experts in every MoE layer (Gemma-4: its ``mlp`` and
    ``experts`` outputs summed)."""

    n_experts: int
    experts_per_token: int
    intermediate_size: int | None
    shared_intermediate_size: int | None = None
    shared_gate: bool = False
    router_bias: bool = False
    expert_bias: bool = False
    dense_beside: bool = False


@dataclass(frozen=True)
class Architecture:
    """Everything kvlib reads from one config, typed and immutable.

    name: display name; model_type: the config's ``model_type`` ("" when absent); layers: one
    LayerSpec per decoder layer; hidden_size (None when absent: models sized from explicit head
    dims need none); vocab_size; tie_word_embeddings; embed_dim: embedding width (OPT's
    ``word_embed_proj_dim``; else hidden); learned_positions: a learned position table (OPT;
    RoPE/ALiBi models have none); attention, mla, mamba1, mamba2, gated_deltanet, lightning: the shared
    geometry of each mixer kind present (None otherwise); mlp, moe: the feed-forward shapes;
    layer_norms: norm vectors per decoder layer; norm_bias: LayerNorm with a bias (two vectors
    per norm); final_norm: a norm after the last layer (OPT may drop it); embedding_norm: a norm
    right after the embedding (BLOOM); dtype: the checkpoint dtype (``torch_dtype``); ssm_dtype: the
    recurrent-state dtype the config asks for; quant_method: ``quantization_config.quant_method``;
    max_position_embeddings; max_model_len: the longest context vLLM accepts without an
    override (``_max_model_len``; None when the config names no length); notes: what the
    parameter count leaves out; weights_unmodelled: why the parameter count is refused (the
    fields that add weights kvlib does not describe), None when it is counted.
    """

    name: str
    model_type: str
    layers: tuple[LayerSpec, ...]
    hidden_size: int | None = None
    vocab_size: int | None = None
    tie_word_embeddings: bool = True
    embed_dim: int | None = None
    learned_positions: bool = False
    attention: Attention | None = None
    mla: MLA | None = None
    mamba1: Mamba1 | None = None
    mamba2: Mamba2 | None = None
    gated_deltanet: GatedDeltaNet | None = None
    lightning: Lightning | None = None
    mlp: MLP | None = None
    moe: MoE | None = None
    layer_norms: int = 2
    norm_bias: bool = False
    final_norm: bool = True
    embedding_norm: bool = False
    dtype: str | None = None
    ssm_dtype: str | None = None
    quant_method: str | None = None
    max_position_embeddings: int | None = None
    max_model_len: int | None = None
    notes: tuple[str, ...] = ()
    #: Multi-token-prediction layers the checkpoint ships (``num_nextn_predict_layers`` or
    #: ``mtp_num_hidden_layers``; 0 without): the draft of speculative decoding by MTP, not counted
    #: in the layers, the cache or the parameters of the model itself.
    mtp_layers: int = 0
    weights_unmodelled: str | None = None
    #: The config's ``architectures`` (the model classes it names, "Qwen3ForCausalLM"), by which
    #: a vLLM release picks its model runner (``kvlib.deployment.vllm_memory_rules``).
    architectures: tuple[str, ...] = ()

    @property
    def n_layers(self) -> int:
        """Decoder layers (L)."""
        return len(self.layers)

    @property
    def query_heads(self) -> int | None:
        """Query heads of the attention layers (MLA or softmax), None without attention."""
        if self.mla is not None:
            return self.mla.n_heads
        return self.attention.n_heads if self.attention is not None else None

    @property
    def mixers(self) -> frozenset[str]:
        """The mixer kinds present."""
        return frozenset(spec.mixer for spec in self.layers)


# --- field access -----------------------------------------------------------------------------

class _Fields:
    """A config dict with look-ups that raise ValueError naming the model and the field."""

    def __init__(self, cfg: Mapping[str, Any], model: str) -> None:
        self.cfg, self.model = cfg, model
        self.defaults = _FAMILY_DEFAULTS.get(str(cfg.get("model_type")), {})

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        if key not in READ_KEYS and key not in FAMILY_READ_KEYS.get(str(self.cfg.get("model_type")),
                                                                    ()):
            # a programming error: every key read is listed
            raise AssertionError(f"hf_config reads {key!r}, which READ_KEYS does not list")
        value = self.cfg.get(key)
        if value is None:
            value = self.defaults.get(key)
        return default if value is None else value

    def field(self, key: str) -> str:
        return f"{self.model}: config field {key!r}"

    def _int(self, key: str, minimum: int) -> int:
        value = self.get(key)
        if (isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral))
                and math.isfinite(value) and float(value).is_integer()):
            value = int(value)  # 32.0 (a float that is a whole number) reads as 32
        bound = MAX_LAYERS if key in _LAYER_COUNT_KEYS else None
        try:
            return integer(self.field(key), value, minimum, bound)
        except ValueError:
            raise ValueError(f"{self.field(key)} must be an integer >= {minimum}"
                             + (f" and <= {bound:,}" if bound else "")
                             + f", got {value!r}") from None

    def int(self, *keys: str, default: int | None = None, minimum: int = 1) -> int:
        """The first of ``keys`` present, as an int >= ``minimum``; else ``default``."""
        for key in keys:
            if self.has(key):
                return self._int(key, minimum)
        if default is not None:
            return default
        raise ValueError(f"{self.model}: config field {' / '.join(map(repr, keys))} is missing")

    def opt_int(self, *keys: str, minimum: int = 1) -> int | None:
        """The first of ``keys`` present, as an int; None when none is."""
        for key in keys:
            if self.has(key):
                return self._int(key, minimum)
        return None

    def flag(self, key: str, default: bool = False) -> bool:
        """A true/false field (absent or null: ``default``); anything but a bool is refused."""
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{self.field(key)} must be true or false, got {value!r}")
        return bool(value)

    def int_list(self, key: str) -> tuple[int, ...]:
        """A list of non-negative integers (e.g. layer indices); absent: empty."""
        value = self.get(key)
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{self.field(key)} must be a list of layer indices, got {value!r}")
        return tuple(integer(f"{self.field(key)} entry", v, 0) for v in value)

    def text(self, key: str) -> str | None:
        value = self.get(key)
        return None if value is None else str(value)


_LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def text_config(config: Mapping[str, Any]) -> Any:
    """The language-model part of a config: ``text_config`` for multimodal wrappers."""
    inner = config.get("text_config")
    if isinstance(inner, Mapping) and inner.get("num_hidden_layers") is not None:
        return inner
    return config


# --- layers -----------------------------------------------------------------------------------

def _mixers(c: _Fields, n_layers: int) -> list[Mixer] | list[tuple[Mixer, FeedForwardKind]]:
    """The mixer of each layer (Nemotron-H: the (mixer, feed-forward) block of each layer)."""
    if c.has("hybrid_override_pattern"):
        pattern = c.get("hybrid_override_pattern")
        if not isinstance(pattern, str):
            raise ValueError(f"{c.field('hybrid_override_pattern')} must be a string of "
                             f"{''.join(_NEMOTRON_BLOCKS)} characters, got {pattern!r}")
        unknown = sorted(set(pattern) - set(_NEMOTRON_BLOCKS))
        if unknown:
            raise ValueError(f"{c.model}: hybrid_override_pattern has unknown characters {unknown}")
        return _checked([_NEMOTRON_BLOCKS[ch] for ch in pattern], "hybrid_override_pattern",
                        n_layers, c)
    if c.has("layers_block_type"):
        return _checked([_NEMOTRON_BLOCKS[_NEMOTRON_BLOCK_NAMES[t]] for t in _block_types(c)],
                        "layers_block_type", n_layers, c)
    if c.has("layer_types"):
        types = c.get("layer_types")
        if not isinstance(types, (list, tuple)):
            raise ValueError(f"{c.field('layer_types')} must be a list of layer type names, "
                             f"got {types!r}")
        bad = [t for t in types if not isinstance(t, str)]
        if bad:
            raise ValueError(f"{c.field('layer_types')} must hold layer type names (strings), "
                             f"got {bad[0]!r}")
        unknown = sorted({t for t in types if t not in _LAYER_TYPE_NAMES})
        if unknown:
            raise ValueError(f"{c.model}: layer_types has unknown entries {unknown}")
        kinds = [_LAYER_TYPE_NAMES[t] for t in types]
        if str(c.get("model_type")) in _MAMBA1_TYPES:
            kinds = ["mamba1" if k == "mamba2" else k for k in kinds]
        return _checked(kinds, "layer_types", n_layers, c)
    if c.has("attn_type_list"):
        # MiniMax: 1 softmax attention, 0 lightning (linear) attention on that layer
        # (modeling_minimax_m1.py: ``attention_type = config.attn_type_list[layer_id]``)
        return ["full" if kind == 1 else "lightning"
                for kind in _int_list(c, "attn_type_list", n_layers, {0, 1})]
    model_type = str(c.get("model_type"))
    if c.has("attn_layer_period") or model_type == "jamba":
        # Jamba: attention where i % attn_layer_period == attn_layer_offset, Mamba-1 elsewhere
        # (transformers JambaConfig.layers_block_type; defaults 8 and 4, as vLLM reads them)
        period = c.int("attn_layer_period", default=8)
        offset = c.int("attn_layer_offset", default=4, minimum=0)
        if offset >= period:
            raise ValueError(f"{c.model}: attn_layer_offset ({offset}) must be below "
                             f"attn_layer_period ({period})")
        return ["full" if i % period == offset else "mamba1" for i in range(n_layers)]
    if model_type in ("falcon_mamba", "mamba"):  # a pure Mamba-1 stack: mixer-only blocks
        return [("mamba1", "none")] * n_layers
    if model_type == "falcon_h1":  # attention and Mamba-2 side by side in every layer
        return ["parallel"] * n_layers
    if model_type in _MIMO_TYPES and c.has("hybrid_layer_pattern"):
        # MiMo-V2: 1 a sliding-window layer, 0 full attention (vLLM mimo_v2.py,
        # is_compressed_softmax_layer); its attention_chunk_size is read by no MiMo-V2 layer
        return ["sliding" if kind == 1 else "full"
                for kind in _int_list(c, "hybrid_layer_pattern", n_layers, {0, 1})]
    if c.has("attention_chunk_size"):
        return _llama4_chunked(c, n_layers)
    if c.has("full_attention_interval"):
        every = c.int("full_attention_interval")
        return ["full" if (i + 1) % every == 0 else "gated_deltanet" for i in range(n_layers)]
    if c.has("sliding_window_pattern"):
        pattern = c.get("sliding_window_pattern")
        if isinstance(pattern, str):  # e.g. EXAONE-4 "LLLG": L local, G global, repeating
            if not pattern or set(pattern) - {"L", "G"}:
                raise ValueError(f"{c.model}: sliding_window_pattern {pattern!r} must use L and G")
            return ["sliding" if pattern[i % len(pattern)] == "L" else "full"
                    for i in range(n_layers)]
        every = c.int("sliding_window_pattern")  # Gemma-3: every pattern-th layer is global
        return ["full" if (i + 1) % every == 0 else "sliding" for i in range(n_layers)]
    if c.get("model_type") == "gemma3_text":
        # Gemma-3: the published google/gemma-3-27b-it config.json has no sliding_window_pattern
        # and no layer_types; transformers' Gemma3TextConfig supplies the pattern as a class
        # default, kwargs.get("sliding_window_pattern", 6): every 6th layer global
        # (transformers 5.24.0, models/gemma3/configuration_gemma3.py, __post_init__).
        return ["full" if (i + 1) % 6 == 0 else "sliding" for i in range(n_layers)]
    if c.get("model_type") == "gemma3n_text":
        # Gemma-3n without layer_types: Gemma3nTextConfig.__post_init__ makes every 5th layer
        # full attention, the others sliding (transformers 5.24.0, gemma3n/configuration_gemma3n.py)
        return ["full" if (i + 1) % 5 == 0 else "sliding" for i in range(n_layers)]
    if c.get("model_type") == "gemma2":  # Gemma-2: even layers local, odd layers global
        return ["sliding" if i % 2 == 0 else "full" for i in range(n_layers)]
    if c.flag("use_sliding_window") and c.has("max_window_layers"):
        # Qwen2 convention: layers from max_window_layers on use the window
        first = c.int("max_window_layers")
        return ["sliding" if i >= first else "full" for i in range(n_layers)]
    if c.has("sliding_window"):  # Mistral-7B-v0.1: every layer windowed
        return ["sliding"] * n_layers
    return ["full"] * n_layers


def _llama4_chunked(c: _Fields, n_layers: int) -> list[Mixer]:
    """Llama-4: chunked local attention on the RoPE layers, full attention on the NoPE layers.

    ``no_rope_layers[i]`` is 1 for a RoPE layer; without it transformers' Llama4TextConfig
    builds it from ``no_rope_layer_interval`` (default 4): ``int((i + 1) % 4 != 0)``, so every
    4th layer is NoPE (transformers 5.24.0, models/llama4/configuration_llama4.py). vLLM chunks a
    layer iff it is not NoPE and ``attention_chunk_size`` is set (models/llama4.py).
    """
    if str(c.get("model_type")) not in ("llama4_text", "llama4"):
        raise ValueError(f"{c.model}: config field 'attention_chunk_size' without layer_types: "
                         "kvlib knows which layers are chunked only for Llama-4; refusing to "
                         "guess the cache size")
    if c.has("no_rope_layers"):
        rope = c.int_list("no_rope_layers")
        if set(rope) - {0, 1}:
            raise ValueError(f"{c.field('no_rope_layers')} must hold 0 (NoPE) or 1 (RoPE) per "
                             f"layer, got {sorted(set(rope))}")
    else:
        every = c.int("no_rope_layer_interval", default=4)
        rope = tuple(int((i + 1) % every != 0) for i in range(n_layers))
    return _checked(["chunked" if r else "full" for r in rope], "no_rope_layers", n_layers, c)


def _checked(kinds: list, source: str, n_layers: int, c: _Fields) -> list:
    if len(kinds) != n_layers:
        raise ValueError(f"{c.model}: {source} describes {len(kinds)} layers but "
                         f"num_hidden_layers is {n_layers}")
    return kinds


def _block_types(c: _Fields) -> list[str]:
    """Nemotron ``layers_block_type``: a list of block names, each known."""
    types = c.get("layers_block_type")
    if not isinstance(types, (list, tuple)) or not all(isinstance(t, str) for t in types):
        raise ValueError(f"{c.field('layers_block_type')} must be a list of block names "
                         f"({', '.join(_NEMOTRON_BLOCK_NAMES)}), got {types!r}")
    unknown = sorted(set(types) - set(_NEMOTRON_BLOCK_NAMES))
    if unknown:
        raise ValueError(f"{c.model}: layers_block_type has unknown entries {unknown}")
    return list(types)


def _layer_count(c: _Fields) -> int:
    """The decoder layers: num_hidden_layers (or its spellings); Nemotron-3 configs that give only
    ``layers_block_type`` have one layer per entry (transformers NemotronHConfig.num_hidden_layers
    is ``len(layers_block_type)`` and ignores a stated count)."""
    if not any(c.has(key) for key in _LAYER_COUNT_KEYS) and c.has("layers_block_type"):
        n = len(_block_types(c))
        if not 0 < n <= MAX_LAYERS:
            raise ValueError(f"{c.field('layers_block_type')} must list 1 to {MAX_LAYERS:,} "
                             f"blocks, got {n:,}")
        return n
    return c.int(*_LAYER_COUNT_KEYS)


def _int_list(c: _Fields, key: str, n_layers: int, allowed: set | None = None) -> list:
    """A per-layer list (one entry per decoder layer), optionally of allowed values only."""
    value = c.get(key)
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{c.field(key)} must be a list with one entry per layer, got {value!r}")
    if len(value) != n_layers:
        raise ValueError(f"{c.model}: {key} describes {len(value)} layers but num_hidden_layers "
                         f"is {n_layers}")
    if allowed is not None:
        bad = sorted({repr(v) for v in value
                      if isinstance(v, bool) or not isinstance(v, (int, str)) or v not in allowed})
        if bad:
            raise ValueError(f"{c.model}: {key} has entries {', '.join(bad)}; kvlib knows "
                             f"{sorted(map(repr, allowed))}")
    return list(value)


#: Ernie4_5_MoeConfig's defaults for its routed experts and how many a token uses (transformers
#: 5.24; its attribute_map reads num_experts and num_experts_per_tok as the same fields).
_ERNIE_EXPERTS = (64, 6)


def _expert_keys(c: _Fields, count: bool) -> tuple[str, ...]:
    """The config keys of the routed experts' number (``count``) or of how many a token uses,
    in the family's spelling first (ERNIE-4.5 MoE: ``moe_num_experts``, ``moe_k``)."""
    ernie = str(c.get("model_type")) == "ernie4_5_moe"
    if count:
        return (("moe_num_experts",) if ernie else ()) + ("num_local_experts", "num_experts",
                                                          "n_routed_experts")
    return (("moe_k",) if ernie else ()) + ("num_experts_per_tok", "experts_per_token")


def _n_experts(c: _Fields) -> int:
    if str(c.get("model_type")) != "ernie4_5_moe":
        return c.int(*_expert_keys(c, True), default=0, minimum=0)
    n = c.int(*_expert_keys(c, True), default=_ERNIE_EXPERTS[0], minimum=0)
    # vLLM 0.33 ernie45_moe.py: use_moe (default: any experts) false builds dense MLPs only
    return n if c.flag("use_moe", n > 0) else 0


def _moe_layers(c: _Fields, n_layers: int) -> set[int]:
    """The layers with routed experts (Mixtral/Qwen/DeepSeek conventions): every layer from
    ``first_k_dense_replace`` on, every ``decoder_sparse_step``-th (or ``moe_layer_freq``-th),
    except ``mlp_only_layers``."""
    if not _n_experts(c):
        return set()
    if c.has("expert_layer_period") or str(c.get("model_type")) == "jamba":
        # Jamba: experts where i % expert_layer_period == expert_layer_offset (defaults 2 and 1)
        period = c.int("expert_layer_period", default=2)
        offset = c.int("expert_layer_offset", default=1, minimum=0)
        return {i for i in range(n_layers) if i % period == offset}
    if isinstance(c.get("moe_layer_freq"), (list, tuple)):  # MiMo-V2: 1 MoE, 0 dense per layer
        kinds = _int_list(c, "moe_layer_freq", n_layers, {0, 1})
        return {i for i, kind in enumerate(kinds) if kind == 1}
    if c.has("mlp_layer_types"):  # Laguna, GLM-5.2: "dense" or "sparse" (routed experts) per layer
        kinds = _int_list(c, "mlp_layer_types", n_layers, {"dense", "sparse"})
        return {i for i, kind in enumerate(kinds) if kind == "sparse"}
    if c.has("moe_layers"):  # an explicit list (Llama-4 configs may carry one)
        return {i for i in c.int_list("moe_layers") if i < n_layers}
    if c.has("interleave_moe_layer_step"):  # Llama-4: every step-th layer, the last of each
        step = c.int("interleave_moe_layer_step")
        return {i for i in range(n_layers) if (i + 1) % step == 0}
    if str(c.get("model_type")) == "ernie4_5_moe":  # ERNIE-4.5: an interval within a range
        first = c.int("moe_layer_start_index", minimum=0)
        last = c.get("moe_layer_end_index", -1)  # -1: the last layer (Ernie4_5_MoeConfig)
        last = n_layers - 1 if last == -1 else c.int("moe_layer_end_index", minimum=0)
        step = c.int("moe_layer_interval")
        return {i for i in range(first, min(last, n_layers - 1) + 1) if (i + 1) % step == 0}
    first_dense = c.int("first_k_dense_replace", default=0, minimum=0)
    step = c.int("decoder_sparse_step", "moe_layer_freq", default=1, minimum=0) or 1
    dense = set(c.int_list("mlp_only_layers"))
    if c.has("decoder_sparse_step"):
        moe = {i for i in range(n_layers) if (i + 1) % step == 0}
    else:
        moe = {i for i in range(first_dense, n_layers) if (i - first_dense) % step == 0}
    return {i for i in moe if i >= first_dense} - dense


def _layers(c: _Fields, n_layers: int) -> tuple[LayerSpec, ...]:
    mixers = _mixers(c, n_layers)
    if not c.flag("use_sliding_window", True):  # the window is switched off
        mixers = ["full" if m == "sliding" else m for m in mixers]
    mla = c.has("kv_lora_rank")
    moe_layers = _moe_layers(c, n_layers)
    built: dict[tuple[str, str], LayerSpec] = {}
    out = []
    for i, mixer in enumerate(mixers):
        if isinstance(mixer, tuple):  # a Nemotron-H block
            mixer, ffn = mixer
        else:
            ffn = "moe" if i in moe_layers else "dense"
        if mla and mixer in ("full", "sliding"):
            mixer = "mla"
        key = (mixer, ffn)
        if key not in built:  # layers of one kind share one record
            built[key] = LayerSpec(mixer, ffn)
        out.append(built[key])
    return tuple(out)


# --- geometry ---------------------------------------------------------------------------------

#: Model types whose attention reads ``multi_query`` (one KV head): transformers 5.24
#: gpt_bigcode (GPTBigCodeConfig: ``num_key_value_heads = 1 if multi_query``) and falcon
#: (FalconAttention), vLLM 0.33 falcon.py with its FalconModelArchConfigConvertor
#: (model_arch_config_convertor.py, falcon and RefinedWebModel). Every other family ignores the
#: key, as vLLM's base ``get_total_num_kv_heads`` and transformers' LlamaAttention do.
_MULTI_QUERY_TYPES = ("gpt_bigcode", "falcon", "RefinedWebModel")


def _attention(c: _Fields, model_type: str, mixers: frozenset[str]) -> Attention:
    n_heads = c.int("num_attention_heads", "n_head", "num_heads")
    multi_query = c.flag("multi_query")  # checked in every family, read in _MULTI_QUERY_TYPES
    mqa = (model_type in _MULTI_QUERY_TYPES and multi_query
           and not c.flag("new_decoder_architecture"))
    n_kv = 1 if mqa else c.int("num_key_value_heads", "num_kv_heads", default=n_heads)
    if n_heads % n_kv:
        raise ValueError(f"{c.model}: {n_kv} KV heads cannot serve {n_heads} query heads: the "
                         "KV heads (num_key_value_heads) must divide the query heads "
                         "(num_attention_heads)")
    if c.has("head_dim"):
        head_dim = c.int("head_dim")
    else:
        hidden = c.int(*_HIDDEN_KEYS)
        if hidden % n_heads:
            raise ValueError(f"{c.model}: hidden_size {hidden} is not divisible by "
                             f"{n_heads} attention heads and no head_dim is given")
        head_dim = hidden // n_heads
    # biases everywhere: BLOOM; Falcon's ``bias``; StarCoder2's ``use_bias`` (q/k/v/o, c_fc,
    # c_proj: transformers 5.24 starcoder2/modeling_starcoder2.py)
    bias_all = (c.flag("bias") or model_type == "bloom"
                or (model_type == "starcoder2" and c.flag("use_bias")))
    qk_norm = None
    if model_type == "llama4_text":
        pass  # Llama-4's q/k norm is an L2 norm without weights: no parameters
    elif model_type.startswith(("qwen3", "gemma3", "gemma4")) or c.flag("use_qk_norm"):
        qk_norm = "per_layer" if c.get("qk_norm_type") == "per_layer" else "per_head"
    return Attention(
        n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
        sliding_window=_window(c) if "sliding" in mixers else None,
        chunk_size=c.int("attention_chunk_size") if "chunked" in mixers else None,
        qkv_bias=(c.flag("attention_bias") or c.flag("qkv_bias") or c.flag("use_qkv_bias")
                  or model_type in ("qwen2", "opt") or bias_all),
        o_bias=c.flag("attention_bias") or model_type == "opt" or bias_all,
        qk_norm=qk_norm, sinks=model_type == "gpt_oss",
        output_gate=model_type.startswith("qwen3_next") or (
            model_type.startswith("qwen3_5") and c.flag("attn_output_gate", True)))


def _check_v_head_dim(c: _Fields, model_type: str, attention: Attention | None,
                      mixers: frozenset[str]) -> None:
    """``v_head_dim`` is read for MLA (the V heads of its up-projection) and MiMo-V2 (its full
    layers); on plain attention a V head dim unlike the K head dim would change what is cached,
    and no cache layer here is read that way: refused unless it equals the head dim."""
    if (not c.has("v_head_dim") or "mla" in mixers or model_type in _MIMO_TYPES
            or attention is None):
        return
    v_dim = c.int("v_head_dim")
    if v_dim != attention.head_dim:
        raise _cache_refusal(c, "v_head_dim", f"value heads of {v_dim} beside key heads of "
                             f"{attention.head_dim} and no MLA latent")


def _window(c: _Fields) -> int:
    window = c.int("sliding_window")
    if c.has("sliding_window_size") and c.int("sliding_window_size") != window:
        raise ValueError(f"{c.model}: sliding_window ({window:,}) and sliding_window_size "
                         f"({c.int('sliding_window_size'):,}) disagree")
    return window


def _mla(c: _Fields) -> MLA:
    indexer = None
    if c.has("index_n_heads"):  # DeepSeek-V3.2 lightning indexer
        indexer = Indexer(n_heads=c.int("index_n_heads"), head_dim=c.int("index_head_dim"),
                          topk=c.opt_int("index_topk"))
    return MLA(n_heads=c.int("num_attention_heads"), q_lora_rank=c.opt_int("q_lora_rank"),
               kv_lora_rank=c.int("kv_lora_rank"), qk_nope_head_dim=c.opt_int("qk_nope_head_dim"),
               qk_rope_head_dim=c.int("qk_rope_head_dim"), v_head_dim=c.opt_int("v_head_dim"),
               indexer=indexer)


def _dt_rank(c: _Fields, key: str, hidden: int) -> int:
    """A Mamba-1 dt rank; "auto" is ceil(hidden / 16), as transformers and vLLM read it."""
    if c.get(key) == "auto":
        return -(-hidden // 16)
    return c.int(key, default=-(-hidden // 16))


def _mamba1(c: _Fields, model_type: str) -> Mamba1:
    """Mamba-1, in Jamba's spelling (``mamba_*``; inner width mamba_expand × hidden, as vLLM's
    jamba.py reads it) or Falcon-Mamba's (``intermediate_size``, ``state_size``, ...; vLLM
    models/mamba.py)."""
    hidden = c.int(*_HIDDEN_KEYS)
    if model_type == "jamba":
        return Mamba1(d_inner=c.int("mamba_expand", default=2) * hidden,
                      state_size=c.int("mamba_d_state", default=16),
                      conv_kernel=c.int("mamba_d_conv", default=4),
                      dt_rank=_dt_rank(c, "mamba_dt_rank", hidden),
                      conv_bias=c.flag("mamba_conv_bias", True),
                      proj_bias=c.flag("mamba_proj_bias"), bcdt_norms=True)
    return Mamba1(d_inner=c.int("intermediate_size"), state_size=c.int("state_size"),
                  conv_kernel=c.int("conv_kernel"), dt_rank=_dt_rank(c, "time_step_rank", hidden),
                  conv_bias=c.flag("use_conv_bias", True), proj_bias=c.flag("use_bias"))


def _mamba2(c: _Fields) -> Mamba2:
    """Mamba-2 in Nemotron-H's spelling (``mamba_num_heads``, ``ssm_state_size``, ...) or
    Falcon-H1's and Granite-4.0-H's (``mamba_n_heads``, ``mamba_d_head``, ``mamba_d_state``...).

    vLLM sizes the conv state from the inner width: ``mamba_d_ssm`` (Falcon-H1), else
    ``mamba_expand × hidden`` (Falcon-H1, Granite-4.0-H), else heads × head dim (Nemotron-H);
    it must equal heads × head dim, as the SSM state is heads × head dim × state.
    """
    heads = c.int("mamba_num_heads", "mamba_n_heads")
    if c.has("mamba_d_ssm"):
        inner = c.int("mamba_d_ssm")
    elif c.has("mamba_expand"):
        inner = c.int("mamba_expand") * c.int(*_HIDDEN_KEYS)
    else:
        inner = None
    if c.get("mamba_d_head") == "auto":  # Falcon-H1 / Granite default: inner width / heads
        if inner is None or inner % heads:
            raise ValueError(f"{c.model}: mamba_d_head is 'auto' but the inner width "
                             f"{inner} does not split into {heads} heads")
        head_dim = inner // heads
    else:
        head_dim = c.int("mamba_head_dim", "mamba_d_head")
    m = Mamba2(n_heads=heads, head_dim=head_dim,
               state_size=c.int("ssm_state_size", "mamba_d_state"),
               n_groups=c.int("n_groups", "mamba_n_groups"),
               conv_kernel=c.int("conv_kernel", "mamba_d_conv"),
               conv_bias=c.flag("use_conv_bias", c.flag("mamba_conv_bias", True)),
               proj_bias=c.flag("mamba_proj_bias") or c.flag("use_bias"),
               out_bias=(c.flag("projectors_bias") if str(c.get("model_type")) == "falcon_h1"
                         else c.flag("mamba_proj_bias") or c.flag("use_bias")),
               gated_norm=(c.flag("mamba_rms_norm") if str(c.get("model_type")) == "falcon_h1"
                           else True))
    if inner is not None and inner != m.d_inner:
        raise ValueError(f"{c.model}: the mamba inner width {inner:,} is not mamba heads × head "
                         f"dim = {m.d_inner:,}")
    if m.n_heads % m.n_groups:
        raise ValueError(f"{c.model}: {m.n_heads} mamba heads cannot be shared by {m.n_groups} "
                         "groups: the groups must divide the heads")
    return m


def _lightning(c: _Fields) -> Lightning:
    """MiniMax lightning attention: ``num_attention_heads`` heads of ``head_dim`` (else hidden /
    heads), as vLLM's ``LinearAttention`` (model_executor/layers/mamba/linear/base.py) and the
    reference modeling_minimax_m1.py read them."""
    n_heads = c.int("num_attention_heads")
    if c.has("head_dim"):
        return Lightning(n_heads=n_heads, head_dim=c.int("head_dim"))
    hidden = c.int(*_HIDDEN_KEYS)
    if hidden % n_heads:
        raise ValueError(f"{c.model}: hidden_size {hidden} is not divisible by {n_heads} "
                         "lightning-attention heads and no head_dim is given")
    return Lightning(n_heads=n_heads, head_dim=hidden // n_heads)


def _gated_deltanet(c: _Fields) -> GatedDeltaNet:
    g = GatedDeltaNet(n_k_heads=c.int("linear_num_key_heads"),
                         n_v_heads=c.int("linear_num_value_heads"),
                         k_head_dim=c.int("linear_key_head_dim"),
                         v_head_dim=c.int("linear_value_head_dim"),
                         conv_kernel=c.int("linear_conv_kernel_dim"))
    if g.n_v_heads % g.n_k_heads:
        raise ValueError(f"{c.model}: {g.n_k_heads} linear-attention key heads cannot serve "
                         f"{g.n_v_heads} value heads: the key heads must divide the value heads")
    return g


#: Model types whose MLP (and experts) is two matrices, up and down, with no gate, whatever the
#: activation: each modeling file of transformers 5.24.0 was read for its MLP class (GPTNeoXMLP
#: dense_h_to_4h/dense_4h_to_h, Starcoder2MLP and GPTBigCodeMLP c_fc/c_proj, PhiMLP and
#: OPT/XGLM/BioGPT fc1/fc2, NemotronMLP and NemotronHMLP up_proj/down_proj, ...).
_NO_GATE_TYPES = frozenset({
    "opt", "RefinedWebModel", "RefinedWeb", "falcon", "bloom", "gpt2", "gpt_bigcode", "gpt_neo",
    "gpt_neox", "gpt_neox_japanese", "gptj", "codegen", "starcoder2", "phi", "mpt", "persimmon",
    "nemotron", "nemotron_h", "apertus", "arcee", "nanochat", "jais2", "xglm", "biogpt", "ctrl",
    "openai-gpt"})
#: Families whose MLP is gated (gate_proj and up_proj, or fused gate_up_proj, or w1/w3) whatever
#: the activation (a ReLU Llama is still gated): checked against transformers 5.24.0's modeling
#: files of every model type with one of these prefixes (kimi_k2 and minimax_m1 are remote code
#: of DeepSeek-V3's and MiniMax's gated shapes).
_GATED_FAMILIES = (
    "llama", "mistral", "mixtral", "qwen", "gemma", "deepseek", "kimi_k2", "glm", "olmo",
    "stablelm", "phi3", "phimoe", "granite", "ernie4_5", "hunyuan", "exaone", "cohere", "minimax",
    "jamba", "falcon_h1", "gpt_oss", "laguna", "mimo")
#: configs whose MLP is 4 × hidden without saying so (Falcon's RW configs, BLOOM)
_FOUR_X_MLP_TYPES = ("RefinedWebModel", "falcon", "bloom")
_HIDDEN_KEYS = ("hidden_size", "d_model", "n_embd", "n_embed")
#: For model types in neither list (remote code): activations that are used without a gate.
_NO_GATE_ACTS = ("relu2", "relu", "gelu_new")
#: Model types whose norms are LayerNorms with a bias (two vectors per norm): transformers 5.24
#: nn.LayerNorm in OPT, Falcon, BLOOM, GPT-NeoX and StarCoder2.
_LAYER_NORM_BIAS_TYPES = ("opt", "RefinedWebModel", "falcon", "bloom", "gpt_neox", "starcoder2")


def _gated(c: _Fields, model_type: str) -> bool:
    """Whether the MLP is gated (three matrices), as transformers builds the model type."""
    if model_type in _NO_GATE_TYPES:
        return False
    if model_type.startswith(_GATED_FAMILIES):
        return True
    act = str(c.get("hidden_act") or c.get("hidden_activation") or c.get("activation_function")
              or c.get("mlp_hidden_act") or "silu")
    return act not in _NO_GATE_ACTS


def _mlp(c: _Fields, model_type: str, hidden: int | None, gated: bool) -> MLP:
    if model_type == "llama4_text":  # Llama-4: dense layers use intermediate_size_mlp
        inter = c.opt_int("intermediate_size_mlp")
    else:
        inter = c.opt_int("intermediate_size", "ffn_dim")
    if inter is None and model_type in _FOUR_X_MLP_TYPES and hidden:
        inter = 4 * hidden  # no size given: the MLP is 4 × hidden
    # biases: OPT's fc1/fc2; GPT-NeoX's dense_h_to_4h/dense_4h_to_h (nn.Linear's default bias,
    # transformers 5.24 gpt_neox/modeling_gpt_neox.py); StarCoder2's use_bias
    return MLP(intermediate_size=inter, gated=gated,
               bias=(model_type in ("opt", "gpt_neox") or c.flag("mlp_bias") or c.flag("bias")
                     or (model_type == "starcoder2" and c.flag("use_bias"))))


def _moe(c: _Fields, model_type: str) -> MoE | None:
    n_experts = _n_experts(c)
    if not n_experts:
        return None
    inter = (c.opt_int("moe_intermediate_size")
             or (c.opt_int("expert_intermediate_size") if model_type == "gemma4_text" else None)
             or c.opt_int("intermediate_size"))
    shared = c.opt_int("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
                       "shared_intermediate_size", minimum=0)
    n_shared = c.opt_int("n_shared_experts", *(("moe_num_shared_experts",)
                                                if model_type == "ernie4_5_moe" else ()),
                         minimum=0)
    if shared is None and n_shared and inter is not None:
        shared = n_shared * inter
    if shared is None and model_type == "llama4_text":
        shared = inter  # Llama-4: one shared expert of the experts' size (Llama4TextMoe)
    per_token = _expert_keys(c, False) + (("top_k_experts",) if model_type == "gemma4_text"
                                          else ())
    # missing or below 1: an error naming the field
    k = c.int(*per_token, default=_ERNIE_EXPERTS[1] if model_type == "ernie4_5_moe" else None)
    if k > n_experts:
        used = next((key for key in per_token if c.has(key)), per_token[0])
        counted = next((key for key in _expert_keys(c, True) if c.has(key)),
                       _expert_keys(c, True)[0])
        raise ValueError(f"{c.model}: config field {used!r} ({k}) asks for more experts per "
                         f"token than the {n_experts} routed experts ({counted!r})")
    return MoE(
        n_experts=n_experts, experts_per_token=k,
        intermediate_size=inter, shared_intermediate_size=shared or None,
        shared_gate=model_type.startswith(("qwen2_moe", "qwen3_next", "qwen3_5")),
        # a router bias (e_score_correction_bias): ERNIE-4.5 MoE builds one always
        # (Ernie4_5_MoeStatics in transformers 5.24; vLLM 0.33 ernie45_moe.py)
        router_bias=(model_type in ("gpt_oss", "nemotron_h", "laguna", "ernie4_5_moe")
                     or c.flag("use_routing_bias") or c.get("topk_method") == "noaux_tc"),
        expert_bias=model_type == "gpt_oss", dense_beside=model_type == "gemma4_text")


def _dtype(configs: tuple[Mapping[str, Any], ...], keys: tuple[str, ...],
           label: str) -> str | None:
    """The first of ``keys`` set in ``configs`` (text config first), as a kvlib dtype; None when
    none is set or it is "auto" (the checkpoint's own). Any other value is refused, naming the
    field: transformers itself fails on a dtype torch does not have."""
    for cfg in configs:
        for key in keys:
            value = cfg.get(key)
            if value is None or value == "auto":
                continue
            if isinstance(value, str) and value in HF_DTYPE_NAMES:
                return HF_DTYPE_NAMES[value]
            raise ValueError(f"{label}: config field {key!r} must be one of "
                             f"{', '.join(HF_DTYPE_NAMES)} (or auto), got {value!r}")
    return None


def _layer_norms(c: _Fields, model_type: str) -> int:
    """Norm vectors per decoder layer: 2 (pre-attention, pre-MLP); Gemma 4 (pre and post);
    Falcon-7B's parallel block 1; Nemotron-H's and Mamba's single-mixer blocks 1."""
    if (c.has("hybrid_override_pattern") or c.has("layers_block_type")
            or model_type in ("falcon_mamba", "mamba")):
        return 1
    if model_type in ("RefinedWebModel", "falcon") and not c.flag("new_decoder_architecture"):
        return 1
    return 4 if model_type.startswith("gemma") else 2


# --- per-layer geometry -----------------------------------------------------------------------

def _cache_refusal(c: _Fields, key: str, what: str) -> ValueError:
    return ValueError(f"{c.model}: config field {key!r} ({what}) changes what is cached in a way "
                      "kvlib does not model; refusing to guess the cache size")


def _weight_refusal(c: _Fields, key: str, what: str) -> ValueError:
    return ValueError(f"{c.model}: config field {key!r} ({what}) changes the weights in a way "
                      "kvlib does not model (the cache would be right, the parameter count would "
                      "not); refusing to guess")


def _gemma4_layers(c: _Fields, layers: tuple[LayerSpec, ...],
                   attention: Attention | None) -> tuple[LayerSpec, ...]:
    """Gemma-4: the global (full-attention) layers have their own geometry.

    transformers 5.24 (gemma4/configuration_gemma4.py, ``__post_init__``) gives every
    ``full_attention`` layer ``head_dim = global_head_dim`` (default 512) and, when
    ``attention_k_eq_v``, ``num_key_value_heads = num_global_key_value_heads``; vLLM 0.33
    (gemma4.py, ``Gemma4DecoderLayer``) sizes each layer from that ``per_layer_config``. With
    ``attention_k_eq_v`` the values are the keys' projection (no V weights) but both are cached
    (transformers normalises and caches ``value_states`` apart; vLLM loads K's weights into the
    V slot). transformers forces the last layer to full attention; so does this reader.
    """
    if c.get("use_bidirectional_attention") == "all":
        raise _cache_refusal(c, "use_bidirectional_attention", "bidirectional attention on every "
                             "token, with a halved sliding window")
    if c.opt_int("hidden_size_per_layer_input", minimum=0):
        raise _weight_refusal(c, "hidden_size_per_layer_input", "Gemma-4 per-layer input "
                              "embeddings")
    moe_flag = c.flag("enable_moe_block")
    if moe_flag != bool(_n_experts(c)):
        raise ValueError(f"{c.model}: enable_moe_block ({moe_flag}) and num_experts "
                         f"({c.get('num_experts')}) disagree (transformers reads the first, vLLM "
                         "the second)")
    if attention is None:
        return layers
    k_eq_v = c.flag("attention_k_eq_v")
    n_kv = (c.int("num_global_key_value_heads") if k_eq_v and c.has("num_global_key_value_heads")
            else attention.n_kv_heads)
    if attention.n_heads % n_kv:
        raise ValueError(f"{c.model}: {n_kv} global KV heads (num_global_key_value_heads) cannot "
                         f"serve {attention.n_heads} query heads")
    glob = Attention(n_heads=attention.n_heads, n_kv_heads=n_kv,
                     head_dim=c.int("global_head_dim", default=512),
                     qkv_bias=attention.qkv_bias, o_bias=attention.o_bias,
                     qk_norm=attention.qk_norm, k_eq_v=k_eq_v)
    out = [LayerSpec("full", spec.ffn, attention=glob) if spec.mixer == "full" else spec
           for spec in layers]
    if out[-1].mixer != "full":
        out[-1] = LayerSpec("full", out[-1].ffn, attention=glob)
    return tuple(out)


def _gemma3n_layers(c: _Fields, layers: tuple[LayerSpec, ...],
                    widths: tuple[int, ...] | None) -> tuple[LayerSpec, ...]:
    """Gemma-3n: the last ``num_kv_shared_layers`` layers (absent: transformers' default, 15)
    compute attention but cache nothing of their own.

    Each reads the K/V of an earlier layer of its own kind, sliding or full. transformers 5.24
    (``Gemma3nTextConfig.kv_sharing_modes``) takes the last non-shared layer of that kind, and its
    DynamicCache gives a shared layer a ``DummyLayer`` that stores nothing (cache_utils.py,
    ``_get_layer_types_and_kwargs``). vLLM 0.33 (gemma3n.py, ``Gemma3nAttention``) names layer
    ``first − 2`` (sliding) or ``first − 1`` (full) as ``kv_sharing_target_layer_name``, and its
    ``get_kv_cache_spec`` (v1/worker/gpu_model_runner.py) gives such a layer no cache spec, so the
    pool allocates nothing for it. kvlib follows vLLM, the engine a reader serves with; the two
    agree on the bytes, and a config on which their source layers differ in kind is refused.
    ``widths``: Gemma-3n's per-layer MLP widths (``intermediate_size`` as a list), None if uniform.
    """
    n = len(layers)
    shared = c.int("num_kv_shared_layers", default=15, minimum=0)
    if widths is not None:
        layers = tuple(LayerSpec(spec.mixer, spec.ffn, intermediate_size=w)
                       for spec, w in zip(layers, widths))
    if not shared:
        return layers
    if shared >= n:
        raise ValueError(f"{c.model}: num_kv_shared_layers ({shared}) must be below "
                         f"num_hidden_layers ({n}): a shared layer reads an earlier layer's cache")
    first = n - shared
    for kind in sorted({spec.mixer for spec in layers[first:]}):
        own = [i for i in range(first) if layers[i].mixer == kind]
        if not own:
            raise ValueError(f"{c.model}: layers {first}-{n - 1} share KV, some of them {kind} "
                             f"attention, but none of the {first} layers before them is {kind}: no "
                             "layer caches K/V for them")
        target = first - (2 if kind == "sliding" else 1)  # vLLM 0.33's source layer
        if target < 0 or layers[target].mixer != kind:
            vllm = ("keep caches of their own in vLLM 0.33 (no layer to read)" if target < 0 else
                    f"read layer {target}'s cache in vLLM 0.33 (a {layers[target].mixer} layer)")
            raise _cache_refusal(c, "num_kv_shared_layers", f"the shared {kind} layers would "
                                 f"{vllm} and layer {own[-1]}'s in transformers")
    return tuple(LayerSpec(spec.mixer, spec.ffn, intermediate_size=spec.intermediate_size,
                           kv_shared=True) if i >= first else spec
                 for i, spec in enumerate(layers))


def _gemma3n_widths(text: Mapping[str, Any], label: str) -> tuple[Mapping[str, Any],
                                                                 tuple[int, ...] | None]:
    """Gemma-3n's ``intermediate_size``, which may list one MLP width per layer (transformers
    5.24 Gemma3nTextConfig): the config with the widest as its one width, and the per-layer
    widths when they differ (None when they are all one)."""
    value = text.get("intermediate_size")
    if not isinstance(value, (list, tuple)):
        return text, None
    n = text.get("num_hidden_layers")
    if len(value) != n:
        raise ValueError(f"{label}: intermediate_size lists {len(value)} widths but "
                         f"num_hidden_layers is {n!r}")
    widths = tuple(positive_integer(f"{label}: config field 'intermediate_size' entry", w)
                   for w in value)
    return {**text, "intermediate_size": max(widths)}, (widths if len(set(widths)) > 1 else None)


def _gemma3n_weights(c: _Fields) -> str:
    """Why Gemma-3n's parameters are not counted: the fields that add weights kvlib does not
    describe, with their values (transformers' defaults where the config gives none)."""
    defaults = {"altup_num_inputs": 4, "laurel_rank": 64, "hidden_size_per_layer_input": 256,
                "vocab_size_per_layer_input": 262_144}  # Gemma3nTextConfig, transformers 5.24
    fields = ", ".join(f"{key!r} ({what}: {c.get(key, defaults[key])!r})"
                       for key, what in _GEMMA3N_WEIGHT_KEYS.items())
    return (f"config fields {fields} change the weights in a way kvlib does not model (the cache "
            "is sized, the parameter count is not); refusing to guess")


def _shared_indexer_layers(c: _Fields, layers: tuple[LayerSpec, ...]) -> tuple[LayerSpec, ...]:
    """IndexCache (GLM-5.2/5.3): only some MLA layers run the DeepSeek-V3.2 indexer and cache its
    keys; the others reuse the previous top-k. vLLM 0.33 (deepseek_v2.py,
    ``DeepseekV2MLAAttention``) builds the indexer on layer i unless
    ``max(i − index_skip_topk_offset + 1, 0) % index_topk_freq != 0`` (offset default 2, freq
    default 1: every layer), or, with ``index_topk_pattern``, unless its i-th letter is "S".
    GLM-5.2's offset 3 and freq 4 give layers 0, 1, 2, 6, 10, …, 74: 21 of 78. A config's own
    ``indexer_types`` ("full"/"shared" per layer, which vLLM does not read) must agree.
    """
    n = len(layers)
    pattern = c.get("index_topk_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or len(pattern) != n or set(pattern) - {"S", "F"}:
            raise ValueError(f"{c.field('index_topk_pattern')} must hold one letter per layer, "
                             f"S (shared) or F (full), got {pattern!r}")
        shared = [ch == "S" for ch in pattern]
    else:
        freq = c.int("index_topk_freq", default=1)
        offset = c.int("index_skip_topk_offset", default=2, minimum=0)
        shared = [max(i - offset + 1, 0) % freq != 0 for i in range(n)]
    if c.has("indexer_types"):
        stated = _int_list(c, "indexer_types", n, {"full", "shared"})
        if [t == "shared" for t in stated] != shared:
            raise _cache_refusal(c, "indexer_types", "indexer layers that disagree with the ones "
                                 "vLLM builds from index_topk_freq and index_skip_topk_offset")
    return tuple(LayerSpec(spec.mixer, spec.ffn, shared_indexer=True)
                 if skip and spec.mixer == "mla" else spec
                 for spec, skip in zip(layers, shared))


def _mimo_layers(c: _Fields, layers: tuple[LayerSpec, ...],
                 attention: Attention | None) -> tuple[LayerSpec, ...]:
    """MiMo-V2-Flash: each kind of layer has its own geometry, as vLLM 0.33 builds it
    (mimo_v2.py, ``MiMoV2DecoderLayer``): sliding layers ``swa_num_attention_heads``,
    ``swa_num_key_value_heads``, K head dim ``swa_head_dim``, V head dim ``swa_v_head_dim``, window
    ``sliding_window_size``, a sink per head when ``add_swa_attention_sink_bias``; full layers
    ``num_key_value_heads``, ``head_dim`` and ``v_head_dim``. vLLM's window of W = 128 keeps
    W − 1 = 127 tokens; transformers 5.24 (mimo_v2_flash) sets its window to W + 1 and keeps 128.
    """
    if attention is None:
        return layers
    if c.flag("add_full_attention_sink_bias"):
        raise _cache_refusal(c, "add_full_attention_sink_bias", "sinks on the full layers, which "
                             "vLLM's MiMo-V2 does not build")
    full = Attention(n_heads=attention.n_heads, n_kv_heads=attention.n_kv_heads,
                     head_dim=attention.head_dim, v_head_dim=c.opt_int("v_head_dim"),
                     qkv_bias=attention.qkv_bias)
    n_heads = c.int("swa_num_attention_heads", default=attention.n_heads)
    n_kv = c.int("swa_num_key_value_heads", default=attention.n_kv_heads)
    if n_heads % n_kv:
        raise ValueError(f"{c.model}: {n_kv} sliding-window KV heads (swa_num_key_value_heads) "
                         f"cannot serve {n_heads} query heads")
    swa = Attention(n_heads=n_heads, n_kv_heads=n_kv,
                    head_dim=c.int("swa_head_dim", default=attention.head_dim),
                    v_head_dim=c.opt_int("swa_v_head_dim"), qkv_bias=attention.qkv_bias,
                    sliding_window=attention.sliding_window,
                    sinks=c.flag("add_swa_attention_sink_bias"))
    return tuple(LayerSpec(spec.mixer, spec.ffn, attention=swa if spec.mixer == "sliding" else full)
                 for spec in layers)


def _laguna_layers(c: _Fields, layers: tuple[LayerSpec, ...],
                   attention: Attention | None) -> tuple[LayerSpec, ...]:
    """Laguna: per-layer query heads (``num_attention_heads_per_layer``) over one KV-head count,
    and an output gate ``g_proj`` (transformers 5.24 ``LagunaAttention``): per head
    (``gating`` true or "per-head": hidden → heads) or per element (hidden → heads × head dim).
    The cache depends on the KV heads only; the weights on each layer's query heads."""
    if attention is None:
        return layers
    gating = c.get("gating", True)
    if gating not in (True, False, "per-head", "per-element"):
        raise ValueError(f"{c.field('gating')} must be true, false, 'per-head' or 'per-element', "
                         f"got {gating!r}")
    heads = (_int_list(c, "num_attention_heads_per_layer", len(layers))
             if c.has("num_attention_heads_per_layer") else [attention.n_heads] * len(layers))
    out = []
    for spec, n_heads in zip(layers, heads):
        if n_heads % attention.n_kv_heads:
            raise ValueError(f"{c.model}: {attention.n_kv_heads} KV heads cannot serve "
                             f"{n_heads} query heads (num_attention_heads_per_layer)")
        own = Attention(n_heads=n_heads, n_kv_heads=attention.n_kv_heads,
                        head_dim=attention.head_dim, qkv_bias=attention.qkv_bias,
                        o_bias=attention.o_bias, qk_norm="per_head",
                        sliding_window=attention.sliding_window if spec.mixer == "sliding" else None,
                        head_gate=gating in (True, "per-head"),
                        output_gate=gating == "per-element")
        out.append(LayerSpec(spec.mixer, spec.ffn, attention=own))
    return tuple(out)


#: Nemotron-NAS block fields vLLM 0.33 reads (nemotron_nas.py), and those it does not read,
#: which must be unset: a block whose attention is replaced by a linear layer, windowed, given
#: sink tokens or sparsified is built by vLLM as plain attention, so kvlib cannot size it.
_NAS_ATTENTION_UNREAD = ("replace_with_linear", "sparsify", "window_length", "num_sink_tokens",
                         "unshifted_sink", "use_prefill_window_in_sink_attention")
_NAS_FFN_UNREAD = ("replace_with_linear", "sparsify")
_NAS_KEYS = {"attention": {"no_op", "n_heads_in_group", *_NAS_ATTENTION_UNREAD},
             "ffn": {"no_op", "ffn_mult", "intermediate_size", "hidden_act", *_NAS_FFN_UNREAD}}


def _nas_intermediate(ffn: Mapping[str, Any], hidden: int, c: _Fields, i: int) -> int:
    """vLLM's ``_ffn_mult_to_intermediate_size``: int(2 · ffn_mult · hidden / 3) rounded up to a
    multiple of 256 (e.g. 5.25 × 8,192: 28,672); else the block's ``intermediate_size``."""
    if ffn.get("ffn_mult") is not None:
        mult = number(f"{c.model}: block_configs[{i}] ffn_mult", ffn["ffn_mult"], positive=True)
        size = int(2 * mult * hidden / 3)
        return -(-size // 256) * 256
    return positive_integer(f"{c.model}: block_configs[{i}] ffn intermediate_size",
                            ffn.get("intermediate_size"))


def _nas_layers(c: _Fields, n_layers: int, attention: Attention | None,
                hidden: int | None) -> tuple[LayerSpec, ...]:
    """Nemotron-NAS (DeciLM) ``block_configs``: one block per layer, as vLLM 0.33's
    ``DeciLMDecoderLayer`` builds it. ``attention.no_op``: no attention and no cache; else
    ``num_attention_heads // attention.n_heads_in_group`` KV heads; ``ffn.no_op``: no MLP; else
    an MLP of ``ffn_mult``'s width. A layer keeps a norm per part it has (input_layernorm with
    the attention, post_attention_layernorm with the MLP)."""
    blocks = c.get("block_configs")
    if not isinstance(blocks, (list, tuple)) or not all(
            isinstance(b, Mapping) and isinstance(b.get("attention"), Mapping)
            and isinstance(b.get("ffn"), Mapping) for b in blocks):
        raise ValueError(f"{c.field('block_configs')} must be a list of blocks, each with an "
                         "'attention' and an 'ffn' mapping")
    _checked(list(blocks), "block_configs", n_layers, c)
    if attention is None or hidden is None:
        raise ValueError(f"{c.model}: block_configs needs num_attention_heads and hidden_size")
    out = []
    for i, block in enumerate(blocks):
        att, ffn = block["attention"], block["ffn"]
        for name, part, unread in (("attention", att, _NAS_ATTENTION_UNREAD),
                                   ("ffn", ffn, _NAS_FFN_UNREAD)):
            unknown = sorted(map(str, set(part) - _NAS_KEYS[name]))
            if unknown:
                raise _cache_refusal(c, "block_configs", f"layer {i}: {name} fields "
                                     f"{', '.join(unknown)} unknown to kvlib")
            for key in unread:
                if _is_set(part.get(key)):
                    raise _cache_refusal(c, "block_configs", f"layer {i}: {key} set, which vLLM "
                                         "does not read")
            if not isinstance(part.get("no_op", False), bool):
                raise ValueError(f"{c.model}: block_configs[{i}] {name} no_op must be true or "
                                 f"false, got {part.get('no_op')!r}")
        if ffn.get("hidden_act") not in (None, c.get("hidden_act")):
            raise _weight_refusal(c, "block_configs", f"layer {i}: its own MLP activation "
                                  f"{ffn.get('hidden_act')!r}")
        has_attention, has_ffn = not att.get("no_op"), not ffn.get("no_op")
        geometry = None
        if has_attention:
            group = positive_integer(f"{c.model}: block_configs[{i}] n_heads_in_group",
                                     att.get("n_heads_in_group"))
            if attention.n_heads % group:
                raise ValueError(f"{c.model}: block_configs[{i}] n_heads_in_group ({group}) does "
                                 f"not divide the {attention.n_heads} query heads")
            geometry = Attention(n_heads=attention.n_heads, n_kv_heads=attention.n_heads // group,
                                 head_dim=attention.head_dim, qkv_bias=attention.qkv_bias,
                                 o_bias=attention.o_bias)
        out.append(LayerSpec("full" if has_attention else "none",
                             "dense" if has_ffn else "none", attention=geometry,
                             intermediate_size=(_nas_intermediate(ffn, hidden, c, i) if has_ffn
                                                else None),
                             norms=int(has_attention) + int(has_ffn)))
    return tuple(out)


# --- the config as transformers reads it ------------------------------------------------------

#: Keys that describe weights, remote code or quantized checkpoints, not the model's shapes:
#: dropped before transformers builds the model (``from_config`` builds no weights).
_WEIGHT_ONLY_KEYS = ("auto_map", "quantization_config", "_name_or_path")
#: Falcon's original "RefinedWebModel" configs use names transformers no longer reads.
_RW_RENAMES = {"n_head": "num_attention_heads", "n_layer": "num_hidden_layers"}


def transformers_config(config: Mapping[str, Any], n_layers: int | None = None) -> dict[str, Any]:
    """A copy of ``config`` as transformers 5.x reads it, optionally cut to ``n_layers`` layers.

    Drops weight-only keys, renames Falcon's RW fields, and, when cutting, keeps the first
    ``n_layers`` entries of every per-layer list (``layer_types``, ``hybrid_override_pattern``)
    so each kept layer has its true geometry.
    """
    out = copy.deepcopy(dict(config))
    for key in _WEIGHT_ONLY_KEYS:
        out.pop(key, None)
    if out.get("model_type") == "RefinedWebModel":
        out["model_type"] = "falcon"
        for old, new in _RW_RENAMES.items():
            if old in out:
                out[new] = out.pop(old)
    if n_layers is not None:
        text = text_config(out)
        total = read_config(config).n_layers
        if isinstance(n_layers, bool) or not isinstance(n_layers, int) or not 0 < n_layers <= total:
            raise ValueError(f"n_layers must be in 1..{total}, got {n_layers!r}")
        text["num_hidden_layers"] = n_layers
        for key in ("layer_types", "no_rope_layers", "layers_block_type", "attn_type_list",
                    "mlp_layer_types", "num_attention_heads_per_layer",
                    "block_configs", "indexer_types", "hybrid_layer_pattern",
                    "moe_layer_freq", "intermediate_size",
                    "activation_sparsity_pattern"):  # one entry per layer, where a list
            if isinstance(text.get(key), list):
                text[key] = text[key][:n_layers]
        if isinstance(text.get("hybrid_override_pattern"), str):
            text["hybrid_override_pattern"] = text["hybrid_override_pattern"][:n_layers]
    return out


# --- refusals ---------------------------------------------------------------------------------

def _is_set(value: Any) -> bool:
    """Whether a config value says something (null, false, 0 and empty containers do not)."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, tuple, Mapping)):
        return len(value) > 0
    if isinstance(value, numbers.Number):
        return value != 0
    return True


def _family_ignored(config: Mapping[str, Any], text: Mapping[str, Any]) -> dict[str, str]:
    """The FAMILY_IGNORED_KEYS of the outer and the text ``model_type``."""
    out: dict[str, str] = {}
    for cfg in (config, text):
        out.update(FAMILY_IGNORED_KEYS.get(str(cfg.get("model_type")), {}))
    return out


def _refuse_unmodelled(config: Mapping[str, Any], text: Mapping[str, Any], label: str
                       ) -> str | None:
    """Refuse a config that sets a field kvlib does not model: a field of ``REFUSED_KEYS`` (it
    changes the cache) or ``PARAMETER_REFUSED_KEYS`` (it changes the weights), or a key kvlib does
    not know, neither read nor ignored for the family, whose name looks cache-related.

    Known fields are named alone when there are any: the name-pattern guesses are reported only
    when no known field explains the refusal, so the message names what really stops the reader.
    Returns why the parameter count is refused when an unknown key's name looks like routed
    experts (``MOE_RELATED``), None otherwise: such a key changes no cache.
    """
    family = {**_family_ignored(config, text),
              **{key: "read" for cfg in (config, text)
                 for key in FAMILY_READ_KEYS.get(str(cfg.get("model_type")), ())}}
    known, guessed, weights, experts = [], [], [], []
    for cfg in (text, config) if text is not config else (config,):
        for key, value in cfg.items():
            if not isinstance(key, str) or not _is_set(value) or key in family:
                continue
            if key in REFUSED_KEYS:
                known.append(f"{key!r} ({REFUSED_KEYS[key]})")
            elif key in PARAMETER_REFUSED_KEYS:
                weights.append(f"{key!r} ({PARAMETER_REFUSED_KEYS[key]})")
            elif key in READ_KEYS or key in IGNORED_KEYS:
                continue
            elif CACHE_RELATED.search(key):
                guessed.append(f"{key!r} (unknown to kvlib; its name suggests a cache layout)")
            elif MOE_RELATED.search(key):
                experts.append(f"{key!r} (unknown to kvlib; its name suggests routed experts)")
    found = known or guessed
    if found:
        raise ValueError(f"{label}: config field{'s' if len(found) > 1 else ''} "
                         f"{', '.join(found)} change{'' if len(found) > 1 else 's'} what is "
                         "cached in a way kvlib does not model; refusing to guess the cache size")
    if weights:
        raise ValueError(f"{label}: config field{'s' if len(weights) > 1 else ''} "
                         f"{', '.join(weights)} change{'' if len(weights) > 1 else 's'} the "
                         "weights in a way kvlib does not model (the cache would be right, the "
                         "parameter count would not); refusing to guess")
    if experts:
        return (f"config field{'s' if len(experts) > 1 else ''} {', '.join(experts)} "
                f"change{'' if len(experts) > 1 else 's'} the weights in a way kvlib does not "
                "model (the cache is sized, the parameter count is not); refusing to guess")
    return None


# --- the reader -------------------------------------------------------------------------------

#: Config keys vLLM reads a model's maximum context from, smallest wins (``ModelConfig``'s
#: ``_get_and_verify_max_len``, vllm/config/model.py at commit 0052a5b8).
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "model_max_length", "max_target_positions", "max_sequence_length",
                 "max_seq_length", "seq_len")


def _max_model_len(c: _Fields, model_type: str) -> int | None:
    """The longest ``max_model_len`` vLLM accepts without ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``.

    vLLM's rule: the smallest of the length keys (``model_max_length`` wins when set), times
    the RoPE scaling ``factor`` unless the scaling type is llama3, longrope or su (YaRN starts
    from ``original_max_position_embeddings``; Gemma-3's length is already scaled). None when
    the config names no length even after transformers' class defaults (Falcon-7B's
    RefinedWebModel config): vLLM then assumes 2,048 tokens when no ``max_model_len`` is given
    and accepts any ``max_model_len`` that is given (``_get_and_verify_max_len`` in
    vllm/config/model.py, 0.33.0), so kvlib sets no limit.
    """
    lengths = {key: c.opt_int(key) for key in _MAX_LEN_KEYS if c.has(key)}
    if not lengths:
        return None
    derived = lengths.get("model_max_length") or min(lengths.values())
    rope = c.get("rope_parameters") or c.get("rope_scaling")
    if isinstance(rope, Mapping) and "gemma3" not in model_type:
        kind = rope.get("rope_type") or rope.get("type")
        if kind not in ("su", "longrope", "llama3", "default", None):
            if kind == "yarn":
                derived = positive_integer(f"{c.model}: rope_scaling original_max_position_"
                                           "embeddings", rope.get("original_max_position_embeddings"))
            derived = derived * number(f"{c.model}: rope_scaling factor", rope.get("factor", 1.0),
                                       positive=True)
    if not math.isfinite(derived):
        raise ValueError(f"{c.model}: the RoPE-scaled maximum context overflows a float")
    return int(derived)


def _check_per_layer_fields(c: _Fields, n_layers: int) -> None:
    """Per-layer lists that are read only to be sure they change nothing kvlib models.

    ``attn_type_list`` (MiniMax) is read as the layer pattern (``_mixers``): 1 is softmax
    attention on that layer, 0 lightning (linear) attention with a constant state; MiniMax-M2
    lists only 1s.
    ``num_attention_heads_per_layer`` (Laguna): query heads per layer; the KV heads stay
    ``num_key_value_heads`` (transformers laguna/modeling_laguna.py), so only differing entries
    matter, and they change the weights, not the cache: read for Laguna (``_laguna_layers``),
    refused elsewhere.
    ``qk_head_dim`` (GLM-5, MLA): qk_nope_head_dim + qk_rope_head_dim, as transformers
    recomputes it; without an MLA latent it would be a K head dim unlike V's, not modelled.
    """
    if c.has("num_attention_heads_per_layer"):
        heads = [integer(f"{c.field('num_attention_heads_per_layer')} entry", h, 1)
                 for h in _int_list(c, "num_attention_heads_per_layer", n_layers)]
        if set(heads) != {c.get("num_attention_heads")} and c.get("model_type") != "laguna":
            raise ValueError(f"{c.model}: config field 'num_attention_heads_per_layer' (query heads "
                             f"{sorted(set(map(str, heads)))} per layer) changes the weights in a way "
                             "kvlib does not model (the cache would be right, the parameter count "
                             "would not); refusing to guess")
    if c.has("qk_head_dim"):
        if not c.has("kv_lora_rank"):
            raise ValueError(f"{c.model}: config field 'qk_head_dim' without an MLA latent "
                             "(kv_lora_rank): a key head dim unlike the value head dim changes what "
                             "is cached in a way kvlib does not model; refusing to guess the cache size")
        total = c.int("qk_nope_head_dim", default=0, minimum=0) + c.int("qk_rope_head_dim")
        if c.int("qk_head_dim") != total:
            raise ValueError(f"{c.model}: qk_head_dim ({c.int('qk_head_dim')}) is not "
                             f"qk_nope_head_dim + qk_rope_head_dim ({total})")


def read_config(config: Mapping[str, Any], name: str | None = None) -> Architecture:
    """The :class:`Architecture` a Hugging Face ``config.json`` (as a dict) describes.

    Reads ``text_config`` for multimodal wrappers (the vision tower is not described) and the
    outer ``tie_word_embeddings``/dtype where the text config has none. Raises ValueError naming
    the model and the field that is missing, invalid, or describes a cache kvlib does not model.
    """
    if not isinstance(config, Mapping) or not config:
        raise ValueError("config is empty: expected the fields of a Hugging Face config.json")
    text = text_config(config)
    label = name or str(config.get("_name_or_path") or config.get("model_type") or "model")
    experts_unmodelled = _refuse_unmodelled(config, text, label)
    wrapped, widths = config is not text, None
    if text.get("model_type") == "gemma3n_text":
        text, widths = _gemma3n_widths(text, label)
    c = _Fields(text, label)
    model_type = str(c.get("model_type") or "")
    n_layers = _layer_count(c)
    _check_per_layer_fields(c, n_layers)
    layers = _layers(c, n_layers)
    mixers = frozenset(spec.mixer for spec in layers)
    hidden = c.opt_int(*_HIDDEN_KEYS)
    attention = (_attention(c, model_type, mixers)
                 if mixers & {"full", "sliding", "chunked", "parallel"} else None)
    _check_v_head_dim(c, model_type, attention, mixers)
    mlp = _mlp(c, model_type, hidden, _gated(c, model_type))
    if model_type == "gemma4_text":
        layers = _gemma4_layers(c, layers, attention)
    elif model_type == "laguna":
        layers = _laguna_layers(c, layers, attention)
    elif model_type == "gemma3n_text":
        layers = _gemma3n_layers(c, layers, widths)
    elif model_type in _MIMO_TYPES:
        layers = _mimo_layers(c, layers, attention)
    elif model_type in ("glm_moe_dsa", "deepseek_v32") and c.has("index_n_heads"):
        layers = _shared_indexer_layers(c, layers)
    elif model_type == "nemotron-nas":
        layers = _nas_layers(c, n_layers, attention, hidden)
        mixers = frozenset(spec.mixer for spec in layers)
        own = [spec.attention for spec in layers if spec.attention is not None]
        attention = own[0] if own else None  # the shared record: the first attention layer's
        widths = [spec.intermediate_size for spec in layers if spec.intermediate_size]
        mlp = MLP(intermediate_size=max(widths, default=None), gated=mlp.gated, bias=mlp.bias)
    tie = c.flag("tie_word_embeddings", _Fields(config, label).flag("tie_word_embeddings", True))
    notes = []
    mtp_layers = (c.opt_int("num_nextn_predict_layers", minimum=0)
                  or c.opt_int("mtp_num_hidden_layers", minimum=0) or 0)
    if mtp_layers or c.flag("use_mtp"):
        notes.append("multi-token-prediction layers not counted")
    if wrapped:
        notes.append("vision tower not counted (text_config only)")
    quant = config.get("quantization_config") or text.get("quantization_config")
    return Architecture(
        name=label, model_type=model_type, layers=layers, hidden_size=hidden,
        vocab_size=c.opt_int("vocab_size"), tie_word_embeddings=tie,
        embed_dim=c.opt_int("word_embed_proj_dim") or hidden,
        learned_positions=model_type == "opt",
        attention=attention,
        mla=_mla(c) if "mla" in mixers else None,
        mamba1=_mamba1(c, model_type) if "mamba1" in mixers else None,
        mamba2=_mamba2(c) if mixers & {"mamba2", "parallel"} else None,
        gated_deltanet=_gated_deltanet(c) if "gated_deltanet" in mixers else None,
        lightning=_lightning(c) if "lightning" in mixers else None,
        mlp=mlp, moe=_moe(c, model_type),
        layer_norms=_layer_norms(c, model_type),
        norm_bias=model_type in _LAYER_NORM_BIAS_TYPES,
        embedding_norm=model_type == "bloom",
        final_norm=not c.flag("_remove_final_layer_norm"),
        dtype=_dtype((text, config), ("torch_dtype", "dtype"), label),
        ssm_dtype=_dtype((text, config), ("mamba_ssm_cache_dtype", "mamba_ssm_dtype"), label),
        quant_method=(str(quant.get("quant_method", "")) if isinstance(quant, Mapping) else None),
        max_position_embeddings=c.opt_int("max_position_embeddings"),
        max_model_len=_max_model_len(c, model_type), notes=tuple(notes), mtp_layers=mtp_layers,
        weights_unmodelled=(_gemma3n_weights(c) if model_type == "gemma3n_text"
                            else experts_unmodelled),
        architectures=tuple(str(a) for a in config.get("architectures") or ()))
