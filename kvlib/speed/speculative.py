"""How fast a speculative decoding step is: the target verifies k + 1 tokens per request, the
draft runs k passes, and a request gains the mean acceptance length τ tokens per step.

    time per output token = (verify(k + 1 tokens per request) + k · draft pass) ÷ τ,
    τ = 1 + Σᵢ pᵢ  (pᵢ: share of steps whose draft position i is accepted; αⁱ i.i.d.)

The verify step is ``step_time`` with k + 1 scheduled tokens per request (each writes its KV
and attends to the context before it, as vLLM schedules a request with k drafts). A draft pass
is one token per request through the draft's layers plus the LM head, timed by the same law
(``law_seconds``): each draft layer reads and computes what one target decoder layer does in a
decode step of the same batch (the experts the batch touches, for MoE), plus the fusion
projection, its own KV (``draft_kv_bytes_per_token``), the per-block fixed costs of its blocks
and their all-reduces. n-gram drafts cost no GPU time. At small batch the verify step costs
about what a decode step does (weights dominate), so speculation divides time per token by
nearly τ; at large batch the k + 1 tokens make the step compute-bound and the gain shrinks, then
inverts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.checks import positive_integer
from ..deployment import Deployment
from ..engines.speculative import FUSION_WIDTH, draft_kv_bytes_per_token, draft_layer_count
from ..model.params import ParamCounts, weight_bytes
from ..model.weights import params_for
from .roofline import (ACTIVATION_BYTES, Blocks, StepTimer, allreduce_time_s, blocks,
                       compute_leg_s, hidden_size, law_seconds)


@dataclass(frozen=True)
class SpeculativeStep:
    """One speculative decoding step of ``batch`` requests at ``context_tokens`` each.

    k: drafted tokens per request; tokens_per_step: τ, tokens a request gains per step;
    decode_s: the plain decode step of the same batch (no speculation); verify_s: the target
    step over k + 1 tokens per request; draft_s: one draft pass (0 for n-gram).
    """

    batch: int
    context_tokens: int
    k: int
    tokens_per_step: float
    decode_s: float
    verify_s: float
    draft_s: float

    @property
    def step_s(self) -> float:
        """Seconds of one speculative step: verify + k draft passes."""
        return self.verify_s + self.k * self.draft_s

    @property
    def tpot_s(self) -> float:
        """Mean time per output token of a request with speculation."""
        return self.step_s / self.tokens_per_step

    @property
    def speedup(self) -> float:
        """Time per output token without speculation ÷ with it, at the same batch (> 1: faster)."""
        return self.decode_s / self.tpot_s


def _draft_blocks(d: Deployment, n: int) -> Blocks:
    """The blocks of ``n`` draft decoder layers: a copy of one target layer's mixer and FFN."""
    per_layer = blocks(d.model)
    mixer = "mla" if per_layer.mla else "attention"
    ffn = "moe_ffn" if (per_layer.moe_ffn and d.speculative.method == "mtp") or not \
        per_layer.dense_ffn else "dense_ffn"
    counts = dict.fromkeys(("attention", "mla", "recurrent", "dense_ffn", "moe_ffn"), 0)
    counts[mixer] = n
    counts[ffn] = n
    return Blocks(**counts)


def draft_pass_s(d: Deployment, batch: int, context_tokens: int) -> float:
    """Seconds of one draft pass: ``batch`` requests, one token each, at ``context_tokens``
    (0 without a draft model). See the module docstring."""
    n = draft_layer_count(d)
    if not n:
        return 0.0
    base = d.with_(speculative=None)
    timer = StepTimer(base)
    s = timer.step(np.array([[1, context_tokens]] * batch))
    counts = params_for(d.model)
    head = counts.components.get("lm_head") or counts.components.get("embedding", 0)
    head_bytes = weight_bytes(ParamCounts(name="lm head", components={"lm_head": head}),
                              d.weights, d.tp)
    layers = d.model.n_layers
    hidden = hidden_size(d.model)
    fusion = FUSION_WIDTH[d.speculative.method] * hidden * hidden / d.tp
    fusion_bytes = weight_bytes(ParamCounts(name="fusion", components={"mlp": round(fusion)}),
                                d.weights, 1)
    layer_bytes = (s.weight_bytes - head_bytes) / layers
    layer_flops = (s.flops - 2 * head * batch / d.tp) / layers
    weights = n * layer_bytes + head_bytes + fusion_bytes
    kv = batch * context_tokens * draft_kv_bytes_per_token(d)
    flops = n * layer_flops + 2 * (head / d.tp + fusion) * batch
    eff = timer.eff
    draft_blocks = _draft_blocks(d, n)
    fixed = eff.block_overhead_s(draft_blocks, d.tp)
    comm = 0.0
    if d.tp > 1 and eff.communication:
        comm = draft_blocks.total * allreduce_time_s(d.gpu, d.tp,
                                                     batch * hidden * ACTIVATION_BYTES)
    attention = n * s.attention_s / layers  # the draft layers attend as the target's do
    compute = compute_leg_s(flops, attention * timer.peak, timer.peak, timer.rate)
    return float(law_seconds(weights / timer.beta, kv / timer.beta, compute, fixed, comm, eff,
                             attention))


def speculative_step(d: Deployment, batch: int, context_tokens: int) -> SpeculativeStep:
    """The ``SpeculativeStep`` of deployment ``d`` (which must name ``speculative``) for
    ``batch`` requests at ``context_tokens`` cached tokens each."""
    spec = d.speculative
    if spec is None:
        raise ValueError("the deployment has no speculative decoding: pass speculative="
                         "Speculative(...) or 'method:k:acceptance'")
    b = positive_integer("batch", batch)
    ctx = positive_integer("context_tokens", context_tokens)
    k = spec.num_speculative_tokens
    timer = StepTimer(d.with_(speculative=None))
    decode_s = timer(np.array([[1, ctx]] * b))
    verify_s = timer(np.array([[k + 1, ctx]] * b))
    return SpeculativeStep(batch=b, context_tokens=ctx, k=k,
                           tokens_per_step=spec.tokens_per_step, decode_s=decode_s,
                           verify_s=verify_s, draft_s=draft_pass_s(d, b, ctx))
