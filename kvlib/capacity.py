"""What a serving engine gives you: the KV pool, the way vLLM sizes it.

vLLM (v1, ``gpu_worker.determine_available_memory`` and ``kv_cache_utils.get_kv_cache_configs``)
does, on every GPU of a tensor-parallel group:

1. budget = total memory the CUDA runtime reports × ``gpu_memory_utilization``;
2. available KV memory = budget − weights on this GPU − the torch activation peak of a dummy
   forward pass of ``max_num_batched_tokens`` tokens (and a dummy sampling step over
   ``max_num_seqs`` rows of logits) − memory allocated outside torch (NCCL, custom all-reduce
   buffers, cuBLAS workspaces);  logged as "Available KV cache memory";
3. layers are grouped by cache kind (full, sliding window, MLA, Mamba/linear-attention state);
   every group uses pages of the same byte size, ``block_size`` tokens per page for attention
   (for hybrids with recurrent state the attention block grows until one page holds a layer's
   state); blocks = available ÷ (page bytes × layers per group), rounded down;
4. "GPU KV cache size" = blocks ÷ groups × block size tokens; "Maximum concurrency" = blocks ÷
   the blocks one request of ``max_model_len`` tokens needs in every group.

Steps 1, 3 and 4 are exact arithmetic. Step 2's activation peak and non-torch memory are
measured by the engine at start-up; kvlib models them with the ``Overheads`` terms below,
calibrated on the public start-up logs in ``data/engine_logs.csv`` (see ``calibration``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import pandas as pd

from .checks import integer, number, positive_integer
from .hardware import GPU, load_gpu
from .hf_config import Architecture
from .model import Model
from .params import ParamCounts, loaded_weights, params_for
from .quant import KVFormat, kv_format
from .registry import load_model
from .units import GIB

#: vLLM's default tokens per KV block (``CacheConfig.block_size``) for attention layers.
DEFAULT_BLOCK_SIZE = 16
#: Tokens per block is rounded to this multiple when a hybrid's attention block is enlarged to
#: hold one recurrent-state page (vLLM: "Setting attention block size to N tokens").
HYBRID_BLOCK_ALIGNMENT = 16
#: vLLM's default ``gpu_memory_utilization``: 0.9 until vLLM PR #38284 (2026), 0.92 since.
VLLM_DEFAULT_UTILIZATION_OLD = 0.9
VLLM_DEFAULT_UTILIZATION = 0.92


def default_max_num_seqs(gpu: GPU) -> int:
    """vLLM's default ``max_num_seqs`` for the OpenAI server: 1024 on GPUs with ≥ 70 GiB that
    are not A100s (H100/H200/B200/MI300X), 256 elsewhere (``EngineArgs`` usage defaults)."""
    big = gpu.usable_memory_bytes >= 70 * GIB and not gpu.slug.startswith("a100")
    return 1024 if big else 256


def default_max_num_batched_tokens(gpu: GPU) -> int:
    """vLLM's default ``max_num_batched_tokens`` for the OpenAI server: 8192 on the large GPUs
    of ``default_max_num_seqs``, 2048 elsewhere."""
    return 8192 if default_max_num_seqs(gpu) == 1024 else 2048


@dataclass(frozen=True)
class Overheads:
    """The start-up terms vLLM measures, as kvlib models them (bytes, per GPU).

    forward_factor: the dummy forward pass's torch peak is ``forward_factor ×
    max_num_batched_tokens × w × 2`` bytes, w = hidden + the widest per-token intermediate on
    one GPU (2·I/tp for a gated MLP, top-k·2·I_moe/tp (+ shared) for MoE, the q/k/v width for
    attention) — bf16 activations;
    sampler_copies: the dummy sampling step's peak is ``sampler_copies × min(max_num_seqs,
    max_num_batched_tokens) × vocab × 4`` bytes (fp32 logits, softmax, log-softmax, sort
    values and int64 indices); the activation peak is the larger of the two;
    non_torch_bytes: memory outside torch on one GPU (CUDA/cuBLAS workspaces);
    non_torch_tp_bytes: added when tensor parallelism is on (NCCL and custom all-reduce
    buffers); cuda_graph_bytes: CUDA-graph memory subtracted before sizing (0 in vLLM unless
    ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` is set: graphs are captured after the pool,
    in the 1 − utilization headroom).
    """

    name: str
    forward_factor: float
    sampler_copies: float
    non_torch_bytes: int
    non_torch_tp_bytes: int
    cuda_graph_bytes: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        for key in ("forward_factor", "sampler_copies", "non_torch_bytes", "non_torch_tp_bytes",
                    "cuda_graph_bytes"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Overheads.{key} must be >= 0, got {value!r}")


#: Calibrated on ``data/engine_logs.csv`` (rows with ``calibration`` = yes) by
#: ``fit_overheads``: forward_factor from the two RTX-3090 Llama-3.1-8B logs (vllm#10517, the
#: activation peak grows 0.92 GiB for 9,000 more batched tokens); the other three terms by least
#: squares on every calibration log's "Available KV cache memory". tests/test_capacity.py
#: refits them and checks these values.
VLLM = Overheads(name="vllm (calibrated)", forward_factor=1.675, sampler_copies=8.55,
                 non_torch_bytes=round(0.75 * GIB), non_torch_tp_bytes=round(2.71 * GIB),
                 source="data/engine_logs.csv calibration rows; kvlib.capacity.fit_overheads")
#: No overheads at all: the budget minus the weights (the source article's arithmetic).
NO_OVERHEADS = Overheads(name="none (budget − weights)", forward_factor=0.0, sampler_copies=0.0,
                         non_torch_bytes=0, non_torch_tp_bytes=0)


# --- cache groups ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CacheGroup:
    """Layers of one cache kind on one GPU, as vLLM groups them.

    kind: full / sliding / mla / state (the layers' ``cache_kind``); layers: how many layers of
    the model have this kind; page_bytes: bytes of one page of one layer; block_size: tokens
    per page (attention) or None (a recurrent-state page holds one sequence); window: sliding
    window (tokens); layer: one of the layers (they are alike), which knows its own page needs.
    """

    kind: str
    layers: int
    page_bytes: int
    block_size: int | None
    window: int | None = None
    layer: Any = field(default=None, compare=False, repr=False)

    def pages_per_request(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Pages one request of ``max_model_len`` tokens needs in one layer of this group
        (vLLM's ``max_memory_usage_bytes`` ÷ page size; the layer's ``pages_per_request``)."""
        return self.layer.pages_per_request(max_model_len, max_num_batched_tokens,
                                            self.block_size or 1)


def cache_groups(model: Model, *, tp: int = 1, kv_dtype: str | KVFormat = "bf16",
                 block_size: int = DEFAULT_BLOCK_SIZE) -> list[CacheGroup]:
    """The cache groups of ``model`` on one GPU, one entry per kind of cache, with vLLM's page
    sizes: attention pages hold ``block_size`` tokens in the KV format ``kv_dtype``; with
    recurrent layers the attention block grows to the smallest multiple of 16 tokens whose page
    holds one layer's state, and the state page is padded to the attention page
    (``Platform`` hybrid block-size rule: "Setting attention block size to N tokens")."""
    fmt = kv_format(kv_dtype)
    block = positive_integer("block_size (tokens)", block_size)
    return list(_cache_groups(model, model.check_tp(tp), fmt, block))


@lru_cache(maxsize=4096)  # the serving grid asks for the same model, tp and format many times
def _cache_groups(model: Model, tp: int, fmt: KVFormat, block: int) -> tuple[CacheGroup, ...]:
    conv_dtype, ssm_dtype = model.state_dtypes() if model.has_state else ("bf16", None)
    kinds: dict[tuple, list] = {}
    for layer in model.layers:
        if layer.cache_kind == "none":
            continue
        page_1 = layer.page_bytes(1, fmt, tp, conv_dtype, ssm_dtype)  # one token, or one state
        key = (layer.cache_kind, page_1, layer.span)
        kinds.setdefault(key, [0, layer])[0] += 1
    if not kinds:
        return ()
    token_kinds = [k for k in kinds if k[0] != "state"]
    state_kinds = [k for k in kinds if k[0] == "state"]
    if state_kinds and token_kinds:
        per_token = max(k[1] for k in token_kinds)
        state = max(k[1] for k in state_kinds)
        block = HYBRID_BLOCK_ALIGNMENT * math.ceil(state / (HYBRID_BLOCK_ALIGNMENT * per_token))
    groups = []
    for (kind, page_1, span), (count, layer) in kinds.items():
        if kind == "state":
            groups.append(CacheGroup("state", count, page_1, None, layer=layer))
        else:
            groups.append(CacheGroup(kind, count, page_1 * block, block, span, layer=layer))
    if state_kinds and token_kinds:  # pad state pages to the attention page
        page = max(g.page_bytes for g in groups)
        groups = [replace(g, page_bytes=page) for g in groups]
    elif len({g.page_bytes for g in groups}) > 1 and not _uniform_type(groups):
        raise ValueError(f"{model.name}: cache kinds with different page sizes "
                         f"({sorted({g.page_bytes for g in groups})}) — vLLM would unify them "
                         "by changing block sizes, which kvlib does not model")
    return tuple(groups)


#: Cache kinds that need the same token slots (every token of the context): vLLM puts layers of
#: these kinds in one group even when their pages differ in size (``UniformTypeKVCacheSpecs``,
#: e.g. DeepSeek-V3.2's MLA latent and indexer keys), a block costing the sum of their pages.
_ALL_TOKEN_KINDS = frozenset({"full", "mla", "indexer"})


def _uniform_type(groups: list[CacheGroup]) -> bool:
    return all(g.kind in _ALL_TOKEN_KINDS for g in groups)


def _group_layout(groups: list[CacheGroup]) -> tuple[int, int, int]:
    """(layers per group, number of groups, bytes of one block across the layers that share it)
    as vLLM splits kinds into equal-sized groups (``kv_cache_planning``: group size = the fewest
    layers of a kind, or the most when every kind has fewer than 1.5 × the fewest)."""
    if len(groups) == 1 or _uniform_type(groups):
        return (sum(g.layers for g in groups), 1, sum(g.layers * g.page_bytes for g in groups))
    counts = [g.layers for g in groups]
    size = min(counts)
    if max(counts) < 1.5 * size:
        size = max(counts)
    return size, sum(math.ceil(c / size) for c in counts), size * groups[0].page_bytes


# --- the pool -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pool:
    """The KV pool one configuration gets, with every term of its arithmetic (bytes per GPU).

    budget_bytes = total_memory_bytes × gpu_memory_utilization;
    available_kv_bytes = budget − weights − activation peak − non-torch − CUDA graphs
    (negative when the model does not fit: the engine refuses to start);
    kv_bytes_per_gpu = blocks × page bytes × layers per group (≤ available: block rounding).
    """

    model: str
    gpu: str
    n_gpus: int
    gpu_memory_utilization: float
    weight_dtype: str
    kv_dtype: str
    max_num_batched_tokens: int
    max_num_seqs: int
    total_memory_bytes: int
    total_memory_source: str
    budget_bytes: int
    weights_bytes_per_gpu: int
    activation_forward_bytes: int
    activation_sampler_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    groups: tuple[CacheGroup, ...]
    layers_per_group: int
    n_groups: int
    block_bytes: int
    num_blocks: int
    overheads: str
    max_num_batched_tokens_note: str = field(default="", compare=False)
    weights_basis: str = field(default="", compare=False)

    @property
    def activation_peak_bytes(self) -> int:
        """The larger of the forward-pass and sampling-step peaks."""
        return max(self.activation_forward_bytes, self.activation_sampler_bytes)

    @property
    def available_kv_bytes(self) -> int:
        """vLLM's "Available KV cache memory" on one GPU (bytes; may be negative)."""
        return (self.budget_bytes - self.weights_bytes_per_gpu - self.activation_peak_bytes
                - self.non_torch_bytes - self.cuda_graph_bytes)

    @property
    def page_bytes(self) -> int:
        """Bytes of one page of one layer (equal in every group)."""
        return self.groups[0].page_bytes if self.groups else 0

    @property
    def kv_bytes_per_gpu(self) -> int:
        """Bytes the KV tensors take on one GPU: whole blocks only."""
        return self.num_blocks * self.block_bytes

    @property
    def block_rounding_bytes(self) -> int:
        """Available memory left unused because blocks are whole."""
        return max(self.available_kv_bytes, 0) - self.kv_bytes_per_gpu

    @property
    def block_size(self) -> int:
        """Tokens per attention page (enlarged for hybrids with recurrent state)."""
        sizes = [g.block_size for g in self.groups if g.block_size]
        return min(sizes) if sizes else 0

    @property
    def tokens(self) -> int:
        """KV tokens the pool holds: vLLM's "GPU KV cache size" (blocks ÷ groups × block size).

        For a single-kind model this is the number of tokens whose K and V fit; for hybrids it
        is the context one sequence could reach if it had the whole pool.
        """
        if not self.groups or not self.block_size:
            return 0
        return self.num_blocks // self.n_groups * self.block_size

    def blocks_per_request(self, context_tokens: int) -> int:
        """Blocks one request of ``context_tokens`` needs, summed over the groups."""
        positive_integer("context_tokens", context_tokens)
        pages = [g.pages_per_request(context_tokens, self.max_num_batched_tokens)
                 for g in self.groups]
        if self.n_groups == 1:  # one block table for every layer
            return max(pages)
        return sum(math.ceil(g.layers / self.layers_per_group) * n
                   for g, n in zip(self.groups, pages))

    def max_concurrency(self, context_tokens: int) -> float:
        """Requests of ``context_tokens`` tokens the pool holds at once (vLLM's "Maximum
        concurrency for N tokens per request")."""
        if self.num_blocks <= 0:
            return 0.0
        return self.num_blocks / self.blocks_per_request(context_tokens)

    def terms(self) -> pd.DataFrame:
        """Every term of the arithmetic, one row each, in bytes and GiB (per GPU)."""
        rows = [
            ("total memory (" + self.total_memory_source + ")", self.total_memory_bytes),
            (f"× gpu_memory_utilization {self.gpu_memory_utilization:g} = budget",
             self.budget_bytes),
            (f"− weights ({self.weight_dtype}, 1/{self.n_gpus} of the model"
             + (f"; {self.weights_basis}" if self.weights_basis else "") + ")",
             -self.weights_bytes_per_gpu),
            (f"− activation peak ({self.max_num_batched_tokens:,} batched tokens, "
             f"{self.max_num_seqs:,} sampled rows)", -self.activation_peak_bytes),
            ("− non-torch memory" + (" (incl. tensor-parallel buffers)" if self.n_gpus > 1
                                     else ""), -self.non_torch_bytes),
            ("− CUDA graphs counted before sizing", -self.cuda_graph_bytes),
            ("= available KV memory", self.available_kv_bytes),
            ("− block rounding", -self.block_rounding_bytes if self.available_kv_bytes > 0 else 0),
            (f"= KV pool ({self.num_blocks:,} blocks)", self.kv_bytes_per_gpu),
        ]
        return pd.DataFrame([{"term": t, "bytes": int(b), "gib": b / GIB} for t, b in rows])


def _resolve_model(model: Model | str) -> Model:
    if isinstance(model, str):
        return load_model(model)
    if isinstance(model, Model):
        return model
    raise TypeError(f"model must be a Model or a registry slug, got {type(model)!r}")


def _resolve_gpu(gpu: GPU | str) -> GPU:
    if isinstance(gpu, str):
        return load_gpu(gpu)
    if isinstance(gpu, GPU):
        return gpu
    raise TypeError(f"gpu must be a GPU or a slug from data/gpus.csv, got {type(gpu)!r}")


def activation_width(counts: ParamCounts, arch: Architecture, tp: int) -> int:
    """Elements per token of the widest activation a forward pass holds on one GPU
    (hidden state + the widest intermediate; see ``Overheads.forward_factor``): 2·I/tp for a
    dense MLP, top-k·2·I_moe/tp (+ 2·shared/tp) for MoE, (heads + 2·KV heads)·H/tp for softmax
    attention and heads·(d_nope + d_R)/tp + r + d_R for an MLA layer's query and latent."""
    hidden = arch.hidden_size
    if hidden is None:
        raise ValueError(f"{arch.name}: config field 'hidden_size' is missing (needed for the "
                         "activation peak)")
    widths = []
    if counts.components.get("mlp") and arch.mlp is not None and arch.mlp.intermediate_size:
        widths.append(2 * arch.mlp.intermediate_size / tp)
    if counts.n_experts and arch.moe is not None and arch.moe.intermediate_size:
        moe = arch.moe
        widths.append((counts.experts_per_token * 2 * moe.intermediate_size
                       + 2 * (moe.shared_intermediate_size or 0)) / tp)
    att = arch.attention
    if att is not None:
        widths.append((att.n_heads + 2 * att.n_kv_heads) * att.head_dim / tp)
    mla = arch.mla
    if mla is not None:
        q_dim = (mla.qk_nope_head_dim or 0) + mla.qk_rope_head_dim
        widths.append(mla.n_heads * q_dim / tp + mla.kv_lora_rank + mla.qk_rope_head_dim)
    return math.ceil(hidden + max(widths, default=0))


def _vocab(arch: Architecture) -> int:
    if arch.vocab_size is None:
        raise ValueError(f"{arch.name}: config field 'vocab_size' is missing (needed for the "
                         "sampler peak)")
    return arch.vocab_size


def derived_max_model_len(model: Model) -> int | None:
    """The longest ``max_model_len`` vLLM accepts for ``model`` without an override (tokens):
    its config's lengths and RoPE scaling by vLLM's rule (``kvlib.hf_config._max_model_len``);
    None when the config names no length or the model was built from explicit layers."""
    return model.architecture.max_model_len if model.architecture is not None else None


def check_max_model_len(model: Model, max_model_len: int, allow_long: bool = False) -> int:
    """``max_model_len`` (tokens) if the model accepts it: ValueError past
    ``derived_max_model_len`` unless ``allow_long`` (vLLM's ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``)."""
    tokens = positive_integer("max_model_len", max_model_len)
    limit = derived_max_model_len(model)
    if limit is not None and tokens > limit and not allow_long:
        raise ValueError(f"{tokens:,} tokens exceed {model.name}'s maximum context of {limit:,} "
                         "tokens (vLLM refuses such a max_model_len; override with "
                         "allow_long_max_model_len=True, kvlib fit --allow-long-context)")
    return tokens


def kv_pool(model: Model | str, gpu: GPU | str, *, n_gpus: int = 1,
            gpu_memory_utilization: float = VLLM_DEFAULT_UTILIZATION_OLD,
            weight_dtype: str | Mapping[str, str] = "bf16", kv_dtype: str = "bf16",
            max_num_batched_tokens: int = 8192, max_num_seqs: int | None = None,
            block_size: int = DEFAULT_BLOCK_SIZE, overheads: Overheads = VLLM,
            weights_bytes_per_gpu: int | None = None, max_model_len: int | None = None,
            allow_long_max_model_len: bool = False) -> Pool:
    """The KV pool vLLM would allocate for ``model`` on ``n_gpus`` × ``gpu`` (tensor parallel).

    model: a ``Model`` or registry slug; gpu: a ``GPU`` or slug of ``data/gpus.csv``;
    n_gpus: tensor-parallel degree (weights, KV heads and recurrent heads split across GPUs;
    every number in the result is per GPU except ``tokens``, which every GPU holds a slice of);
    gpu_memory_utilization: fraction in (0, 1] (vLLM default 0.9 until 2026, 0.92 since);
    weight_dtype: weight format, or component → format mapping (see ``params.weight_bytes``);
    kv_dtype: KV element type (bf16, fp8, ...); max_num_batched_tokens: the profiled forward
    pass (tokens); max_num_seqs: sampled rows in the profile (default: vLLM's by GPU);
    block_size: tokens per KV block; overheads: the activation/non-torch model
    (``NO_OVERHEADS`` reproduces "budget − weights"); weights_bytes_per_gpu: override the
    computed weights (e.g. with a logged "Model loading took"); max_model_len: the context the
    engine is started with (tokens), refused past the model's own maximum
    (``derived_max_model_len``) as vLLM refuses it, unless ``allow_long_max_model_len`` (vLLM's
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``).
    """
    m = _resolve_model(model)
    g = _resolve_gpu(gpu)
    tp = m.check_tp(positive_integer("n_gpus", n_gpus))
    if not 0 < number("gpu_memory_utilization", gpu_memory_utilization) <= 1:
        raise ValueError("gpu_memory_utilization must be in (0, 1], "
                         f"got {gpu_memory_utilization!r}")
    mnbt = positive_integer("max_num_batched_tokens", max_num_batched_tokens)
    seqs = default_max_num_seqs(g) if max_num_seqs is None else positive_integer(
        "max_num_seqs", max_num_seqs)
    if max_model_len is not None:
        check_max_model_len(m, max_model_len, allow_long_max_model_len)
    if not isinstance(overheads, Overheads):
        raise TypeError(f"overheads must be an Overheads, got {type(overheads)!r}")
    counts = params_for(m)
    if weights_bytes_per_gpu is None:
        loaded = loaded_weights(m, weight_dtype, tp, g.slug)
        weights, weights_basis = loaded.total_bytes, loaded.basis
    else:
        weights = integer("weights_bytes_per_gpu", weights_bytes_per_gpu)
        weights_basis = "given"
    arch = m.architecture
    if arch is None:
        raise ValueError(f"model {m.name!r} carries no config: the activation peak needs its "
                         "config.json fields (build it with Model.from_hf_config)")
    forward = int(overheads.forward_factor * mnbt * activation_width(counts, arch, tp) * 2)
    sampler = int(overheads.sampler_copies * min(seqs, mnbt) * _vocab(arch) * 4)
    non_torch = overheads.non_torch_bytes + (overheads.non_torch_tp_bytes if tp > 1 else 0)
    total = g.usable_memory_bytes
    budget = int(total * gpu_memory_utilization)
    groups = cache_groups(m, tp=tp, kv_dtype=kv_dtype, block_size=block_size)
    per_group, n_groups, block_bytes = _group_layout(groups) if groups else (0, 0, 0)
    available = budget - weights - max(forward, sampler) - non_torch - overheads.cuda_graph_bytes
    num_blocks = max(available // block_bytes, 0) if groups else 0
    wd = weight_dtype if isinstance(weight_dtype, str) else ",".join(
        f"{k}={v}" for k, v in sorted(weight_dtype.items()))
    return Pool(model=m.name, gpu=g.slug, n_gpus=tp,
                gpu_memory_utilization=float(gpu_memory_utilization), weight_dtype=wd,
                kv_dtype=kv_dtype, max_num_batched_tokens=mnbt, max_num_seqs=seqs,
                total_memory_bytes=total, total_memory_source=g.usable_memory_source,
                budget_bytes=budget, weights_bytes_per_gpu=weights,
                activation_forward_bytes=forward, activation_sampler_bytes=sampler,
                non_torch_bytes=non_torch, cuda_graph_bytes=overheads.cuda_graph_bytes,
                groups=tuple(groups), layers_per_group=per_group, n_groups=n_groups,
                block_bytes=block_bytes, num_blocks=int(num_blocks), overheads=overheads.name,
                weights_basis=weights_basis)


# --- calibration on public start-up logs ----------------------------------------------------

def _num(value: Any) -> float | None:
    text = str(value).strip()
    return float(text) if text else None


def _weight_format(text: str) -> str | dict[str, str]:
    """``engine_logs.csv`` weight_format: a format name, or ``component=format[;...]``."""
    if "=" not in text:
        return text
    return dict(part.split("=", 1) for part in text.split(";"))


def engine_logs() -> pd.DataFrame:
    """``data/engine_logs.csv``: public serving-engine start-up logs, one per row (``id``)."""
    from .data import csv_path

    return pd.read_csv(csv_path("engine_logs.csv"), dtype=str,
                       keep_default_na=False).set_index("id")


def log_pool(log_id: str, overheads: Overheads = VLLM, use_logged_weights: bool = True) -> Pool:
    """The pool kvlib predicts for one start-up log of ``data/engine_logs.csv``.

    Uses the log's model, GPU (its logged CUDA total when printed), tensor-parallel degree,
    utilization, profiled batch and sampled rows; with ``use_logged_weights`` the logged
    "Model loading took" replaces the computed weights (isolating the overhead terms).
    """
    logs = engine_logs()
    if log_id not in logs.index:
        raise KeyError(f"unknown engine log {log_id!r} (see data/engine_logs.csv)")
    row = logs.loc[log_id]
    if not row["model_slug"] or not row["gpu_slug"]:
        raise ValueError(f"engine log {log_id} names no registry model and GPU: "
                         f"{row['calibration_note'] or 'not predictable'}")
    gpu = load_gpu(row["gpu_slug"])
    total = _num(row["total_gpu_memory_gib"])
    if total is not None:
        gpu = replace(gpu, memory_bytes_runtime=round(total * GIB))
    weights = _num(row["model_weights_gib"]) if use_logged_weights else None
    kv_dtype = row["kv_cache_dtype"] or "bf16"
    return kv_pool(row["model_slug"], gpu, n_gpus=int(row["tp"] or row["n_gpus"] or 1),
                   gpu_memory_utilization=float(row["gpu_memory_utilization"] or 0.9),
                   weight_dtype=_weight_format(row["weight_format"]), kv_dtype=kv_dtype,
                   max_num_batched_tokens=int(row["max_num_batched_tokens"] or 8192),
                   max_num_seqs=int(row["max_num_seqs"]) if row["max_num_seqs"] else None,
                   overheads=overheads,
                   weights_bytes_per_gpu=None if weights is None else round(weights * GIB))


def calibration(overheads: Overheads = VLLM) -> pd.DataFrame:
    """Predicted against reported, for every log of ``engine_logs.csv`` kvlib can predict.

    Columns: weights (computed vs logged, GiB), available KV memory (predicted with the logged
    weights where the log has them, vs logged, GiB), KV tokens (predicted vs logged) and the
    relative errors; ``use`` is the row's calibration role (fit / validate / weights / history).
    """
    logs = engine_logs()
    rows = []
    for log_id, row in logs.iterrows():
        if row["calibration"] not in ("fit", "validate", "weights", "history"):
            continue
        computed = log_pool(log_id, overheads, use_logged_weights=False)
        pool = log_pool(log_id, overheads, use_logged_weights=True)
        rep_w, rep_a, rep_t = (_num(row["model_weights_gib"]), _num(row["available_kv_gib"]),
                               _num(row["kv_cache_tokens"]))
        pred_a = pool.available_kv_bytes / GIB
        rows.append({
            "id": log_id, "use": row["calibration"], "model": row["model_slug"],
            "gpu": row["gpu_slug"], "tp": pool.n_gpus, "utilization": pool.gpu_memory_utilization,
            "engine": row["engine_version"],
            "weights_gib_computed": computed.weights_bytes_per_gpu / GIB,
            "weights_gib_logged": rep_w,
            "weights_error": (computed.weights_bytes_per_gpu / GIB / rep_w - 1) if rep_w else None,
            "available_gib_predicted": pred_a if row["calibration"] != "weights" else None,
            "available_gib_logged": rep_a,
            "available_error_gib": (pred_a - rep_a) if rep_a is not None and row[
                "calibration"] != "weights" else None,
            "tokens_predicted": pool.tokens if row["calibration"] != "weights" else None,
            "tokens_logged": int(rep_t) if rep_t is not None else None,
            "tokens_error": (pool.tokens / rep_t - 1) if rep_t else None,
            "source": row["source_url"],
        })
    return pd.DataFrame(rows).set_index("id")


def _fit_inputs(forward_factor: float) -> list[dict[str, float]]:
    """Per fit log: the measured overhead (budget − weights − available) and its terms."""
    probe = Overheads("probe", forward_factor, 1.0, 0, 0)
    logs = engine_logs()
    out = []
    for log_id, row in logs.iterrows():
        if row["calibration"] != "fit" or not row["available_kv_gib"]:
            continue
        pool = log_pool(log_id, probe, use_logged_weights=True)
        measured = (pool.budget_bytes - pool.weights_bytes_per_gpu
                    - _num(row["available_kv_gib"]) * GIB)
        out.append({"id": log_id, "measured": measured, "forward": pool.activation_forward_bytes,
                    "sampler_per_copy": pool.activation_sampler_bytes, "tp": pool.n_gpus})
    return out


def fit_forward_factor() -> float:
    """``forward_factor`` from the fit logs that print their activation peak at two batch sizes
    for the same model and GPU (the slope of peak against batched tokens)."""
    logs = engine_logs()
    rows = logs[(logs["calibration"] == "fit") & (logs["activation_peak_gib"] != "")]
    for (_model, _gpu), grp in rows.groupby(["model_slug", "gpu_slug"]):
        mnbt = grp["max_num_batched_tokens"].astype(int)
        if mnbt.nunique() < 2:
            continue
        lo, hi = grp.loc[mnbt.idxmin()], grp.loc[mnbt.idxmax()]
        probe = Overheads("probe", 1.0, 0.0, 0, 0)
        p_lo = log_pool(lo.name, probe)
        p_hi = log_pool(hi.name, probe)
        slope_logged = (float(hi["activation_peak_gib"]) - float(lo["activation_peak_gib"])) * GIB
        return slope_logged / (p_hi.activation_forward_bytes - p_lo.activation_forward_bytes)
    raise ValueError("no fit logs give the activation peak at two batch sizes")


def fit_overheads(forward_factor: float | None = None) -> Overheads:
    """Least-squares fit of ``sampler_copies``, ``non_torch_bytes`` and ``non_torch_tp_bytes``
    to the fit logs' measured overhead (budget − weights − available), for a given
    ``forward_factor`` (default: ``fit_forward_factor()``); sampler copies on a 0.05 grid."""
    import numpy as np

    k_fwd = fit_forward_factor() if forward_factor is None else forward_factor
    data = _fit_inputs(k_fwd)
    measured = np.array([d["measured"] for d in data])
    tp_on = np.array([1.0 if d["tp"] > 1 else 0.0 for d in data])
    design = np.column_stack([np.ones(len(data)), tp_on])
    best = None
    for k_s in np.arange(0.0, 20.0001, 0.05):
        act = np.array([max(d["forward"], k_s * d["sampler_per_copy"]) for d in data])
        coef, *_ = np.linalg.lstsq(design, measured - act, rcond=None)
        coef = np.maximum(coef, 0.0)
        sse = float(((measured - act - design @ coef) ** 2).sum())
        if best is None or sse < best[0] - 1e-6:
            best = (sse, float(k_s), coef)
    _, k_s, (n0, ntp) = best
    return Overheads(name="vllm (refit)", forward_factor=round(k_fwd, 3),
                     sampler_copies=round(k_s, 2), non_torch_bytes=int(n0),
                     non_torch_tp_bytes=int(ntp), source="kvlib.capacity.fit_overheads")
