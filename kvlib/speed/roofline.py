"""How fast a step is: the bytes it reads, the FLOPs it does, and the fixed costs around them.

Every step — a decode step, a prefill, or the mixed step of a continuous-batching server —
has one decomposition, on each of ``n_gpus`` tensor-parallel GPUs::

    time = max(weights ÷ (β · η_w), matmul FLOPs ÷ (F · η_F))             the roofline,
         + max(KV ÷ (β · η_kv), attention FLOPs ÷ (F · η_F))         kernels in sequence
         + engine step cost + Σ_blocks block cost                fixed costs (fitted)
         + requests × request cost + blocks × log2(n_gpus) × stage cost
         + blocks × (α + message bytes ÷ link bandwidth)        all-reduces (tensor parallel)

* bytes: the weights read once per step (embedding lookups excluded; for MoE only the experts
  the step's tokens touch, ``E·(1 − (1 − k/E)^T)`` per layer under uniform routing) + every
  decoding sequence's KV cache (windows capped, recurrent state included) + the prompt KV a
  prefill writes;
* FLOPs: 2 × active matmul parameters per token + attention (2·heads·(d_k + d_v) per cached
  token per layer); each touched expert's token rows are padded to ``MOE_TILE_ROWS``, the
  row block vLLM's fused-MoE kernels pad every expert's tokens to (``moe_align_block_size``), so a
  small batch costs each touched expert a whole tile;
* the roofline: the matmuls run as long as the slower of their weight reads and their math,
  then the attention as long as the slower of its KV reads and its math (``Efficiency.law``
  "sequence", ``CALIBRATED``'s); the classic roofline lets every read overlap every FLOP,
  max(weights + KV, FLOPs) ("overlap", ``DATASHEET``'s);
* β, F: the GPU's datasheet bandwidth and dense FLOP/s (``data/gpus.csv``); η_w, η_kv, η_F:
  the shares an engine achieves streaming weights, reading the paged KV cache (attention
  kernels gather scattered blocks) and doing matmuls (fitted; ``CALIBRATED`` ties η_kv to η_w);
* fixed costs: a per-step cost (one per GPU vendor's software stack, stored for each engine
  build on it), a per-block cost by block kind (kernel launches and small ops that do not grow
  with bytes; in ``CALIBRATED`` one cost every block pays, plus one of their own for the latent,
  recurrent and MoE blocks, whose kernels the others do not run), a cost per request the step schedules (in ``CALIBRATED`` one per GPU vendor
  too: the scheduler's bookkeeping, sampling and output handling for each request), and under
  tensor parallelism a
  cost per block per doubling of the group (the synchronisation each block's all-reduce and
  the kernels around it add inside an engine, beyond the microbenchmarked latency α) — all
  fitted by :mod:`kvlib.fit.calibrate`, the terms chosen by leave-one-source-out error;
* all-reduces: one after every block (attention or recurrent mixer, MLP or MoE) under tensor
  parallelism — a hybrid stack counts the mixers it really has (``blocks``); the latency α
  comes from published microbenchmarks (``hardware.allreduce_latency``) and the bytes term
  from the datasheet link bandwidth (``allreduce_time_s``).

``DATASHEET`` is the pure roofline (η = 1, no fixed costs, no all-reduces); ``CALIBRATED``
holds the constants :func:`kvlib.fit.calibrate.fit` finds on the train half of the measurements.
``serving_steps`` turns steps into what a serving benchmark measures: other requests'
prefill shares the decode steps (chunked prefill), so time per output token is not pure decode;
``lockstep_steps`` does the same for a closed-loop benchmark on an engine that prefills before
it decodes (SGLang), whose requests then run in waves.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..core.checks import integer, number, positive_integer
from ..deployment import ENGINES, Deployment
from ..deployment import deployment as as_deployment
from ..engines import sglang
from ..hardware.gpus import GPU, allreduce_latency, resolve_gpu
from ..model.formats import WeightFormat, weight_bits, weight_format
from ..model.layers import SharedKVLayer
from ..model.model import Model
from ..model.params import ParamCounts, weight_bytes
from ..model.registry import resolve_model
from ..model.weights import params_for

#: Block kinds with a fitted fixed cost each.
BLOCK_KINDS = ("attention", "mla", "recurrent", "dense_ffn", "moe_ffn")
#: Rows each touched expert's tokens are padded to in vLLM's fused-MoE kernels
#: (``moe_align_block_size`` pads every expert's token count to a multiple of BLOCK_SIZE_M; the
#: tuned configs use 16 for small batches).
MOE_TILE_ROWS = 16
#: Bytes per element of the activations an all-reduce sums (bf16).
ACTIVATION_BYTES = 2
#: Tokens one engine step may process (vLLM's ``max_num_batched_tokens`` on large GPUs; the
#: measured SGLang and TensorRT-LLM runs allow at least as many).
MAX_BATCHED_TOKENS = 8192


#: How a step's legs combine (``law_seconds``): "overlap", the classic roofline — the step's
#: reads and its math overlap whole, max(weights + KV, FLOPs); "sequence", its kernels run one
#: after another, the matmuls bound by their weight reads or their math and the attention by
#: its KV reads or its math, max(weights, matmul FLOPs) + max(KV, attention FLOPs).
LAWS = ("overlap", "sequence")


@dataclass(frozen=True)
class Efficiency:
    """The speed model's constants: achieved shares of the peaks and the fixed costs.

    bandwidth: achieved ÷ peak memory bandwidth reading weights, (0, 1]; kv_bandwidth: the same
    reading (and writing) the KV cache; compute: achieved ÷ peak dense FLOP/s, (0, 1]; step_s:
    (engine, seconds) added to every step — the engine key is ``ENGINES`` or ``"<engine>-rocm"``
    on AMD GPUs; block_s: (block kind, seconds) added per block of that kind (``BLOCK_KINDS``);
    request_s: (engine key, seconds) added per request a step schedules (a decode or a prompt
    chunk); stage_s: seconds added per block per doubling of the tensor-parallel group
    (× log2 n_gpus); communication: whether tensor-parallel all-reduces cost time; law: how
    the legs combine (``LAWS``; ``law_seconds``); fp8_matmul_share: the share of its peak an
    FP8 matmul reaches relative to the share a 16-bit one reaches of its own, (0, 1]
    (``matmul_rate``; measured, ``kvlib.hardware.gpus.fp8_matmul_share``; 1 in ``DATASHEET``).
    """

    name: str
    bandwidth: float = 1.0
    kv_bandwidth: float = 1.0
    compute: float = 1.0
    step_s: tuple[tuple[str, float], ...] = ()
    block_s: tuple[tuple[str, float], ...] = ()
    request_s: tuple[tuple[str, float], ...] = ()
    stage_s: float = 0.0
    communication: bool = False
    source: str = ""
    law: str = "overlap"
    fp8_matmul_share: float = 1.0

    def __post_init__(self) -> None:
        if self.law not in LAWS:
            raise ValueError(f"Efficiency.law {self.law!r}: one of {', '.join(LAWS)}")
        for key in ("bandwidth", "kv_bandwidth", "compute", "fp8_matmul_share"):
            number(f"Efficiency.{key}", getattr(self, key), maximum=1, positive=True)
        number("Efficiency.stage_s", self.stage_s, minimum=0)
        for label, pairs in (("step_s", self.step_s), ("block_s", self.block_s),
                             ("request_s", self.request_s)):
            for name, value in pairs:
                number(f"Efficiency.{label}[{name!r}]", value, minimum=0)
        unknown = sorted(set(dict(self.block_s)) - set(BLOCK_KINDS))
        if unknown:
            raise ValueError(f"Efficiency.block_s names unknown block kinds {unknown}; "
                             f"known: {', '.join(BLOCK_KINDS)}")

    def step_overhead_s(self, engine: str, gpu: GPU) -> float:
        """Seconds ``engine`` adds to every step on ``gpu`` (0 when no step costs are set);
        KeyError naming the engine when they are set but this engine has none."""
        if not self.step_s:
            return 0.0
        key = engine_key(engine, gpu)
        table = dict(self.step_s)
        if key not in table:
            raise KeyError(f"no fitted step cost for engine {key!r} in {self.name!r}; "
                           f"known: {', '.join(sorted(table))}")
        return table[key]

    def block_overhead_s(self, blocks: "Blocks", n_gpus: int = 1) -> float:
        """Seconds of fixed per-block costs for a model's ``blocks`` on a tensor-parallel group
        of ``n_gpus``: each block's cost by kind plus ``stage_s`` × log2(n_gpus) per block."""
        table = dict(self.block_s)
        return (sum(table.get(kind, 0.0) * n for kind, n in blocks.by_kind().items())
                + self.stage_s * blocks.total * math.log2(n_gpus))

    def request_overhead_s(self, engine: str, gpu: GPU) -> float:
        """Seconds ``engine`` adds per request a step schedules on ``gpu`` (0 when no request
        costs are set or this engine build has none fitted)."""
        return dict(self.request_s).get(engine_key(engine, gpu), 0.0)

    def fixed_s(self, engine: str, gpu: GPU, blocks: "Blocks", n_gpus: int,
                requests: int) -> float:
        """Every fixed cost of one step: the engine's step cost, the blocks' costs on
        ``n_gpus`` and ``requests`` × the engine's request cost."""
        return (self.step_overhead_s(engine, gpu) + self.block_overhead_s(blocks, n_gpus)
                + requests * self.request_overhead_s(engine, gpu))


def engine_key(engine: str, gpu: GPU) -> str:
    """``engine`` on NVIDIA GPUs, ``"<engine>-rocm"`` on AMD ones (a different build, other
    kernels); ValueError for an engine kvlib has no name for."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    return f"{engine}-rocm" if gpu.vendor == "AMD" else engine


#: The pure datasheet roofline: peak bandwidth, peak dense FLOP/s, reads and math overlapping
#: whole, nothing else.
DATASHEET = Efficiency("datasheet roofline (η = 1)")
#: Fitted by ``kvlib.fit.calibrate.fit`` on the train half of the modern measurements in
#: data/throughput.csv with the term set of ``kvlib.fit.calibrate.CHOSEN_TERMS`` — one share
#: of the bandwidth for weight and KV reads alike, one step cost and one cost per scheduled
#: request per GPU vendor, one cost every block pays (plus one of their own for latent,
#: recurrent and MoE blocks) and one per block per doubling of the tensor-parallel group, a
#: step's kernels in sequence (``LAWS``) and FP8 matmuls at the share of their peak NVIDIA's
#: measured GEMM tables give (``kvlib.hardware.gpus.fp8_matmul_share``, not fitted), the
#: candidate chosen by leave-one-source-out error (see Appendix A,
#: chapters/appendix_a_validation.md, for its errors); tests/test_calibrate.py refits and
#: checks these values.
CALIBRATED = Efficiency(
    "calibrated (data/throughput.csv, train half)", bandwidth=0.77,
    kv_bandwidth=0.77, compute=0.6,
    step_s=(("sglang", 0.0e-3),
            ("sglang-rocm", 1.588e-3),
            ("tensorrt-llm", 0.0e-3),
            ("vllm", 0.0e-3),
            ("vllm-rocm", 1.588e-3)),
    block_s=(("attention", 9.2e-6),
             ("mla", 23.0e-6),
             ("recurrent", 41.9e-6),
             ("dense_ffn", 9.2e-6),
             ("moe_ffn", 39.9e-6)),
    request_s=(("sglang", 11.1e-6),
               ("sglang-rocm", 71.0e-6),
               ("tensorrt-llm", 11.1e-6),
               ("vllm", 11.1e-6),
               ("vllm-rocm", 71.0e-6)),
    stage_s=5.6e-6,
    communication=True, source="kvlib.fit.calibrate.fit", law="sequence",
    fp8_matmul_share=0.77)


@dataclass(frozen=True)
class Blocks:
    """The blocks of a model that each end in an all-reduce under tensor parallelism.

    attention / mla / recurrent: token mixers (softmax attention, latent attention, Mamba-2 or
    Gated DeltaNet); dense_ffn / moe_ffn: feed-forward blocks. A transformer layer is one mixer
    and one FFN; a Nemotron-H layer is one or the other.
    """

    attention: int
    mla: int
    recurrent: int
    dense_ffn: int
    moe_ffn: int

    @property
    def total(self) -> int:
        return self.attention + self.mla + self.recurrent + self.dense_ffn + self.moe_ffn

    def by_kind(self) -> dict[str, int]:
        return {kind: getattr(self, kind) for kind in BLOCK_KINDS}


@lru_cache(maxsize=256)
def _counts(model: Model) -> ParamCounts:
    return params_for(model)


def blocks(model: Model | str) -> Blocks:
    """Count a model's blocks from its architecture record, decoder layer by decoder layer: the
    mixer (softmax attention, MLA, a recurrent mixer; a Falcon-H1 ``parallel`` layer runs both an
    attention and a Mamba-2 mixer) and the feed-forward block (dense MLP or MoE). A Nemotron-H
    layer is a mixer *or* an FFN, so its stack counts the mixers it really has."""
    return _blocks(resolve_model(model))


_MIXER_KINDS = {"full": ("attention",), "sliding": ("attention",), "chunked": ("attention",),
                "mla": ("mla",), "mamba1": ("recurrent",), "mamba2": ("recurrent",),
                "gated_deltanet": ("recurrent",), "lightning": ("recurrent",), "parallel": ("attention", "recurrent"),
                "none": ()}
_FFN_KINDS = {"dense": ("dense_ffn",), "moe": ("moe_ffn",), "none": ()}


@lru_cache(maxsize=256)
def _blocks(m: Model) -> Blocks:
    if m.architecture is None:
        raise ValueError(f"model {m.name!r} carries no architecture record: its blocks come from "
                         "its config.json (build it with Model.from_hf_config)")
    counts = dict.fromkeys(BLOCK_KINDS, 0)
    for spec in m.architecture.layers:
        for kind in (*_MIXER_KINDS[spec.mixer], *_FFN_KINDS[spec.ffn]):
            counts[kind] += 1
    return Blocks(**counts)


def hidden_size(model: Model) -> int:
    """The model's hidden size (elements per token of the activations an all-reduce sums)."""
    value = model.architecture.hidden_size if model.architecture is not None else None
    if not value:
        raise ValueError(f"model {model.name!r}: config field 'hidden_size' is missing (needed "
                         "for the all-reduce message size)")
    return int(value)


def allreduce_time_s(gpu: GPU | str, n_gpus: int, message_bytes: float) -> float:
    """Seconds of one all-reduce of ``message_bytes`` per GPU over ``n_gpus`` GPUs.

    latency α (``hardware.allreduce_latency``, published microbenchmarks) + the bytes each GPU
    moves ÷ its link bandwidth to the group (``GPU.group_link_bytes_per_s``), with the faster of
    the two algorithms engines ship (vLLM's custom all-reduce): one-stage, every GPU reads all
    ``n − 1`` peers' buffers, ``α + (n − 1)·M/B``; two-stage, reduce-scatter then all-gather,
    ``2α + 2·(n − 1)/n·M/B``. 1 GPU: 0.
    """
    g = resolve_gpu(gpu)
    n = positive_integer("n_gpus", n_gpus)
    number("message_bytes", message_bytes, minimum=0)
    if n == 1:
        return 0.0
    alpha = allreduce_latency(g.slug, n).seconds
    link = g.group_link_bytes_per_s(n)
    one_stage = alpha + (n - 1) * message_bytes / link
    two_stage = 2 * alpha + 2 * (n - 1) / n * message_bytes / link
    return min(one_stage, two_stage)


@dataclass(frozen=True)
class Step:
    """One forward step on each GPU of a tensor-parallel group.

    kind: "decode", "prefill" or "mixed" (decodes plus prompt tokens); batch: sequences that
    each emit a token; context_tokens: the context each of them attends to (the mean, for a
    mixed batch); prefill_tokens: prompt tokens processed; requests: requests the step
    schedules (each decode, each prompt or prompt chunk); weight_bytes / kv_bytes: bytes one
    GPU reads (KV: read by the decodes, written by the prefill); flops: FLOPs one GPU does;
    weights_s / kv_s / compute_s: the legs at η = 1 (bytes ÷ bandwidth, FLOPs ÷ peak);
    fixed_s: engine, per-block and per-request costs; allreduce_s: the tensor-parallel all-reduces;
    efficiency: the name of the constants ``law`` (the ``Efficiency`` the step was timed with);
    attention_s: the part of compute_s that is attention math (the rest is matmuls).
    """

    kind: str
    batch: int
    context_tokens: int
    prefill_tokens: int
    requests: int
    n_gpus: int
    weight_bytes: int
    kv_bytes: float
    flops: float
    weights_s: float
    kv_s: float
    compute_s: float
    fixed_s: float
    allreduce_s: float
    efficiency: str
    law: Efficiency = field(compare=False, repr=False)
    attention_s: float = 0.0

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def memory_time_s(self) -> float:
        """The memory leg: weights ÷ (β·η_w) + KV ÷ (β·η_kv)."""
        return self.weights_s / self.law.bandwidth + self.kv_s / self.law.kv_bandwidth

    @property
    def compute_time_s(self) -> float:
        """The compute leg: FLOPs ÷ (F·η_F)."""
        return self.compute_s / self.law.compute

    @property
    def overhead_s(self) -> float:
        """Everything that is not the roofline: fixed costs plus all-reduces."""
        return self.fixed_s + self.allreduce_s

    @property
    def time_s(self) -> float:
        """Seconds the step takes (``law_seconds``): the legs as its law combines them, plus the
        overheads."""
        return float(law_seconds(self.weights_s, self.kv_s, self.compute_s, self.fixed_s,
                                 self.allreduce_s, self.law, self.attention_s))

    @property
    def bound(self) -> str:
        """"memory" when reading all its bytes takes longer than all its math, else "compute"
        (the classic roofline's comparison, whatever law times the step)."""
        return "memory" if self.memory_time_s >= self.compute_time_s else "compute"

    @property
    def tokens_per_s(self) -> float:
        """Tokens the whole group emits per second (one per decoding sequence per step)."""
        return self.batch / self.time_s

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte read (one GPU)."""
        return self.flops / self.bytes


def expected_experts(n_experts: int, experts_per_token: int, tokens: int) -> float:
    """Distinct experts a batch of ``tokens`` touches in one MoE layer, in expectation, when
    each token picks ``experts_per_token`` of ``n_experts`` uniformly: E·(1 − (1 − k/E)^B)."""
    positive_integer("n_experts", n_experts)
    positive_integer("experts_per_token", experts_per_token)
    positive_integer("tokens", tokens)
    if experts_per_token > n_experts:
        raise ValueError("experts_per_token cannot exceed n_experts")
    return n_experts * (1 - (1 - experts_per_token / n_experts) ** tokens)


def moe_padded_rows(n_experts: int, experts_per_token: int, tokens: int,
                    tile_rows: int = MOE_TILE_ROWS) -> float:
    """Token rows the expert matmuls of one MoE layer compute for ``tokens`` tokens: each of the
    expected touched experts gets its mean share of the ``tokens × k`` routed rows, rounded up
    to whole tiles of ``tile_rows`` (at least one tile per touched expert)."""
    touched = expected_experts(n_experts, experts_per_token, tokens)
    per_expert = tokens * experts_per_token / touched
    return touched * tile_rows * math.ceil(per_expert / tile_rows)


def step_weight_bytes(counts: ParamCounts, weight_dtype: str | Mapping[str, str], tp: int,
                      tokens: int) -> int:
    """Weight bytes one GPU reads in a step over ``tokens`` tokens: everything but the
    embedding table (a lookup; read in full only when it doubles as the LM head), with routed
    experts scaled to the expected fraction a batch of that size touches."""
    comp = dict(counts.components)
    if not counts.tied_embeddings:
        comp["embedding"] = 0
    if counts.n_experts:
        touched = expected_experts(counts.n_experts, counts.experts_per_token, tokens)
        comp["experts"] = round(comp["experts"] * touched / counts.n_experts)
    scaled = ParamCounts(name=counts.name, components=comp, n_experts=counts.n_experts,
                         experts_per_token=counts.experts_per_token,
                         n_moe_layers=counts.n_moe_layers, tied_embeddings=counts.tied_embeddings,
                         kv_proj_params=counts.kv_proj_params, n_kv_heads=counts.n_kv_heads)
    return weight_bytes(scaled, weight_dtype, tp)


def matmul_flops(gpu: GPU, weights: WeightFormat) -> float:
    """Peak dense FLOP/s the matmuls of ``weights`` run at on ``gpu``: FP8 tensor cores for FP8
    weights (W8A8) where the GPU has them; 16-bit otherwise — on a GPU without FP8 tensor cores
    (Ampere) vLLM serves an FP8 checkpoint as weight-only FP8, its Marlin kernels dequantizing
    to 16-bit (vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py,
    ``is_fp8_marlin_supported``: compute capability 7.5 or more), as it does 4-bit weights."""
    if weights.compute_dtype == "fp8" and gpu.fp8_dense_flops is None:
        return gpu.dense_flops("bf16")
    return gpu.dense_flops(weights.compute_dtype)


def matmul_rate(gpu: GPU, weights: WeightFormat, eff: Efficiency) -> float:
    """FLOP/s the matmuls of ``weights`` run at on ``gpu`` before η_F: ``matmul_flops``, times
    ``eff.fp8_matmul_share`` where they run on FP8 tensor cores (an FP8 GEMM reaches a smaller
    share of its doubled peak than a 16-bit one of its own)."""
    peak = matmul_flops(gpu, weights)
    return peak * eff.fp8_matmul_share if fp8_matmuls(gpu, weights) else peak


def fp8_matmuls(gpu: GPU, weights: WeightFormat) -> bool:
    """Whether the matmuls of ``weights`` run on ``gpu``'s FP8 tensor cores (W8A8)."""
    return weights.compute_dtype == "fp8" and gpu.fp8_dense_flops is not None


def compute_leg_s(flops, attention_flops, peak: float, rate: float):
    """The compute leg at η_F = 1 (seconds; floats or numpy arrays) of ``flops`` of which
    ``attention_flops`` are attention math: the attention at the format's ``peak``, the matmuls
    at ``rate`` (``matmul_rate``)."""
    return attention_flops / peak + (flops - attention_flops) / rate


def attention_flops_per_token(model: Model, context_tokens: int, tp: int = 1) -> float:
    """FLOPs one new token spends attending to ``context_tokens`` cached tokens, on one GPU:
    the sum of each layer's own ``attention_flops_per_token`` (softmax attention 2·heads·(d_k +
    d_v) per cached token, windows capped; MLA in its absorbed latent form, d_k = r + d_R,
    d_v = r; recurrent layers ≈ 4 FLOPs per state element)."""
    return sum(n * layer.attention_flops_per_token(context_tokens, tp, model.n_heads)
               for layer, n in model.distinct_layers)


#: Prompt positions sampled to average a prompt token's attention work.
_PROMPT_SAMPLES = 8


def law_seconds(weights_s, kv_s, compute_s, fixed_s, allreduce_s, eff: Efficiency,
                attention_s=0.0):
    """The step-time law (the module docstring), for floats or numpy arrays of legs at η = 1
    (``attention_s``: the part of ``compute_s`` that is attention math): under ``eff.law``
    "overlap", max(weights ÷ η_w + KV ÷ η_kv, compute ÷ η_F); under "sequence",
    max(weights ÷ η_w, (compute − attention) ÷ η_F) + max(KV ÷ η_kv, attention ÷ η_F); then
    + fixed costs + all-reduces (when ``eff`` counts communication). The one place it is
    written: ``Step.time_s``, ``step_time`` and the fit (``kvlib.fit.calibrate.Parts``) call it."""
    comm = allreduce_s if eff.communication else 0.0
    if eff.law == "sequence":
        matmul_s = compute_s - attention_s
        return (np.maximum(weights_s / eff.bandwidth, matmul_s / eff.compute)
                + np.maximum(kv_s / eff.kv_bandwidth, attention_s / eff.compute)
                + fixed_s + comm)
    memory = weights_s / eff.bandwidth + kv_s / eff.kv_bandwidth
    return np.maximum(memory, compute_s / eff.compute) + fixed_s + comm


def _efficiency(d: Deployment) -> Efficiency:
    eff = CALIBRATED if d.efficiency is None else d.efficiency
    if not isinstance(eff, Efficiency):
        raise TypeError(f"efficiency must be an Efficiency, got {type(eff)!r}")
    return eff


def one_group(d: Deployment) -> Deployment:
    """``d`` if it is one tensor-parallel group; ValueError naming ``kvlib.speed.parallel``
    (which times pipeline stages, data-parallel ranks and expert parallelism) otherwise."""
    if (d.pp, d.dp, d.ep) != (1, 1, 1):
        raise ValueError(f"pp={d.pp}, dp={d.dp}, ep={d.ep}: this step law times one "
                         "tensor-parallel group; kvlib.speed.parallel.parallel_decode times "
                         "the others")
    return d


def _step(d: Deployment, kind: str, decodes: int, context_tokens: int, prefill_tokens: int,
          prompts: int, kv_bytes: float, attention_flops: float) -> Step:
    """A step of ``decodes`` one-token sequences and ``prefill_tokens`` prompt tokens from
    ``prompts`` requests whose KV reads and writes (bytes) and attention FLOPs are given: the
    law's legs and fixed costs."""
    m, g, tp, eff = one_group(d).model, d.gpu, d.tp, _efficiency(d)
    counts = _counts(m)
    tokens = decodes + prefill_tokens
    weights = step_weight_bytes(counts, d.weights, tp, tokens)
    flops = tokens * 2 * counts.matmul_active / tp + attention_flops
    if counts.n_experts:
        rows = moe_padded_rows(counts.n_experts, counts.experts_per_token, tokens)
        extra = rows - tokens * counts.experts_per_token
        flops += extra * 2 * counts.expert_params_per_expert() * counts.n_moe_layers / tp
    peak, rate = matmul_flops(g, d.weights), matmul_rate(g, d.weights, eff)
    bl = blocks(m)
    fixed = eff.fixed_s(d.engine, g, bl, tp, decodes + prompts)
    comm = 0.0
    if tp > 1 and eff.communication:
        message = tokens * hidden_size(m) * ACTIVATION_BYTES
        comm = bl.total * allreduce_time_s(g, tp, message)
    beta = g.bandwidth()
    return Step(kind=kind, batch=decodes, context_tokens=context_tokens,
                prefill_tokens=prefill_tokens, requests=decodes + prompts, n_gpus=tp,
                weight_bytes=weights,
                kv_bytes=kv_bytes, flops=flops, weights_s=weights / beta, kv_s=kv_bytes / beta,
                compute_s=compute_leg_s(flops, attention_flops, peak, rate),
                fixed_s=fixed, allreduce_s=comm, efficiency=eff.name,
                law=eff, attention_s=attention_flops / peak)


def _uniform_step(d: Deployment, batch: int, ctx: int, pre: int, prompt: int) -> Step:
    """``batch`` decodes at ``ctx`` cached tokens each plus ``pre`` prompt tokens from prompts of
    ``prompt`` tokens (a prompt token attends on average to half its prompt, sampled at
    ``_PROMPT_SAMPLES`` positions so windows cap it)."""
    m, tp, kv = d.model, d.tp, d.kv
    if batch + pre == 0:
        raise ValueError("a step needs a decoding sequence (batch) or prompt tokens")
    kv_bytes = batch * m.kv_bytes(ctx, kv, tp=tp) if ctx and batch else 0
    flops = batch * attention_flops_per_token(m, ctx, tp) if batch else 0.0
    if pre:
        kv_bytes += round(m.kv_bytes(prompt, kv, tp=tp) * pre / prompt)
        n = min(_PROMPT_SAMPLES, prompt)
        positions = [int((i + 0.5) * prompt / n) for i in range(n)]
        flops += pre * sum(attention_flops_per_token(m, p, tp) for p in positions) / n
    kind = "mixed" if batch and pre else ("decode" if batch else "prefill")
    return _step(d, kind, batch, ctx, pre, math.ceil(pre / prompt) if pre else 0, kv_bytes,
                 flops)


def step(model: Deployment | Model | str, gpu: GPU | str | None = None, *, batch: int = 0,
         context_tokens: int = 0, prefill_tokens: int = 0, prompt_tokens: int = 0,
         **deployment_keywords: Any) -> Step:
    """One step of ``batch`` decoding sequences at ``context_tokens`` each plus
    ``prefill_tokens`` prompt tokens (a chunk of one prompt, or several prompts) from prompts of
    ``prompt_tokens`` tokens, for a ``Deployment`` (or ``model`` on ``gpu`` with the
    deployment's keywords, ``n_gpus``/``weight_dtype``/``kv_dtype`` included); the module
    docstring gives the formula. ``efficiency`` None means ``CALIBRATED``."""
    d = as_deployment(model, gpu, **deployment_keywords)
    b = integer("batch", batch)
    ctx = integer("context_tokens", context_tokens)
    pre = integer("prefill_tokens", prefill_tokens)
    prompt = positive_integer("prompt_tokens", prompt_tokens) if pre else 0
    return _uniform_step(d, b, ctx, pre, prompt)


class _Linear:
    """Σ over a model's distinct layers of ``count · (const + slope · held(c))``, held(c) =
    min(c, cap) (the tokens a layer keeps of a context of c): the KV bytes and attention FLOPs of
    a context, for numpy arrays of contexts. Built from the layers' own ``tokens_held``,
    ``bytes_per_token`` and ``attention_flops_per_token``, so it gives their numbers."""

    def __init__(self, terms: list[tuple[float, float, float]]) -> None:
        self.const = sum(c for c, _, _ in terms)
        self.terms = [(slope, cap) for _, slope, cap in terms if slope]
        self.windowed = any(cap != math.inf for _, cap in self.terms)

    def at(self, c: np.ndarray) -> np.ndarray:
        if not self.windowed:
            return self.const + sum(slope * c for slope, _ in self.terms)
        return self.const + sum(slope * np.minimum(c, cap) for slope, cap in self.terms)

    def decoding(self, computed: np.ndarray, n_steps: int) -> np.ndarray:
        """Σ over requests of ``at(computed + j)`` for j = 0 … n_steps − 1 (each request one
        token further every step), in O((requests + steps) log requests)."""
        k, j = len(computed), np.arange(n_steps, dtype=float)
        out = np.full(n_steps, self.const * k)
        if not self.windowed:  # every context counts in full: only the sum matters
            total = float(np.sum(computed, dtype=float))
            for slope, _ in self.terms:
                out += slope * (total + k * j)
            return out
        c = np.sort(np.asarray(computed, dtype=float))
        prefix = np.concatenate(([0.0], np.cumsum(c)))
        for slope, cap in self.terms:
            if cap == math.inf:
                out += slope * (prefix[-1] + k * j)
                continue
            below = np.searchsorted(c, cap - j, side="left")  # c_i + j < cap
            out += slope * (prefix[below] + below * j + cap * (k - below))
        return out

    def summed(self, start: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Σ of ``at`` over the contexts start, start + 1, …, start + n − 1."""
        def s(x: np.ndarray, cap: float) -> np.ndarray:  # Σ_{t < x} min(t, cap)
            if cap == math.inf:
                return x * (x - 1) / 2
            m = np.minimum(x, cap)
            return m * (m - 1) / 2 + np.maximum(x - cap, 0) * cap
        return self.const * n + sum(slope * (s(start + n, cap) - s(start, cap))
                                    for slope, cap in self.terms)


_HUGE = 1 << 40


def _held_cap(layer: Any) -> float:
    held = layer.tokens_held(_HUGE)
    return 0.0 if held == 0 else (math.inf if held == _HUGE else float(held))


@lru_cache(maxsize=64)
def _context_costs(d: Deployment) -> tuple[_Linear, _Linear, int]:
    """(KV bytes of a context, attention FLOPs of a token at a context, state bytes) on one GPU."""
    m, tp, fmt = d.model, d.tp, d.kv
    kv_terms, flop_terms = [], []
    for layer, count in m.distinct_layers:
        cap = _held_cap(layer)
        kv_terms.append((0.0, count * layer.bytes_per_token(fmt, tp) if cap else 0.0, cap))
        if isinstance(layer, SharedKVLayer):  # holds nothing, attends to its source's tokens
            cap = _held_cap(layer.source)
        f0 = layer.attention_flops_per_token(0, tp, m.n_heads)
        probe = 1024 if cap == math.inf else max(int(cap), 1)
        slope = (layer.attention_flops_per_token(probe, tp, m.n_heads) - f0) / probe if cap else 0.0
        flop_terms.append((count * f0, count * slope, cap))
    return _Linear(kv_terms), _Linear(flop_terms), m.state_bytes(None, tp)


@lru_cache(maxsize=4096)
def _fixed_terms(d: Deployment, tokens: int, requests: int) -> tuple[int, float, float, float]:
    """(weight bytes, matmul FLOPs with MoE tile padding, fixed seconds, all-reduce seconds) of a
    step over ``tokens`` tokens of ``requests`` requests: what does not depend on the requests'
    contexts."""
    m, g, tp, eff = d.model, d.gpu, d.tp, _efficiency(d)
    counts = _counts(m)
    weights = step_weight_bytes(counts, d.weights, tp, tokens)
    flops = tokens * 2 * counts.matmul_active / tp
    if counts.n_experts:
        rows = moe_padded_rows(counts.n_experts, counts.experts_per_token, tokens)
        extra = rows - tokens * counts.experts_per_token
        flops += extra * 2 * counts.expert_params_per_expert() * counts.n_moe_layers / tp
    bl = blocks(m)
    fixed = eff.fixed_s(d.engine, g, bl, tp, requests)
    comm = 0.0
    if tp > 1 and eff.communication:
        comm = bl.total * allreduce_time_s(g, tp, tokens * hidden_size(m) * ACTIVATION_BYTES)
    return weights, flops, fixed, comm


def step_of(deployment: Deployment, batch: Any) -> Step:
    """The ``Step`` of ``step_time``. Each request of ``batch`` — ``(tokens scheduled this step,
    tokens already computed)`` — reads the KV of its computed tokens; a prefill chunk (more than
    one token) also writes its own KV, and each of its tokens attends to the tokens before it."""
    return StepTimer(deployment).step(batch)


class StepTimer:
    """``step_time`` of one deployment as the serving simulator calls it, step after step:
    ``timer(batch)`` is ``step_time(deployment, batch)``, ``timer.step(batch)`` its ``Step``, and
    ``timer.decode_steps(computed, n)`` the seconds of n consecutive pure-decode steps of requests
    holding ``computed`` tokens at the first — the same numbers, in one vectorised call."""

    def __init__(self, deployment: Deployment) -> None:
        d = self.deployment = one_group(deployment)
        self.kv, self.attention, self.state = _context_costs(d)
        self.eff = _efficiency(d)
        self.beta = d.gpu.bandwidth()
        self.peak = matmul_flops(d.gpu, d.weights)
        self.rate = matmul_rate(d.gpu, d.weights, self.eff)
        self._fixed: dict[tuple[int, int], tuple[int, float, float, float]] = {}

    def _terms(self, tokens: int, requests: int) -> tuple[int, float, float, float]:
        key = (tokens, requests)
        if key not in self._fixed:
            self._fixed[key] = _fixed_terms(self.deployment, tokens, requests)
        return self._fixed[key]

    @staticmethod
    def _pairs(batch: Any) -> np.ndarray:
        try:
            pairs = np.asarray(batch, dtype=np.int64).reshape(-1, 2)
        except (TypeError, ValueError, OverflowError):
            raise ValueError("batch must be pairs (tokens scheduled this step, tokens already "
                             f"computed) of integers, got {batch!r}"[:200]) from None
        if len(pairs) == 0 or (pairs < 0).any() or (pairs[:, 0] < 1).any():
            raise ValueError("a step schedules at least one token for each request, "
                             "none negative")
        return pairs

    def _legs(self, pairs: np.ndarray) -> tuple[int, int, float, float, float, int, float,
                                                    float]:
        """(decodes, prefill tokens, KV bytes, FLOPs, attention FLOPs, weight bytes, fixed s,
        all-reduce s) of a step of valid ``pairs``."""
        new, done = pairs[:, 0].astype(float), pairs[:, 1].astype(float)
        kv, attention = self.kv, self.attention
        chunk = new > 1
        read = float(kv.at(done).sum()) + self.state * int((done > 0).sum())
        flops = float(attention.at(done[~chunk]).sum())
        written = 0.0
        if chunk.any():
            start, n = done[chunk], new[chunk]
            written = float((kv.at(start + n) - kv.at(start)).sum())
            flops += float(attention.summed(start, n).sum())
        decodes = int((~chunk).sum())
        prefill = int(new[chunk].sum())
        weights, matmul, fixed, comm = self._terms(decodes + prefill, len(pairs))
        return decodes, prefill, read + written, flops + matmul, flops, weights, fixed, comm

    def step(self, batch: Any) -> Step:
        pairs = self._pairs(batch)
        done = pairs[:, 1]
        decodes, prefill, kv_bytes, flops, attention, weights, fixed, comm = self._legs(pairs)
        kind = "mixed" if decodes and prefill else ("decode" if decodes else "prefill")
        return Step(kind=kind, batch=decodes, context_tokens=int(done.sum()) // len(done),
                    prefill_tokens=prefill, requests=len(pairs), n_gpus=self.deployment.tp,
                    weight_bytes=weights,
                    kv_bytes=kv_bytes, flops=flops, weights_s=weights / self.beta,
                    kv_s=kv_bytes / self.beta,
                    compute_s=compute_leg_s(flops, attention, self.peak, self.rate),
                    fixed_s=fixed,
                    allreduce_s=comm, efficiency=self.eff.name, law=self.eff,
                    attention_s=attention / self.peak)

    def __call__(self, batch: Any) -> float:
        _, _, kv_bytes, flops, attention, weights, fixed, comm = self._legs(self._pairs(batch))
        return float(law_seconds(weights / self.beta, kv_bytes / self.beta,
                                 compute_leg_s(flops, attention, self.peak, self.rate), fixed,
                                 comm, self.eff,
                                 attention / self.peak))

    def decode_steps(self, computed: np.ndarray, n_steps: int) -> np.ndarray:
        c = np.asarray(computed, dtype=float)
        k = len(c)
        weights, matmul, fixed, comm = self._terms(k, k)
        with_state = np.full(n_steps, k)  # a request holds its recurrent state once it has tokens
        with_state[0] = int((c > 0).sum())
        kv_bytes = self.kv.decoding(c, n_steps) + self.state * with_state
        attention = self.attention.decoding(c, n_steps)
        return law_seconds(weights / self.beta, kv_bytes / self.beta,
                           compute_leg_s(matmul + attention, attention, self.peak, self.rate),
                           fixed, comm,
                           self.eff, attention / self.peak)


def step_time(deployment: Deployment, batch: Any) -> float:
    """Seconds of one engine step that schedules, for each request in ``batch``, ``(tokens
    scheduled this step, tokens already computed)`` — decodes (1 token) and prefill chunks
    together, each attending to its own context (``step_of``; the law of ``law_seconds``).
    The default ``step_time`` of the serving simulator: a sequence of pairs or an (n, 2) array.

    E.g. ``step_time(Deployment("llama-3.1-8b", "h100-sxm"), [(1, 4000)] * 32 + [(2048, 0)])``:
    32 decodes at 4,000 tokens beside the first 2,048-token chunk of a new prompt.
    """
    return StepTimer(deployment)(batch)


def decode_step(model: Deployment | Model | str, gpu: GPU | str | None = None, *, batch: int,
                context_tokens: int, **deployment_keywords: Any) -> Step:
    """One decode step: ``batch`` sequences each at ``context_tokens`` cached tokens emit one
    token each (a ``Deployment``, or ``model`` on ``gpu`` with its keywords).
    ``efficiency=DATASHEET`` gives the pure roofline."""
    positive_integer("batch", batch)
    return step(model, gpu, batch=batch, context_tokens=context_tokens, **deployment_keywords)


def kv_dtype_speedup(model: Deployment | Model | str, gpu: GPU | str | None = None, *,
                     batch: int, context_tokens: int, kv_dtype: str = "fp8",
                     baseline_kv_dtype: str = "bf16", **deployment_keywords: Any) -> float:
    """How much faster one decode step is with a ``kv_dtype`` cache than with a
    ``baseline_kv_dtype`` one, all else equal: the baseline's step time ÷ this one's (1.25
    means 25 % faster). Only the KV reads change, so the gain grows with batch × context."""
    d = as_deployment(model, gpu, **deployment_keywords)
    times = [decode_step(d.with_(kv=kv), batch=batch, context_tokens=context_tokens).time_s
             for kv in (baseline_kv_dtype, kv_dtype)]
    return times[0] / times[1]


def prefill_step(model: Deployment | Model | str, gpu: GPU | str | None = None, *, batch: int,
                 prompt_tokens: int, **deployment_keywords: Any) -> Step:
    """One prefill step of ``batch`` prompts of ``prompt_tokens`` tokens: reads the weights
    once, writes the prompts' KV, and does 2 × active params per token plus causal attention."""
    positive_integer("batch", batch)
    positive_integer("prompt_tokens", prompt_tokens)
    return step(model, gpu, prefill_tokens=batch * prompt_tokens, prompt_tokens=prompt_tokens,
                **deployment_keywords)


#: Engines whose scheduler runs waiting prompts as a prefill batch of their own before the next
#: decode step, not inside it: SGLang (``enable_mixed_chunk`` off by default; "Run prefill first
#: if possible" in ``Scheduler.get_next_batch_to_run``; read in the 0.5.1.post1 and 0.5.23
#: wheels). vLLM and TensorRT-LLM put prompt chunks inside decode steps.
PREFILL_FIRST_ENGINES = ("sglang",)


@dataclass(frozen=True)
class ServingSteps:
    """The steady state of a continuous-batching server with ``batch`` requests in flight.

    decode: a step of pure decodes; mixed: a decode step that also prefills one arriving prompt
    (or, when prompts arrive faster than one per step, the mean prefill tokens per step) — on
    an engine that prefills before it decodes (``prefill_apart``: ``PREFILL_FIRST_ENGINES``),
    those prompt tokens' own prefill batch, run between two decode steps; prefill_share: the
    fraction of decode steps that carry (or follow) a prompt; prefill_tokens_per_step: mean
    prompt tokens per step, (batch − 1) × input ÷ output (each of the other requests brings a
    prompt every ``output`` steps); first: the step that carries a new request's own prompt.
    """

    decode: Step
    mixed: Step
    first: Step
    prefill_share: float
    prefill_tokens_per_step: float
    prompt_chunks: int
    prefill_apart: bool = False

    @property
    def tpot_s(self) -> float:
        """Mean time per output token of a request: the mean step time (with prompts apart, a
        decode step plus the prefill batches run between decode steps, per step)."""
        if self.prefill_apart:
            return self.decode.time_s + self.prefill_share * self.mixed.time_s
        return (1 - self.prefill_share) * self.decode.time_s + self.prefill_share * self.mixed.time_s

    @property
    def ttft_s(self) -> float:
        """Time to a new request's first token when arrivals are spread out: its prompt's
        chunk steps plus, on average, half a running step to wait for."""
        return self.prompt_s + self.tpot_s / 2

    @property
    def prompt_s(self) -> float:
        """Seconds of the steps that carry one request's own prompt (its chunks)."""
        return self.prompt_chunks * self.first.time_s

    @property
    def tokens_per_s(self) -> float:
        """Output tokens the whole group emits per second."""
        return self.decode.batch / self.tpot_s

    @property
    def per_user_tokens_per_s(self) -> float:
        """What one request sees: 1 ÷ time per output token."""
        return 1 / self.tpot_s

    @property
    def prefill_time_share(self) -> float:
        """The part of the mean step spent on prefill work (what input tokens cost)."""
        extra = self.mixed.time_s if self.prefill_apart else self.mixed.time_s - self.decode.time_s
        return self.prefill_share * extra / self.tpot_s


def serving_steps(model: Deployment | Model | str, gpu: GPU | str | None = None, *, batch: int,
                  input_tokens: int, output_tokens: int, max_batched_tokens: int | None = None,
                  **deployment_keywords: Any) -> ServingSteps:
    """Decode and prefill steps of a server keeping ``batch`` requests of ``input_tokens`` +
    ``output_tokens`` in flight (a closed-loop benchmark at concurrency ``batch``, or steady
    traffic): decodes run at the mean context, input + output ÷ 2; a prompt is prefilled in
    chunks of up to the deployment's ``max_num_batched_tokens`` − ``batch`` tokens inside decode
    steps (chunked prefill; ``max_batched_tokens`` overrides it) — or, on an engine that
    prefills before it decodes (``PREFILL_FIRST_ENGINES``), in batches of prompt tokens alone
    between decode steps. (A closed-loop benchmark of one length on such an engine runs in
    waves instead: ``lockstep_steps``.)
    """
    d = as_deployment(model, gpu, **deployment_keywords)
    b = positive_integer("batch", batch)
    isl = positive_integer("input_tokens", input_tokens)
    osl = positive_integer("output_tokens", output_tokens)
    limit = (d.max_num_batched_tokens or MAX_BATCHED_TOKENS) if max_batched_tokens is None \
        else positive_integer("max_batched_tokens", max_batched_tokens)
    budget = limit - b
    if budget < 1:
        raise ValueError(f"max_batched_tokens ({limit}) leaves no room for prefill "
                         f"beside {b} decodes")
    ctx = isl + osl // 2
    chunk = min(isl, budget)
    per_step = (b - 1) * isl / osl
    share = min(1.0, per_step / chunk)
    mixed_tokens = min(budget, max(chunk, math.ceil(per_step)))
    apart = d.engine in PREFILL_FIRST_ENGINES
    decode = _uniform_step(d, b, ctx, 0, 0)
    mixed = _uniform_step(d, 0 if apart else b, ctx, mixed_tokens, isl)
    first = _uniform_step(d, 0 if apart else b - 1, ctx, chunk, isl)
    return ServingSteps(decode=decode, mixed=mixed, first=first, prefill_share=share,
                        prefill_tokens_per_step=per_step, prompt_chunks=math.ceil(isl / chunk),
                        prefill_apart=apart)


@dataclass(frozen=True)
class LockstepSteps:
    """A closed-loop benchmark of ``batch`` requests of one length on an engine that prefills
    before it decodes (``PREFILL_FIRST_ENGINES``): the requests start together, so they finish
    together and their replacements arrive together — every wave prefills ``batch`` prompts in
    ``chunks`` chunks, then decodes ``output_tokens`` steps at ``batch``.

    decode: a decode step at the mean context (input + output ÷ 2); wave: the prefill of the
    whole wave's prompts (one step's legs; its chunks add no bytes the weights do not already
    dominate); chunks: prefill batches per wave; output_tokens: tokens each request emits.
    A request's first token comes with its own chunk, so on average it waits (chunks + 1) ÷ 2
    chunks for it and then (chunks − 1) ÷ 2 more before decoding resumes.
    """

    decode: Step
    wave: Step
    chunks: int
    output_tokens: int

    @property
    def tpot_wave_share(self) -> float:
        """The part of the wave's prefill in each output token's time: the (chunks − 1) ÷ 2
        chunks after a request's first token, spread over its other output tokens."""
        return (self.chunks - 1) / (2 * self.chunks) / max(self.output_tokens - 1, 1)

    @property
    def ttft_wave_share(self) -> float:
        """The part of the wave's prefill before a request's first token: (chunks + 1) ÷ 2 of
        its chunks."""
        return (self.chunks + 1) / (2 * self.chunks)

    @property
    def tpot_s(self) -> float:
        """Mean time per output token: a decode step plus ``tpot_wave_share`` of the wave."""
        return self.decode.time_s + self.tpot_wave_share * self.wave.time_s

    @property
    def ttft_s(self) -> float:
        """Mean time to first token: ``ttft_wave_share`` of the wave's prefill."""
        return self.ttft_wave_share * self.wave.time_s


def lockstep_steps(model: Deployment | Model | str, gpu: GPU | str | None = None, *,
                   batch: int, input_tokens: int, output_tokens: int,
                   chunk_tokens: int | None = None, **deployment_keywords: Any) -> LockstepSteps:
    """The steps of ``LockstepSteps``: ``batch`` requests of ``input_tokens`` + ``output_tokens``
    prefilled ``chunk_tokens`` prompt tokens per batch (default: the deployment's
    ``max_num_batched_tokens``, else SGLang's ``chunked_prefill_size`` for the GPU)."""
    d = as_deployment(model, gpu, **deployment_keywords)
    b = positive_integer("batch", batch)
    isl = positive_integer("input_tokens", input_tokens)
    osl = positive_integer("output_tokens", output_tokens)
    if chunk_tokens is None:
        chunk_tokens = d.max_num_batched_tokens or sglang.capacity_defaults(
            sglang.gpu_memory_mib(d.gpu), d.tp)[0]
    chunk = positive_integer("chunk_tokens", chunk_tokens)
    return LockstepSteps(decode=_uniform_step(d, b, isl + osl // 2, 0, 0),
                         wave=prefill_step(d, batch=b, prompt_tokens=isl),
                         chunks=math.ceil(b * isl / chunk), output_tokens=osl)


def generation_time_s(model: Deployment | Model | str, gpu: GPU | str | None = None, *,
                      batch: int, prompt_tokens: int, output_tokens: int, samples: int = 16,
                      **deployment_keywords: Any) -> float:
    """Seconds a static batch takes: one prefill of ``batch × prompt_tokens`` then
    ``output_tokens`` decode steps at growing context (integrated over ``samples`` points)."""
    d = as_deployment(model, gpu, **deployment_keywords)
    positive_integer("output_tokens", output_tokens)
    total = prefill_step(d, batch=batch, prompt_tokens=prompt_tokens).time_s
    n = min(samples, output_tokens)
    for i in range(n):
        ctx = prompt_tokens + int((i + 0.5) * output_tokens / n)
        total += decode_step(d, batch=batch, context_tokens=ctx).time_s * output_tokens / n
    return total


def critical_batch(gpu: GPU | str, weight_dtype: str = "bf16") -> float:
    """Tokens per step at which a weight matmul turns compute-bound on ``gpu``:
    peak FLOP/s ÷ bandwidth × bytes per weight ÷ 2 (the scaling book's B_crit; 240 for bf16
    on a TPU v5e). The compute rate is the one the weight format runs at (``matmul_flops``: fp8
    on FP8 tensor cores; weight-only 4-bit formats, and FP8 on a GPU without FP8 tensor cores,
    on bf16)."""
    g = resolve_gpu(gpu)
    fmt = weight_format(weight_dtype)
    bytes_per_weight = weight_bits(fmt.linear) / 8
    return matmul_flops(g, fmt) / g.bandwidth() * bytes_per_weight / 2


def model_critical_batch(model: Deployment | Model | str, gpu: GPU | str | None = None, *,
                         context_tokens: int, max_batch: int = 1 << 20,
                         **deployment_keywords: Any) -> int | None:
    """The smallest decode batch at ``context_tokens`` whose step is compute-bound, or None
    when KV reads grow faster than the math and no batch up to ``max_batch`` gets there
    (``efficiency`` defaults to ``DATASHEET`` here: the pure roofline)."""
    deployment_keywords.setdefault("efficiency", DATASHEET)
    d = as_deployment(model, gpu, **deployment_keywords)
    lo, hi = 1, max_batch
    if decode_step(d, batch=hi, context_tokens=context_tokens).bound == "memory":
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if decode_step(d, batch=mid, context_tokens=context_tokens).bound == "compute":
            hi = mid
        else:
            lo = mid + 1
    return lo
