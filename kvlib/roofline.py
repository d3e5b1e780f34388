"""How fast a step is: a roofline of the bytes it reads and the FLOPs it does.

A decode step of ``batch`` sequences at ``context_tokens`` each, on each of ``n_gpus``
tensor-parallel GPUs:

* bytes = the weights read once per step (embedding lookups excluded; for MoE only the
  experts a batch of that size touches, ``E·(1 − (1 − k/E)^B)`` per layer under uniform
  routing) + every sequence's KV cache (windows capped, recurrent state included);
* FLOPs = 2 × active matmul parameters per token × batch + attention
  (2·heads·(d_k + d_v) per cached token per layer);
* time = max(bytes ÷ (bandwidth × η_bw), FLOPs ÷ (peak × η_c)) + a fixed per-step overhead.

``DATASHEET`` is the pure roofline (η = 1, no overhead); ``CALIBRATED`` uses efficiency
factors fitted to the measured throughputs in ``data/throughput.csv`` (``fit_efficiency``).
Prefill has the same shape with ``batch × prompt_tokens`` tokens and a causal attention term.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .capacity import _resolve_gpu, _resolve_model
from .checks import integer, number, positive_integer
from .data import csv_path
from .hardware import GPU, compute_dtype_for
from .model import Model
from .params import ParamCounts, params_for, weight_bits, weight_bytes


@dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of the datasheet peaks, and a fixed cost per step.

    bandwidth: achieved ÷ peak memory bandwidth (0, 1]; compute: achieved ÷ peak dense
    FLOP/s (0, 1]; step_overhead_s: seconds added to every step (kernel launches, scheduling,
    sampling); allreduce_s: seconds per all-reduce (two per layer) when ``n_gpus`` > 1.
    """

    name: str
    bandwidth: float = 1.0
    compute: float = 1.0
    step_overhead_s: float = 0.0
    allreduce_s: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        for key in ("bandwidth", "compute"):
            number(f"Efficiency.{key}", getattr(self, key), maximum=1, positive=True)
        for key in ("step_overhead_s", "allreduce_s"):
            number(f"Efficiency.{key}", getattr(self, key), minimum=0)


#: The pure datasheet roofline: peak bandwidth, peak dense FLOP/s, nothing else.
DATASHEET = Efficiency("datasheet roofline (η = 1)")
#: Fitted by ``fit_efficiency`` to the static-batch and batch-1 rows of data/throughput.csv
#: mapped in data/roofline_calibration.csv (TensorRT-LLM 0.5 H100/H200 tables, the
#: TensorRT-LLM 0.16 batch-1 latency run): 70 % of peak bandwidth, 40 % of peak dense FLOP/s
#: (static batches include their prefill), 115 µs per tensor-parallel all-reduce (two per
#: layer; it absorbs every multi-GPU inefficiency of those runs);
#: tests/test_roofline.py refits and checks these values.
CALIBRATED = Efficiency("calibrated (data/throughput.csv)", bandwidth=0.70, compute=0.40,
                        step_overhead_s=0.0, allreduce_s=115e-6,
                        source="kvlib.roofline.fit_efficiency")


@dataclass(frozen=True)
class Step:
    """One forward step on each GPU of a tensor-parallel group.

    kind: "decode" or "prefill"; tokens: tokens the step processes (all GPUs together);
    output_tokens: tokens it emits (batch for decode, batch for prefill's first token);
    weight_bytes / kv_bytes: bytes one GPU reads; flops: FLOPs one GPU does;
    memory_time_s / compute_time_s: the two roofline legs; overhead_s: fixed costs.
    """

    kind: str
    batch: int
    context_tokens: int
    n_gpus: int
    weight_bytes: int
    kv_bytes: int
    flops: float
    memory_time_s: float
    compute_time_s: float
    overhead_s: float
    efficiency: str

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes

    @property
    def time_s(self) -> float:
        """Seconds the step takes: the slower leg plus the fixed overhead."""
        return max(self.memory_time_s, self.compute_time_s) + self.overhead_s

    @property
    def bound(self) -> str:
        """"memory" when reading bytes takes longer than the math, else "compute"."""
        return "memory" if self.memory_time_s >= self.compute_time_s else "compute"

    @property
    def tokens_per_s(self) -> float:
        """Tokens the whole group emits per second (decode: batch ÷ step time)."""
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
    return sum(layer.attention_flops_per_token(context_tokens, tp, model.n_heads)
               for layer in model.layers)


def _weight_format_bits_max(weight_dtype: str | Mapping[str, str]) -> float:
    if isinstance(weight_dtype, Mapping):
        return max(weight_bits(v) for v in weight_dtype.values())
    return weight_bits(weight_dtype)


def _compute_dtype(weight_dtype: str | Mapping[str, str]) -> str:
    if isinstance(weight_dtype, Mapping):
        return "fp8" if set(weight_dtype.values()) == {"fp8"} else "bf16"
    return compute_dtype_for(weight_dtype)


def _overhead(model: Model, tp: int, eff: Efficiency) -> float:
    return eff.step_overhead_s + (2 * model.n_layers * eff.allreduce_s if tp > 1 else 0.0)


def _step(kind: str, m: Model, g: GPU, batch: int, context_tokens: int, tp: int,
          weight_bytes: float, kv_bytes: float, flops: float,
          weight_dtype: str | Mapping[str, str], efficiency: Efficiency) -> Step:
    """A Step from the bytes and FLOPs it moves, timed against ``efficiency`` × the peaks."""
    if not isinstance(efficiency, Efficiency):
        raise TypeError(f"efficiency must be an Efficiency, got {type(efficiency)!r}")
    peak = g.dense_flops(_compute_dtype(weight_dtype))
    return Step(kind=kind, batch=batch, context_tokens=context_tokens, n_gpus=tp,
                weight_bytes=weight_bytes, kv_bytes=kv_bytes, flops=flops,
                memory_time_s=(weight_bytes + kv_bytes) / (g.bandwidth() * efficiency.bandwidth),
                compute_time_s=flops / (peak * efficiency.compute),
                overhead_s=_overhead(m, tp, efficiency), efficiency=efficiency.name)


def decode_step(model: Model | str, gpu: GPU | str, *, batch: int, context_tokens: int,
                n_gpus: int = 1, weight_dtype: str | Mapping[str, str] = "bf16",
                kv_dtype: str = "bf16", efficiency: Efficiency = CALIBRATED) -> Step:
    """One decode step: ``batch`` sequences each at ``context_tokens`` cached tokens emit one
    token each, on ``n_gpus`` tensor-parallel ``gpu``s. ``efficiency=DATASHEET`` gives the
    pure roofline."""
    m, g = _resolve_model(model), _resolve_gpu(gpu)
    b = positive_integer("batch", batch)
    ctx = integer("context_tokens", context_tokens)
    tp = positive_integer("n_gpus", n_gpus)
    counts = params_for(m)
    w = step_weight_bytes(counts, weight_dtype, tp, b)
    kv = b * m.kv_bytes(ctx, kv_dtype, tp=tp) if ctx else 0
    flops = b * (2 * counts.matmul_active / tp + attention_flops_per_token(m, ctx, tp))
    return _step("decode", m, g, b, ctx, tp, w, kv, flops, weight_dtype, efficiency)


def prefill_step(model: Model | str, gpu: GPU | str, *, batch: int, prompt_tokens: int,
                 n_gpus: int = 1, weight_dtype: str | Mapping[str, str] = "bf16",
                 kv_dtype: str = "bf16", efficiency: Efficiency = CALIBRATED) -> Step:
    """One prefill step of ``batch`` prompts of ``prompt_tokens`` tokens: reads the weights
    once, writes the prompts' KV, and does 2 × active params per token plus causal attention
    (each token attends to the tokens before it: ≈ T²/2 pairs per prompt)."""
    m, g = _resolve_model(model), _resolve_gpu(gpu)
    b = positive_integer("batch", batch)
    t = positive_integer("prompt_tokens", prompt_tokens)
    tp = positive_integer("n_gpus", n_gpus)
    counts = params_for(m)
    tokens = b * t
    w = step_weight_bytes(counts, weight_dtype, tp, tokens)
    kv = b * m.kv_bytes(t, kv_dtype, tp=tp)
    attn = b * sum(attention_flops_per_token(m, ctx, tp) for ctx in _sample_contexts(t))
    attn *= t / len(_sample_contexts(t))
    flops = tokens * 2 * counts.matmul_active / tp + attn
    return _step("prefill", m, g, b, t, tp, w, kv, flops, weight_dtype, efficiency)


def _sample_contexts(t: int, n: int = 16) -> list[int]:
    """Midpoints of ``n`` equal slices of 0..t (the contexts prefill tokens attend to)."""
    n = min(n, t)
    return [int((i + 0.5) * t / n) for i in range(n)]


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
    lo, hi = 1, max_batch
    step = decode_step(model, gpu, batch=hi, context_tokens=context_tokens, n_gpus=n_gpus,
                       weight_dtype=weight_dtype, kv_dtype=kv_dtype, efficiency=efficiency)
    if step.bound == "memory":
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        s = decode_step(model, gpu, batch=mid, context_tokens=context_tokens, n_gpus=n_gpus,
                        weight_dtype=weight_dtype, kv_dtype=kv_dtype, efficiency=efficiency)
        if s.bound == "compute":
            hi = mid
        else:
            lo = mid + 1
    return lo


def generation_time_s(model: Model | str, gpu: GPU | str, *, batch: int, prompt_tokens: int,
                      output_tokens: int, n_gpus: int = 1,
                      weight_dtype: str | Mapping[str, str] = "bf16", kv_dtype: str = "bf16",
                      efficiency: Efficiency = CALIBRATED, samples: int = 16) -> float:
    """Seconds a static batch takes: one prefill of ``batch × prompt_tokens`` then
    ``output_tokens`` decode steps at growing context (integrated over ``samples`` points)."""
    positive_integer("output_tokens", output_tokens)
    pre = prefill_step(model, gpu, batch=batch, prompt_tokens=prompt_tokens, n_gpus=n_gpus,
                       weight_dtype=weight_dtype, kv_dtype=kv_dtype, efficiency=efficiency)
    n = min(samples, output_tokens)
    total = 0.0
    for i in range(n):
        ctx = prompt_tokens + int((i + 0.5) * output_tokens / n)
        total += decode_step(model, gpu, batch=batch, context_tokens=ctx, n_gpus=n_gpus,
                             weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                             efficiency=efficiency).time_s
    return pre.time_s + total * output_tokens / n


# --- calibration on measured throughputs ----------------------------------------------------

def calibration_cases() -> pd.DataFrame:
    """``data/roofline_calibration.csv`` joined with the ``data/throughput.csv`` rows it maps
    to registry models and GPUs (one measured case per row, indexed by throughput id)."""
    cases = pd.read_csv(csv_path("roofline_calibration.csv"), keep_default_na=False)
    measured = pd.read_csv(csv_path("throughput.csv")).set_index("id")
    missing = sorted(set(cases["throughput_id"]) - set(measured.index))
    if missing:
        raise ValueError(f"roofline_calibration.csv names unknown throughput rows {missing}")
    joined = cases.join(measured[["source", "source_url", "engine", "n_gpus", "tp", "batch",
                                  "input_tokens", "output_tokens", "metric", "value"]],
                        on="throughput_id")
    return joined.set_index("throughput_id")


def predict_case(case: Mapping[str, Any], efficiency: Efficiency = CALIBRATED) -> float | None:
    """kvlib's value for one calibration case, in the case's metric: output tokens/s of a
    static batch (prefill + decode), or seconds per output token at the case's batch."""
    tp = int(case["tp"] if case["tp"] == case["tp"] else case["n_gpus"])
    batch = int(case["batch"]) if case["batch"] == case["batch"] else None
    isl, osl = int(case["input_tokens"]), int(case["output_tokens"])
    kw = dict(n_gpus=tp, weight_dtype=case["weight_dtype"], kv_dtype=case["kv_dtype"],
              efficiency=efficiency)
    if case["mode"] == "static" and batch:
        seconds = generation_time_s(case["model_slug"], case["gpu_slug"], batch=batch,
                                    prompt_tokens=isl, output_tokens=osl, **kw)
        return batch * osl / seconds
    if case["mode"] == "itl":
        conc = batch or int(8)
        step = decode_step(case["model_slug"], case["gpu_slug"], batch=conc,
                           context_tokens=isl + osl // 2, **kw)
        return step.time_s
    return None


def roofline_calibration(efficiency: Efficiency = CALIBRATED) -> pd.DataFrame:
    """Predicted against measured for every case of ``data/roofline_calibration.csv``, with
    the datasheet roofline alongside (relative errors: predicted ÷ measured − 1)."""
    rows = []
    for case_id, case in calibration_cases().iterrows():
        pred = predict_case(case, efficiency)
        sheet = predict_case(case, DATASHEET)
        rows.append({"id": case_id, "role": case["role"], "model": case["model_slug"],
                     "gpu": case["gpu_slug"], "tp": case["tp"], "batch": case["batch"],
                     "input_tokens": case["input_tokens"], "output_tokens": case["output_tokens"],
                     "metric": case["metric"], "measured": case["value"], "predicted": pred,
                     "error": None if pred is None else pred / case["value"] - 1,
                     "datasheet": sheet,
                     "datasheet_error": None if sheet is None else sheet / case["value"] - 1})
    return pd.DataFrame(rows).set_index("id")


def _case_legs(case: Mapping[str, Any]) -> tuple[list[tuple[float, float, float, float]], float]:
    """A case as datasheet roofline legs: [(memory_s, compute_s, all-reduces, repeats)] and
    the numerator that turns total seconds into the case's metric (0 for a latency)."""
    tp = int(case["tp"] if case["tp"] == case["tp"] else case["n_gpus"])
    batch = int(case["batch"]) if case["batch"] == case["batch"] else 8
    isl, osl = int(case["input_tokens"]), int(case["output_tokens"])
    kw = dict(n_gpus=tp, weight_dtype=case["weight_dtype"], kv_dtype=case["kv_dtype"],
              efficiency=DATASHEET)
    model = _resolve_model(case["model_slug"])
    n_ar = 2 * model.n_layers if tp > 1 else 0
    if case["mode"] == "itl":
        s = decode_step(model, case["gpu_slug"], batch=batch, context_tokens=isl + osl // 2, **kw)
        return [(s.memory_time_s, s.compute_time_s, n_ar, 1.0)], 0.0
    legs = []
    pre = prefill_step(model, case["gpu_slug"], batch=batch, prompt_tokens=isl, **kw)
    legs.append((pre.memory_time_s, pre.compute_time_s, n_ar, 1.0))
    n = min(16, osl)
    for i in range(n):
        ctx = isl + int((i + 0.5) * osl / n)
        s = decode_step(model, case["gpu_slug"], batch=batch, context_tokens=ctx, **kw)
        legs.append((s.memory_time_s, s.compute_time_s, n_ar, osl / n))
    return legs, float(batch * osl)


def fit_efficiency() -> Efficiency:
    """Grid fit of η_bw, η_c (steps of 0.05) and the per-all-reduce latency (steps of 5 µs) to
    the ``fit`` cases, minimising the squared log error of the predicted metric."""
    cases = calibration_cases()
    fit = cases[cases["role"] == "fit"]
    prepared = [(_case_legs(case), float(case["value"])) for _, case in fit.iterrows()]
    best = None
    for bw in [x / 20 for x in range(4, 21)]:
        for comp in [x / 20 for x in range(4, 21)]:
            for ar_us in range(0, 201, 5):
                err = 0.0
                for (legs, numerator), measured in prepared:
                    total = sum(rep * (max(m / bw, c / comp) + n * ar_us * 1e-6)
                                for m, c, n, rep in legs)
                    pred = numerator / total if numerator else total
                    err += math.log(pred / measured) ** 2
                if best is None or err < best[0] - 1e-12:
                    best = (err, bw, comp, ar_us)
    _, bw, comp, ar_us = best
    return Efficiency("calibrated (refit)", bandwidth=bw, compute=comp, allreduce_s=ar_us * 1e-6,
                      source="kvlib.roofline.fit_efficiency")
