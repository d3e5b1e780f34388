"""The draft of speculative decoding in the engine: its layers, their KV and their weights.

vLLM 0.33 builds the draft (an EAGLE/EAGLE-3 head, or the checkpoint's MTP layers:
``model_executor/models/deepseek_mtp.py``) beside the target model; ``GPUModelRunner.
get_kv_cache_spec`` (``v1/worker/gpu_model_runner.py``) lists the draft's attention layers with
the target's, marked ``is_draft``, a flag "excluded from equality so it never affects grouping"
(``v1/kv_cache_interface.py``): a draft layer whose spec equals a target layer's joins that
layer's KV cache group, one of another size gets its own group, and every group draws its blocks
from the same pool (``v1/core/kv_cache_planning.py``). So each token held costs the target's
bytes plus the draft's, and the pool holds fewer tokens. The scheduler also allocates
``num_lookahead_tokens`` = k slots past each running request's tokens for the drafts' KV
(``VllmConfig.num_lookahead_tokens``, ``KVCacheManager.allocate_slots``); n-gram drafts have
no model, no KV and no lookahead.

A draft decoder layer is modelled on the target's own token-holding layer (full attention or
MLA, with its indexer keys where the model has them): DeepSeek's MTP module is one more decoder
layer of the model; EAGLE and EAGLE-3 heads are one decoder layer with the target's KV heads and
head size. Its weights are one decoder layer of the target's (an MoE layer for an MoE model's
MTP, attention + a dense MLP or the experts a token uses for EAGLE) plus the projection that
feeds it the target's hidden states (2h × h for MTP and EAGLE, 3h × h for EAGLE-3); embedding
and LM head are the target's, shared.
"""
from __future__ import annotations

from typing import Any

from ..deployment import Deployment
from ..model.formats import weight_bits
from ..model.weights import params_for

#: Cache kinds a draft layer repeats: those holding every token of the context.
DRAFT_KINDS = ("full", "mla", "indexer")
#: Widths (× hidden) of the projection feeding the draft the target's hidden states.
FUSION_WIDTH = {"mtp": 2, "eagle": 2, "eagle3": 3}


def draft_layer_count(d: Deployment) -> int:
    """Decoder layers in the deployment's draft: 0 without speculation or for n-gram; the
    checkpoint's MTP layers for "mtp" (ValueError when it ships none, or when ``draft_layers``
    asks for more than it ships: vLLM 0.33's MTP draft builds exactly the checkpoint's
    ``num_nextn_predict_layers`` layers, deepseek_mtp.py); 1 for EAGLE heads, or the draft
    head's own ``draft_layers``."""
    spec = d.speculative
    if spec is None or spec.method == "ngram":
        return 0
    if spec.method == "mtp" and d.model.architecture is not None:
        n = d.model.architecture.mtp_layers
        if not n:
            raise ValueError(f"{d.model.name} ships no multi-token-prediction layers "
                             "(num_nextn_predict_layers): speculate with eagle, eagle3 or ngram")
        if spec.draft_layers is not None and spec.draft_layers > n:
            raise ValueError(f"draft_layers={spec.draft_layers}: {d.model.name} ships {n} "
                             f"multi-token-prediction layer{'s' if n > 1 else ''} "
                             "(num_nextn_predict_layers), the most an MTP draft can run")
        return n if spec.draft_layers is None else spec.draft_layers
    if spec.draft_layers is not None:
        return spec.draft_layers
    if spec.method == "mtp":  # a Model built from explicit layers: no config to read
        raise ValueError(f"{d.model.name} ships no multi-token-prediction layers "
                         "(num_nextn_predict_layers): speculate with eagle, eagle3 or ngram")
    return 1


def draft_cache_layers(d: Deployment) -> tuple[Any, ...]:
    """The cache layers of one draft decoder layer: one target layer of each token-holding kind
    (``DRAFT_KINDS``); () without a draft. ValueError for a model with none (a recurrent-only
    stack has no layer for a draft to copy)."""
    if not draft_layer_count(d):
        return ()
    seen: dict[str, Any] = {}
    for layer, _ in d.model.distinct_layers:
        if layer.cache_kind in DRAFT_KINDS:
            seen.setdefault(layer.cache_kind, layer)
    if not seen:
        raise ValueError(f"{d.model.name} has no full-attention or MLA layer for a draft layer "
                         "to copy")
    return tuple(seen.values())


def draft_kv_bytes_per_token(d: Deployment) -> int:
    """KV bytes the draft adds per token held, on one GPU: draft layers × the bytes per token
    of its cache layers (0 for n-gram). DeepSeek-V3's MTP layer, MLA 512 + 64 in bf16:
    1 × 576 × 2 = 1,152 bytes on every GPU (the latent is not split by tensor parallelism)."""
    n = draft_layer_count(d)
    return n * sum(layer.bytes_per_token(d.kv, d.tp) for layer in draft_cache_layers(d))


def draft_params(d: Deployment) -> int:
    """Parameters of the draft (0 for n-gram): per draft layer, one decoder layer of the target
    (attention ÷ attention layers plus, for an MoE model's MTP, experts + shared experts + router ÷ MoE layers;
    else the dense MLP ÷ dense layers, or the experts one token uses) plus the fusion projection
    ``FUSION_WIDTH`` × h × h. DeepSeek-V3: ≈ 11.6 B (its report: 14 B with embedding and head)."""
    n = draft_layer_count(d)
    if not n:
        return 0
    counts = params_for(d.model)
    arch = d.model.architecture
    comp = counts.components
    layers = d.model.n_layers
    mixers = [spec.mixer for spec in arch.layers] if arch is not None else []
    attention_layers = sum(m in ("full", "sliding", "chunked", "mla", "parallel")
                           for m in mixers) or layers
    attention = comp.get("attention", 0) / attention_layers + comp.get("norms", 0) / layers
    moe = comp.get("experts", 0) + comp.get("shared_experts", 0) + comp.get("router", 0)
    dense_layers = layers - counts.n_moe_layers
    if counts.n_moe_layers and (d.speculative.method == "mtp" or not dense_layers):
        per_token = (moe if d.speculative.method == "mtp"
                     else moe - counts.routed_expert_params * (1 - counts.experts_per_token
                                                               / counts.n_experts))
        ffn = per_token / counts.n_moe_layers
    else:
        ffn = comp.get("mlp", 0) / max(dense_layers, 1)
    hidden = arch.hidden_size if arch is not None and arch.hidden_size else 0
    fusion = FUSION_WIDTH[d.speculative.method] * hidden * hidden
    return round(n * (attention + ffn + fusion))


def draft_weight_bytes(d: Deployment) -> int:
    """Bytes of the draft's weights on one GPU: ``draft_params`` at the deployment's linear
    weight format, split over the tensor-parallel group."""
    return round(draft_params(d) * weight_bits(d.weights.linear) / 8 / d.tp)


def lookahead_tokens(d: Deployment) -> int:
    """KV slots the scheduler reserves past each running request's tokens: k for a draft model
    (EAGLE, EAGLE-3, MTP), 0 for n-gram and without speculation (vLLM 0.33
    ``VllmConfig.num_lookahead_tokens``)."""
    spec = d.speculative
    return 0 if spec is None or spec.method == "ngram" else spec.num_speculative_tokens
