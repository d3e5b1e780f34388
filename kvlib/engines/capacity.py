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

Beyond one tensor-parallel group (``Deployment`` pp, dp, ep; vLLM 0.33's ``ParallelConfig``):
each pipeline stage is sized alone — its own layers' weights and KV pages, the sampler peak on
the last stage only — and every stage gets the fewest blocks any stage has
(``get_kv_cache_configs``); a data-parallel rank is one engine with its own pool and requests
(``Pool.tokens`` and ``max_concurrency`` are one rank's, ``deployment_concurrency`` all of
them), its experts shared over the tp × dp GPUs of the stage (``parallel_weights``). The
activation peak is the single group's (the gathered hidden states of data-parallel MoE are not
counted).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import pandas as pd

from ..core.checks import integer, positive_integer
from ..deployment import DEFAULT_BLOCK_SIZE, Deployment
from ..deployment import deployment as as_deployment
from ..hardware.gpus import GPU
from ..model.hf_config import Architecture
from ..model.model import Model
from ..model.params import ParamCounts, count_architecture, marlin_padding_bytes, weight_bytes
from ..model.weights import loaded_weights, params_for
from ..model.formats import KVFormat, kv_format
from ..core.units import GIB
from .speculative import draft_cache_layers, draft_layer_count, draft_weight_bytes

#: Tokens per block is rounded to this multiple when a hybrid's attention block is enlarged to
#: hold one recurrent-state page (vLLM: "Setting attention block size to N tokens").
HYBRID_BLOCK_ALIGNMENT = 16


@dataclass(frozen=True)
class Overheads:
    """The start-up terms vLLM measures, as kvlib models them (bytes, per GPU).

    forward_factor: the dummy forward pass's torch peak is ``forward_factor ×
    max_num_batched_tokens × w × 2`` bytes, w = hidden + the widest per-token intermediate on
    one GPU (2·I/tp for a gated MLP, top-k·2·I_moe/tp (+ shared) for MoE, the q/k/v width for
    attention) — bf16 activations;
    sampler_copies: the dummy sampling step's peak is ``sampler_copies × min(max_num_seqs,
    max_num_batched_tokens) × vocab × 4`` bytes (fp32 logits, softmax, log-softmax, sort
    values and int64 indices) where the release's runner profiles the sorting fp32 pipeline
    (rules with ``sampler_term`` "fitted": the V1 runner before 0.17);
    triton_fp32_tensors: where the release masks top-k/top-p with its Triton kernel instead
    of a sort (``sampler_term`` "triton": the V1 runner from 0.17, at 8 rows or more) the
    peak is the logits in the model dtype plus ``triton_fp32_tensors`` fp32 tensors of rows ×
    vocab (the fp32 logits, the softmax probabilities, the exponential noise: 3, read in the
    source, not fitted) plus the kernel's buffer of one fp32 vocabulary row per program (one
    program per streaming multiprocessor, ``GPU.compute_units``); logit_bytes: bytes of one
    logit in the model dtype (bf16: 2; read in the source); where the runner samples the
    logits as they are (vLLM 0.22–0.32's V2 runner, ``sampler_term`` "logits": one sampler
    pass with no sampling parameters over the lm_head output) the peak is ``logit_bytes ×
    rows × vocab``; warmup_fp32_tensors: vLLM 0.33's V2 runner samples a second time with
    every sampling parameter on (``sampler_term`` "warmup"); on an NVIDIA GPU (FlashInfer's
    fused sampler) its peak is the logits in the model dtype plus ``warmup_fp32_tensors`` fp32
    tensors of rows × vocab (vLLM's fp32 copy, FlashInfer's top-k-masked logits and their
    softmax: 3, read in the source and measured on CPU, not fitted), elsewhere (the Triton
    kernel) the logits, the one fp32 copy and the kernel's buffer (``sampler_bytes``); the
    activation peak is the larger of the forward and sampling peaks; sampler_state: charge the
    V2 runner's persistent penalty state where the release counts it (``sampler_state_bytes``;
    read in the source, not fitted);
    non_torch_bytes: memory outside torch on one GPU (CUDA/cuBLAS workspaces);
    non_torch_tp_bytes: added when tensor parallelism is on over NVLink-class links (NVLink,
    NVSwitch, xGMI: NCCL plus custom all-reduce and symmetric-memory buffers);
    non_torch_tp_pcie_bytes: added instead over PCIe, where vLLM allocates no custom
    all-reduce beyond a P2P pair (``tp_link``); cuda_graph_bytes: CUDA-graph memory subtracted
    before sizing (vLLM before 0.21, and its V2 runner before 0.29: 0, graphs are captured
    after the pool, in the 1 − utilization headroom; otherwise vLLM subtracts an estimate that
    kvlib does not size — no log it predicts prints one — so a pool for those releases is high
    by it; ``data/vllm_memory_rules.csv``).
    """

    name: str
    forward_factor: float
    sampler_copies: float
    non_torch_bytes: int
    non_torch_tp_bytes: int
    cuda_graph_bytes: int = 0
    source: str = ""
    non_torch_tp_pcie_bytes: int = 0
    logit_bytes: float = 2.0
    triton_fp32_tensors: float = 3.0
    warmup_fp32_tensors: float = 3.0
    sampler_state: bool = True

    def __post_init__(self) -> None:
        for key in ("forward_factor", "sampler_copies", "non_torch_bytes", "non_torch_tp_bytes",
                    "cuda_graph_bytes", "non_torch_tp_pcie_bytes", "logit_bytes",
                    "triton_fp32_tensors", "warmup_fp32_tensors"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Overheads.{key} must be >= 0, got {value!r}")

    def non_torch_for(self, gpu: GPU, tp: int) -> int:
        """Memory outside torch on one GPU of a ``tp``-GPU group of ``gpu`` (bytes): the base
        term plus the add-on of the group's link (``tp_link``)."""
        link = tp_link(gpu, tp)
        add = {None: 0, "nvlink": self.non_torch_tp_bytes,
               "pcie": self.non_torch_tp_pcie_bytes}[link]
        return self.non_torch_bytes + add


#: The links a tensor-parallel group's add-on depends on (``tp_link``).
TP_LINKS = ("nvlink", "pcie")


def tp_link(gpu: GPU, tp: int) -> str | None:
    """How a ``tp``-GPU group of ``gpu`` is linked, as vLLM's buffers depend on it: None at
    tp 1; "pcie" for PCIe cards (``data/gpus.csv`` interconnect "PCIe …", optional bridges
    included) and for NVLink-bridged pairs grouped past the pair; "nvlink" otherwise (NVLink,
    NVSwitch, xGMI). vLLM disables custom all-reduce for more than two GPUs that are not fully
    connected by NVLink, and for any pair whose P2P test fails
    (``vllm/distributed/device_communicators/custom_all_reduce.py``, 0.33.0)."""
    if tp <= 1:
        return None
    link = gpu.interconnect.strip()
    if link.startswith("PCIe") or ("2-GPU pairs" in link and tp > 2):
        return "pcie"
    return "nvlink"


class NoKVMemory(ValueError):
    """The engine's budget holds no KV cache, so it refuses to start: raised by every engine's
    ``kv_pool`` (vLLM's ``Pool``, SGLang's ``SGLangPool``, TensorRT-LLM's ``TensorRTLLMPool``)
    when the pool's ``shortfall()`` names what ran out. ``pool`` keeps every term of the
    arithmetic; ``terms`` is that shortfall, one line in the engine's own terms (GiB per GPU)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        #: What ran out, in one line: the terms against the budget (GiB per GPU).
        self.terms = pool.shortfall()
        super().__init__(f"{pool.model} on {pool.n_gpus} × {pool.gpu}: no memory left for the "
                         f"KV cache — {self.terms}")


#: Calibrated on ``data/engine_logs.csv`` (rows with ``calibration`` = yes) by
#: ``fit_overheads``: forward_factor from the two RTX-3090 Llama-3.1-8B logs (vllm#10517, the
#: activation peak grows 0.92 GiB for 9,000 more batched tokens); the other three terms by least
#: squares on every calibration log's "Available KV cache memory" (sampler_copies from the logs
#: whose release sorts; el31, vLLM 0.19.0, masks with the Triton kernel, a term read in the source
#: that leaves it only the other terms to inform; the NVLink add-on from the TP logs on H100 SXM;
#: no fit log has tensor parallelism over PCIe, so its add-on is left at
#: 0: no custom all-reduce buffers there, ``tp_link``). tests/test_capacity.py refits them and
#: checks these values.
VLLM = Overheads(name="vllm (calibrated)", forward_factor=1.675, sampler_copies=8.5,
                 non_torch_bytes=round(0.94 * GIB), non_torch_tp_bytes=round(2.54 * GIB),
                 source="data/engine_logs.csv calibration rows; kvlib.fit.validation.fit_overheads",
                 non_torch_tp_pcie_bytes=0)
#: No overheads at all: the budget minus the weights (the source article's arithmetic).
NO_OVERHEADS = Overheads(name="none (budget − weights)", forward_factor=0.0, sampler_copies=0.0,
                         non_torch_bytes=0, non_torch_tp_bytes=0, logit_bytes=0.0,
                         triton_fp32_tensors=0.0, warmup_fp32_tensors=0.0, sampler_state=False)


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


def with_draft(groups: list[CacheGroup], d: Deployment) -> list[CacheGroup]:
    """``groups`` with the deployment's speculative draft layers added: a draft layer copies a
    target layer's cache, so it joins that layer's group (vLLM groups by spec, ``is_draft``
    excluded from equality); ``groups`` itself without a draft."""
    n = draft_layer_count(d)
    if not n:
        return groups
    out = list(groups)
    for layer in draft_cache_layers(d):
        i = next(i for i, g in enumerate(out) if g.kind == layer.cache_kind and g.layer == layer)
        out[i] = replace(out[i], layers=out[i].layers + n)
    return out


# --- the pool -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pool:
    """The KV pool one configuration gets, with every term of its arithmetic (bytes per GPU).

    budget_bytes = total_memory_bytes × gpu_memory_utilization;
    available_kv_bytes = budget − weights − activation peak − non-torch − CUDA graphs
    (positive: ``kv_pool`` raises ``NoKVMemory`` otherwise, as the engine refuses to start);
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
    tp_link: str | None = None
    engine_version: str = ""
    #: The vLLM model runner whose profile the pool follows ("v1", "v2"; ``Deployment.vllm_rules``).
    model_runner: str = ""
    #: Pipeline stages, data-parallel ranks and expert-parallel degree of the deployment; the
    #: numbers above are those of ``stage`` (0-based), the stage with the fewest blocks, whose
    #: count every stage uses (vLLM ``get_kv_cache_configs``, step 5).
    pp: int = 1
    dp: int = 1
    ep: int = 1
    stage: int = 0
    #: The V2 runner's persistent sampler state the release's profile counts as non-KV memory
    #: (bytes; ``sampler_state_bytes``; 0 where it has none or does not count it).
    sampler_state_bytes: int = 0

    @property
    def sampled_rows(self) -> int:
        """Rows of logits the dummy sampling step holds: min(max_num_seqs,
        max_num_batched_tokens)."""
        return min(self.max_num_seqs, self.max_num_batched_tokens)

    @property
    def activation_peak_bytes(self) -> int:
        """The larger of the forward-pass and sampling-step peaks."""
        return max(self.activation_forward_bytes, self.activation_sampler_bytes)

    @property
    def available_kv_bytes(self) -> int:
        """vLLM's "Available KV cache memory" on one GPU (bytes; ≤ 0 only in a ``NoKVMemory``)."""
        return (self.budget_bytes - self.weights_bytes_per_gpu - self.activation_peak_bytes
                - self.sampler_state_bytes - self.non_torch_bytes - self.cuda_graph_bytes)

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

    def shortfall(self) -> str:
        """What ran out, in one line ("" while memory is left for the KV cache): weights,
        activations, non-torch memory (and CUDA graphs) reach ``gpu_memory_utilization`` ×
        memory on one GPU, where vLLM refuses to start ("No available memory for the cache
        blocks")."""
        if self.available_kv_bytes > 0:
            return ""
        graphs = (f" + CUDA graphs {self.cuda_graph_bytes / GIB:.2f} GiB"
                  if self.cuda_graph_bytes else "")
        state = (f" + sampler state {self.sampler_state_bytes / GIB:.2f} GiB"
                 if self.sampler_state_bytes else "")
        return (f"weights {self.weights_bytes_per_gpu / GIB:.2f} GiB + activations "
                f"{self.activation_peak_bytes / GIB:.2f} GiB{state} + non-torch "
                f"{self.non_torch_bytes / GIB:.2f} GiB{graphs} ≥ "
                f"{self.gpu_memory_utilization:g} × {self.total_memory_bytes / GIB:.2f} GiB"
                f" = {self.budget_bytes / GIB:.2f} GiB per GPU")

    def max_concurrency(self, context_tokens: int) -> float:
        """Requests of ``context_tokens`` tokens the pool holds at once (vLLM's "Maximum
        concurrency for N tokens per request"): one data-parallel rank's (0 without blocks:
        a refused pool, or a model that caches nothing)."""
        if self.num_blocks <= 0:
            return 0.0
        return self.num_blocks / self.blocks_per_request(context_tokens)

    def deployment_concurrency(self, context_tokens: int) -> float:
        """Requests of ``context_tokens`` tokens the whole deployment holds at once: each of
        its ``dp`` data-parallel ranks holds its own requests in its own pool, so dp ×
        ``max_concurrency`` (``tokens`` is one rank's)."""
        return self.dp * self.max_concurrency(context_tokens)

    def terms(self) -> pd.DataFrame:
        """Every term of the arithmetic, one row each, in bytes and GiB (per GPU)."""
        rows = [
            ("total memory (" + self.total_memory_source + ")", self.total_memory_bytes),
            (f"× --gpu-memory-utilization {self.gpu_memory_utilization:g} = budget",
             self.budget_bytes),
            ((f"− weights ({self.weight_dtype}; {self.weights_basis})"
              if (self.pp, self.dp, self.ep) != (1, 1, 1) else
              f"− weights ({self.weight_dtype}, 1/{self.n_gpus} of the model"
              + (f"; {self.weights_basis}" if self.weights_basis else "") + ")"),
             -self.weights_bytes_per_gpu),
            (f"− activation peak ({self.max_num_batched_tokens:,} batched tokens, "
             f"{self.max_num_seqs:,} sampled rows)", -self.activation_peak_bytes),
            *([(f"− sampler state (token counts and prompt mask of {self.max_num_seqs:,} "
                 "requests, int32)",
                -self.sampler_state_bytes)] if self.sampler_state_bytes else []),
            ("− non-torch memory" + (f" (incl. tensor-parallel buffers, {self.tp_link})"
                                     if self.tp_link else ""), -self.non_torch_bytes),
            ("− CUDA graphs counted before sizing", -self.cuda_graph_bytes),
            ("= available KV memory", self.available_kv_bytes),
            ("− block rounding", -self.block_rounding_bytes if self.available_kv_bytes > 0 else 0),
            (f"= KV pool ({self.num_blocks:,} blocks)", self.kv_bytes_per_gpu),
        ]
        return pd.DataFrame([{"term": t, "bytes": int(b), "gib": b / GIB} for t, b in rows])


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
    its config's lengths and RoPE scaling by vLLM's rule (the config reader, ``kvlib.model.hf_config``);
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


def kv_pool(deployment: Deployment | Model | str, gpu: GPU | str | None = None, *,
            overheads: Overheads = VLLM, weights_bytes_per_gpu: int | None = None,
            **keywords: Any) -> Pool:
    """The KV pool vLLM would allocate for a ``Deployment`` (or for ``model`` on ``gpu`` with
    the deployment's fields, or the older ``n_gpus`` / ``weight_dtype`` / ``kv_dtype``, as
    keywords: ``kv_pool("llama-3.1-70b", "h100-sxm", n_gpus=2)``).

    Every number in the result is per GPU except ``tokens``, which every GPU of the
    tensor-parallel group holds a slice of. ``max_num_batched_tokens`` sizes the profiled forward
    pass, ``max_num_seqs`` the sampled rows; ``max_model_len`` is refused past the model's own
    maximum (``derived_max_model_len``) as vLLM refuses it, unless the deployment allows long
    contexts. overheads: the activation/non-torch model (``NO_OVERHEADS`` reproduces "budget −
    weights"); weights_bytes_per_gpu: override the computed weights (e.g. with a logged "Model
    loading took"). The default utilization is the named vLLM release's
    (``Deployment.resolved``), and the dummy sampling pass is charged as the runner that
    release gives the model profiles it (``Deployment.vllm_rules``, ``sampler_bytes``). ``NoKVMemory`` (a ValueError naming the terms) when nothing is
    left for the KV cache.
    """
    d = as_deployment(deployment, gpu, **keywords).resolved()
    m = d.model
    m.check_tp(d.tp)
    if d.max_model_len is not None:
        check_max_model_len(m, d.max_model_len, d.allow_long_max_model_len)
    if not isinstance(overheads, Overheads):
        raise TypeError(f"overheads must be an Overheads, got {type(overheads)!r}")
    stages = stage_pools(d, overheads=overheads, weights_bytes_per_gpu=weights_bytes_per_gpu)
    pool = min(stages, key=lambda p: (p.num_blocks, p.stage))
    if pool.shortfall():  # available ≤ 0: vLLM v1/core/kv_cache_planning.py refuses it too
        raise NoKVMemory(pool)
    return pool


def stage_pools(deployment: Deployment, *, overheads: Overheads = VLLM,
                weights_bytes_per_gpu: int | None = None) -> list[Pool]:
    """The pool of one GPU of each pipeline stage, each sized alone (its own weights, pages and
    activation peak; ``num_blocks`` before vLLM lowers every stage to the fewest). One entry
    when pp = 1. ``kv_pool`` returns the one with the fewest blocks."""
    d = deployment.resolved()
    tp = d.model.check_tp(d.tp)
    return [_pool(d, tp, overheads, weights_bytes_per_gpu, s) for s in range(d.pp)]


def _pool(d: Deployment, tp: int, overheads: Overheads, weights_bytes_per_gpu: int | None,
          stage: int) -> Pool:
    """The pool of one GPU of pipeline ``stage`` of a resolved deployment."""
    m, g = d.model, d.gpu
    mnbt, seqs = d.max_num_batched_tokens, d.max_num_seqs
    counts = params_for(m)
    parallel = (d.pp, d.dp, d.ep) != (1, 1, 1)
    if parallel and d.speculative is not None:
        raise ValueError(f"pp={d.pp}, dp={d.dp}, ep={d.ep}: speculative decoding is modelled for "
                         "one tensor-parallel group only (pp = dp = ep = 1)")
    if weights_bytes_per_gpu is None and parallel:
        weights, weights_basis = parallel_weights(d, stage)
    elif weights_bytes_per_gpu is None:
        loaded = loaded_weights(m, d.weights, tp, g.slug)
        weights, weights_basis = loaded.total_bytes, loaded.basis
    else:
        weights = integer("weights_bytes_per_gpu", weights_bytes_per_gpu)
        weights_basis = "given"
    arch = m.architecture
    if arch is None:
        raise ValueError(f"model {m.name!r} carries no config: the activation peak needs its "
                         "config.json fields (build it with Model.from_hf_config)")
    forward = int(overheads.forward_factor * mnbt * activation_width(counts, arch, tp) * 2)
    rules = d.vllm_rules()
    last = stage == d.pp - 1  # the last stage samples (``profile_run``, ``load_model``)
    sampler = (sampler_bytes(overheads, rules.sampler_term, min(seqs, mnbt), _vocab(arch), g)
               if last else 0)
    state = (sampler_state_bytes(seqs, _vocab(arch))
             if last and overheads.sampler_state and rules.sampler_state_in_profile else 0)
    # the add-on of the link between the GPUs that exchange activations (tp, stages or ranks)
    non_torch = overheads.non_torch_for(g, tp if tp > 1 else d.gpus if communicates(d, tp) else 1)
    total = g.usable_memory_bytes
    budget = int(total * d.gpu_memory_utilization)
    groups = stage_groups(d, with_draft(cache_groups(m, tp=tp, kv_dtype=d.kv,
                                                     block_size=d.block_size), d), stage)
    if d.speculative is not None and weights_bytes_per_gpu is None:
        draft = draft_weight_bytes(d)
        if draft:
            weights += draft
            weights_basis += f" + the {d.speculative.method} draft"
    per_group, n_groups, block_bytes = _group_layout(groups) if groups else (0, 0, 0)
    available = (budget - weights - max(forward, sampler) - state - non_torch
                 - overheads.cuda_graph_bytes)
    num_blocks = max(available // block_bytes, 0) if groups else 0
    pool = Pool(model=m.name, gpu=g.slug, n_gpus=tp,
                gpu_memory_utilization=d.gpu_memory_utilization, weight_dtype=d.weights.label,
                kv_dtype=d.kv_name, max_num_batched_tokens=mnbt, max_num_seqs=seqs,
                total_memory_bytes=total, total_memory_source=g.usable_memory_source,
                budget_bytes=budget, weights_bytes_per_gpu=weights,
                activation_forward_bytes=forward, activation_sampler_bytes=sampler,
                non_torch_bytes=non_torch, cuda_graph_bytes=overheads.cuda_graph_bytes,
                groups=tuple(groups), layers_per_group=per_group, n_groups=n_groups,
                block_bytes=block_bytes, num_blocks=int(num_blocks), overheads=overheads.name,
                weights_basis=weights_basis, tp_link=tp_link(g, tp),
                engine_version=d.engine_version, pp=d.pp, dp=d.dp, ep=d.ep, stage=stage,
                model_runner=rules.runner, sampler_state_bytes=state)
    return pool


#: The fewest sampled rows vLLM 0.17–0.28 mask with the Triton top-k/top-p kernel; below it they
#: sort (``apply_top_k_top_p``: "Use pytorch sort implementation for small batch sizes").
TRITON_MIN_ROWS = 8

#: The fp32 tensors of rows × vocab that vLLM 0.33's warm-up sampling pass holds beside the
#: logits where it masks with the Triton kernel instead of FlashInfer (AMD GPUs; NVIDIA GPUs of
#: 16 SMs or fewer): its one fp32 copy of the logits; the kernel masks it in place and the
#: Gumbel sampling kernel draws its noise in registers (``sampler_bytes``).
WARMUP_TRITON_FP32_TENSORS = 1


def flashinfer_sampler(gpu: GPU | None) -> bool:
    """Whether vLLM 0.33 samples top-k/top-p with FlashInfer's fused sampler on ``gpu``
    (``flashinfer_sampler_supported`` in vllm/v1/sample/ops/topk_topp_sampler.py: a CUDA GPU
    of compute capability 8.0–12.1 with more than 16 SMs, ``VLLM_USE_FLASHINFER_SAMPLER``
    on, its default): an NVIDIA GPU of more than 16 SMs (every NVIDIA GPU of
    ``data/gpus.csv`` is 8.0 or newer; an unknown count counts as more). No GPU: an NVIDIA one.
    Otherwise vLLM masks with its Triton kernel."""
    if gpu is None:
        return True
    return gpu.vendor == "NVIDIA" and (gpu.compute_units is None or gpu.compute_units > 16)


def _triton_buffer_rows(gpu: GPU | None, rows: int) -> int:
    """Vocabulary rows of the Triton top-k/top-p kernel's fp32 buffer: min(next power of two
    of min(SMs, rows), SMs) (vLLM ``apply_top_k_top_p_triton``, one program per SM)."""
    if gpu is None or gpu.compute_units is None:
        name = "no GPU" if gpu is None else gpu.slug
        raise ValueError(f"{name}: the Triton sampler's buffer needs the GPU's streaming "
                         "multiprocessors, and compute_units in data/gpus.csv is empty for it (give "
                         "the count with its source, or another vLLM release)")
    sms = gpu.compute_units
    programs = min(sms, rows)
    return min(1 << (programs - 1).bit_length(), sms)


def sampler_state_bytes(max_num_seqs: int, vocab: int) -> int:
    """Bytes of the V2 runner's penalty state, allocated with its sampler when the last pipeline
    stage loads the model and kept for the engine's life (vLLM
    ``v1/worker/gpu/sample/penalties.py`` ``PenaltiesState``, read in the 0.22.0, 0.30.0 and 0.33.0
    wheels): an int32 count of every vocabulary token per request slot (``output_bin_counts``,
    max_num_seqs × vocab) and a bit mask of the prompt's tokens (``prompt_bin_mask``,
    max_num_seqs × ⌈vocab ÷ 32⌉ int32). Llama-3.1-8B (vocabulary 128,256) at 1,024 sequences:
    4 × 1,024 × (128,256 + 4,008) = 541,753,344 B (0.50 GiB)."""
    return 4 * max_num_seqs * (vocab + -(-vocab // 32))


def sampler_bytes(overheads: Overheads, sampler_term: str, rows: int, vocab: int,
                  gpu: GPU | None = None) -> int:
    """The dummy sampling pass's peak (bytes) over ``rows`` × ``vocab`` logits, as a release's
    rules charge it (``VLLMMemoryRules.sampler_term``): "fitted", the calibrated fp32 copies;
    "triton", the logits in the model dtype, ``triton_fp32_tensors`` fp32 tensors and the
    Triton kernel's buffer of ``min(next power of two of min(SMs, rows), SMs)`` vocabulary
    rows on ``gpu`` (vLLM ``apply_top_k_top_p_triton``; below ``TRITON_MIN_ROWS`` rows the
    release sorts: "fitted"); "logits", one logits tensor in the model dtype (vLLM
    0.22–0.32's V2 runner); "warmup", vLLM 0.33's second pass with every sampling parameter
    on: where FlashInfer samples (``flashinfer_sampler``) the logits in the model dtype and
    ``warmup_fp32_tensors`` fp32 tensors, ``(b + 4 × 3) × rows × vocab``, elsewhere the logits,
    ``WARMUP_TRITON_FP32_TENSORS`` fp32 copy and the Triton buffer at every row count.
    Llama-3.1-8B (bf16, vocabulary 128,256) on an H100 at 1,024 rows, "warmup": (2 + 12) ×
    1,024 × 128,256 B = 1,838,678,016 B (1.71 GiB)."""
    if sampler_term == "warmup":
        logits = overheads.logit_bytes * rows * vocab
        if flashinfer_sampler(gpu):
            return int(logits + 4 * overheads.warmup_fp32_tensors * rows * vocab)
        buffer_rows = _triton_buffer_rows(gpu, rows) if overheads.warmup_fp32_tensors else 0
        copies = WARMUP_TRITON_FP32_TENSORS if overheads.warmup_fp32_tensors else 0
        return int(logits + 4 * vocab * (copies * rows + buffer_rows))
    if sampler_term == "triton" and rows >= TRITON_MIN_ROWS:
        buffer_rows = _triton_buffer_rows(gpu, rows)
        if not overheads.triton_fp32_tensors:
            buffer_rows = 0
        return int(overheads.logit_bytes * rows * vocab
                   + 4 * vocab * (overheads.triton_fp32_tensors * rows + buffer_rows))
    if sampler_term == "logits":
        return int(overheads.logit_bytes * rows * vocab)
    if sampler_term in ("fitted", "triton"):
        return int(overheads.sampler_copies * rows * vocab * 4)
    raise ValueError(f"unknown sampler_term {sampler_term!r} (fitted, triton, logits, warmup)")


def pool_arithmetic(deployment: Deployment | Model | str, gpu: GPU | str | None = None, *,
                    overheads: Overheads = VLLM, weights_bytes_per_gpu: int | None = None,
                    **keywords: Any) -> Pool:
    """``kv_pool``'s arithmetic (same arguments, public API), also where vLLM would refuse to
    start: then the ``Pool`` of the ``NoKVMemory`` (available ≤ 0, no blocks), for tables that
    show by how much a deployment does not fit."""
    try:
        return kv_pool(deployment, gpu, overheads=overheads,
                       weights_bytes_per_gpu=weights_bytes_per_gpu, **keywords)
    except NoKVMemory as refused:
        return refused.pool


# --- beyond one tensor-parallel group: pipeline stages, data-parallel ranks, expert parallelism

def stage_layers(n_layers: int, pp: int) -> list[tuple[int, int]]:
    """(first, end) decoder layers of each of ``pp`` pipeline stages, as vLLM splits them
    (``vllm/distributed/utils.py`` ``get_pp_indices``, no ``VLLM_PP_LAYER_PARTITION``): n // pp
    each, the remainder one apiece to the stages before the last, from the second-to-last
    back. 61 layers on 2 stages: [(0, 31), (31, 61)]."""
    n, pp = positive_integer("layers", n_layers), positive_integer("pp", pp)
    if pp > n:
        raise ValueError(f"pp={pp}: more pipeline stages than the model's {n} layers")
    sizes = [n // pp] * pp
    for i in range(2, n % pp + 2):
        sizes[-i] += 1
    starts = [sum(sizes[:i]) for i in range(pp)]
    return [(a, a + s) for a, s in zip(starts, sizes)]


def communicates(d: Deployment, tp: int) -> bool:
    """Whether a GPU of the deployment exchanges activations with others (and so holds NCCL
    and all-reduce buffers): tp > 1, pipeline stages, or a MoE's experts shared by dp ranks."""
    return tp > 1 or d.pp > 1 or (d.dp > 1 and d.model.architecture.moe is not None)


def refuse_parallel(d: Deployment, engine: str) -> None:
    """ValueError naming the layout when ``engine``'s pool is asked for pipeline stages,
    data-parallel ranks or expert parallelism, which kvlib sizes for vLLM only."""
    if (d.pp, d.dp, d.ep) != (1, 1, 1):
        raise ValueError(f"pp={d.pp}, dp={d.dp}, ep={d.ep}: kvlib sizes {engine}'s pool for one "
                         "tensor-parallel group only (pp = dp = ep = 1); vLLM's is modelled")


def _split(counts: ParamCounts, keep: set[str]) -> ParamCounts:
    return replace(counts, components={k: v for k, v in counts.components.items() if k in keep})


def parallel_weights(d: Deployment, stage: int = 0) -> tuple[int, str]:
    """Weight bytes one GPU of pipeline ``stage`` holds, and the basis in words, under vLLM's
    layout of a resolved deployment with pp, dp or ep above 1 (vLLM 0.33):

    * the stage's own decoder layers (``stage_layers``); the embedding on the first stage, the
      LM head on the last (a tied one too: the last stage loads its own copy);
    * attention, dense MLPs, shared experts and the embeddings split over the tp GPUs of one
      data-parallel rank, as at dp = 1 (KV projections replicated past the KV heads);
    * routed experts split over every GPU of the stage, tp × dp: tensor-split when ep = 1
      (``FusedMoEParallelConfig.make`` flattens TP across DP), whole experts, E ÷ ep per GPU,
      when ep = tp × dp (``--enable-expert-parallel``) — the same bytes either way;
    * shared experts replicated on every GPU when ep, tp > 1 and dp > 1 (the default
      all-to-all backend "allgather_reducescatter" makes the MoE sequence-parallel,
      ``ParallelConfig.use_sequence_parallel_moe``, and ``DeepseekV2MLP`` then disables TP).

    A published checkpoint served in its own format scales the count as ``loaded_weights``
    does; MXFP4 Marlin padding is added for the stage's share of MoE layers."""
    m, g, arch = d.model, d.gpu, d.model.architecture
    if arch is None:
        raise ValueError(f"model {m.name!r} carries no config: weights per pipeline stage or "
                         "data-parallel rank need its config.json fields")
    bounds = stage_layers(len(arch.layers), d.pp)[stage]
    sub = replace(arch, layers=arch.layers[bounds[0]:bounds[1]])
    counts = params_for(m)
    part = count_architecture(sub) if d.pp > 1 else counts
    comp = dict(part.components)
    if stage > 0:
        comp["embedding"] = comp["position_embedding"] = 0
    if stage < d.pp - 1:  # the final norm and the LM head are the last stage's
        comp["lm_head"] = 0
        comp["norms"] -= ((arch.hidden_size or 0) * (2 if arch.norm_bias else 1)
                          if arch.final_norm else 0)
    elif d.pp > 1 and arch.tie_word_embeddings:
        comp["lm_head"] = counts.components.get("embedding", 0)
    part = replace(part, components=comp)
    moe_gpus = d.tp * d.dp if counts.n_experts else d.tp
    shared_tp = 1 if (d.ep > 1 and d.tp > 1 and d.dp > 1) else d.tp
    fmt = d.weights
    experts = _split(part, {"experts"})
    shared = _split(part, {"shared_experts"})
    rest = _split(part, set(comp) - {"experts", "shared_experts"})
    computed = (weight_bytes(rest, fmt, d.tp) + weight_bytes(experts, fmt, moe_gpus)
                + weight_bytes(shared, fmt, shared_tp))
    whole = loaded_weights(m, fmt, 1, g.slug)
    total = computed
    if whole.checkpoint_bytes is not None:
        total = whole.checkpoint_bytes * computed // whole.computed_bytes
    if counts.n_moe_layers:
        moe_share = part.n_moe_layers / counts.n_moe_layers
        if d.ep > 1:  # whole experts: each one's padding at tp = 1, E ÷ ep of them
            pad = marlin_padding_bytes(counts, arch, fmt, 1, g.slug) / d.ep
        else:
            pad = marlin_padding_bytes(counts, arch, fmt, moe_gpus, g.slug)
        total += math.ceil(pad * moe_share)
    how = (f"layers {bounds[0]}–{bounds[1] - 1} of stage {stage + 1}/{d.pp}, " if d.pp > 1
           else "")
    if counts.n_experts and moe_gpus > d.tp:
        how += (f"experts over {moe_gpus} GPUs ({'whole, expert-parallel' if d.ep > 1 else 'tensor-split'}), "
                f"the rest over tp = {d.tp}")
    else:
        how += f"split over tp = {d.tp}"
    basis = ("published checkpoint size" if whole.checkpoint_bytes is not None
             else f"parameter count at {fmt.label}")
    return int(total), f"{basis}; {how}"


def stage_groups(d: Deployment, groups: list[CacheGroup], stage: int) -> list[CacheGroup]:
    """The cache groups of pipeline ``stage``: the same pages, the stage's own layers of each
    kind (vLLM projects the whole model's groups onto each worker,
    ``_project_kv_cache_groups_to_worker``). ValueError for what kvlib does not model under
    pp > 1: several cache groups of unequal layer counts (hybrids, sliding windows) and a model
    whose cache layers are not one per decoder layer (DeepSeek-V3.2's indexer)."""
    m = d.model
    if d.pp == 1:
        return groups
    if (len(groups) > 1 or m.architecture is None
            or len(m.layers) != len(m.architecture.layers)):
        raise ValueError(f"pp={d.pp}: kvlib models pipeline stages of a model with one kind of "
                         f"KV cache per layer; {m.name} has "
                         f"{', '.join(sorted({gr.kind for gr in groups}))} caches")
    a, b = stage_layers(len(m.layers), d.pp)[stage]
    held = sum(1 for layer in m.layers[a:b] if layer.cache_kind != "none")
    return [replace(groups[0], layers=held)] if held else []

