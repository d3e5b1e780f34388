"""One serving pipeline: a model, a GPU, request lengths and a price in; GPUs, requests in flight,
speed, time to first token, dollars and the speed model's error out.

``serving_point`` for one (model, GPU, input tokens, output tokens):

1. GPUs: ``n_gpus`` when given, else the smallest tensor-parallel degree in ``TP_DEGREES`` whose
   KV pool holds one request of ``max_model_len`` tokens — the engine refuses to start
   otherwise. The pool is the deployment's own engine's (``kvlib.kv_pool``: vLLM's 16-token
   blocks, SGLang's 1-token pages, TensorRT-LLM's 32-token blocks, each with its own memory
   fraction and defaults). ``max_model_len`` defaults to the request's input
   + output tokens and is refused past the model's own maximum, as vLLM refuses it. Degrees
   the model's heads cannot be split over, and degrees above 1 on a GPU with no sourced
   GPU-to-GPU link (GH200), are skipped. A model that fits no degree says why
   (``ServingPoint.limit`` and ``why_not``, read on the largest degree tried);
2. requests in flight: the pool's ``max_concurrency`` (vLLM's "Maximum concurrency") at input +
   output tokens, rounded down and capped at the engine's running limit (``engine_start``:
   vLLM ``max_num_seqs``, SGLang ``max_running_requests``, TensorRT-LLM ``max_batch_size``) —
   or the caller's ``batch``, which must fit;
3. speed: ``roofline.serving_steps`` at that batch — decode steps at the mean context that also
   carry the other requests' prompts (chunked prefill, at the engine's tokens per step), with
   the engine's own step cost: time per output token (TPOT), what one user sees (1 ÷ TPOT),
   what the group emits (batch ÷ TPOT), and the time to first token;
4. error: ``calibrate.case_band`` — the error of the speed model on measurements like the case
   (GPU vendor, engine, model family, tensor-parallel degree and batch range), or, where there
   are none, the leave-one-source-out error it falls back to, saying so;
5. dollars (``ServingPoint.dollars_per_million`` …): price × GPUs ÷ tokens per second.

``Engine`` answers many requests on one engine (model, GPU, formats, utilization), sizing each
degree's pool once; the landing page's grid (``kvlib.report.answer.answer_grid``) asks one for every
model, checkpoint, GPU and setting it offers.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from dataclasses import dataclass

from ..fit import calibrate
from ..deployment import Deployment
from ..deployment import deployment as as_deployment
from ..engines.capacity import NoKVMemory, check_max_model_len
from ..engines.pools import AnyPool, EngineStart, SGLangPool, TensorRTLLMPool, engine_start
from .cost import cost_per_million_tokens
from ..hardware.gpus import GPU
from ..model.model import Model
from ..speed.roofline import ServingSteps, serving_steps
from ..core.checks import number, positive_integer
from ..core.units import GIB
from ..deployment import ENGINE_NAMES, ENGINE_VERSIONS

#: Tensor-parallel degrees tried, smallest first (one 8-GPU server at most).
TP_DEGREES = (1, 2, 4, 8)

#: What stops a model that fits no degree (``ServingPoint.limit``).
LIMITS = ("weights", "activation", "kv", "tp")


class DoesNotFit(ValueError):
    """The model's weights and one request do not fit the GPUs tried.

    model / gpu: slugs; context_tokens: the tokens one request must fit (the engine's
    max_model_len); degrees: the tensor-parallel degrees tried; reason: why, in words
    (``ServingPoint.why_not``; empty when no degree could be tried).
    """

    def __init__(self, model: str, gpu: str, context_tokens: int, degrees: Sequence[int],
                 reason: str = "") -> None:
        self.model, self.gpu, self.context_tokens = model, gpu, context_tokens
        self.degrees, self.reason = tuple(degrees), reason
        super().__init__(f"{model} does not fit {context_tokens:,}-token requests on "
                         f"{' or '.join(str(d) for d in self.degrees)} × {gpu}"
                         + (f": {reason}" if reason else ""))


class BatchTooLarge(ValueError):
    """The requested batch exceeds the requests the engine runs together: those the KV pool
    holds, its running cap, or those whose prompts its token budget keeps up with (attributes
    ``batch`` and ``max_concurrency``)."""

    def __init__(self, batch: int, max_concurrency: float) -> None:
        self.batch, self.max_concurrency = batch, max_concurrency
        super().__init__(f"batch {batch} exceeds the {max_concurrency:.2f} requests the engine "
                         "runs together (its KV pool, running cap and token budget)")


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / GIB:,.1f} GiB"


@dataclass(frozen=True)
class ServingPoint:
    """What one deployment gets (the module docstring gives the rules). Seconds, tokens/s,
    bytes; ``n_gpus`` 0 and zero speeds when the model does not fit (``fits`` False).

    max_concurrency: requests of input + output tokens the pool holds (fractional, vLLM's
    figure); batch: requests decoded together; tpot_s: time per output token of one request;
    ttft_s: time to its first token with arrivals spread out; tokens_per_s: output tokens the
    group emits per second; per_user_tokens_per_s: 1 ÷ TPOT; prefill_time_share: the part of
    the GPUs' time spent on prompts (what input tokens cost; 0 at batch 1, where no other
    request's prompt shares a decode step); prompt_s: seconds of the steps that carry one
    request's own prompt; bound: "memory" or "compute" (the
    decode step); kv_bytes_per_gpu: the pool on each GPU; band: the error of the speed model on
    measurements like this case (``calibrate.case_band``, a ``CaseBand``: its ``words`` say
    what it rests on; None when it does not fit); gpu_memory_utilization: the engine's memory
    fraction (SGLang's ``mem_fraction_static``, TensorRT-LLM's ``free_gpu_memory_fraction``).

    max_model_len: the context the engine is started with (tokens); limit: "" when it fits,
    else one of ``LIMITS``: the weights exceed the memory the engine may use, or the weights with
    the start-up activation peak and buffers do, or the pool left holds less than one request of
    max_model_len tokens ("kv"), or no degree tried can split the model ("tp"). The memory
    terms, bytes per GPU, of the degree used (or the largest one tried): budget_bytes (vLLM:
    total × utilization; SGLang: the free memory × mem_fraction_static; TensorRT-LLM: the
    total), weights_bytes, startup_bytes (activation peak, sampler state, non-torch memory, CUDA graphs; 0 for
    SGLang, which keeps them outside its fraction) and request_kv_bytes (one request of
    max_model_len tokens); tried_gpus: that degree.
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
    prompt_s: float
    bound: str
    kv_bytes_per_gpu: int
    band: calibrate.CaseBand | None
    max_model_len: int
    limit: str
    tried_gpus: int
    budget_bytes: int
    weights_bytes: int
    startup_bytes: int
    request_kv_bytes: int

    @property
    def context_tokens(self) -> int:
        """Tokens one request holds at its end: input + output."""
        return self.input_tokens + self.output_tokens

    @property
    def fits(self) -> bool:
        return self.n_gpus > 0

    def why_not(self) -> str:
        """Why it does not fit, in words, with the memory terms of the largest degree tried
        ("" when it fits)."""
        if self.fits:
            return ""
        if self.limit == "tp":
            return f"no GPU count tried can split {self.model_name} over {self.gpu_name} GPUs"
        on = "on one GPU" if self.tried_gpus == 1 else f"per GPU on {self.tried_gpus} GPUs"
        usable = _usable(self.engine, self.budget_bytes, self.gpu_memory_utilization)
        if self.limit == "weights":
            return f"the weights alone, {_gib(self.weights_bytes)} {on}, exceed {usable}"
        if self.limit == "activation":
            return (f"the weights ({_gib(self.weights_bytes)} {on}) and the start-up activation "
                    f"peak and buffers ({_gib(self.startup_bytes)}) exceed {usable}")
        return (f"the KV pool left, {_gib(self.kv_bytes_per_gpu)} {on}, holds less than one "
                f"request of --max-model-len {self.max_model_len:,} tokens, which needs "
                f"{_gib(self.request_kv_bytes)}")

    def _hourly(self, dollars_per_gpu_hour: float) -> float:
        if not self.fits:
            raise DoesNotFit(self.model, self.gpu, self.max_model_len, TP_DEGREES, self.why_not())
        return number("dollars_per_gpu_hour", dollars_per_gpu_hour) * self.n_gpus

    def dollars_per_million(self, dollars_per_gpu_hour: float) -> float:
        """$ per 10⁶ output tokens when each of the ``n_gpus`` GPUs costs
        ``dollars_per_gpu_hour``, all GPU time charged to output tokens."""
        return cost_per_million_tokens(self._hourly(dollars_per_gpu_hour), self.tokens_per_s)

    def dollars_per_million_split(self, dollars_per_gpu_hour: float) -> tuple[float, float]:
        """($ per 10⁶ input tokens, $ per 10⁶ output tokens) when the GPU time is split by the
        work it does: the prefill share to the prompts, the rest to the decoded tokens. A request
        then costs input × the first + output × the second, as much as
        ``dollars_per_million`` charges for its output alone. At batch 1 no decode step
        carries a prompt (share 0): the prompt's own steps (``prompt_s``) are time the output
        price leaves out, and the input price charges them."""
        hourly = self._hourly(dollars_per_gpu_hour)
        share = self.prefill_time_share
        if share == 0:
            return (cost_per_million_tokens(hourly, self.input_tokens / self.prompt_s),
                    cost_per_million_tokens(hourly, self.tokens_per_s))
        input_rate = self.tokens_per_s * self.input_tokens / self.output_tokens
        return (cost_per_million_tokens(hourly * share, input_rate),
                cost_per_million_tokens(hourly * (1 - share), self.tokens_per_s))


def _usable(engine: str, budget_bytes: int, fraction: float) -> str:
    """The memory an engine may use, in words."""
    if engine == "sglang":
        return (f"the {_gib(budget_bytes)} SGLang keeps for weights and KV cache at "
                f"mem_fraction_static {fraction:g}")
    if engine == "tensorrt-llm":
        return f"the GPU's {_gib(budget_bytes)}"
    return f"the {_gib(budget_bytes)} vLLM may use at --gpu-memory-utilization {fraction:g}"


def _memory_terms(pool: AnyPool, max_model_len: int) -> dict[str, int]:
    """``ServingPoint``'s memory terms of one engine's pool (bytes per GPU)."""
    if isinstance(pool, SGLangPool):
        kv = (pool.pages_per_request(max_model_len) * pool.page_size * pool.cell_bytes
              + pool.state_bytes_per_request)
        return dict(budget_bytes=pool.free_before_weights_bytes - pool.reserve_bytes,
                    weights_bytes=pool.weights_bytes_per_gpu, startup_bytes=0,
                    request_kv_bytes=kv)
    if isinstance(pool, TensorRTLLMPool):
        return dict(budget_bytes=pool.total_memory_bytes,
                    weights_bytes=pool.weights_bytes_per_gpu,
                    startup_bytes=pool.activation_peak_bytes + pool.non_torch_bytes,
                    request_kv_bytes=(pool.blocks_per_request(max_model_len)
                                      * pool.tokens_per_block * pool.bytes_per_token))
    return dict(budget_bytes=pool.budget_bytes, weights_bytes=pool.weights_bytes_per_gpu,
                startup_bytes=(pool.activation_peak_bytes + pool.sampler_state_bytes
                               + pool.non_torch_bytes + pool.cuda_graph_bytes),
                request_kv_bytes=(pool.blocks_per_request(max_model_len) * pool.block_bytes
                                  if pool.groups else 0))


def _positive(name: str, value: object) -> int:
    return positive_integer(name, value)


def _limit(pool: AnyPool, terms: dict[str, int]) -> str:
    """What stops a pool that holds no request (``ServingPoint.limit``)."""
    if terms["weights_bytes"] > terms["budget_bytes"]:
        return "weights"
    return "activation" if pool.available_kv_bytes <= 0 else "kv"


class Engine:
    """One ``Deployment`` asked about requests with ``point``, on any of ``tp_degrees`` GPUs
    (the deployment's own ``tp`` is replaced by each degree tried) and with the deployment's
    ``max_model_len`` unless a request names one. Each degree's KV pool, and each (degree,
    batch, lengths) speed, is computed once and shared by every request asked of it (a grid of
    lengths and ``max_model_len`` values costs one pool per degree; SGLang's, whose running
    limit depends on ``max_model_len``, one per degree and length). A vLLM deployment is
    ``resolved()``; SGLang's and TensorRT-LLM's keep their ``None`` fields, which their pools
    read as those engines' own defaults.

    deployment: a ``Deployment``, or a model and GPU with its keywords (``weight_dtype``,
    ``kv_dtype``, ``gpu_memory_utilization``, ``engine``, ``efficiency``, …).
    """

    def __init__(self, deployment: Deployment | Model | str, gpu: GPU | str | None = None, *,
                 tp_degrees: Sequence[int] = TP_DEGREES, **deployment_keywords: Any) -> None:
        if isinstance(tp_degrees, (str, bytes)) or not isinstance(tp_degrees, Sequence) \
                or not tp_degrees:
            raise ValueError(f"tp_degrees / n_gpus must be positive integers, got {tp_degrees!r}")
        tp_degrees = tuple(positive_integer("tp_degrees / n_gpus", d) for d in tp_degrees)
        given = as_deployment(deployment, gpu, **deployment_keywords)
        self.deployment = given.resolved() if given.engine == "vllm" else given.with_(
            engine_version=given.engine_version or ENGINE_VERSIONS[given.engine])
        d = self.deployment
        self.model, self.slug, self.gpu = d.model, d.slug, d.gpu
        self.tp_degrees = tuple(sorted(tp_degrees))
        self._base = dict(model=d.slug, model_name=d.model.name, gpu=d.gpu.slug,
                          gpu_name=d.gpu.name, weight_format=d.weights.label, kv_dtype=d.kv_name,
                          engine=d.engine)
        self._starts: dict[tuple[int, int | None], EngineStart] = {}
        self._steps: dict[tuple[int, int, int, int],
                          tuple[ServingSteps, calibrate.CaseBand]] = {}
        self._runs: dict[int, bool] = {}

    def runs_on(self, tp: int) -> bool:
        """Whether the engine would run this model on ``tp`` of these GPUs (the heads split, and
        a GPU-to-GPU link is sourced when tp > 1)."""
        if tp not in self._runs:
            self._runs[tp] = (self.model.supports_tp(tp)
                              and not (tp > 1 and self.gpu.link_bytes_per_s is None))
        return self._runs[tp]

    def start(self, tp: int, max_model_len: int | None = None) -> EngineStart:
        """The engine on ``tp`` GPUs started with ``max_model_len`` (None: the deployment's):
        its pool and limits (``engine_start``), sized once; where nothing is left for the KV
        cache, the refused pool's terms (no blocks: it holds no request)."""
        length = max_model_len or self.deployment.max_model_len
        key = (tp, length if self.deployment.engine == "sglang" else None)
        if key not in self._starts:
            try:
                self._starts[key] = engine_start(self.deployment.with_(tp=tp, max_model_len=length))
            except NoKVMemory as refused:  # the engine would not start
                self._starts[key] = EngineStart.of(refused.pool)
        return self._starts[key]

    def pool(self, tp: int) -> AnyPool:
        """The KV pool on ``tp`` GPUs (``kvlib.kv_pool``), sized once."""
        return self.start(tp).pool

    def _serving_steps(self, start: EngineStart, batch: int, input_tokens: int,
                       output_tokens: int) -> tuple[ServingSteps, calibrate.CaseBand]:
        tp = start.pool.n_gpus
        key = (tp, batch, input_tokens, output_tokens)
        if key not in self._steps:
            d = self.deployment
            self._steps[key] = (serving_steps(d.with_(tp=tp), batch=batch,
                                              input_tokens=input_tokens,
                                              output_tokens=output_tokens,
                                              max_batched_tokens=start.step_tokens(batch)),
                                calibrate.case_band(self.model, self.gpu, d.engine, tp, batch))
        return self._steps[key]

    def point(self, input_tokens: int, output_tokens: int, *, max_model_len: int | None = None,
              n_gpus: int | None = None, batch: int | None = None) -> ServingPoint:
        """The ``ServingPoint`` of requests of ``input_tokens`` + ``output_tokens`` on this
        engine started with ``max_model_len`` (None: the request's length) on ``n_gpus`` GPUs
        (None: the smallest degree tried that holds one request of max_model_len) with
        ``batch`` requests in flight (None: as many as the pool holds)."""
        input_tokens = _positive("input_tokens", input_tokens)
        output_tokens = _positive("output_tokens", output_tokens)
        if n_gpus is not None:
            n_gpus = _positive("n_gpus", n_gpus)
        if batch is not None:
            batch = _positive("batch", batch)
        context = input_tokens + output_tokens
        if max_model_len is None:
            max_model_len = self.deployment.max_model_len
        limit_len = context if max_model_len is None else _positive("max_model_len",
                                                                   max_model_len)
        if limit_len < context:
            raise ValueError(f"requests of {context:,} tokens exceed max_model_len "
                             f"{limit_len:,}: {ENGINE_NAMES[self.deployment.engine]} refuses them")
        check_max_model_len(self.model, limit_len, self.deployment.allow_long_max_model_len)
        tried = [tp for tp in (self.tp_degrees if n_gpus is None else (n_gpus,))
                 if self.runs_on(tp)]
        start = next((self.start(tp, limit_len) for tp in tried
                      if self.start(tp, limit_len).pool.max_concurrency(limit_len) >= 1), None)
        shown = start or (self.start(tried[-1], limit_len) if tried else None)
        memory = (_memory_terms(shown.pool, limit_len) if shown
                  else dict.fromkeys(("budget_bytes", "weights_bytes", "startup_bytes",
                                      "request_kv_bytes"), 0))
        fraction = (shown.memory_fraction if shown
                    else float(self.deployment.gpu_memory_utilization or 0.0))
        terms = dict(self._base, input_tokens=input_tokens, output_tokens=output_tokens,
                     max_model_len=limit_len, tried_gpus=shown.pool.n_gpus if shown else 0,
                     gpu_memory_utilization=fraction, **memory,
                     kv_bytes_per_gpu=shown.pool.kv_bytes_per_gpu if shown else 0)
        if start is None:
            point = ServingPoint(**terms, n_gpus=0, max_concurrency=0.0, batch=0, tpot_s=0.0,
                                 ttft_s=0.0, tokens_per_s=0.0, per_user_tokens_per_s=0.0,
                                 prefill_time_share=0.0, prompt_s=0.0, bound="", band=None,
                                 limit=_limit(shown.pool, memory) if shown else "tp")
            if n_gpus is not None:
                raise DoesNotFit(self.slug, self.gpu.slug, limit_len, (n_gpus,),
                                 point.why_not())
            return point
        pool = start.pool
        concurrency = pool.max_concurrency(context)
        runs_together = min(concurrency, start.max_running,
                            start.sustained_batch(input_tokens, output_tokens))
        held = math.floor(runs_together)
        if batch is not None and batch > held:
            raise BatchTooLarge(batch, runs_together)
        running = held if batch is None else batch
        steps, band = self._serving_steps(start, running, input_tokens, output_tokens)
        return ServingPoint(**terms, n_gpus=pool.n_gpus, max_concurrency=float(concurrency),
                            batch=running, tpot_s=steps.tpot_s, ttft_s=steps.ttft_s,
                            tokens_per_s=steps.tokens_per_s,
                            per_user_tokens_per_s=steps.per_user_tokens_per_s,
                            prefill_time_share=steps.prefill_time_share,
                            prompt_s=steps.prompt_s, bound=steps.decode.bound,
                            band=band, limit="")


def serving_point(model: Deployment | Model | str, gpu: GPU | str | None = None, *,
                  input_tokens: int, output_tokens: int, n_gpus: int | None = None,
                  batch: int | None = None, tp_degrees: Sequence[int] | None = None,
                  max_model_len: int | None = None, **deployment_keywords: Any) -> ServingPoint:
    """The answer for a ``Deployment`` (or ``model`` on ``gpu`` with the deployment's keywords)
    with requests of ``input_tokens`` + ``output_tokens`` (see the module docstring).

    n_gpus: a fixed tensor-parallel degree (None: the smallest of ``tp_degrees``, default
    ``TP_DEGREES``, that fits; a Deployment's own ``tp`` when one is given, and then
    ``tp_degrees`` is a ValueError: it would be ignored); batch: requests in flight (None: as many as the
    pool holds; BatchTooLarge if it does not hold them); max_model_len: the context the engine
    is started with (None: the deployment's, else input + output), which one request must fit
    and which the model must accept. A model that fits no degree comes back with ``n_gpus =
    0``, zeros and its ``limit``; a given ``n_gpus`` that does not fit raises DoesNotFit.
    ``Engine`` answers many requests on one deployment at the cost of one.
    """
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        _positive(name, value)
    if isinstance(model, Deployment) and model.speculative is not None:
        raise ValueError("serving_point times decoding without speculation: for speculative "
                         "decoding use kvlib.speculative_decode")
    if isinstance(model, Deployment) and n_gpus is None:
        if tp_degrees is not None:
            raise ValueError(f"tp_degrees does not apply to a Deployment: its tp ({model.tp}) is "
                             "the degree served; give a model and a GPU to try several degrees")
        n_gpus = model.tp
    if tp_degrees is None:
        tp_degrees = TP_DEGREES
    degrees = tp_degrees if n_gpus is None else (_positive("n_gpus", n_gpus),)
    return Engine(model, gpu, tp_degrees=degrees, **deployment_keywords).point(
        input_tokens, output_tokens, n_gpus=n_gpus, max_model_len=max_model_len, batch=batch)


def batch_sweep(model: str, gpus: Sequence[str], contexts: Sequence[int], *, output_tokens: int,
                n_gpus: int = 1, **deployment_keywords: Any) -> list[dict[str, Any]]:
    """``serving_point`` at every power-of-two batch 1 … 1,024 and at the pool's ceiling, per GPU
    and context (prompt = context − ``output_tokens``), on ``n_gpus`` GPUs: one dict per point
    with gpu, context ("8,192 tokens"), batch, n_gpus, tokens_per_s, per_user_tokens_per_s and
    band_low / band_high (the speed model's band for the case at that batch, ``CaseBand.low`` /
    ``high``: a rate spans rate·(1 + low) … rate·(1 + high)). A batch past the ceiling is left
    out; a context the pool holds no request of ends that GPU's sweep for it; the ceiling is
    not repeated when it is a power of two already drawn."""
    points: list[dict[str, Any]] = []
    for g in gpus:
        for ctx in contexts:
            for b in [*(2**i for i in range(11)), None]:  # None: as many as the pool holds
                try:
                    pt = serving_point(model, g, input_tokens=ctx - output_tokens,
                                       output_tokens=output_tokens, n_gpus=n_gpus, batch=b,
                                       **deployment_keywords)
                except BatchTooLarge:
                    continue  # past the pool's ceiling: the last point (None) is the ceiling
                except DoesNotFit:
                    break  # the pool holds no request of this length
                if b is None and points and points[-1]["gpu"] == g \
                        and points[-1]["context"] == f"{ctx:,} tokens" \
                        and points[-1]["batch"] == pt.batch:
                    continue  # the ceiling is a power of two, already drawn
                band = pt.band
                points.append({"gpu": g, "context": f"{ctx:,} tokens", "batch": pt.batch,
                               "n_gpus": n_gpus, "tokens_per_s": pt.tokens_per_s,
                               "per_user_tokens_per_s": pt.per_user_tokens_per_s,
                               "band_low": band.low if band else math.nan,
                               "band_high": band.high if band else math.nan})
    return points
