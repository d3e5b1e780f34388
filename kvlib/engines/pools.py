"""Every engine's KV pool from the same ``Deployment``: ``kv_pool`` dispatches on
``deployment.engine`` to vLLM's (``capacity.kv_pool``, a ``Pool``), SGLang's
(``sglang.kv_pool``, an ``SGLangPool``) or TensorRT-LLM's (``tensorrt_llm.kv_pool``, a
``TensorRTLLMPool``); ``engine_comparison`` puts the three side by side.

Each pool answers ``tokens``, ``block_size``, ``num_blocks``, ``kv_bytes_per_gpu``,
``available_kv_bytes``, ``weights_bytes_per_gpu``, ``max_concurrency(context)`` and
``terms()``. This module is ``kvlib.kv_pool``; ``engine_start`` adds the limits each engine
runs under (most running requests, tokens per step).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Union

import pandas as pd

from ..core.checks import positive_integer
from ..core.units import GIB
from ..deployment import Deployment
from ..deployment import deployment as as_deployment
from ..hardware.gpus import GPU
from ..model.model import Model
from . import capacity, sglang, tensorrt_llm
from .capacity import VLLM, NoKVMemory, Overheads, Pool
from .sglang import SGLangPool
from .tensorrt_llm import TensorRTLLMPool

#: What ``kv_pool`` returns, by engine.
AnyPool = Union[Pool, SGLangPool, TensorRTLLMPool]


def kv_pool(deployment: Deployment | Model | str, gpu: GPU | str | None = None, *,
            overheads: Overheads = VLLM, weights_bytes_per_gpu: int | None = None,
            **keywords: Any) -> AnyPool:
    """The KV pool the deployment's ``engine`` allocates (public API, ``kvlib.kv_pool``): for
    "vllm" exactly ``capacity.kv_pool`` (every keyword form it takes), for "sglang"
    ``sglang.kv_pool``, for "tensorrt-llm" ``tensorrt_llm.kv_pool``. ``overheads`` (the
    activation and non-torch terms) applies to vLLM and TensorRT-LLM; SGLang measures no
    activations, so a non-default one is refused for it."""
    d = as_deployment(deployment, gpu, **keywords)
    if d.speculative is not None and d.engine != "vllm":
        raise ValueError(f"speculative decoding is modelled in vLLM's pool only, not "
                         f"{d.engine}'s (its draft keeps a KV pool of its own)")
    if d.engine == "sglang":
        if overheads is not VLLM:
            raise ValueError("SGLang measures no activation peak: overheads do not apply")
        return sglang.kv_pool(d, weights_bytes_per_gpu=weights_bytes_per_gpu)
    if d.engine == "tensorrt-llm":
        return tensorrt_llm.kv_pool(d, weights_bytes_per_gpu=weights_bytes_per_gpu,
                                    overheads=overheads)
    return capacity.kv_pool(d, overheads=overheads, weights_bytes_per_gpu=weights_bytes_per_gpu)


def engine_comparison(deployment: Deployment | Model | str, gpu: GPU | str | None = None, *,
                      context_tokens: int, **keywords: Any) -> pd.DataFrame:
    """The same deployment under vLLM, SGLang and TensorRT-LLM, one row per engine, each with
    its own defaults for every field left ``None`` (public API).

    Columns: engine; memory_fraction (vLLM's utilization, SGLang's ``mem_fraction_static``,
    TensorRT-LLM's ``free_gpu_memory_fraction``) and what it is a share of; kv_gib (the K/V
    tensors on one GPU, GiB); tokens; block_tokens (tokens per page/block); waste_tokens, the
    mean tokens left empty in a request's last page, (P − 1)/2 for lengths spread evenly over
    a page; waste_share = waste_tokens ÷ ``context_tokens``; concurrency, requests of
    ``context_tokens`` tokens the pool holds; max_running, the engine's default cap on running
    requests (vLLM ``max_num_seqs``, SGLang ``--max-running-requests``, TensorRT-LLM
    ``max_batch_size``). An engine that would not start (``NoKVMemory``) keeps its row, with 0
    tokens and 0 concurrency.
    """
    base = as_deployment(deployment, gpu, **keywords)
    context = positive_integer("context_tokens", context_tokens)
    shares = {"vllm": "the device total", "sglang": "free memory before the weights",
              "tensorrt-llm": "free memory after weights and profiling"}
    rows = []
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        try:
            p = kv_pool(base.with_(engine=engine))
        except NoKVMemory as refused:  # the engine would not start: a row with no pool
            p = refused.pool
        fraction = {"vllm": getattr(p, "gpu_memory_utilization", None),
                    "sglang": getattr(p, "mem_fraction_static", None),
                    "tensorrt-llm": getattr(p, "free_gpu_memory_fraction", None)}[engine]
        running = {"vllm": getattr(p, "max_num_seqs", None),
                   "sglang": getattr(p, "max_running_requests", None),
                   "tensorrt-llm": getattr(p, "max_batch_size", None)}[engine]
        rows.append({"engine": engine, "memory_fraction": float(fraction),
                     "fraction_of": shares[engine], "kv_gib": p.kv_bytes_per_gpu / GIB,
                     "tokens": int(p.tokens), "block_tokens": int(p.block_size),
                     "waste_tokens": (p.block_size - 1) / 2,
                     "waste_share": (p.block_size - 1) / 2 / context,
                     "concurrency": float(p.max_concurrency(context)),
                     "max_running": None if running is None else int(running)})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class EngineStart:
    """What an engine starts with on one deployment, beside its KV pool: ``max_running``, the
    most requests it runs at once (vLLM ``--max-num-seqs``, SGLang ``--max-running-requests``,
    TensorRT-LLM ``max_batch_size``); ``max_batched_tokens``, the tokens one step may carry
    (vLLM ``--max-num-batched-tokens``, SGLang ``--chunked-prefill-size``, TensorRT-LLM
    ``max_num_tokens``), of which ``prompt_tokens_only`` says whether it bounds prompt tokens
    alone (SGLang: decodes come on top) or every token of the step; ``memory_fraction``, the
    share of memory it was started with (``engine_comparison``'s ``memory_fraction``)."""

    pool: AnyPool
    max_running: int
    max_batched_tokens: int
    prompt_tokens_only: bool
    memory_fraction: float

    @classmethod
    def of(cls, p: AnyPool) -> "EngineStart":
        """The start of the engine whose pool ``p`` is, also of a refused one (the pool of a
        ``NoKVMemory``: SGLang's running cap is then 0)."""
        if isinstance(p, SGLangPool):
            return cls(p, p.max_running_requests or 0, p.chunked_prefill_size, True,
                       p.mem_fraction_static)
        if isinstance(p, TensorRTLLMPool):
            return cls(p, p.max_batch_size, p.max_num_tokens, False, p.free_gpu_memory_fraction)
        return cls(p, p.max_num_seqs, p.max_num_batched_tokens, False, p.gpu_memory_utilization)

    def step_tokens(self, decodes: int) -> int:
        """Tokens a step with ``decodes`` running requests may carry in all."""
        return self.max_batched_tokens + (decodes if self.prompt_tokens_only else 0)

    def sustained_batch(self, input_tokens: int, output_tokens: int) -> int:
        """The most requests of ``input_tokens`` + ``output_tokens`` that decode together under
        steady traffic while the prompts arriving beside them fit the step's token budget:
        with b running, a step carries (b − 1) × input ÷ output prompt tokens on average
        (``roofline.serving_steps``), within what the budget leaves beside the b decodes —
        b ≤ (budget + r) ÷ (1 + r) with r = input ÷ output (SGLang, whose chunk counts prompt
        tokens only: b ≤ chunk ÷ r + 1). 8,192 tokens, prompts of 31,744 + 1,024 (r = 31):
        ⌊8,223 ÷ 32⌋ = 256. Past it the queue grows and the running batch shrinks to it."""
        r = positive_integer("input_tokens", input_tokens) / positive_integer(
            "output_tokens", output_tokens)
        if self.prompt_tokens_only:
            return max(1, math.floor(self.max_batched_tokens / r + 1))
        return max(1, math.floor((self.max_batched_tokens + r) / (1 + r)))


def engine_start(deployment: Deployment | Model | str, gpu: GPU | str | None = None,
                 **keywords: Any) -> EngineStart:
    """The deployment's own engine as it starts (public API): its pool (``kv_pool``) and the
    limits it runs under, each that engine's default where the deployment leaves it ``None``
    (SGLang's ``max_running_requests`` depends on the deployment's ``max_model_len``).
    ``NoKVMemory`` where the engine would not start (``EngineStart.of`` its pool)."""
    return EngineStart.of(kv_pool(as_deployment(deployment, gpu, **keywords)))
