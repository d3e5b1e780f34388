"""One serving pipeline: a model, a GPU, request lengths and a price in; GPUs, requests in flight,
speed, time to first token, dollars and the speed model's error out.

``serving_point`` for one (model, GPU, input tokens, output tokens):

1. GPUs: ``n_gpus`` when given, else the smallest tensor-parallel degree in ``TP_DEGREES`` whose
   KV pool (``capacity.kv_pool``, vLLM's arithmetic) holds one request of input + output tokens
   — degrees the model's heads cannot be split over, and degrees above 1 on a GPU with no
   sourced GPU-to-GPU link (GH200), are skipped;
2. requests in flight: the pool's ``max_concurrency`` (vLLM's "Maximum concurrency") at input +
   output tokens, rounded down and capped at the engine's ``max_num_seqs`` — or the caller's
   ``batch``, which must fit;
3. speed: ``roofline.serving_steps`` at that batch — decode steps at the mean context that also
   carry the other requests' prompts (chunked prefill): time per output token (TPOT), what one
   user sees (1 ÷ TPOT), what the group emits (batch ÷ TPOT), and the time to first token;
4. error: ``calibrate.error_band`` — the held-out error of the speed model at that
   tensor-parallel degree and batch range;
5. dollars (``ServingPoint.dollars_per_million`` …): price × GPUs ÷ tokens per second.

The landing page's grid (``kvlib.answer.answer_grid``) runs this pipeline for every model, GPU
and length it offers, with each model's published weight format.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from . import calibrate
from .capacity import VLLM_DEFAULT_UTILIZATION_OLD, kv_pool
from .cost import cost_per_million_tokens
from .hardware import load_gpu
from .model import Model
from .registry import load_model
from .roofline import CALIBRATED, Efficiency, serving_steps

#: Tensor-parallel degrees tried, smallest first (one 8-GPU server at most).
TP_DEGREES = (1, 2, 4, 8)

def format_label(weight_dtype: str | Mapping[str, str]) -> str:
    """A short label for a weight format: ``"bf16"``, ``"experts mxfp4, rest bf16"``."""
    if isinstance(weight_dtype, str):
        return weight_dtype
    parts = ", ".join(f"{k} {v}" for k, v in sorted(weight_dtype.items()))
    return f"{parts}, rest bf16"


class DoesNotFit(ValueError):
    """The model's weights and one request do not fit the GPUs tried.

    model / gpu: slugs; context_tokens: input + output tokens of the request; degrees: the
    tensor-parallel degrees tried.
    """

    def __init__(self, model: str, gpu: str, context_tokens: int, degrees: Sequence[int]) -> None:
        self.model, self.gpu, self.context_tokens = model, gpu, context_tokens
        self.degrees = tuple(degrees)
        super().__init__(f"{model} does not fit {context_tokens:,}-token requests on "
                         f"{' or '.join(str(d) for d in self.degrees)} × {gpu}")


class BatchTooLarge(ValueError):
    """The requested batch exceeds the requests the KV pool holds (attributes ``batch`` and
    ``max_concurrency``)."""

    def __init__(self, batch: int, max_concurrency: float) -> None:
        self.batch, self.max_concurrency = batch, max_concurrency
        super().__init__(f"batch {batch} exceeds the {max_concurrency:.2f} requests the KV pool "
                         "holds")


@dataclass(frozen=True)
class ServingPoint:
    """What one deployment gets (the module docstring gives the rules). Seconds, tokens/s,
    bytes; ``n_gpus`` 0 and zeros when the model does not fit (``fits`` False).

    max_concurrency: requests of input + output tokens the pool holds (fractional, vLLM's
    figure); batch: requests decoded together; tpot_s: time per output token of one request;
    ttft_s: time to its first token with arrivals spread out; tokens_per_s: output tokens the
    group emits per second; per_user_tokens_per_s: 1 ÷ TPOT; prefill_time_share: the part of
    the GPUs' time spent on prompts (what input tokens cost); bound: "memory" or "compute" (the
    decode step); kv_bytes_per_gpu: the pool on each GPU; band: the held-out error of the speed
    model at this TP and batch (``calibrate.ErrorBand``; None when it does not fit).
    """

    model: str
    model_name: str
    gpu: str
    gpu_name: str
    input_tokens: int
    output_tokens: int
    weight_format: str
    kv_dtype: str
    gpu_memory_utilization: float
    engine: str
    n_gpus: int
    max_concurrency: float
    batch: int
    tpot_s: float
    ttft_s: float
    tokens_per_s: float
    per_user_tokens_per_s: float
    prefill_time_share: float
    bound: str
    kv_bytes_per_gpu: int
    band: calibrate.ErrorBand | None

    @property
    def context_tokens(self) -> int:
        """Tokens one request holds at its end: input + output."""
        return self.input_tokens + self.output_tokens

    @property
    def fits(self) -> bool:
        return self.n_gpus > 0

    def _hourly(self, dollars_per_gpu_hour: float) -> float:
        if not self.fits:
            raise DoesNotFit(self.model, self.gpu, self.context_tokens, TP_DEGREES)
        if isinstance(dollars_per_gpu_hour, bool) or not isinstance(dollars_per_gpu_hour,
                                                                   (int, float)):
            raise ValueError(f"dollars_per_gpu_hour must be a number, got {dollars_per_gpu_hour!r}")
        return dollars_per_gpu_hour * self.n_gpus

    def dollars_per_million(self, dollars_per_gpu_hour: float) -> float:
        """$ per 10⁶ output tokens when each of the ``n_gpus`` GPUs costs
        ``dollars_per_gpu_hour``, all GPU time charged to output tokens."""
        return cost_per_million_tokens(self._hourly(dollars_per_gpu_hour), self.tokens_per_s)

    def dollars_per_million_split(self, dollars_per_gpu_hour: float) -> tuple[float, float]:
        """($ per 10⁶ input tokens, $ per 10⁶ output tokens) when the GPU time is split by the
        work it does: the prefill share to the prompts, the rest to the decoded tokens. A request
        then costs input × the first + output × the second, as much as
        ``dollars_per_million`` charges for its output alone."""
        hourly = self._hourly(dollars_per_gpu_hour)
        share = self.prefill_time_share
        input_rate = self.tokens_per_s * self.input_tokens / self.output_tokens
        input_cost = (cost_per_million_tokens(hourly * share, input_rate) if share > 0 else 0.0)
        return input_cost, cost_per_million_tokens(hourly * (1 - share), self.tokens_per_s)


def serving_point(model: Model | str, gpu: str, *, input_tokens: int, output_tokens: int,
                  n_gpus: int | None = None, batch: int | None = None,
                  tp_degrees: Sequence[int] = TP_DEGREES,
                  gpu_memory_utilization: float = VLLM_DEFAULT_UTILIZATION_OLD,
                  kv_dtype: str = "bf16", weight_dtype: str | Mapping[str, str] = "bf16",
                  engine: str = "vllm", efficiency: Efficiency = CALIBRATED) -> ServingPoint:
    """The answer for ``model`` (a registry slug or a ``Model``) on ``gpu`` with requests of
    ``input_tokens`` + ``output_tokens`` (see the module docstring).

    n_gpus: a fixed tensor-parallel degree (None: the smallest of ``tp_degrees`` that fits);
    batch: requests in flight (None: as many as the pool holds; BatchTooLarge if it does not
    hold them); weight_dtype: the weight format (``params.weight_bytes``). A model that fits no degree
    comes back with ``n_gpus = 0`` and zeros; a given ``n_gpus`` that does not fit raises
    DoesNotFit.
    """
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    degrees = sorted(tp_degrees) if n_gpus is None else [n_gpus]
    if not degrees or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in degrees):
        raise ValueError(f"tp_degrees / n_gpus must be positive integers, got "
                         f"{tp_degrees if n_gpus is None else n_gpus!r}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0):
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    wd = weight_dtype
    m, g = (model if isinstance(model, Model) else load_model(model)), load_gpu(gpu)
    slug = model if isinstance(model, str) else m.name
    context = input_tokens + output_tokens
    base = dict(model=slug, model_name=m.name, gpu=gpu,
                gpu_name=g.name, input_tokens=input_tokens, output_tokens=output_tokens,
                weight_format=format_label(wd), kv_dtype=kv_dtype,
                gpu_memory_utilization=float(gpu_memory_utilization), engine=engine)
    for tp in degrees:
        if not m.supports_tp(tp) or (tp > 1 and g.link_bytes_per_s is None):
            continue
        pool = kv_pool(m, g, n_gpus=tp, gpu_memory_utilization=gpu_memory_utilization,
                       weight_dtype=wd, kv_dtype=kv_dtype)
        concurrency = pool.max_concurrency(context)
        if concurrency < 1:
            continue
        held = min(math.floor(concurrency), pool.max_num_seqs)
        if batch is not None and batch > held:
            raise BatchTooLarge(batch, min(concurrency, pool.max_num_seqs))
        running = held if batch is None else batch
        steps = serving_steps(m, g, batch=running, input_tokens=input_tokens,
                              output_tokens=output_tokens, n_gpus=tp, weight_dtype=wd,
                              kv_dtype=kv_dtype, engine=engine, efficiency=efficiency)
        return ServingPoint(**base, n_gpus=tp, max_concurrency=float(concurrency), batch=running,
                            tpot_s=steps.tpot_s, ttft_s=steps.ttft_s,
                            tokens_per_s=steps.tokens_per_s,
                            per_user_tokens_per_s=steps.per_user_tokens_per_s,
                            prefill_time_share=steps.prefill_time_share, bound=steps.decode.bound,
                            kv_bytes_per_gpu=pool.kv_bytes_per_gpu,
                            band=calibrate.error_band(tp, running))
    if n_gpus is not None:
        raise DoesNotFit(slug, gpu, context, degrees)
    return ServingPoint(**base, n_gpus=0, max_concurrency=0.0, batch=0, tpot_s=0.0, ttft_s=0.0,
                        tokens_per_s=0.0, per_user_tokens_per_s=0.0, prefill_time_share=0.0,
                        bound="", kv_bytes_per_gpu=0, band=None)
