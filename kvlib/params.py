"""Parameter counts from a Hugging Face ``config.json``, by component, and weight bytes.

Counts follow the module shapes of the reference implementations (transformers / vLLM):

* embeddings (``vocab × hidden``) and the LM head (0 when ``tie_word_embeddings``, whose
  transformers default is true);
* attention: MHA/GQA/MQA ``q, k, v, o`` projections (+ biases, q/k norms, gpt-oss sinks,
  the gated output of Qwen3-Next/3.5), or MLA (DeepSeek-V2/V3, Kimi-K2) low-rank projections;
* dense MLPs (gated ``3·h·I`` for SiLU/GELU-gated models, ``2·h·I`` for OPT/Falcon/relu²);
* MoE: every routed expert (all resident), shared experts and routers;
* recurrent mixers: Mamba-2 (Nemotron-H) and Gated DeltaNet (Qwen3-Next, Qwen3.5);
* norms.

Not counted, by design: multi-token-prediction heads (``num_nextn_predict_layers``,
``mtp_*`` — engines load them only for speculative decoding) and vision towers of
multimodal wrappers (only ``text_config`` is read). Publishers' round numbers ("671B",
"8B") therefore differ from these counts by the amounts ``tests/test_params.py`` lists.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .units import DTYPE_BITS

#: Components whose weights a quantized checkpoint stores in the quantized format; all other
#: components (embeddings, LM head, norms, routers, biases, small state vectors) stay 16-bit,
#: as in FP8/AWQ/GPTQ/MXFP4 checkpoints served by vLLM.
LINEAR_COMPONENTS = ("attention", "mlp", "experts", "shared_experts", "recurrent")
COMPONENTS = ("embedding", "position_embedding", "lm_head", "attention", "mlp", "experts",
              "shared_experts", "router", "recurrent", "norms", "small")

#: Effective bits per weight of the storage formats kvlib accepts for weights: the plain dtypes
#: of ``units.DTYPE_BITS`` plus block-scaled formats, scales included.
#: mxfp4: 4-bit E2M1 + one 8-bit E8M0 scale per 32 values (OCP MX spec) = 4.25 bits;
#: nvfp4: 4-bit + one FP8 scale per 16 values = 4.5 bits;
#: int4-g128: 4-bit + one fp16 scale per 128 values (GPTQ/AWQ group size 128) = 4.125 bits
#: (AWQ's 4-bit zero points add 4/128 more: ``int4-g128-zp`` = 4.15625 bits).
WEIGHT_FORMAT_BITS: dict[str, float] = {
    **{k: float(v) for k, v in DTYPE_BITS.items()},
    "mxfp4": 4.25,
    "nvfp4": 4.5,
    "int4-g128": 4.125,
    "int4-g128-zp": 4.15625,
}

#: transformers class defaults for fields some published configs omit (Gemma-3's text_config
#: has no ``vocab_size``; ``Gemma3TextConfig`` supplies 262,208).
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "hidden_activation": "gelu_pytorch_tanh"},
}


def weight_bits(fmt: str) -> float:
    """Effective bits per weight of a storage format; ValueError for an unknown name."""
    try:
        return WEIGHT_FORMAT_BITS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"unknown weight format {fmt!r}; known: "
                         f"{', '.join(WEIGHT_FORMAT_BITS)}") from None


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of one model by component (numbers of values, not bytes).

    ``components``: component → count (keys from ``COMPONENTS``);
    ``kv_proj_params``/``n_kv_heads``: K/V projection weights and KV heads of the softmax
    attention layers (replicated per GPU when tensor parallelism exceeds the KV heads);
    ``n_experts``/``experts_per_token``: routed experts per MoE layer and how many a token
    uses (0 for dense models); ``n_moe_layers``: layers with routed experts.
    """

    name: str
    components: Mapping[str, int]
    n_experts: int = 0
    experts_per_token: int = 0
    n_moe_layers: int = 0
    tied_embeddings: bool = False
    kv_proj_params: int = 0
    n_kv_heads: int = 0
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def total(self) -> int:
        """Every parameter held in memory (all experts; embeddings once when tied)."""
        return sum(self.components.values())

    @property
    def routed_expert_params(self) -> int:
        return self.components.get("experts", 0)

    @property
    def active(self) -> int:
        """Parameters a single token touches: total minus the routed experts it skips."""
        if not self.n_experts:
            return self.total
        used = self.routed_expert_params * self.experts_per_token // self.n_experts
        return self.total - self.routed_expert_params + used

    @property
    def matmul_active(self) -> int:
        """Active parameters that take part in matrix multiplies for one token.

        The input embedding is a table lookup, not a matmul; when it is tied, its matrix
        still serves as the LM head, so it is counted once.
        """
        lookup = 0 if self.tied_embeddings else self.components.get("embedding", 0)
        return self.active - lookup - self.components.get("position_embedding", 0)

    def expert_params_per_expert(self) -> int:
        """Parameters of one routed expert in one layer (0 for dense models)."""
        if not self.n_experts or not self.n_moe_layers:
            return 0
        return self.routed_expert_params // (self.n_experts * self.n_moe_layers)


# --- config access ------------------------------------------------------------------------

class _Cfg:
    def __init__(self, cfg: Mapping[str, Any], name: str) -> None:
        self.cfg, self.name = cfg, name
        self.defaults = _FAMILY_DEFAULTS.get(str(cfg.get("model_type")), {})

    def get(self, key: str, default: Any = None) -> Any:
        value = self.cfg.get(key)
        if value is None:
            value = self.defaults.get(key, default)
        return value

    def int(self, *keys: str, default: int | None = None) -> int:
        for key in keys:
            value = self.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(f"{self.name}: config field {key!r} must be a non-negative "
                                     f"integer, got {value!r}")
                return value
        if default is not None:
            return default
        raise ValueError(f"{self.name}: config field {' / '.join(map(repr, keys))} is missing "
                         "(needed for the parameter count)")


def _text_and_outer(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    inner = config.get("text_config")
    if isinstance(inner, Mapping) and inner.get("num_hidden_layers") is not None:
        return inner, config
    return config, config


def _layer_kinds(c: _Cfg, n_layers: int) -> list[str]:
    """Mixer kind per layer: attention, mla, gated_deltanet, mamba2, mlp_only, moe_only."""
    if c.get("hybrid_override_pattern"):
        table = {"M": "mamba2", "*": "attention", "-": "mlp_only", "E": "moe_only"}
        return [table[ch] for ch in c.get("hybrid_override_pattern")]
    if c.get("kv_lora_rank") is not None:
        return ["mla"] * n_layers
    types = c.get("layer_types")
    if types and any(t == "linear_attention" for t in types):
        return ["gated_deltanet" if t == "linear_attention" else "attention" for t in types]
    if c.get("full_attention_interval"):
        every = c.int("full_attention_interval")
        return ["attention" if (i + 1) % every == 0 else "gated_deltanet" for i in range(n_layers)]
    return ["attention"] * n_layers


def _is_moe_layer(c: _Cfg, i: int) -> bool:
    n_experts = c.int("num_local_experts", "num_experts", "n_routed_experts", default=0)
    if not n_experts:
        return False
    if i in (c.get("mlp_only_layers") or []):
        return False
    first_dense = c.int("first_k_dense_replace", default=0)
    if i < first_dense:
        return False
    step = c.int("decoder_sparse_step", "moe_layer_freq", default=1) or 1
    return (i + 1) % step == 0 if c.get("decoder_sparse_step") else (i - first_dense) % step == 0


def _gated(c: _Cfg) -> bool:
    act = str(c.get("hidden_act") or c.get("hidden_activation") or c.get("activation_function")
              or c.get("mlp_hidden_act") or "silu")
    model_type = str(c.get("model_type"))
    if model_type in ("opt", "RefinedWebModel", "falcon", "gpt2", "gpt_bigcode"):
        return False
    return act not in ("relu2", "relu", "gelu_new")


def _attention_params(c: _Cfg, hidden: int) -> tuple[int, int, int, int]:
    """(linear, bias+small, norms, kv_linear) parameters of one softmax-attention layer."""
    n_heads = c.int("num_attention_heads", "n_head")
    model_type = str(c.get("model_type"))
    if c.get("multi_query") and not c.get("new_decoder_architecture"):
        n_kv = 1
    else:
        n_kv = c.int("num_key_value_heads", "num_kv_heads", default=n_heads)
    head_dim = c.get("head_dim") or hidden // n_heads
    q_out = n_heads * head_dim
    gate = model_type.startswith("qwen3_next") or (
        model_type.startswith("qwen3_5") and c.get("attn_output_gate", True))
    kv_linear = 2 * hidden * n_kv * head_dim
    linear = hidden * q_out * (2 if gate else 1) + kv_linear + q_out * hidden
    small = 0
    qkv_bias = (c.get("attention_bias") or c.get("qkv_bias") or model_type == "qwen2"
                or model_type == "opt" or (c.get("bias") is True))
    if qkv_bias:
        small += q_out + 2 * n_kv * head_dim
    if c.get("attention_bias") or model_type == "opt" or c.get("bias") is True:
        small += hidden  # o_proj bias
    if model_type == "gpt_oss":
        small += n_heads  # attention sinks
    norms = 0
    if model_type.startswith(("qwen3", "gemma3")) or c.get("use_qk_norm"):
        if c.get("qk_norm_type") == "per_layer":  # MiniMax: norms over all heads
            norms += q_out + n_kv * head_dim
        else:
            norms += 2 * head_dim
    return linear, small, norms, kv_linear


def _mla_params(c: _Cfg, hidden: int) -> tuple[int, int]:
    """(linear, norms) parameters of one MLA layer (DeepSeek-V2/V3, Kimi-K2), plus the
    DeepSeek-V3.2 lightning indexer when the config has one."""
    n_heads = c.int("num_attention_heads")
    q_lora = c.get("q_lora_rank")
    kv_lora = c.int("kv_lora_rank")
    nope, rope = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim")
    v_dim = c.int("v_head_dim")
    qk = nope + rope
    norms = kv_lora
    if q_lora:
        linear = hidden * q_lora + q_lora * n_heads * qk
        norms += q_lora
    else:
        linear = hidden * n_heads * qk
    linear += hidden * (kv_lora + rope) + kv_lora * n_heads * (nope + v_dim)
    linear += n_heads * v_dim * hidden
    if c.get("index_n_heads"):  # DeepSeek-V3.2 indexer: wq_b, wk, k_norm (w+b), weights_proj
        ih, idim = c.int("index_n_heads"), c.int("index_head_dim")
        linear += (q_lora or hidden) * ih * idim + hidden * idim + hidden * ih
        norms += 2 * idim
    return linear, norms


def _mamba2_params(c: _Cfg, hidden: int) -> tuple[int, int]:
    """(linear, small) parameters of one Mamba-2 mixer (Nemotron-H shapes)."""
    heads, hd = c.int("mamba_num_heads"), c.int("mamba_head_dim")
    state, groups, kernel = c.int("ssm_state_size"), c.int("n_groups"), c.int("conv_kernel")
    d_inner = heads * hd
    conv_dim = d_inner + 2 * groups * state
    linear = hidden * (2 * d_inner + 2 * groups * state + heads) + d_inner * hidden
    small = conv_dim * kernel + 3 * heads + d_inner  # conv weight, dt_bias/A_log/D, gated norm
    if c.get("use_conv_bias", True):
        small += conv_dim
    if c.get("mamba_proj_bias"):
        small += 2 * d_inner + 2 * groups * state + heads + hidden
    return linear, small


def _gdn_params(c: _Cfg, hidden: int) -> tuple[int, int]:
    """(linear, small) parameters of one Gated DeltaNet mixer (Qwen3-Next / Qwen3.5)."""
    nk, nv = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
    dk, dv = c.int("linear_key_head_dim"), c.int("linear_value_head_dim")
    kernel = c.int("linear_conv_kernel_dim")
    conv_dim = 2 * nk * dk + nv * dv
    linear = hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv + nv * dv * hidden
    small = conv_dim * kernel + 2 * nv + dv  # conv, dt_bias + A_log, gated norm weight
    return linear, small


def count_params(config: Mapping[str, Any], name: str | None = None) -> ParamCounts:
    """Parameter counts of the model a Hugging Face ``config.json`` (as a dict) describes.

    Reads ``text_config`` for multimodal wrappers (the vision tower is not counted) and the
    outer ``tie_word_embeddings``. Raises ValueError naming a missing field.
    """
    if not isinstance(config, Mapping) or not config:
        raise ValueError("config is empty: expected the fields of a Hugging Face config.json")
    text, outer = _text_and_outer(config)
    label = name or str(config.get("_name_or_path") or config.get("model_type") or "model")
    c = _Cfg(text, label)
    model_type = str(c.get("model_type"))
    hidden = c.int("hidden_size", "d_model", "n_embd")
    n_layers = c.int("num_hidden_layers", "n_layer", "num_layers")
    vocab = c.int("vocab_size")
    tie = text.get("tie_word_embeddings", outer.get("tie_word_embeddings", True))
    comp = dict.fromkeys(COMPONENTS, 0)
    notes: list[str] = []

    # Embeddings, LM head, final norm
    embed_dim = c.int("word_embed_proj_dim", default=hidden)
    comp["embedding"] = vocab * embed_dim
    comp["lm_head"] = 0 if tie else vocab * hidden
    layernorm_bias = model_type in ("opt", "RefinedWebModel", "falcon")
    norm_size = hidden * (2 if layernorm_bias else 1)
    comp["norms"] += norm_size  # final norm
    if model_type == "opt":
        comp["position_embedding"] = (c.int("max_position_embeddings") + 2) * hidden
        if embed_dim != hidden:
            comp["small"] += 2 * hidden * embed_dim

    kinds = _layer_kinds(c, n_layers)
    if len(kinds) != n_layers:
        raise ValueError(f"{label}: layer pattern describes {len(kinds)} layers but "
                         f"num_hidden_layers is {n_layers}")
    n_experts = c.int("num_local_experts", "num_experts", "n_routed_experts", default=0)
    topk = c.int("num_experts_per_tok", "experts_per_token", default=0)
    gated = _gated(c)
    mats = 3 if gated else 2
    dense_inter = c.get("intermediate_size") or c.get("ffn_dim") or (
        4 * hidden if model_type in ("RefinedWebModel", "falcon") else None)
    moe_inter = c.get("moe_intermediate_size") or c.get("intermediate_size")
    shared_inter = c.get("shared_expert_intermediate_size")
    if shared_inter is None:
        shared_inter = c.get("moe_shared_expert_intermediate_size")
    if shared_inter is None and c.get("n_shared_experts"):
        shared_inter = c.int("n_shared_experts") * moe_inter
    kv_total = 0
    n_kv = 0
    n_moe_layers = 0
    per_layer_norms = 4 if model_type.startswith("gemma") else 2
    if model_type in ("RefinedWebModel", "falcon") and not c.get("new_decoder_architecture"):
        per_layer_norms = 1
    if c.get("hybrid_override_pattern"):
        per_layer_norms = 1  # Nemotron-H: one pre-norm per block

    for i, kind in enumerate(kinds):
        comp["norms"] += per_layer_norms * norm_size
        if kind == "attention":
            lin, small, norms, kv = _attention_params(c, hidden)
            comp["attention"] += lin
            comp["small"] += small
            comp["norms"] += norms
            kv_total += kv
            n_kv = c.int("num_key_value_heads", "num_kv_heads",
                         default=1 if c.get("multi_query") else c.int("num_attention_heads",
                                                                       "n_head"))
        elif kind == "mla":
            lin, norms = _mla_params(c, hidden)
            comp["attention"] += lin
            comp["norms"] += norms
        elif kind == "mamba2":
            lin, small = _mamba2_params(c, hidden)
            comp["recurrent"] += lin
            comp["small"] += small
        elif kind == "gated_deltanet":
            lin, small = _gdn_params(c, hidden)
            comp["recurrent"] += lin
            comp["small"] += small
        # The feed-forward part of the layer
        if kind in ("mamba2", "attention") and c.get("hybrid_override_pattern"):
            continue  # Nemotron-H: mixer-only blocks
        moe = kind == "moe_only" or (kind != "mlp_only" and _is_moe_layer(c, i))
        if moe:
            n_moe_layers += 1
            expert_mats = 3 if gated else 2
            per_expert = expert_mats * hidden * moe_inter
            if model_type == "gpt_oss":  # biases on gate_up (2I) and down (h)
                per_expert += 2 * moe_inter + hidden
            comp["experts"] += n_experts * per_expert
            comp["router"] += hidden * n_experts
            if model_type == "gpt_oss" or c.get("use_routing_bias") or (
                    c.get("topk_method") == "noaux_tc") or model_type == "nemotron_h":
                comp["router"] += n_experts  # router bias / e_score_correction_bias
            if shared_inter:
                comp["shared_experts"] += expert_mats * hidden * shared_inter
                if model_type.startswith(("qwen2_moe", "qwen3_next", "qwen3_5")):
                    comp["router"] += hidden  # shared_expert_gate
        else:
            inter = dense_inter
            if inter is None:
                raise ValueError(f"{label}: config field 'intermediate_size' is missing")
            comp["mlp"] += mats * hidden * inter
            if model_type == "opt" or c.get("mlp_bias") or c.get("bias") is True:
                comp["small"] += inter + hidden
    if c.get("num_nextn_predict_layers") or c.get("mtp_num_hidden_layers") or c.get("use_mtp"):
        notes.append("multi-token-prediction layers not counted")
    if config is not text:
        notes.append("vision tower not counted (text_config only)")
    return ParamCounts(name=label, components=comp, n_experts=n_experts if n_moe_layers else 0,
                       experts_per_token=topk if n_moe_layers else 0, n_moe_layers=n_moe_layers,
                       tied_embeddings=bool(tie), kv_proj_params=kv_total, n_kv_heads=n_kv,
                       notes=tuple(notes))


def weight_bytes(counts: ParamCounts, weight_dtype: str | Mapping[str, str] = "bf16",
                 tp: int = 1) -> int:
    """Bytes of weights one GPU holds under tensor parallelism ``tp``.

    ``weight_dtype``: a format name (``WEIGHT_FORMAT_BITS``) applied to every linear layer
    (attention, MLP, experts, shared experts, recurrent projections), with embeddings, LM head,
    norms and routers kept 16-bit unless the format is itself 16/32-bit; or a mapping
    component → format (e.g. ``{"experts": "mxfp4"}`` for gpt-oss, ``{"mlp": "fp8"}`` for
    Meta's Llama-3.1-405B-FP8), other components 16-bit.
    Sharded components are divided by ``tp``; norms, routers and small vectors are
    replicated; K/V projections are replicated when ``tp`` exceeds the KV heads.
    """
    if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0:
        raise ValueError(f"tp (tensor-parallel degree) must be a positive integer, got {tp!r}")
    if isinstance(weight_dtype, Mapping):
        unknown = sorted(set(weight_dtype) - set(COMPONENTS))
        if unknown:
            raise ValueError(f"weight_dtype names unknown components {unknown}; "
                             f"known: {', '.join(COMPONENTS)}")
        bits = {k: weight_bits(v) for k, v in weight_dtype.items()}
        default_bits = 16.0
        bits_of = {comp: bits.get(comp, default_bits) for comp in COMPONENTS}
    else:
        b = weight_bits(weight_dtype)
        other = b if b >= 16 else 16.0
        bits_of = {comp: (b if comp in LINEAR_COMPONENTS else other) for comp in COMPONENTS}
    total_bits = 0.0
    replicated = {"norms", "router", "small", "position_embedding"}
    for comp, n in counts.components.items():
        if not n:
            continue
        if comp in replicated:
            per_gpu = n
        elif comp == "attention" and counts.n_kv_heads and tp > counts.n_kv_heads:
            # each GPU holds a full copy of one KV head's K/V projections
            kv = counts.kv_proj_params
            per_gpu = (n - kv) / tp + kv / counts.n_kv_heads
        else:
            per_gpu = n / tp
        total_bits += per_gpu * bits_of[comp]
    return math.ceil(total_bits / 8)


def params_for(model: Any) -> ParamCounts:
    """Parameter counts for a registry slug, a ``Model`` or a config dict (memoized).

    A ``Model`` keeps only its text config; when it comes from the registry (same name and
    text config) the full published config is used, so a wrapper's outer
    ``tie_word_embeddings`` is honoured.
    """
    from .model import Model

    if isinstance(model, Model):
        key = (model.name, model.layers, json.dumps(dict(model.config), sort_keys=True,
                                                    default=str))
        if key not in _PARAMS_CACHE:
            _PARAMS_CACHE[key] = _params_for(model)
        return _PARAMS_CACHE[key]
    return _params_for(model)


_PARAMS_CACHE: dict[tuple, ParamCounts] = {}


def _params_for(model: Any) -> ParamCounts:
    from .model import Model
    from .registry import model_record, model_slugs

    if isinstance(model, str):
        record = model_record(model)
        return count_params(record["config"], record.get("name", model))
    if isinstance(model, Model):
        for slug in model_slugs():
            record = model_record(slug)
            if record.get("name") != model.name:
                continue
            text, _ = _text_and_outer(record["config"])
            if dict(text) == dict(model.config):
                return count_params(record["config"], model.name)
        if not model.config:
            raise ValueError(f"model {model.name!r} carries no config: parameter counts need "
                             "the config.json fields (build it with Model.from_hf_config)")
        return count_params(model.config, model.name)
    if isinstance(model, Mapping):
        return count_params(model)
    raise TypeError(f"expected a registry slug, a Model or a config dict, got {type(model)!r}")
