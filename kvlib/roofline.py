"""How fast a step is: the bytes it reads, the FLOPs it does, and the fixed costs around them.

Every step — a decode step, a prefill, or the mixed step of a continuous-batching server —
has one decomposition, on each of ``n_gpus`` tensor-parallel GPUs::

    time = max(weights ÷ (β · η_w) + KV ÷ (β · η_kv), FLOPs ÷ (F · η_F))      the roofline
         + engine step cost + Σ_blocks block cost                fixed costs (fitted)
         + blocks × (α + message bytes ÷ link bandwidth)        all-reduces (tensor parallel)

* bytes: the weights read once per step (embedding lookups excluded; for MoE only the experts
  the step's tokens touch, ``E·(1 − (1 − k/E)^T)`` per layer under uniform routing) + every
  decoding sequence's KV cache (windows capped, recurrent state included) + the prompt KV a
  prefill writes;
* FLOPs: 2 × active matmul parameters per token + attention (2·heads·(d_k + d_v) per cached
  token per layer); each touched expert's token rows are padded to ``MOE_TILE_ROWS``, the
  row block vLLM's fused-MoE kernels pad every expert's tokens to (``moe_align_block_size``), so a
  small batch costs each touched expert a whole tile;
* β, F: the GPU's datasheet bandwidth and dense FLOP/s (``data/gpus.csv``); η_w, η_kv, η_F:
  the shares an engine achieves streaming weights, reading the paged KV cache (attention
  kernels gather scattered blocks) and doing matmuls (fitted);
* fixed costs: a per-step cost of the engine (scheduling, sampling; one per engine and
  platform) and a per-block cost by block kind (kernel launches and small ops that do not grow
  with bytes) — both fitted by :mod:`kvlib.calibrate`;
* all-reduces: one after every block (attention or recurrent mixer, MLP or MoE) under tensor
  parallelism — a hybrid stack counts the mixers it really has (``blocks``); the latency α
  comes from published microbenchmarks (``hardware.allreduce_latency``) and the bytes term
  from the datasheet link bandwidth (``allreduce_time_s``).

``DATASHEET`` is the pure roofline (η = 1, no fixed costs, no all-reduces); ``CALIBRATED``
holds the constants :func:`kvlib.calibrate.fit` finds on the train half of the measurements.
``serving_steps`` turns steps into what a serving benchmark measures: other requests'
prefill shares the decode steps (chunked prefill), so time per output token is not pure decode.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from .capacity import _resolve_gpu, _resolve_model
from .checks import integer, number, positive_integer
from .hardware import GPU, allreduce_latency, compute_dtype_for
from .model import Model
from .params import ParamCounts, params_for, weight_bits, weight_bytes

#: Engines with fitted step costs; on an AMD GPU the engine's ROCm build is its own entry.
ENGINES = ("vllm", "sglang", "tensorrt-llm")
#: How the book names each engine of ``ENGINES`` (and of ``data/engine_block_sizes.csv``).
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM"}
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


@dataclass(frozen=True)
class Efficiency:
    """The speed model's constants: achieved shares of the peaks and the fixed costs.

    bandwidth: achieved ÷ peak memory bandwidth reading weights, (0, 1]; kv_bandwidth: the same
    reading (and writing) the KV cache; compute: achieved ÷ peak dense FLOP/s, (0, 1]; step_s: (engine, seconds) added to every step — the engine key is ``ENGINES`` or
    ``"<engine>-rocm"`` on AMD GPUs; block_s: (block kind, seconds) added per block of that kind
    (``BLOCK_KINDS``); communication: whether tensor-parallel all-reduces cost time.
    """

    name: str
    bandwidth: float = 1.0
    kv_bandwidth: float = 1.0
    compute: float = 1.0
    step_s: tuple[tuple[str, float], ...] = ()
    block_s: tuple[tuple[str, float], ...] = ()
    communication: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        for key in ("bandwidth", "kv_bandwidth", "compute"):
            number(f"Efficiency.{key}", getattr(self, key), maximum=1, positive=True)
        for label, pairs in (("step_s", self.step_s), ("block_s", self.block_s)):
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

    def block_overhead_s(self, blocks: "Blocks") -> float:
        """Seconds of fixed per-block costs for a model's ``blocks``."""
        table = dict(self.block_s)
        return sum(table.get(kind, 0.0) * n for kind, n in blocks.by_kind().items())


def engine_key(engine: str, gpu: GPU) -> str:
    """``engine`` on NVIDIA GPUs, ``"<engine>-rocm"`` on AMD ones (a different build, other
    kernels); ValueError for an engine kvlib has no name for."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    return f"{engine}-rocm" if gpu.vendor == "AMD" else engine


#: The pure datasheet roofline: peak bandwidth, peak dense FLOP/s, nothing else.
DATASHEET = Efficiency("datasheet roofline (η = 1)")
#: Fitted by ``kvlib.calibrate.fit`` on the train half of the modern measurements in
#: data/throughput.csv (see Appendix A, chapters/06_validation.md, for its held-out error); tests/test_calibrate.py refits
#: and checks these values.
CALIBRATED = Efficiency(
    "calibrated (data/throughput.csv, train half)", bandwidth=0.96,
    kv_bandwidth=0.59, compute=0.6,
    step_s=(("sglang", 0.000e-3),
            ("sglang-rocm", 4.194e-3),
            ("tensorrt-llm", 0.675e-3),
            ("vllm", 1.892e-3),
            ("vllm-rocm", 3.406e-3)),
    block_s=(("attention", 0.0e-6),
             ("mla", 83.5e-6),
             ("recurrent", 5.7e-6),
             ("dense_ffn", 35.1e-6),
             ("moe_ffn", 25.5e-6)),
    communication=True, source="kvlib.calibrate.fit")


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
    return _blocks(_resolve_model(model))


_MIXER_KINDS = {"full": ("attention",), "sliding": ("attention",), "chunked": ("attention",),
                "mla": ("mla",), "mamba1": ("recurrent",), "mamba2": ("recurrent",),
                "gated_deltanet": ("recurrent",), "parallel": ("attention", "recurrent"),
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
    g = _resolve_gpu(gpu)
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
    each emit a token; context_tokens: the context each of them attends to; prefill_tokens:
    prompt tokens processed; weight_bytes / kv_bytes: bytes one GPU reads (KV: read by the
    decodes, written by the prefill); flops: FLOPs one GPU does; memory_time_s /
    compute_time_s: the two roofline legs; fixed_s: engine and per-block costs; allreduce_s: the
    tensor-parallel all-reduces.
    """

    kind: str
    batch: int
    context_tokens: int
    prefill_tokens: int
    n_gpus: int
    weight_bytes: int
    kv_bytes: int
    flops: float
    memory_time_s: float
    compute_time_s: float
    fixed_s: float
    allreduce_s: float
    efficiency: str

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes

    @property
    def overhead_s(self) -> float:
        """Everything that is not the roofline: fixed costs plus all-reduces."""
        return self.fixed_s + self.allreduce_s

    @property
    def time_s(self) -> float:
        """Seconds the step takes: the slower roofline leg plus the overheads."""
        return max(self.memory_time_s, self.compute_time_s) + self.overhead_s

    @property
    def bound(self) -> str:
        """"memory" when reading bytes takes longer than the math, else "compute"."""
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


def attention_flops_per_token(model: Model, context_tokens: int, tp: int = 1) -> float:
    """FLOPs one new token spends attending to ``context_tokens`` cached tokens, on one GPU:
    the sum of each layer's own ``attention_flops_per_token`` (softmax attention 2·heads·(d_k +
    d_v) per cached token, windows capped; MLA in its absorbed latent form, d_k = r + d_R,
    d_v = r; recurrent layers ≈ 4 FLOPs per state element)."""
    return sum(n * layer.attention_flops_per_token(context_tokens, tp, model.n_heads)
               for layer, n in model.distinct_layers)


def _compute_dtype(weight_dtype: str | Mapping[str, str]) -> str:
    if isinstance(weight_dtype, Mapping):
        return "fp8" if set(weight_dtype.values()) == {"fp8"} else "bf16"
    return compute_dtype_for(weight_dtype)


#: Prompt positions sampled to average a prompt token's attention work.
_PROMPT_SAMPLES = 8


def step(model: Model | str, gpu: GPU | str, *, batch: int = 0, context_tokens: int = 0,
         prefill_tokens: int = 0, prompt_tokens: int = 0, n_gpus: int = 1,
         weight_dtype: str | Mapping[str, str] = "bf16", kv_dtype: str = "bf16",
         engine: str = "vllm", efficiency: Efficiency | None = None) -> Step:
    """One step of ``batch`` decoding sequences at ``context_tokens`` each plus
    ``prefill_tokens`` prompt tokens (a chunk of one prompt, or several prompts) from prompts of
    ``prompt_tokens`` tokens, on ``n_gpus``
    tensor-parallel ``gpu``s served by ``engine`` (the module docstring gives the formula).

    A prompt token attends to the tokens before it: on average to half its prompt (sampled at
    ``_PROMPT_SAMPLES`` positions so windows cap it). ``efficiency`` None means ``CALIBRATED``.
    """
    eff = CALIBRATED if efficiency is None else efficiency
    if not isinstance(eff, Efficiency):
        raise TypeError(f"efficiency must be an Efficiency, got {type(eff)!r}")
    m, g = _resolve_model(model), _resolve_gpu(gpu)
    b = integer("batch", batch)
    ctx = integer("context_tokens", context_tokens)
    pre = integer("prefill_tokens", prefill_tokens)
    tp = positive_integer("n_gpus", n_gpus)
    if b + pre == 0:
        raise ValueError("a step needs a decoding sequence (batch) or prompt tokens")
    if pre:
        prompt = positive_integer("prompt_tokens", prompt_tokens)
    counts = _counts(m)
    tokens = b + pre
    weights = step_weight_bytes(counts, weight_dtype, tp, tokens)
    kv = b * m.kv_bytes(ctx, kv_dtype, tp=tp) if ctx and b else 0
    flops = tokens * 2 * counts.matmul_active / tp
    if b:
        flops += b * attention_flops_per_token(m, ctx, tp)
    if pre:
        kv += round(m.kv_bytes(prompt, kv_dtype, tp=tp) * pre / prompt)
        n = min(_PROMPT_SAMPLES, prompt)
        positions = [int((i + 0.5) * prompt / n) for i in range(n)]
        flops += pre * sum(attention_flops_per_token(m, p, tp) for p in positions) / n
    if counts.n_experts:
        rows = moe_padded_rows(counts.n_experts, counts.experts_per_token, tokens)
        extra = rows - tokens * counts.experts_per_token
        flops += extra * 2 * counts.expert_params_per_expert() * counts.n_moe_layers / tp
    peak = g.dense_flops(_compute_dtype(weight_dtype))
    bl = blocks(m)
    fixed = eff.step_overhead_s(engine, g) + eff.block_overhead_s(bl)
    comm = 0.0
    if tp > 1 and eff.communication:
        message = tokens * hidden_size(m) * ACTIVATION_BYTES
        comm = bl.total * allreduce_time_s(g, tp, message)
    kind = "mixed" if b and pre else ("decode" if b else "prefill")
    return Step(kind=kind, batch=b, context_tokens=ctx, prefill_tokens=pre, n_gpus=tp,
                weight_bytes=weights, kv_bytes=kv, flops=flops,
                memory_time_s=(weights / eff.bandwidth + kv / eff.kv_bandwidth) / g.bandwidth(),
                compute_time_s=flops / (peak * eff.compute), fixed_s=fixed, allreduce_s=comm,
                efficiency=eff.name)


def decode_step(model: Model | str, gpu: GPU | str, *, batch: int, context_tokens: int,
                n_gpus: int = 1, weight_dtype: str | Mapping[str, str] = "bf16",
                kv_dtype: str = "bf16", engine: str = "vllm",
                efficiency: Efficiency | None = None) -> Step:
    """One decode step: ``batch`` sequences each at ``context_tokens`` cached tokens emit one
    token each, on ``n_gpus`` tensor-parallel ``gpu``s. ``efficiency=DATASHEET`` gives the
    pure roofline."""
    positive_integer("batch", batch)
    return step(model, gpu, batch=batch, context_tokens=context_tokens, n_gpus=n_gpus,
                weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine,
                efficiency=efficiency)


def kv_dtype_speedup(model: Model | str, gpu: GPU | str, *, batch: int, context_tokens: int,
                     kv_dtype: str = "fp8", baseline_kv_dtype: str = "bf16", n_gpus: int = 1,
                     weight_dtype: str | Mapping[str, str] = "bf16", engine: str = "vllm",
                     efficiency: Efficiency | None = None) -> float:
    """How much faster one decode step is with a ``kv_dtype`` cache than with a
    ``baseline_kv_dtype`` one, all else equal: the baseline's step time ÷ this one's (1.25
    means 25 % faster). Only the KV reads change, so the gain grows with batch × context."""
    steps = [decode_step(model, gpu, batch=batch, context_tokens=context_tokens, n_gpus=n_gpus,
                         weight_dtype=weight_dtype, kv_dtype=dtype, engine=engine,
                         efficiency=efficiency).time_s for dtype in (baseline_kv_dtype, kv_dtype)]
    return steps[0] / steps[1]


def prefill_step(model: Model | str, gpu: GPU | str, *, batch: int, prompt_tokens: int,
                 n_gpus: int = 1, weight_dtype: str | Mapping[str, str] = "bf16",
                 kv_dtype: str = "bf16", engine: str = "vllm",
                 efficiency: Efficiency | None = None) -> Step:
    """One prefill step of ``batch`` prompts of ``prompt_tokens`` tokens: reads the weights
    once, writes the prompts' KV, and does 2 × active params per token plus causal attention."""
    positive_integer("batch", batch)
    positive_integer("prompt_tokens", prompt_tokens)
    return step(model, gpu, prefill_tokens=batch * prompt_tokens, prompt_tokens=prompt_tokens,
                n_gpus=n_gpus, weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine,
                efficiency=efficiency)


@dataclass(frozen=True)
class ServingSteps:
    """The steady state of a continuous-batching server with ``batch`` requests in flight.

    decode: a step of pure decodes; mixed: a decode step that also prefills one arriving prompt
    (or, when prompts arrive faster than one per step, the mean prefill tokens per step);
    prefill_share: the fraction of steps that are mixed; prefill_tokens_per_step: mean prompt
    tokens per step, (batch − 1) × input ÷ output (each of the other requests brings a prompt
    every ``output`` steps); first: the step that carries a new request's own prompt.
    """

    decode: Step
    mixed: Step
    first: Step
    prefill_share: float
    prefill_tokens_per_step: float
    prompt_chunks: int

    @property
    def tpot_s(self) -> float:
        """Mean time per output token of a request: the mean step time."""
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
        return self.prefill_share * (self.mixed.time_s - self.decode.time_s) / self.tpot_s


def serving_steps(model: Model | str, gpu: GPU | str, *, batch: int, input_tokens: int,
                  output_tokens: int, n_gpus: int = 1,
                  weight_dtype: str | Mapping[str, str] = "bf16", kv_dtype: str = "bf16",
                  engine: str = "vllm", efficiency: Efficiency | None = None,
                  max_batched_tokens: int = MAX_BATCHED_TOKENS) -> ServingSteps:
    """Decode and prefill steps of a server keeping ``batch`` requests of ``input_tokens`` +
    ``output_tokens`` in flight (a closed-loop benchmark at concurrency ``batch``, or steady
    traffic): decodes run at the mean context, input + output ÷ 2; a prompt is prefilled in
    chunks of up to ``max_batched_tokens − batch`` tokens inside decode steps (chunked prefill).
    """
    b = positive_integer("batch", batch)
    isl = positive_integer("input_tokens", input_tokens)
    osl = positive_integer("output_tokens", output_tokens)
    budget = positive_integer("max_batched_tokens", max_batched_tokens) - b
    if budget < 1:
        raise ValueError(f"max_batched_tokens ({max_batched_tokens}) leaves no room for prefill "
                         f"beside {b} decodes")
    kw = dict(n_gpus=n_gpus, weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine,
              efficiency=efficiency)
    ctx = isl + osl // 2
    chunk = min(isl, budget)
    per_step = (b - 1) * isl / osl
    share = min(1.0, per_step / chunk)
    mixed_tokens = min(budget, max(chunk, math.ceil(per_step)))
    decode = step(model, gpu, batch=b, context_tokens=ctx, **kw)
    mixed = step(model, gpu, batch=b, context_tokens=ctx, prefill_tokens=mixed_tokens,
                 prompt_tokens=isl, **kw)
    first = step(model, gpu, batch=b - 1, context_tokens=ctx, prefill_tokens=chunk,
                 prompt_tokens=isl, **kw)
    return ServingSteps(decode=decode, mixed=mixed, first=first, prefill_share=share,
                        prefill_tokens_per_step=per_step, prompt_chunks=math.ceil(isl / chunk))


def generation_time_s(model: Model | str, gpu: GPU | str, *, batch: int, prompt_tokens: int,
                      output_tokens: int, n_gpus: int = 1,
                      weight_dtype: str | Mapping[str, str] = "bf16", kv_dtype: str = "bf16",
                      engine: str = "vllm", efficiency: Efficiency | None = None,
                      samples: int = 16) -> float:
    """Seconds a static batch takes: one prefill of ``batch × prompt_tokens`` then
    ``output_tokens`` decode steps at growing context (integrated over ``samples`` points)."""
    positive_integer("output_tokens", output_tokens)
    kw = dict(n_gpus=n_gpus, weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine,
              efficiency=efficiency)
    total = prefill_step(model, gpu, batch=batch, prompt_tokens=prompt_tokens, **kw).time_s
    n = min(samples, output_tokens)
    for i in range(n):
        ctx = prompt_tokens + int((i + 0.5) * output_tokens / n)
        total += decode_step(model, gpu, batch=batch, context_tokens=ctx,
                             **kw).time_s * output_tokens / n
    return total


def critical_batch(gpu: GPU | str, weight_dtype: str = "bf16") -> float:
    """Tokens per step at which a weight matmul turns compute-bound on ``gpu``:
    peak FLOP/s ÷ bandwidth × bytes per weight ÷ 2 (the scaling book's B_crit; 240 for bf16
    on a TPU v5e). The compute rate is the one the weight format runs at (fp8 on FP8 tensor
    cores; weight-only 4-bit formats on bf16)."""
    g = _resolve_gpu(gpu)
    bytes_per_weight = weight_bits(weight_dtype) / 8
    return g.dense_flops(compute_dtype_for(weight_dtype)) / g.bandwidth() * bytes_per_weight / 2


def model_critical_batch(model: Model | str, gpu: GPU | str, *, context_tokens: int,
                         n_gpus: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                         efficiency: Efficiency = DATASHEET, max_batch: int = 1 << 20) -> int | None:
    """The smallest decode batch at ``context_tokens`` whose step is compute-bound, or None
    when KV reads grow faster than the math and no batch up to ``max_batch`` gets there."""
    kw = dict(context_tokens=context_tokens, n_gpus=n_gpus, weight_dtype=weight_dtype,
              kv_dtype=kv_dtype, efficiency=efficiency)
    lo, hi = 1, max_batch
    if decode_step(model, gpu, batch=hi, **kw).bound == "memory":
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if decode_step(model, gpu, batch=mid, **kw).bound == "compute":
            hi = mid
        else:
            lo = mid + 1
    return lo
