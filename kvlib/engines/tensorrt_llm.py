"""The KV pool the way TensorRT-LLM's PyTorch backend (``trtllm-serve``) sizes it.

TensorRT-LLM (``tensorrt_llm/_torch/pyexecutor/_util.py``, ``KvCacheCreator`` /
``configure_kv_cache_capacity``, at NVIDIA/TensorRT-LLM commit d8ae02caed59; ``llmapi/llm_args.py``
``KvCacheConfig``) does, on every GPU:

1. loads the weights, then runs a profiling pass: dummy prefill requests of
   min(``max_num_tokens``, ``max_seq_len`` − 1) tokens until ``max_num_tokens`` tokens in all,
   with a temporary KV cache just big enough for them;
2. peak = the torch peak of that pass (weights, activations, the temporary cache) + the memory
   allocated outside torch (NCCL, CUDA graphs); the temporary cache is added back;
3. available KV memory = ``free_gpu_memory_fraction`` (default 0.9) × (device total − peak),
   i.e. 0.9 of what is free after the weights and the profiling pass;
4. ``max_tokens`` = ⌊available / bytes per token⌋, capped by ``KvCacheConfig.max_tokens`` (the
   old ``max_tokens_in_paged_kv_cache``) when given; the pool is whole blocks of
   ``tokens_per_block`` (default 32) tokens — the tokens are rounded *up* to a block at
   allocation (maintainer, NVIDIA/TensorRT-LLM#224);
5. bytes per token = element bytes (2; 1 for fp8) × attention layers × K and V heads per rank
   × head dim, or MLA's (kv_lora_rank + rope dim) × layers × element bytes, not divided by TP.

Defaults of ``trtllm-serve``: ``max_batch_size`` 2048 and ``max_num_tokens`` 8192 (the
``BuildConfig`` defaults it reads), ``tokens_per_block`` 32, fraction 0.9.

**What kvlib assumes for the profiling pass (step 2), which the engine measures and kvlib
cannot:** the activation peak of a ``max_num_tokens``-token forward is vLLM's calibrated forward
term (``capacity.VLLM.forward_factor`` × ``max_num_tokens`` × the widest per-token activation ×
2 bytes; ``capacity.activation_width``) — the same PyTorch forward over the same token count,
but a factor fitted on vLLM's start-up logs, not on TensorRT-LLM's, for which no public log with
the profiling line and a known model was found (el44 of ``data/engine_logs.csv`` gives the
resulting pool only, checked in ``kvlib.fit.validation.engine_pool_validation``); the memory outside torch is vLLM's calibrated
non-torch terms by the tensor-parallel group's link, vLLM's rule (``Overheads.non_torch_for``,
``capacity.tp_link``): ``non_torch_bytes``, plus at TP > 1 ``non_torch_tp_bytes`` over NVLink /
NVSwitch / xGMI or ``non_torch_tp_pcie_bytes`` (0 in ``capacity.VLLM``) over PCIe — that
TensorRT-LLM's all-reduce buffers follow the link as vLLM's do is assumed, not measured; CUDA graphs
captured during the warm-up add nothing (TensorRT-LLM counts them as non-torch memory if they
exist at that point; kvlib does not model their size); the sampling of the dummy requests (one
output token each) adds nothing. The device total is ``GPU.usable_memory_bytes``. Not modelled
(ValueError): sliding-window (VSWA), hybrid recurrent and indexer caches, KV formats with scales,
speculative decoding, attention-DP. Where no memory is left for the KV cache (TensorRT-LLM's
``max_tokens`` would be 0), ``kv_pool`` raises ``capacity.NoKVMemory``, as vLLM's does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..core.checks import integer, number, positive_integer
from ..core.units import GIB
from ..deployment import Deployment
from ..deployment import deployment as as_deployment
from ..hardware.gpus import GPU
from ..model.model import Model
from ..model.weights import loaded_weights, params_for
from .capacity import (VLLM, NoKVMemory, Overheads, activation_width, check_max_model_len,
                       refuse_parallel, tp_link)
from .sglang import token_cell

#: ``KvCacheConfig.free_gpu_memory_fraction`` and ``trtllm-serve``'s
#: ``--kv_cache_free_gpu_memory_fraction`` default.
DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.9
#: ``KvCacheConfig.tokens_per_block`` default.
DEFAULT_TOKENS_PER_BLOCK = 32
#: ``BuildConfig.max_batch_size`` / ``max_num_tokens`` defaults, which ``trtllm-serve`` reads.
DEFAULT_MAX_BATCH_SIZE = 2048
DEFAULT_MAX_NUM_TOKENS = 8192


@dataclass(frozen=True)
class TensorRTLLMPool:
    """TensorRT-LLM's KV pool for one deployment, every term in bytes per GPU.

    free_after_profile_bytes = total − weights − activation peak − non-torch;
    available_kv_bytes = fraction × free_after_profile;
    tokens = whole blocks of ``tokens_per_block`` holding ``max_tokens``; tp_link: the link
    whose add-on ``non_torch_bytes`` includes (``capacity.tp_link``; None at TP 1).
    ``kv_pool`` raises ``NoKVMemory`` where no block is left (``shortfall``).
    """

    model: str
    gpu: str
    n_gpus: int
    free_gpu_memory_fraction: float
    weight_dtype: str
    kv_dtype: str
    max_num_tokens: int
    max_batch_size: int
    total_memory_bytes: int
    total_memory_source: str
    weights_bytes_per_gpu: int
    weights_basis: str
    activation_peak_bytes: int
    non_torch_bytes: int
    bytes_per_token: int
    attention_layers: int
    tokens_per_block: int
    max_tokens_cap: int | None
    overheads: str
    tp_link: str | None = None
    engine: str = "tensorrt-llm"

    @property
    def free_after_profile_bytes(self) -> int:
        """Device total − weights − activation peak − non-torch memory."""
        return (self.total_memory_bytes - self.weights_bytes_per_gpu - self.activation_peak_bytes
                - self.non_torch_bytes)

    @property
    def available_kv_bytes(self) -> int:
        """fraction × the memory free after the profiling pass (≤ 0 only in a ``NoKVMemory``)."""
        return int(self.free_gpu_memory_fraction * self.free_after_profile_bytes)

    @property
    def max_tokens(self) -> int:
        """⌊available / bytes per token⌋, capped by ``max_tokens`` when given."""
        tokens = max(self.available_kv_bytes, 0) // self.bytes_per_token
        return tokens if self.max_tokens_cap is None else min(tokens, self.max_tokens_cap)

    @property
    def num_blocks(self) -> int:
        """Blocks in the pool: ``max_tokens`` rounded up to whole blocks."""
        return -(-self.max_tokens // self.tokens_per_block)

    @property
    def block_size(self) -> int:
        """Tokens per block."""
        return self.tokens_per_block

    @property
    def tokens(self) -> int:
        """Tokens the pool's blocks hold."""
        return self.num_blocks * self.tokens_per_block

    @property
    def kv_bytes_per_gpu(self) -> int:
        """Bytes the KV blocks take on one GPU."""
        return self.tokens * self.bytes_per_token

    def blocks_per_request(self, context_tokens: int) -> int:
        """Blocks one request of ``context_tokens`` tokens takes."""
        return -(-positive_integer("context_tokens", context_tokens) // self.tokens_per_block)

    def shortfall(self) -> str:
        """What ran out, in one line, in TensorRT-LLM's terms ("" when a block is left): the
        weights, the profiling pass's activation peak and the non-torch memory reach the device
        total, or the fraction of what is left holds no token (``max_tokens`` 0, no KV cache)."""
        if self.free_after_profile_bytes <= 0:
            link = f", {self.tp_link} add-on" if self.tp_link else ""
            return (f"weights {self.weights_bytes_per_gpu / GIB:.2f} GiB + activation peak "
                    f"{self.activation_peak_bytes / GIB:.2f} GiB + non-torch "
                    f"{self.non_torch_bytes / GIB:.2f} GiB{link} ≥ device total "
                    f"{self.total_memory_bytes / GIB:.2f} GiB per GPU: TensorRT-LLM's max_tokens "
                    "would be 0 (no paged KV cache)")
        if self.num_blocks <= 0:
            return (f"free_gpu_memory_fraction {self.free_gpu_memory_fraction:g} × "
                    f"{self.free_after_profile_bytes:,} B free = {self.available_kv_bytes:,} B per "
                    f"GPU holds no token of {self.bytes_per_token:,} B: TensorRT-LLM's max_tokens "
                    "would be 0 (no paged KV cache)")
        return ""

    def max_concurrency(self, context_tokens: int) -> float:
        """Requests of ``context_tokens`` tokens the pool holds at once."""
        return self.num_blocks / self.blocks_per_request(context_tokens)

    def terms(self) -> pd.DataFrame:
        """Every term of the arithmetic, one row each, in bytes and GiB (per GPU)."""
        rows = [
            ("total memory (" + self.total_memory_source + ")", self.total_memory_bytes),
            (f"− weights ({self.weight_dtype}, 1/{self.n_gpus} of the model; "
             f"{self.weights_basis})", -self.weights_bytes_per_gpu),
            (f"− activation peak of the profiling pass ({self.max_num_tokens:,} tokens; "
             f"{self.overheads})", -self.activation_peak_bytes),
            ("− non-torch memory" + (f" (incl. tensor-parallel buffers, {self.tp_link})"
                                     if self.tp_link else ""), -self.non_torch_bytes),
            ("= free after the profiling pass", self.free_after_profile_bytes),
            (f"× free_gpu_memory_fraction {self.free_gpu_memory_fraction:g} = available KV memory",
             self.available_kv_bytes),
            (f"= KV pool ({self.num_blocks:,} blocks of {self.tokens_per_block} tokens)",
             self.kv_bytes_per_gpu),
        ]
        return pd.DataFrame([{"term": t, "bytes": int(b), "gib": b / GIB} for t, b in rows])


def kv_pool(deployment: Deployment | Model | str, gpu: GPU | str | None = None, *,
            max_tokens: int | None = None, weights_bytes_per_gpu: int | None = None,
            overheads: Overheads = VLLM, **keywords: Any) -> TensorRTLLMPool:
    """TensorRT-LLM's KV pool for a ``Deployment`` (or model, GPU and deployment keywords).

    Deployment fields as TensorRT-LLM's options: ``gpu_memory_utilization`` →
    ``free_gpu_memory_fraction`` (None: 0.9), ``max_num_batched_tokens`` → ``max_num_tokens``
    (None: 8192), ``max_num_seqs`` → ``max_batch_size`` (None: 2048), ``block_size`` →
    ``tokens_per_block`` (None: 32), ``max_model_len`` → ``max_seq_len``. max_tokens: the
    ``KvCacheConfig.max_tokens`` cap; overheads: the activation and non-torch terms (see the
    module docstring for what kvlib assumes). ``NoKVMemory`` (its ``terms`` in TensorRT-LLM's
    words, ``TensorRTLLMPool.shortfall``) where no block of KV cache is left."""
    d = as_deployment(deployment, gpu, **keywords)
    refuse_parallel(d, "TensorRT-LLM")
    m, g = d.model, d.gpu
    tp = m.check_tp(d.tp)
    if d.max_model_len is not None:
        check_max_model_len(m, d.max_model_len, d.allow_long_max_model_len)
    if not isinstance(overheads, Overheads):
        raise TypeError(f"overheads must be an Overheads, got {type(overheads)!r}")
    fraction = (DEFAULT_FREE_GPU_MEMORY_FRACTION if d.gpu_memory_utilization is None
                else number("free_gpu_memory_fraction", d.gpu_memory_utilization))
    mnt = d.max_num_batched_tokens or DEFAULT_MAX_NUM_TOKENS
    if weights_bytes_per_gpu is None:
        loaded = loaded_weights(m, d.weights, tp, g.slug)
        weights, basis = loaded.total_bytes, loaded.basis
    else:
        weights, basis = integer("weights_bytes_per_gpu", weights_bytes_per_gpu), "given"
    arch = m.architecture
    if arch is None:
        raise ValueError(f"model {m.name!r} carries no config: the activation peak needs its "
                         "config.json fields")
    activation = int(overheads.forward_factor * mnt  # the dummy prompts fill mnt tokens
                     * activation_width(params_for(m), arch, tp) * 2)
    non_torch = overheads.non_torch_for(g, tp)  # the add-on of the group's link, as vLLM's
    if m.has_state:
        raise ValueError(f"{m.name}: recurrent-state layers — kvlib does not model "
                         "TensorRT-LLM's hybrid cache managers")
    per_token, layers = token_cell(m, tp, d.kv, engine="TensorRT-LLM")
    cap = None if max_tokens is None else positive_integer("max_tokens", max_tokens)
    pool = TensorRTLLMPool(model=m.name, gpu=g.slug, n_gpus=tp, free_gpu_memory_fraction=fraction,
                           weight_dtype=d.weights.label, kv_dtype=d.kv_name, max_num_tokens=mnt,
                           max_batch_size=d.max_num_seqs or DEFAULT_MAX_BATCH_SIZE,
                           total_memory_bytes=g.usable_memory_bytes,
                           total_memory_source=g.usable_memory_source,
                           weights_bytes_per_gpu=weights, weights_basis=basis,
                           activation_peak_bytes=activation, non_torch_bytes=non_torch,
                           bytes_per_token=per_token, attention_layers=layers,
                           tokens_per_block=d.block_size or DEFAULT_TOKENS_PER_BLOCK,
                           max_tokens_cap=cap, overheads=overheads.name, tp_link=tp_link(g, tp))
    if pool.shortfall():
        raise NoKVMemory(pool)
    return pool
