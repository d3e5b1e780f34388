"""Decode steps beyond one tensor-parallel group: expert all-to-all, data-parallel ranks and
pipeline stages, on top of the step law of :mod:`kvlib.speed.roofline` (whose fitted constants
they leave untouched: at pp = dp = ep = 1 nothing here runs).

One *pass* takes every request of a data-parallel rank's micro-batch through every layer::

    pass = roofline legs and fixed costs of one rank's micro-batch       (``roofline`` law)
         + MoE layers × expert exchange                                   (dp > 1 on a MoE)
         + (pp − 1) × stage-to-stage send                                  (pp > 1)
    TPOT = pass;   tokens/s of the deployment = dp × batch ÷ TPOT

* **Experts** (dp > 1): the tp × dp GPUs of a stage hold E ÷ (tp·dp) experts each (whole under
  ``--enable-expert-parallel``, tensor-split without; ``engines.capacity.parallel_weights``);
  every rank's tokens reach them, so a GPU reads the experts that dp × b tokens touch and does
  1 ÷ (tp·dp) of their FLOPs. The rest of the layer runs on the rank's own b tokens over tp.
* **The exchange** of one MoE layer: ``"allgather"`` (vLLM 0.33's default
  ``all2all_backend="allgather_reducescatter"``; SGLang's data-parallel attention without
  DeepEP): every rank's b tokens gathered to the tp·dp GPUs and the outputs reduce-scattered —
  the bytes of one all-reduce of dp·b tokens, timed by ``roofline.allreduce_time_s`` from the
  measured all-reduce rows; ``"deepep"``: DeepEP's low-latency dispatch + combine, interpolated
  in the measured rows of ``data/alltoall.csv`` (``alltoall_time_s``). With dp = 1 expert
  parallelism keeps tensor parallelism's all-reduce (every GPU already has every token).
* **Pipeline**: vLLM keeps up to pp micro-batches in flight (``max_concurrent_batches``); a
  rank's batch b is split into min(pp, b) of ⌈b ÷ min(pp, b)⌉ requests, and a request waits
  one pass — all stages — between tokens. When b < pp, pp − b stages idle: the *bubble*
  (``bubble_share`` = 1 − min(pp, b) ÷ pp). Each stage boundary sends the micro-batch's hidden
  states (bf16): the 2-GPU all-reduce latency as the fixed part, the GPU's link bandwidth
  (``GPU.group_link_bytes_per_s(2)``) for the bytes.

Not modelled: expert load imbalance, links between nodes (an EP group or pipeline past one
node's NVLink is timed with the node's figures, which flatters it), overlap of the exchange
with compute, and DeepEP's normal (prefill) kernels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.checks import integer, positive_integer
from ..core.data import csv_path
from ..deployment import Deployment
from ..hardware.gpus import GPU, allreduce_latency, gpu_table, resolve_gpu
from ..model.weights import params_for
from . import roofline

#: The measured all-to-all rows (``data/README.md``).
ALLTOALL_FILE = "alltoall.csv"
#: Expert-exchange backends ``parallel_decode`` knows (module docstring).
EXCHANGES = ("allgather", "deepep")


@lru_cache(maxsize=2)
def _alltoall_rows(path: Path, mtime: float) -> pd.DataFrame:
    return pd.read_csv(path)


def alltoall_time_s(gpu: GPU | str, hidden_size: int, n_experts: int, experts_per_token: int,
                    tokens_per_gpu: float) -> float | None:
    """Seconds of one DeepEP low-latency dispatch + combine of ``tokens_per_gpu`` tokens per GPU
    across one 8-GPU node, from ``data/alltoall.csv``: rows of this GPU, else of a GPU with the
    same interconnect; the shape with the nearest hidden size, then expert count; linear in
    tokens between measured sizes (and past the largest, along the last segment); scaled by
    hidden ÷ the row's hidden when they differ. None when no row has the interconnect or the
    experts per token."""
    g = resolve_gpu(gpu)
    hidden = positive_integer("hidden_size", hidden_size)
    positive_integer("n_experts", n_experts)
    tokens = float(tokens_per_gpu)
    if not tokens > 0:
        raise ValueError(f"tokens_per_gpu must be > 0, got {tokens_per_gpu!r}")
    path = csv_path(ALLTOALL_FILE)
    rows = _alltoall_rows(path, path.stat().st_mtime)
    rows = rows[rows["experts_per_token"] == positive_integer("experts_per_token",
                                                                 experts_per_token)]
    own = rows[rows["gpu_slug"] == g.slug]
    if own.empty:
        links = gpu_table()["interconnect"]
        own = rows[rows["gpu_slug"].map(links) == g.interconnect]
    if own.empty:
        return None
    h = min(sorted(set(own["hidden_size"])), key=lambda v: (abs(v - hidden), v))
    own = own[own["hidden_size"] == h]
    e = min(sorted(set(own["n_experts"])), key=lambda v: (abs(v - n_experts), v))
    own = own[own["n_experts"] == e].groupby("tokens_per_gpu")[["dispatch_us", "combine_us"]]
    us = own.median().sum(axis=1).sort_index()
    x, y = us.index.to_numpy(float), us.to_numpy(float)
    if tokens > x[-1] and len(x) > 1:
        value = y[-1] + (tokens - x[-1]) * (y[-1] - y[-2]) / (x[-1] - x[-2])
    else:
        value = float(np.interp(tokens, x, y))
    return value * 1e-6 * (hidden / h)


def moe_exchange_s(d: Deployment, tokens_per_rank: int, exchange: str = "allgather") -> float:
    """Seconds one MoE layer spends moving tokens to their experts and back when ``d.dp`` ranks
    share the experts (0 when dp = 1): ``exchange`` as the module docstring says. "deepep" falls
    back to "allgather" where ``data/alltoall.csv`` has no row for the GPU's interconnect."""
    if exchange not in EXCHANGES:
        raise ValueError(f"unknown expert exchange {exchange!r}; known: {', '.join(EXCHANGES)}")
    b = positive_integer("tokens_per_rank", tokens_per_rank)
    if d.dp == 1 or d.model.architecture.moe is None:
        return 0.0
    hidden = roofline.hidden_size(d.model)
    if exchange == "deepep":
        moe = d.model.architecture.moe
        t = alltoall_time_s(d.gpu, hidden, moe.n_experts, moe.experts_per_token, b)
        if t is not None:
            return t
    message = d.dp * b * hidden * roofline.ACTIVATION_BYTES
    return roofline.allreduce_time_s(d.gpu, d.tp * d.dp, message)


def stage_send_s(gpu: GPU, tokens: int, hidden: int) -> float:
    """Seconds to send ``tokens`` hidden states (bf16) to the next pipeline stage: the measured
    2-GPU all-reduce latency (``hardware.allreduce_latency``) + bytes ÷ the GPU's link bandwidth."""
    message = tokens * hidden * roofline.ACTIVATION_BYTES
    return allreduce_latency(gpu.slug, 2).seconds + message / gpu.group_link_bytes_per_s(2)


@dataclass(frozen=True)
class ParallelStep:
    """One decode pass of a deployment with pipeline stages, data-parallel ranks or expert
    parallelism (seconds; bytes and FLOPs per GPU, as in ``roofline.Step``).

    batch: requests decoding on one data-parallel rank; in_flight: its pipeline micro-batches
    (min(pp, batch)); micro_batch: requests in each; rank: the ``roofline.Step`` of one
    micro-batch through every layer, expert reads and FLOPs shared over tp × dp, its
    all-reduces those of the rank's own tp group; exchange_s: the MoE layers' expert exchange;
    send_s: the (pp − 1) stage-to-stage sends; bubble_share: stage time left idle, 1 − in_flight ÷ pp.
    """

    pp: int
    dp: int
    ep: int
    batch: int
    in_flight: int
    micro_batch: int
    rank: roofline.Step
    exchange_s: float
    send_s: float
    exchange: str

    @property
    def bubble_share(self) -> float:
        return 1 - self.in_flight / self.pp

    @property
    def tpot_s(self) -> float:
        """Seconds between two tokens of one request: one pass through every stage."""
        return self.rank.time_s + self.exchange_s + self.send_s

    @property
    def tokens_per_s(self) -> float:
        """Tokens the whole deployment emits per second: dp ranks × batch ÷ TPOT."""
        return self.dp * self.batch / self.tpot_s


def _rank_step(d: Deployment, b: int, ctx: int) -> roofline.Step:
    """One micro-batch of ``b`` requests through every layer on one GPU of the rank: the
    roofline step of a single TP group, with the experts' reads and FLOPs those of dp × b tokens
    over tp × dp GPUs, and no all-reduce after a MoE block when the exchange replaces it."""
    base = roofline.decode_step(d.with_(pp=1, dp=1, ep=1), batch=b, context_tokens=ctx)
    counts = params_for(d.model)
    if d.dp == 1 or not counts.n_experts:
        return base
    tp, dp, fmt = d.tp, d.dp, d.weights
    experts = replace(counts, components={"experts": counts.components["experts"]})
    rest = replace(counts, components={**counts.components, "experts": 0})
    weights = (roofline.step_weight_bytes(rest, fmt, tp, b)
               + roofline.step_weight_bytes(experts, fmt, tp * dp, dp * b))
    k, e, per_expert = counts.experts_per_token, counts.n_experts, counts.expert_params_per_expert()
    active_experts = counts.routed_expert_params * k // e
    rows = roofline.moe_padded_rows(e, k, dp * b)
    attention = b * roofline.attention_flops_per_token(d.model, ctx, tp)
    flops = (b * 2 * (counts.matmul_active - active_experts) / tp
             + rows * 2 * per_expert * counts.n_moe_layers / (tp * dp) + attention)
    bl = roofline.blocks(d.model)
    comm = 0.0
    if tp > 1 and base.law.communication:
        message = b * roofline.hidden_size(d.model) * roofline.ACTIVATION_BYTES
        comm = (bl.total - bl.moe_ffn) * roofline.allreduce_time_s(d.gpu, tp, message)
    beta, peak = d.gpu.bandwidth(), roofline.matmul_flops(d.gpu, d.weights)
    rate = roofline.matmul_rate(d.gpu, d.weights, base.law)
    return replace(base, weight_bytes=weights, flops=flops, weights_s=weights / beta,
                   compute_s=roofline.compute_leg_s(flops, attention, peak, rate),
                   allreduce_s=comm)


def parallel_decode(d: Deployment, *, batch: int, context_tokens: int,
                    exchange: str = "allgather") -> ParallelStep:
    """The decode pass of ``batch`` requests per data-parallel rank, each at ``context_tokens``
    cached tokens, for a deployment with any pp, dp and ep (the module docstring's formula;
    at pp = dp = ep = 1 it is ``roofline.decode_step``'s step with nothing added)."""
    if not isinstance(d, Deployment):
        raise TypeError(f"parallel_decode takes a Deployment, got {type(d).__name__}")
    b = positive_integer("batch", batch)
    ctx = integer("context_tokens", context_tokens)
    in_flight = min(d.pp, b)
    micro = math.ceil(b / in_flight)
    rank = _rank_step(d, micro, ctx)
    comm = rank.law.communication
    exchange_s = (roofline.blocks(d.model).moe_ffn * moe_exchange_s(d, micro, exchange)
                  if comm else 0.0)
    send_s = ((d.pp - 1) * stage_send_s(d.gpu, micro, roofline.hidden_size(d.model))
              if comm and d.pp > 1 else 0.0)
    return ParallelStep(pp=d.pp, dp=d.dp, ep=d.ep, batch=b, in_flight=in_flight,
                        micro_batch=micro, rank=rank, exchange_s=exchange_s, send_s=send_s,
                        exchange=exchange)


def layout_comparison(d: Deployment, layouts: dict[str, tuple[int, int, int, int]], *,
                      context_tokens: int, output_tokens: int) -> pd.DataFrame:
    """``d`` under each of ``layouts`` (label → (tp, pp, dp, ep)), one row each: GPUs, weights
    and KV pool per GPU (bytes; of the pipeline stage with the fewest blocks), KV tokens per
    data-parallel rank, requests of ``context_tokens`` the whole deployment holds, and — where
    at least one fits — the decode pass of as many requests per rank as the pool holds (at most
    ``max_num_seqs``), at the middle of ``output_tokens``: seconds per token and tokens/s in all.
    vLLM's pool only (pp, dp and ep are modelled for vLLM)."""
    from ..engines.capacity import pool_arithmetic

    context = positive_integer("context_tokens", context_tokens)
    output = positive_integer("output_tokens", output_tokens)
    if output >= context:
        raise ValueError(f"output_tokens ({output}) must be below context_tokens ({context})")
    rows = []
    for label, (tp, pp, dp, ep) in layouts.items():
        x = d.with_(tp=tp, pp=pp, dp=dp, ep=ep, max_model_len=context)
        pool = pool_arithmetic(x)  # a layout that leaves no KV memory holds 0 requests
        held = pool.max_concurrency(context)
        row = {"layout": label, "gpus": x.gpus, "weights_bytes_per_gpu": pool.weights_bytes_per_gpu,
               "kv_bytes_per_gpu": pool.kv_bytes_per_gpu, "tokens_per_rank": pool.tokens,
               "requests": pool.deployment_concurrency(context), "batch_per_rank": 0,
               "tpot_s": math.nan, "tokens_per_s": 0.0}
        if held >= 1:
            batch = min(math.floor(held), x.resolved().max_num_seqs)
            step = parallel_decode(x, batch=batch, context_tokens=context - output + output // 2)
            row.update(batch_per_rank=batch, tpot_s=step.tpot_s, tokens_per_s=step.tokens_per_s)
        rows.append(row)
    return pd.DataFrame(rows)
