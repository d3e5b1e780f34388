"""The KV pool the way SGLang sizes it (SGLang 0.5.23), from the same ``Deployment``.

SGLang (``python -m sglang.launch_server --tp T --mem-fraction-static f``) does, on every GPU
(our formulas, read in the sglang 0.5.23 wheel from PyPI: ``srt/server_args.py``,
``srt/model_executor/model_runner.py``, ``srt/mem_cache/memory_pool.py``):

1. **the fraction** ``mem_fraction_static`` f, when not given, from the GPU's nvidia-smi total G
   (MiB), the tensor-parallel degree and the CUDA-graph/prefill defaults
   (``arg_groups/memory_hook.py`` ``handle_gpu_memory_settings``)::

       reserved = 512 + 1.5·max(chunked_prefill_size, 2048) + T·PP/8·1024 + 2·decode_graph_max_bs
       reserved = max(reserved, 10·1024) if G > 60·1024          # MiB
       f = round((G − reserved) / G, 3)

   ``chunked_prefill_size`` and the decode graphs' largest batch come from G's capacity bucket
   (``CAPACITY_BUCKETS``); the decode batch is capped by ``--max-running-requests``;
2. **the budget**: f is a share of the memory F that was *free before the weights loaded*
   (``distributed/bootstrap.py``, ``kv_cache_configurator.py`` ``_profile_available_bytes``):
   rest = (F − weights) − F·(1 − f), i.e. f·F − weights. SGLang measures no activation peak:
   activations, CUDA graphs and metadata live in the reserve F·(1 − f);
3. **hybrids** (Mamba / linear attention): the recurrent state is carved first
   (``_handle_max_mamba_cache``): state budget = rest·r/(1 + r), r = ``mamba_full_memory_ratio``
   0.9; slots = ⌊(state budget − s)/s⌋ for s bytes of state per request; rest −= (slots + 1)·s;
4. **the tokens** (``pool_configurator.py`` ``calculate_pool_sizes``):
   ``max_total_num_tokens`` = ⌊rest / cell⌋, rounded down to the page size (1 on CUDA), with
   cell = bytes of one token in every full-attention layer on one GPU — K and V heads per rank ×
   head dims × layers × element bytes (GQA heads replicated when TP exceeds them), or for MLA
   (kv_lora_rank + rope dim) × layers × element bytes, *not* divided by TP;
5. **``--max-running-requests``** when not given (``resolve_max_num_reqs``):
   min(clamp(⌊tokens / context_len · 512⌋, 2048, 4096), tokens // 2); a given value is capped at
   tokens // 2; hybrids also at slots // 3 (``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``);
6. **refusals**: SGLang does not start when the rest memory is ≤ 0 ("Loaded weights leave no GPU
   memory for the KV cache"), when no state slot or running request is left for a hybrid, or
   when ``max_total_num_tokens`` is 0 ("Not enough memory. Please try to increase
   --mem-fraction-static."); ``kv_pool`` raises ``capacity.NoKVMemory`` there, as vLLM's does.

What kvlib assumes: F is the total the CUDA runtime reports (``GPU.usable_memory_bytes``) — the
CUDA context and NCCL buffers created before the weights load (a few hundred MiB) are not
subtracted; the weights are ``kvlib.model.weights.loaded_weights``; a request's recurrent state
is the layers' own ``state_bytes`` (conv state of ``conv_kernel − 1`` taps, as SGLang's
``configs/mamba_utils.py`` shapes it, and the recurrent state in the config's SSM dtype). Not modelled (refused with
a ValueError): sliding-window pools (``HybridSWAPoolConfigurator``), DeepSeek-V3.2's indexer,
KV formats with scales (mxfp8, fp4), speculative decoding, DP attention, DeepEP and the VLM
adjustment of f. Imports only ``kvlib.core``, ``kvlib.model``, ``kvlib.hardware``,
``kvlib.deployment`` and ``kvlib.engines``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..core.checks import integer, positive_integer
from ..core.units import GIB, MIB
from ..deployment import ENGINE_VERSIONS, Deployment
from ..deployment import deployment as as_deployment
from ..hardware.gpus import GPU, resolve_gpu
from ..model.formats import KVFormat
from ..model.model import Model
from ..model.weights import loaded_weights
from .capacity import NoKVMemory, check_max_model_len, derived_max_model_len, refuse_parallel

#: The SGLang release these rules were read in (the PyPI wheel).
SGLANG_VERSION = ENGINE_VERSIONS["sglang"]
#: SGLang's default ``--page-size`` on CUDA and ROCm (``arg_groups/overrides.py``).
DEFAULT_PAGE_SIZE = 1
#: ``--mamba-full-memory-ratio`` fallback: state memory ÷ full-attention KV memory.
MAMBA_FULL_MEMORY_RATIO = 0.9
#: State slots one running request may hold (``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``).
MAMBA_SLOTS_PER_REQUEST = 3
#: (upper bound of nvidia-smi MiB, chunked_prefill_size, decode graph max_bs for tp < 4, for
#: tp ≥ 4) — ``memory_hook.py`` capacity buckets: T4 / 4090 / A100-40G / H100 / H200 / B200.
CAPACITY_BUCKETS = (
    (20 * 1024, 2048, 8, 8),
    (35 * 1024, 4096, 48, 160),
    (60 * 1024, 4096, 32, 160),
    (90 * 1024, 8192, 256, 512),
    (160 * 1024, 8192, 256, 512),
    (math.inf, 16384, 512, 512),
)


def gpu_memory_mib(gpu: GPU) -> float:
    """SGLang's ``gpu_mem``: the nvidia-smi ``memory.total`` (MiB) — ``memory_bytes_nvml`` where
    sourced, else the datasheet capacity."""
    return (gpu.memory_bytes_nvml or gpu.memory_bytes_stated) / MIB


def capacity_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(``chunked_prefill_size`` tokens, decode CUDA-graph max batch) SGLang picks for a GPU of
    ``gpu_mib`` MiB and tensor-parallel degree ``tp``."""
    positive_integer("tp", tp)
    for limit, chunk, small_tp, large_tp in CAPACITY_BUCKETS:
        if gpu_mib < limit:
            return chunk, (small_tp if tp < 4 else large_tp)
    raise AssertionError("unreachable: the last bucket is unbounded")


def reserved_mib(gpu_mib: float, tp: int, chunked_prefill_size: int, decode_graph_max_bs: int,
                 pp: int = 1) -> float:
    """The memory SGLang keeps out of ``mem_fraction_static`` (MiB): 512 of metadata, 1.5 MiB
    per activation token (at least 2,048 tokens), 128 MiB per parallel rank, 2 MiB per decode
    graph batch size; at least 10 GiB on GPUs over 60 GiB."""
    reserved = (512 + 1.5 * max(chunked_prefill_size, 2048) + tp * pp / 8 * 1024
                + 2 * decode_graph_max_bs)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


def default_mem_fraction_static(gpu: GPU | str, tp: int = 1, *,
                                chunked_prefill_size: int | None = None,
                                max_running_requests: int | None = None, pp: int = 1) -> float:
    """SGLang's ``mem_fraction_static`` when ``--mem-fraction-static`` is not given:
    round((G − reserved) / G, 3) with G the GPU's nvidia-smi MiB (H100 SXM, tp 1: 0.835)."""
    g = resolve_gpu(gpu)
    mib = gpu_memory_mib(g)
    chunk, graph_bs = capacity_defaults(mib, tp)
    if chunked_prefill_size is not None:
        chunk = positive_integer("chunked_prefill_size", chunked_prefill_size)
    if max_running_requests is not None:
        graph_bs = min(graph_bs, positive_integer("max_running_requests", max_running_requests))
    return round((mib - reserved_mib(mib, tp, chunk, graph_bs, pp)) / mib, 3)


def rest_memory_bytes(free_before_weights_bytes: int, weights_bytes: int,
                      mem_fraction_static: float) -> int:
    """SGLang's memory for the static pools after the weights (bytes): F − weights −
    F·(1 − f) (``_profile_available_bytes``); ≤ 0: SGLang refuses to start ("Loaded weights
    leave no GPU memory for the KV cache")."""
    free = integer("free_before_weights_bytes", free_before_weights_bytes, 0)
    return free - integer("weights_bytes", weights_bytes, 0) - round(free * (1 - mem_fraction_static))


def min_mem_fraction_static(free_before_weights_bytes: int, weights_bytes: int) -> float:
    """The smallest ``mem_fraction_static`` whose rest memory is not negative: weights ÷ F."""
    return integer("weights_bytes", weights_bytes, 0) / positive_integer(
        "free_before_weights_bytes", free_before_weights_bytes)


def _plain_format(fmt: KVFormat) -> None:
    if fmt.vector_scale_bits or fmt.block or fmt.mla_rope_bits:
        raise ValueError(f"KV format {fmt.name!r} keeps per-token scales: kvlib models SGLang's "
                         "and TensorRT-LLM's cells for plain element formats only (bf16, fp16, fp8)")


def token_cell(model: Model, tp: int, fmt: KVFormat, engine: str = "SGLang") -> tuple[int, int]:
    """(bytes of one token in every attention layer on one GPU, attention layers) — SGLang's
    ``cell_size`` and TensorRT-LLM's KV size per token (both count K and V heads per rank, or
    MLA's replicated latent); recurrent layers add nothing per token. ValueError for
    sliding-window and indexer layers, which neither formula here covers."""
    _plain_format(fmt)
    cell, layers = 0, 0
    for layer, n in model.distinct_layers:
        kind = layer.cache_kind
        if kind in ("none", "state"):
            continue
        if kind not in ("full", "mla"):
            raise ValueError(f"{model.name}: {kind} layers — kvlib does not model {engine}'s "
                             "pool for them (sliding-window / indexer pools)")
        cell += n * layer.bytes_per_token(fmt, tp)
        layers += n
    if not layers:
        raise ValueError(f"{model.name}: no attention layer keeps a KV cache")
    return cell, layers


def default_max_running_requests(tokens: int, context_len: int,
                                 given: int | None = None) -> int:
    """``--max-running-requests`` per worker: min(clamp(⌊tokens / context_len · 512⌋, 2048,
    4096), tokens // 2), or the given value capped at tokens // 2."""
    integer("tokens", tokens, 0)
    positive_integer("context_len", context_len)
    if given is not None:
        return min(positive_integer("max_running_requests", given), tokens // 2)
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    return min(estimated, tokens // 2)


@dataclass(frozen=True)
class SGLangPool:
    """SGLang's KV pool for one deployment, every term in bytes per GPU.

    free_before_weights_bytes: F; reserve_bytes = F·(1 − f); available_kv_bytes = F − weights
    − reserve (SGLang's rest memory); state_bytes: the recurrent-state slots carved first
    (hybrids); kv_bytes_per_gpu = tokens × cell. ``kv_pool`` raises ``NoKVMemory`` where SGLang
    would refuse to start (``shortfall``); the pool it keeps holds no tokens.
    """

    model: str
    gpu: str
    n_gpus: int
    mem_fraction_static: float
    mem_fraction_source: str
    weight_dtype: str
    kv_dtype: str
    chunked_prefill_size: int
    decode_graph_max_bs: int
    free_before_weights_bytes: int
    weights_bytes_per_gpu: int
    weights_basis: str
    cell_bytes: int
    attention_layers: int
    state_bytes_per_request: int
    state_slots: int
    page_size: int
    max_total_num_tokens: int
    max_running_requests: int | None
    context_len: int | None
    mamba_full_memory_ratio: float = MAMBA_FULL_MEMORY_RATIO
    engine: str = "sglang"
    engine_version: str = SGLANG_VERSION

    @property
    def reserve_bytes(self) -> int:
        """F·(1 − f): the memory outside the static pools (activations, graphs, metadata)."""
        return round(self.free_before_weights_bytes * (1 - self.mem_fraction_static))

    @property
    def available_kv_bytes(self) -> int:
        """SGLang's rest memory: F − weights − reserve (≤ 0 only in a ``NoKVMemory``)."""
        return self.free_before_weights_bytes - self.weights_bytes_per_gpu - self.reserve_bytes

    @property
    def state_bytes(self) -> int:
        """The recurrent-state pool: (slots + 1) × state per request (0 without slots)."""
        return (self.state_slots + 1) * self.state_bytes_per_request if self.state_slots else 0

    @property
    def tokens(self) -> int:
        """``max_total_num_tokens``: tokens whose K and V fit."""
        return self.max_total_num_tokens

    @property
    def block_size(self) -> int:
        """Tokens per page (1 by default)."""
        return self.page_size

    @property
    def num_blocks(self) -> int:
        """Pages in the pool."""
        return self.tokens // self.page_size

    @property
    def kv_bytes_per_gpu(self) -> int:
        """Bytes the K/V tensors take on one GPU."""
        return self.tokens * self.cell_bytes

    @property
    def page_rounding_bytes(self) -> int:
        """Rest memory left unused: less than one page (and one cell) of bytes."""
        return max(self.available_kv_bytes - self.state_bytes, 0) - self.kv_bytes_per_gpu

    def pages_per_request(self, context_tokens: int) -> int:
        """Pages one request of ``context_tokens`` tokens takes."""
        return -(-positive_integer("context_tokens", context_tokens) // self.page_size)

    def shortfall(self) -> str:
        """What ran out, in one line, in SGLang's terms ("" when the pool holds a page), each
        where SGLang refuses to start: the weights reach f·F, the free memory F less the reserve
        F·(1 − f) (``_profile_available_bytes``: "Loaded weights leave no GPU memory for the KV
        cache", with the least fraction weights ÷ F rounded up to 0.001; for a hybrid its state
        check may speak first); the rest leaves no
        recurrent-state slot (``_handle_max_mamba_cache``) or no running request for the slots
        (``_resolve_max_num_reqs``); or it holds no page (``MemoryPoolConfig``: "Not enough
        memory. Please try to increase --mem-fraction-static.")."""
        f, free = self.mem_fraction_static, self.free_before_weights_bytes
        rest = self.available_kv_bytes
        if rest <= 0:
            least = math.ceil(min_mem_fraction_static(free, self.weights_bytes_per_gpu) * 1000)
            advice = (f"--mem-fraction-static above {least / 1000:.3f} holds them" if least < 1000
                      else "they exceed the free memory itself")
            return (f"weights {self.weights_bytes_per_gpu / GIB:.2f} GiB ≥ free memory "
                    f"{free / GIB:.2f} GiB − reserve {self.reserve_bytes / GIB:.2f} GiB "
                    f"(1 − mem_fraction_static {f:g} of it) = "
                    f"{(free - self.reserve_bytes) / GIB:.2f} GiB per GPU: SGLang would refuse to "
                    f"start (\"Loaded weights leave no GPU memory for the KV cache\"; {advice})")
        if self.state_bytes_per_request and self.state_slots <= 0:
            r = self.mamba_full_memory_ratio
            return (f"the recurrent state's share of the rest memory, {r:g}/(1 + {r:g}) × "
                    f"{rest / GIB:.2f} GiB per GPU, holds no slot of "
                    f"{self.state_bytes_per_request / GIB:.3f} GiB beside the spare one: SGLang "
                    "would refuse to start (\"Not enough GPU memory for hybrid "
                    "(mamba/linear-attention) state cache\"; increase --mem-fraction-static)")
        if self.state_bytes_per_request and self.max_running_requests == 0:
            return (f"{self.state_slots} recurrent-state slots per GPU serve no request "
                    f"({MAMBA_SLOTS_PER_REQUEST} slots each): SGLang would refuse to start "
                    "(\"Hybrid (mamba/linear-attention) state cache is too small to serve any "
                    "requests\"; increase --mem-fraction-static)")
        if self.num_blocks <= 0:
            left = max(rest - self.state_bytes, 0)
            return (f"rest memory {left:,} B per GPU holds no {self.page_size}-token page of "
                    f"{self.page_size * self.cell_bytes:,} B: SGLang would refuse to start "
                    "(\"Not enough memory. Please try to increase --mem-fraction-static.\")")
        return ""

    def max_concurrency(self, context_tokens: int) -> float:
        """Requests of ``context_tokens`` tokens the pool holds at once (and, for hybrids, no
        more than their state slots allow)."""
        held = self.num_blocks / self.pages_per_request(context_tokens)
        if self.state_bytes_per_request:
            held = min(held, float(self.state_slots))
        return held

    def terms(self) -> pd.DataFrame:
        """Every term of the arithmetic, one row each, in bytes and GiB (per GPU)."""
        rows = [
            ("free memory before the weights load (F)", self.free_before_weights_bytes),
            (f"− reserve F × (1 − mem_fraction_static {self.mem_fraction_static:g}, "
             f"{self.mem_fraction_source})", -self.reserve_bytes),
            (f"− weights ({self.weight_dtype}, 1/{self.n_gpus} of the model; "
             f"{self.weights_basis})", -self.weights_bytes_per_gpu),
            ("= rest memory", self.available_kv_bytes),
        ]
        if self.state_bytes_per_request:
            rows.append((f"− recurrent state ({self.state_slots:,} + 1 slots of "
                         f"{self.state_bytes_per_request:,} B)", -self.state_bytes))
        rows += [
            (f"− page rounding ({self.page_size}-token pages)",
             -self.page_rounding_bytes if self.available_kv_bytes > 0 else 0),
            (f"= KV pool ({self.tokens:,} tokens × {self.cell_bytes:,} B)",
             self.kv_bytes_per_gpu),
        ]
        return pd.DataFrame([{"term": t, "bytes": int(b), "gib": b / GIB} for t, b in rows])


def kv_pool(deployment: Deployment | Model | str, gpu: GPU | str | None = None, *,
            weights_bytes_per_gpu: int | None = None,
            free_before_weights_bytes: int | None = None,
            mamba_full_memory_ratio: float = MAMBA_FULL_MEMORY_RATIO,
            **keywords: Any) -> SGLangPool:
    """SGLang's KV pool for a ``Deployment`` (or model, GPU and deployment keywords).

    Deployment fields as SGLang's flags: ``gpu_memory_utilization`` → ``--mem-fraction-static``
    (None: ``default_mem_fraction_static``), ``max_num_batched_tokens`` →
    ``--chunked-prefill-size`` (None: the GPU's bucket), ``max_num_seqs`` →
    ``--max-running-requests``, ``block_size`` → ``--page-size`` (None: 1), ``max_model_len`` →
    ``--context-length`` (None: the model's own). weights_bytes_per_gpu / free_before_weights_bytes
    override the computed weights and F (e.g. with a log's "mem usage" and "avail mem").
    ``NoKVMemory`` (its ``terms`` in SGLang's words, ``SGLangPool.shortfall``) where SGLang would
    refuse to start: the weights fill f·F, or the rest holds no page or state slot."""
    d = as_deployment(deployment, gpu, **keywords)
    refuse_parallel(d, "SGLang")
    m, g = d.model, d.gpu
    tp = m.check_tp(d.tp)
    if d.max_model_len is not None:
        check_max_model_len(m, d.max_model_len, d.allow_long_max_model_len)
    context_len = d.max_model_len or derived_max_model_len(m)
    mib = gpu_memory_mib(g)
    chunk, graph_bs = capacity_defaults(mib, tp)
    chunk = d.max_num_batched_tokens or chunk
    if d.max_num_seqs is not None:
        graph_bs = min(graph_bs, d.max_num_seqs)
    if d.gpu_memory_utilization is None:
        fraction = round((mib - reserved_mib(mib, tp, chunk, graph_bs)) / mib, 3)
        source = "SGLang's default for this GPU and TP"
    else:
        fraction, source = float(d.gpu_memory_utilization), "given"
    if weights_bytes_per_gpu is None:
        loaded = loaded_weights(m, d.weights, tp, g.slug)
        weights, basis = loaded.total_bytes, loaded.basis
    else:
        weights, basis = integer("weights_bytes_per_gpu", weights_bytes_per_gpu), "given"
    free = (g.usable_memory_bytes if free_before_weights_bytes is None
            else positive_integer("free_before_weights_bytes", free_before_weights_bytes))
    page = d.block_size or DEFAULT_PAGE_SIZE
    cell, layers = token_cell(m, tp, d.kv)
    state = 0
    if m.has_state:
        conv_dtype, ssm_dtype = m.state_dtypes()
        state = sum(n * layer.state_bytes(tp, conv_dtype, ssm_dtype)
                    for layer, n in m.distinct_layers if layer.cache_kind == "state")
    rest = rest_memory_bytes(free, weights, fraction)
    slots = 0
    if state and rest > 0:
        if not 0 < mamba_full_memory_ratio:
            raise ValueError(f"mamba_full_memory_ratio must be > 0, got {mamba_full_memory_ratio!r}")
        budget = rest * mamba_full_memory_ratio / (1 + mamba_full_memory_ratio)
        slots = max(int((budget - state) // state), 0)  # none: refused below
        rest = rest - (slots + 1) * state if slots else 0
    tokens = max(rest, 0) // cell // page * page
    running = None
    if context_len is not None and tokens:
        running = default_max_running_requests(tokens, context_len, d.max_num_seqs)
        if state:
            running = min(running, slots // MAMBA_SLOTS_PER_REQUEST)
    pool = SGLangPool(model=m.name, gpu=g.slug, n_gpus=tp, mem_fraction_static=fraction,
                      mem_fraction_source=source, weight_dtype=d.weights.label,
                      kv_dtype=d.kv_name, chunked_prefill_size=chunk,
                      decode_graph_max_bs=graph_bs, free_before_weights_bytes=free,
                      weights_bytes_per_gpu=weights, weights_basis=basis, cell_bytes=cell,
                      attention_layers=layers, state_bytes_per_request=state,
                      state_slots=slots, page_size=page, max_total_num_tokens=int(tokens),
                      max_running_requests=running, context_len=context_len,
                      mamba_full_memory_ratio=mamba_full_memory_ratio)
    if pool.shortfall():
        raise NoKVMemory(pool)
    return pool
