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

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..core.checks import positive_integer
from .formats import COMPONENTS, WeightFormat, weight_bits, weight_format
from .hf_config import (MLA, Architecture, Attention, GatedDeltaNet, Lightning, Mamba1, Mamba2,
                        read_config)
from .model import Model, model_from_architecture

@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of one model by component (numbers of values, not bytes).

    ``components``: component → count (keys from ``COMPONENTS``);
    ``kv_proj_params``/``n_kv_heads``: K/V projection weights and KV heads of the softmax
    attention layers (replicated per GPU when tensor parallelism exceeds the KV heads);
    ``n_experts``/``experts_per_token``: routed experts per MoE layer and how many a token
    uses (0 for dense models); ``n_moe_layers``: layers with routed experts; ``architecture``:
    the record counted (None for counts built by hand), whose heads say which tensor-parallel
    degrees the attention and recurrent weights split over (``weight_bytes``).
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
    architecture: Architecture | None = field(default=None, compare=False, repr=False)

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


# --- counts by component, from the architecture record -------------------------------------

def _need(value: int | None, label: str, field: str) -> int:
    """A record field the parameter count cannot do without."""
    if value is None:
        raise ValueError(f"{label}: config field {field!r} is missing (needed for the parameter "
                         "count)")
    return value


def _attention_params(att: Attention, hidden: int) -> tuple[int, int, int, int]:
    """(linear, bias+small, norms, kv_linear) parameters of one softmax-attention layer."""
    q_out = att.n_heads * att.head_dim
    kv_out = att.n_kv_heads * att.head_dim
    v_dim = att.v_head_dim or att.head_dim  # MiMo-V2: V heads narrower than K's
    v_out = 0 if att.k_eq_v else att.n_kv_heads * v_dim  # Gemma-4 global: no v_proj
    kv_linear = hidden * (kv_out + v_out)
    linear = (hidden * q_out * (2 if att.output_gate else 1) + kv_linear
              + att.n_heads * v_dim * hidden + (hidden * att.n_heads if att.head_gate else 0))
    small = 0
    if att.qkv_bias:
        small += q_out + kv_out + v_out
    if att.o_bias:
        small += hidden  # o_proj bias
    if att.sinks:
        small += att.n_heads  # attention sinks (gpt-oss)
    norms = 0
    if att.qk_norm == "per_layer":  # MiniMax: norms over all heads
        norms += q_out + kv_out
    elif att.qk_norm == "per_head":
        norms += 2 * att.head_dim
    return linear, small, norms, kv_linear


def _mla_params(mla: MLA, hidden: int, label: str,
                indexer: bool = True) -> tuple[int, int]:
    """(linear, norms) parameters of one MLA layer (DeepSeek-V2/V3, Kimi-K2), plus the
    DeepSeek-V3.2 lightning indexer when the config has one and the layer runs it (``indexer``;
    vLLM drops a shared layer's indexer weights when loading)."""
    n_heads, q_lora, kv_lora, rope = (mla.n_heads, mla.q_lora_rank, mla.kv_lora_rank,
                                      mla.qk_rope_head_dim)
    nope = _need(mla.qk_nope_head_dim, label, "qk_nope_head_dim")
    v_dim = _need(mla.v_head_dim, label, "v_head_dim")
    qk = nope + rope
    norms = kv_lora
    if q_lora:
        linear = hidden * q_lora + q_lora * n_heads * qk
        norms += q_lora
    else:
        linear = hidden * n_heads * qk
    linear += hidden * (kv_lora + rope) + kv_lora * n_heads * (nope + v_dim)
    linear += n_heads * v_dim * hidden
    if mla.indexer is not None and indexer:  # DeepSeek-V3.2 indexer: wq_b, wk, k_norm (w+b), weights_proj
        ih, idim = mla.indexer.n_heads, mla.indexer.head_dim
        linear += (q_lora or hidden) * ih * idim + hidden * idim + hidden * ih
        norms += 2 * idim
    return linear, norms


def _mamba1_params(m: Mamba1, hidden: int) -> tuple[int, int]:
    """(linear, small) parameters of one Mamba-1 mixer (transformers ``MambaMixer`` /
    ``JambaMambaMixer`` shapes): in_proj to x and z, a depthwise conv, x_proj to dt, B and C,
    dt_proj back to the channels, A and D, out_proj; Jamba adds RMS norms on dt, B and C."""
    d, s, r = m.d_inner, m.state_size, m.dt_rank
    linear = hidden * 2 * d + d * (r + 2 * s) + r * d + d * hidden
    small = d * m.conv_kernel + d + d * s + d  # conv weight, dt_proj bias, A_log, D
    if m.conv_bias:
        small += d
    if m.proj_bias:
        small += 2 * d + hidden
    if m.bcdt_norms:
        small += r + 2 * s
    return linear, small


def _mamba2_params(m: Mamba2, hidden: int) -> tuple[int, int]:
    """(linear, small) parameters of one Mamba-2 mixer (Nemotron-H / Falcon-H1 / Granite-4.0-H
    shapes): in_proj to z, x, B, C and dt; a depthwise conv over x, B, C; dt_bias, A_log, D; a
    gated RMS norm; out_proj."""
    heads, state, groups, d_inner = m.n_heads, m.state_size, m.n_groups, m.d_inner
    conv_dim = d_inner + 2 * groups * state
    in_width = 2 * d_inner + 2 * groups * state + heads
    linear = hidden * in_width + d_inner * hidden
    small = conv_dim * m.conv_kernel + 3 * heads  # conv weight, dt_bias/A_log/D
    if m.gated_norm:
        small += d_inner
    if m.conv_bias:
        small += conv_dim
    if m.proj_bias:
        small += in_width
    if m.out_bias:
        small += hidden
    return linear, small


def _gdn_params(g: GatedDeltaNet, hidden: int) -> tuple[int, int]:
    """(linear, small) parameters of one Gated DeltaNet mixer (Qwen3-Next / Qwen3.5)."""
    nk, nv, dk, dv = g.n_k_heads, g.n_v_heads, g.k_head_dim, g.v_head_dim
    conv_dim = 2 * nk * dk + nv * dv
    linear = hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv + nv * dv * hidden
    small = conv_dim * g.conv_kernel + 2 * nv + dv  # conv, dt_bias + A_log, gated norm weight
    return linear, small


def _lightning_params(g: Lightning, hidden: int) -> tuple[int, int]:
    """(linear, norm) parameters of one MiniMax lightning-attention mixer: qkv_proj (hidden →
    3 · heads · head_dim), output_gate (hidden → heads · head_dim), out_proj (back to hidden), no
    biases, and an RMS norm over heads · head_dim (modeling_minimax_m1.py
    MiniMaxM1LightningAttention; transformers models/minimax MiniMaxLightningAttention)."""
    inner = g.n_heads * g.head_dim
    return hidden * 3 * inner + hidden * inner + inner * hidden, inner


def count_architecture(arch: Architecture) -> ParamCounts:
    """Parameter counts of an architecture record (:func:`kvlib.model.hf_config.read_config`).

    Raises ValueError naming a config field the count needs and the record lacks, or the fields
    that add weights the record does not describe (``weights_unmodelled``: Gemma-3n).
    """
    label = arch.name
    if arch.weights_unmodelled:
        raise ValueError(f"{label}: {arch.weights_unmodelled}")
    hidden = _need(arch.hidden_size, label, "hidden_size")
    vocab = _need(arch.vocab_size, label, "vocab_size")
    comp = dict.fromkeys(COMPONENTS, 0)

    # Embeddings, LM head, final norm
    embed_dim = arch.embed_dim or hidden
    comp["embedding"] = vocab * embed_dim
    comp["lm_head"] = 0 if arch.tie_word_embeddings else vocab * hidden
    norm_size = hidden * (2 if arch.norm_bias else 1)
    comp["norms"] += norm_size if arch.final_norm else 0  # final norm
    comp["norms"] += norm_size if arch.embedding_norm else 0  # BLOOM's embedding norm
    if arch.learned_positions:  # OPT: max positions + 2 offset rows (+ its projections)
        rows = _need(arch.max_position_embeddings, label, "max_position_embeddings") + 2
        comp["position_embedding"] = rows * hidden
        if embed_dim != hidden:
            comp["small"] += 2 * hidden * embed_dim

    moe, mlp = arch.moe, arch.mlp
    kv_total = n_kv = n_moe_layers = 0
    for spec in arch.layers:
        comp["norms"] += (arch.layer_norms if spec.norms is None else spec.norms) * norm_size
        if spec.mixer in ("full", "sliding", "chunked", "parallel"):
            att = spec.attention or arch.attention  # a layer's own geometry, else the shared one
            assert att is not None
            lin, small, norms, kv = _attention_params(att, hidden)
            comp["attention"] += lin
            comp["small"] += small
            comp["norms"] += norms
            kv_total += kv
            n_kv = att.n_kv_heads
        elif spec.mixer == "mla":
            assert arch.mla is not None
            lin, norms = _mla_params(arch.mla, hidden, label, not spec.shared_indexer)
            comp["attention"] += lin
            comp["norms"] += norms
        if spec.mixer in ("mamba2", "parallel"):
            assert arch.mamba2 is not None
            lin, small = _mamba2_params(arch.mamba2, hidden)
            comp["recurrent"] += lin
            comp["small"] += small
        elif spec.mixer == "mamba1":
            assert arch.mamba1 is not None
            lin, small = _mamba1_params(arch.mamba1, hidden)
            comp["recurrent"] += lin
            comp["small"] += small
        elif spec.mixer == "gated_deltanet":
            assert arch.gated_deltanet is not None
            lin, small = _gdn_params(arch.gated_deltanet, hidden)
            comp["recurrent"] += lin
            comp["small"] += small
        elif spec.mixer == "lightning":
            assert arch.lightning is not None
            lin, norms = _lightning_params(arch.lightning, hidden)
            comp["recurrent"] += lin
            comp["norms"] += norms
        # The feed-forward part of the layer
        mats = 3 if mlp is not None and mlp.gated else 2
        if spec.ffn == "moe":
            if moe is None:  # a Nemotron-H "E" block: the KV needs no expert count, weights do
                raise ValueError(f"{label}: the layer pattern has expert (MoE) blocks but no "
                                 "expert count: set n_routed_experts (or num_experts)")
            n_moe_layers += 1
            moe_inter = _need(moe.intermediate_size, label, "moe_intermediate_size")
            per_expert = mats * hidden * moe_inter
            if moe.expert_bias:  # gpt-oss: biases on gate_up (2I) and down (h)
                per_expert += 2 * moe_inter + hidden
            comp["experts"] += moe.n_experts * per_expert
            comp["router"] += hidden * moe.n_experts
            if moe.router_bias:
                comp["router"] += moe.n_experts  # router bias / e_score_correction_bias
            if moe.shared_intermediate_size:
                comp["shared_experts"] += mats * hidden * moe.shared_intermediate_size
                if moe.shared_gate:
                    comp["router"] += hidden  # shared_expert_gate
            if moe.dense_beside:  # Gemma-4: router scales (hidden + per expert), 3 more norms
                comp["router"] += hidden + moe.n_experts
                comp["norms"] += 3 * norm_size
        if spec.ffn == "dense" or (spec.ffn == "moe" and moe is not None and moe.dense_beside):
            assert mlp is not None
            inter = _need(spec.intermediate_size or mlp.intermediate_size, label,
                          "intermediate_size")
            comp["mlp"] += mats * hidden * inter
            if mlp.bias:  # one bias per matrix: up (and gate) of inter, down of hidden
                comp["small"] += (mats - 1) * inter + hidden
    n_experts = moe.n_experts if moe is not None and n_moe_layers else 0
    return ParamCounts(name=label, components=comp, n_experts=n_experts,
                       experts_per_token=moe.experts_per_token if n_experts else 0,
                       n_moe_layers=n_moe_layers, tied_embeddings=arch.tie_word_embeddings,
                       kv_proj_params=kv_total, n_kv_heads=n_kv, notes=arch.notes,
                       architecture=arch)


def count_params(config: Mapping[str, Any], name: str | None = None) -> ParamCounts:
    """Parameter counts of the model a Hugging Face ``config.json`` (as a dict) describes.

    Reads ``text_config`` for multimodal wrappers (the vision tower is not counted) and the
    outer ``tie_word_embeddings``. Raises ValueError naming a missing field.
    """
    return count_architecture(read_config(config, name))


def weight_bytes(counts: ParamCounts,
                 weight_dtype: WeightFormat | str | Mapping[str, str] = "bf16",
                 tp: int = 1) -> int:
    """Bytes of weights one GPU holds under tensor parallelism ``tp``.

    ``weight_dtype``: a format name (``WEIGHT_FORMAT_BITS``) applied to every linear layer
    (attention, MLP, experts, shared experts, recurrent projections), with embeddings, LM head,
    norms and routers kept 16-bit unless the format is itself 16/32-bit; or a mapping
    component → format (e.g. ``{"experts": "mxfp4"}`` for gpt-oss, ``{"mlp": "fp8"}`` for
    Meta's Llama-3.1-405B-FP8), other components 16-bit.
    Sharded components are divided by ``tp``; norms, routers and small vectors are
    replicated; K/V projections are replicated when ``tp`` exceeds the KV heads. Where the counts
    hold attention or recurrent weights of a known architecture, ``tp`` must split their heads
    as it must for the cache (``Model.check_tp``: vLLM refuses to start otherwise); counts of
    experts alone (spread over tp × dp GPUs by expert parallelism) are not checked.
    """
    tp = positive_integer("tp (tensor-parallel degree)", tp)
    if tp > 1 and counts.architecture is not None and (counts.components.get("attention")
                                                       or counts.components.get("recurrent")):
        _heads_model(counts.architecture).check_tp(tp)
    bits_of = weight_format(weight_dtype).bits
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


# --- weights as an engine loads them ----------------------------------------------------------

#: GPUs with FP4 tensor cores (NVIDIA Blackwell): vLLM runs MXFP4 experts natively there.
NATIVE_FP4_GPUS = frozenset({"b200"})
#: On every other GPU vLLM's MXFP4 MoE falls back to weight-only Marlin kernels, which pad each
#: expert's intermediate size (per tensor-parallel rank) to a multiple of 128 and the hidden size
#: to a multiple of 256 (``mxfp4_round_up_hidden_size_and_intermediate_size``, MARLIN branch, in
#: ``vllm/model_executor/layers/fused_moe/oracle/mxfp4.py``, vLLM 0.33.0; vLLM issue #23278 logs
#: the fallback on an H100: "Weight-only FP4 compression will be used leveraging the Marlin
#: kernel", then "Model loading took 65.9651 GiB" for gpt-oss-120b).
MARLIN_MXFP4_MULTIPLES = (128, 256)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def marlin_padding_bytes(counts: ParamCounts, arch: Architecture,
                         weights: WeightFormat, tp: int, gpu: str | None) -> int:
    """Bytes the engine adds on one GPU to lay MXFP4 experts out for Marlin (0 when the experts
    are not MXFP4, the model has none, or the GPU runs FP4 natively).

    Per expert: the three matrices grow from H × I/tp to H' × I' (I' = I/tp rounded up to 128,
    H' = H rounded up to 256) at the format's bits; gpt-oss's bf16 expert biases grow from
    2·I/tp + H to 2·I' + H' values.
    """
    fmt = weights.expert_format()
    moe = arch.moe
    if (fmt != "mxfp4" or gpu in NATIVE_FP4_GPUS or moe is None or not counts.n_moe_layers
            or moe.intermediate_size is None or arch.hidden_size is None):
        return 0
    hidden, inter = arch.hidden_size, -(-moe.intermediate_size // tp)
    h_pad = _round_up(hidden, MARLIN_MXFP4_MULTIPLES[1])
    i_pad = _round_up(inter, MARLIN_MXFP4_MULTIPLES[0])
    mats = 3 if arch.mlp is not None and arch.mlp.gated else 2
    extra_bits = mats * (h_pad * i_pad - hidden * inter) * weight_bits("mxfp4")
    if moe.expert_bias:
        extra_bits += (2 * (i_pad - inter) + (h_pad - hidden)) * 16
    return math.ceil(counts.n_moe_layers * moe.n_experts * extra_bits / 8)


#: ``_heads_model``'s models by the identity of their record (hashing a record walks all its
#: layers, which would cost ``weight_bytes`` more than its own arithmetic); each entry holds its
#: record, so an id is not reused while it is stored.
_HEADS_MODELS: dict[int, tuple[Architecture, Model]] = {}


def _heads_model(arch: Architecture) -> Model:
    """The Model of a counted record, whose ``check_tp`` holds the head-splitting rule."""
    hit = _HEADS_MODELS.get(id(arch))
    if hit is None or hit[0] is not arch:
        if len(_HEADS_MODELS) >= 256:
            _HEADS_MODELS.clear()
        hit = _HEADS_MODELS[id(arch)] = (arch, model_from_architecture(arch))
    return hit[1]


@lru_cache(maxsize=256)
def count_cached(arch: Architecture) -> ParamCounts:
    """``count_architecture``, memoized (architectures are immutable)."""
    return count_architecture(arch)
