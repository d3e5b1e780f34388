"""One small class per layer kind, each owning the cache it keeps for one sequence.

Like vLLM's KV cache specs (``vllm/v1/kv_cache_interface.py``), every class answers for itself:

* ``bytes_per_token(fmt, tp)`` — bytes one GPU adds per token in a KV format (a plain dtype
  name, a :data:`kvlib.model.formats.FORMATS` name or a :class:`~kvlib.model.formats.KVFormat`), scales
  included; ``scale_bytes_per_token`` is the scales' share; 0 for constant-state layers;
* ``tokens_held(n_tokens)`` — tokens of per-token state a sequence of ``n_tokens`` keeps;
* ``state_bytes(tp, conv_dtype, ssm_dtype)`` — constant per-sequence state on one GPU
  (recurrent layers; engines keep it in the model's dtype whatever the KV format);
* ``page_bytes(block_size, ...)`` and ``pages_per_request(...)`` — one page of the engine's paged
  cache and how many one request may need (vLLM's ``page_size_bytes`` and
  ``max_memory_usage_bytes``);
* ``attention_flops_per_token(context_tokens, tp, query_heads)`` — the FLOPs one new token
  spends in the layer's attention or recurrence.

``cache_kind`` says which engine cache the layer belongs to (``full``, ``sliding``,
``chunked``, ``mla``, ``indexer``, ``state``, or ``none`` for a layer without cache, a KV-shared
layer included). Counts in
elements (``elements_per_token``, ``state_elements``) remain for arithmetic that needs no format.

``tp`` is the tensor-parallel degree. The rules follow vLLM: KV heads are split across GPUs
and replicated once GPUs outnumber them (``QKVParallelLinear`` in
``vllm/model_executor/layers/linear.py``; ``ModelConfig.get_num_kv_heads`` returns
``max(1, K // tp)``); an MLA latent is replicated on every GPU (``get_num_kv_heads`` returns 1
when ``use_mla``); recurrent heads must divide evenly (``divide`` in
``vllm/model_executor/layers/mamba/mamba_utils.py``), and Mamba-2 groups are split or, when
there is exactly one, replicated (``MambaMixer2``: "If tensor parallel world size does not divide
num_groups, then num_groups must equal 1").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Union

from ..core.checks import integer, positive_integer
from .formats import KVFormat, kv_format
from ..core.units import elements_to_bytes

LayerKind = Literal["full", "sliding", "chunked", "mla", "indexer", "mamba1", "mamba2",
                    "gated_deltanet", "lightning", "shared", "none"]
CacheKind = Literal["full", "sliding", "chunked", "mla", "indexer", "state", "none"]
#: How the book names each ``LayerKind`` for a reader.
KIND_NAMES: dict[str, str] = {"full": "full", "sliding": "sliding", "chunked": "chunked",
                              "mla": "MLA", "indexer": "indexer", "mamba1": "Mamba-1",
                              "mamba2": "Mamba-2", "gated_deltanet": "Gated DeltaNet",
                              "lightning": "lightning attention",
                              "shared": "KV-shared", "none": "stateless"}
FormatLike = Union[str, KVFormat]


def _check_positive(layer: object, owner: str, *names: str) -> None:
    """Each field ``names`` of ``layer`` a positive integer (numpy integers too), stored as int."""
    for name in names:
        object.__setattr__(layer, name, positive_integer(f"{owner}: {name}", getattr(layer, name)))


def _check_tp(tp: int) -> int:
    return positive_integer("tp (tensor-parallel degree)", tp)


def heads_per_gpu(n_heads: int, tp: int, what: str = "KV heads") -> int:
    """Heads one GPU holds under tensor parallelism ``tp``.

    Heads are split evenly when ``tp`` divides them; when GPUs outnumber heads each head is
    replicated so every GPU holds one (vLLM requires ``tp`` to be a multiple of the head
    count then). Any other combination is rejected, as engines reject it.
    """
    tp = _check_tp(tp)
    if n_heads % tp == 0:
        return n_heads // tp
    if tp % n_heads == 0:
        return 1
    raise ValueError(f"{n_heads} {what} cannot be split across tp={tp} GPUs: "
                     "one must divide the other")


def split_evenly(n: int, tp: int, what: str) -> int:
    """``n`` divided across ``tp`` GPUs, which must divide it (vLLM's ``divide``)."""
    tp = _check_tp(tp)
    if n % tp:
        raise ValueError(f"{n} {what} cannot be split across tp={tp} GPUs: "
                         f"tp must divide {n}")
    return n // tp


def mamba_groups_per_gpu(n_groups: int, tp: int) -> int:
    """Mamba-2 B/C groups on one GPU: split when ``tp`` divides them, a single group replicated."""
    tp = _check_tp(tp)
    if n_groups % tp == 0:
        return n_groups // tp
    if n_groups == 1:
        return 1
    raise ValueError(f"{n_groups} mamba groups cannot be split across tp={tp} GPUs: vLLM needs "
                     "tp to divide the groups, or a single group")


def _check_tokens(n_tokens: int) -> int:
    return integer("n_tokens", n_tokens, 0)


class Layer(Protocol):
    """What every layer kind answers (bytes for one sequence on one GPU)."""

    @property
    def kind(self) -> LayerKind: ...

    @property
    def cache_kind(self) -> CacheKind: ...

    def elements_per_token(self, tp: int = 1) -> int: ...

    def bytes_per_token(self, fmt: FormatLike = "bf16", tp: int = 1) -> int: ...

    def scale_bytes_per_token(self, fmt: FormatLike = "bf16", tp: int = 1) -> int: ...

    def tokens_held(self, n_tokens: int) -> int: ...

    def state_elements(self, tp: int = 1) -> int: ...

    def state_bytes(self, tp: int = 1, conv_dtype: str = "bf16", ssm_dtype: str | None = None,
                    all_conv_taps: bool = False) -> int: ...

    def page_bytes(self, block_size: int, fmt: FormatLike = "bf16", tp: int = 1,
                   conv_dtype: str = "bf16", ssm_dtype: str | None = None) -> int: ...

    def pages_per_request(self, max_model_len: int, max_num_batched_tokens: int,
                          block_size: int) -> int: ...

    def attention_flops_per_token(self, context_tokens: int, tp: int = 1,
                                  query_heads: int | None = None) -> float: ...


# --- shared behaviour ---------------------------------------------------------------------------

class _TokenCache:
    """A layer whose cache grows per token (attention, MLA): no constant state, one page holds
    ``block_size`` tokens, a request needs a page per ``block_size`` tokens of its context."""

    @property
    def span(self) -> int | None:
        """Tokens the layer looks back (a window), None for all of them."""
        return None

    def tokens_held(self, n_tokens: int) -> int:
        return _check_tokens(n_tokens)

    def state_elements(self, tp: int = 1) -> int:
        _check_tp(tp)
        return 0

    def state_bytes(self, tp: int = 1, conv_dtype: str = "bf16", ssm_dtype: str | None = None,
                    all_conv_taps: bool = False) -> int:
        _check_tp(tp)
        return 0

    def page_bytes(self, block_size: int, fmt: FormatLike = "bf16", tp: int = 1,
                   conv_dtype: str = "bf16", ssm_dtype: str | None = None) -> int:
        """Bytes of one page of ``block_size`` tokens (vLLM ``AttentionSpec.page_size_bytes``)."""
        block = positive_integer("block_size", block_size)
        return block * self.bytes_per_token(fmt, tp)  # type: ignore[attr-defined]

    def pages_per_request(self, max_model_len: int, max_num_batched_tokens: int,
                          block_size: int) -> int:
        """Pages one request of ``max_model_len`` tokens needs (``FullAttentionSpec``)."""
        return -(-max_model_len // block_size)


class _NothingPerToken:
    """A layer that stores nothing per token (recurrent or stateless): zero bytes per token in
    any format, no window, no tokens held."""

    @property
    def span(self) -> int | None:
        return None

    def elements_per_token(self, tp: int = 1) -> int:
        _check_tp(tp)
        return 0

    def bytes_per_token(self, fmt: FormatLike = "bf16", tp: int = 1) -> int:
        kv_format(fmt)
        _check_tp(tp)
        return 0

    def scale_bytes_per_token(self, fmt: FormatLike = "bf16", tp: int = 1) -> int:
        return self.bytes_per_token(fmt, tp)

    def tokens_held(self, n_tokens: int) -> int:
        _check_tokens(n_tokens)
        return 0


class _StateCache(_NothingPerToken):
    """A recurrent layer: a constant state per sequence (conv + recurrent), nothing per token;
    one page holds one sequence's state (vLLM ``MambaSpec``)."""

    conv_kernel: int

    @property
    def cache_kind(self) -> CacheKind:
        return "state"

    def conv_elements(self, tp: int = 1, width: int | None = None) -> int:
        raise NotImplementedError

    def ssm_elements(self, tp: int = 1) -> int:
        raise NotImplementedError

    def state_elements(self, tp: int = 1) -> int:
        return self.conv_elements(tp) + self.ssm_elements(tp)

    def state_bytes(self, tp: int = 1, conv_dtype: str = "bf16", ssm_dtype: str | None = None,
                    all_conv_taps: bool = False) -> int:
        """Bytes of one sequence's state on one GPU: the conv state in ``conv_dtype`` and the
        recurrent state in ``ssm_dtype`` (default: ``conv_dtype``). ``all_conv_taps`` counts
        ``conv_kernel`` taps, as transformers keeps them, instead of vLLM's ``conv_kernel − 1``."""
        width = self.conv_kernel if all_conv_taps else None
        return (elements_to_bytes(self.conv_elements(tp, width), conv_dtype)
                + elements_to_bytes(self.ssm_elements(tp), ssm_dtype or conv_dtype))

    def page_bytes(self, block_size: int, fmt: FormatLike = "bf16", tp: int = 1,
                   conv_dtype: str = "bf16", ssm_dtype: str | None = None) -> int:
        """One sequence's state: a state page holds one sequence whatever the block size."""
        positive_integer("block_size", block_size)
        kv_format(fmt)
        return self.state_bytes(tp, conv_dtype, ssm_dtype)

    def pages_per_request(self, max_model_len: int, max_num_batched_tokens: int,
                          block_size: int) -> int:
        return 1

    def attention_flops_per_token(self, context_tokens: int, tp: int = 1,
                                  query_heads: int | None = None) -> float:
        """≈ 4 FLOPs per state element (read, decay, update, read out), whatever the context."""
        return 4 * self.state_elements(tp)


# --- the layer kinds ----------------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionLayer(_TokenCache):
    """Softmax attention keeping K and V per token: MHA, GQA or MQA; full, sliding or chunked.

    n_kv_heads: KV heads (K); head_dim: K head dim (H); v_head_dim: V head dim (defaults to H);
    window: sliding-window length in tokens, None for full attention. A windowed layer keeps the
    last ``window − 1`` tokens: the next query attends to ``window`` tokens, itself included
    (vLLM's SlidingWindowManager and transformers' sliding cache keep the same).
    chunk: chunked local attention (Llama-4 ``attention_chunk_size``): a token attends only to
    the earlier tokens of its own chunk of ``chunk`` tokens. Such a layer holds at most
    ``chunk − 1`` tokens: transformers keeps a window of ``chunk − 1`` tokens; vLLM frees each
    finished chunk's blocks, so between chunk boundaries it holds fewer, never more.
    """

    n_kv_heads: int
    head_dim: int
    v_head_dim: int | None = None
    window: int | None = None
    chunk: int | None = None

    def __post_init__(self) -> None:
        _check_positive(self, "attention layer", "n_kv_heads", "head_dim")
        for name in ("v_head_dim", "window", "chunk"):
            if getattr(self, name) is not None:
                _check_positive(self, "attention layer", name)
        if self.chunk is not None:
            if self.window is not None:
                raise ValueError("attention layer: a layer is windowed or chunked, not both")

    @property
    def kind(self) -> LayerKind:
        if self.chunk is not None:
            return "chunked"
        return "full" if self.window is None else "sliding"

    @property
    def cache_kind(self) -> CacheKind:
        return self.kind  # type: ignore[return-value]

    @property
    def span(self) -> int | None:
        return self.window if self.chunk is None else self.chunk

    @property
    def _v_dim(self) -> int:
        return self.head_dim if self.v_head_dim is None else self.v_head_dim

    def elements_per_token(self, tp: int = 1) -> int:
        return heads_per_gpu(self.n_kv_heads, tp) * (self.head_dim + self._v_dim)

    def _fmt(self, fmt: FormatLike) -> KVFormat:
        f = kv_format(fmt)
        if f.mla_only:
            raise ValueError(f"KV format {f.name!r} stores MLA latents only; this model has "
                             f"{self.kind} attention layers")
        return f

    def bytes_per_token(self, fmt: FormatLike = "bf16", tp: int = 1) -> int:
        """K and V of every KV head on this GPU, each vector with its per-token scales."""
        f = self._fmt(fmt)
        return heads_per_gpu(self.n_kv_heads, tp) * (f.vector_bytes(self.head_dim)
                                                     + f.vector_bytes(self._v_dim))

    def scale_bytes_per_token(self, fmt: FormatLike = "bf16", tp: int = 1) -> int:
        f = self._fmt(fmt)
        return heads_per_gpu(self.n_kv_heads, tp) * (f.scale_bytes(self.head_dim)
                                                     + f.scale_bytes(self._v_dim))

    def tokens_held(self, n_tokens: int) -> int:
        n = _check_tokens(n_tokens)
        span = self.span
        return n if span is None else min(n, span - 1)

    def pages_per_request(self, max_model_len: int, max_num_batched_tokens: int,
                          block_size: int) -> int:
        """Full: a page per ``block_size`` tokens. Sliding (vLLM ``SlidingWindowSpec``): the
        window − 1 kept tokens plus one batch of new ones, and one more page because the window
        need not start at a page boundary. Chunked (``ChunkedLocalAttentionSpec``): one chunk
        plus one batch of new tokens."""
        if self.chunk is not None:
            return -(-min(self.chunk + max_num_batched_tokens, max_model_len) // block_size)
        if self.window is None:
            return -(-max_model_len // block_size)
        tokens = min(self.window - 1 + max_num_batched_tokens, max_model_len)
        return -(-tokens // block_size) + 1

    def attention_flops_per_token(self, context_tokens: int, tp: int = 1,
                                  query_heads: int | None = None) -> float:
        """2 · query heads · (d_k + d_v) per cached token the new token attends to."""
        held = self.tokens_held(context_tokens)
        return 2 * (query_heads or 0) * (self.head_dim + self._v_dim) * held / tp


@dataclass(frozen=True)
class MLALayer(_TokenCache):
    """Multi-head latent attention (DeepSeek-V2/V3): one compressed latent per token.

    Stores ``kv_lora_rank`` latent elements plus ``rope_dim`` decoupled RoPE key elements per
    token, shared by all heads — no separate K and V. The latent is replicated on every GPU
    under tensor parallelism.
    """

    kv_lora_rank: int
    rope_dim: int

    def __post_init__(self) -> None:
        _check_positive(self, "MLA layer", "kv_lora_rank", "rope_dim")

    @property
    def kind(self) -> LayerKind:
        return "mla"

    @property
    def cache_kind(self) -> CacheKind:
        return "mla"

    def elements_per_token(self, tp: int = 1) -> int:
        _check_tp(tp)
        return self.kv_lora_rank + self.rope_dim

    def bytes_per_token(self, fmt: FormatLike = "bf16", tp: int = 1) -> int:
        """The latent and the RoPE key: one vector, or two when the format keeps RoPE apart
        (FlashMLA fp8: the RoPE part unquantized)."""
        f = kv_format(fmt)
        _check_tp(tp)  # replicated: the same bytes on every GPU
        if f.mla_rope_bits:
            return f.vector_bytes(self.kv_lora_rank) + f.vector_bytes(self.rope_dim, rope=True)
        return f.vector_bytes(self.kv_lora_rank + self.rope_dim)

    def scale_bytes_per_token(self, fmt: FormatLike = "bf16", tp: int = 1) -> int:
        f = kv_format(fmt)
        _check_tp(tp)
        if f.mla_rope_bits:
            return f.scale_bytes(self.kv_lora_rank) + f.scale_bytes(self.rope_dim, rope=True)
        return f.scale_bytes(self.kv_lora_rank + self.rope_dim)

    def attention_flops_per_token(self, context_tokens: int, tp: int = 1,
                                  query_heads: int | None = None) -> float:
        """The absorbed form: d_k = r + d_R and d_v = r per query head and cached token."""
        n = _check_tokens(context_tokens)
        return 2 * (query_heads or 0) * (2 * self.kv_lora_rank + self.rope_dim) * n / tp


@dataclass(frozen=True)
class IndexerKeyLayer(_TokenCache):
    """DeepSeek-V3.2's lightning-indexer key cache: one key of ``head_dim`` per token and layer,
    stored by vLLM as fp8 with one fp32 scale per ``quant_block`` values whatever the KV format
    asked for: 128 + 4 = 132 bytes (``DeepseekV32IndexerCache``: ``head_dim + head_dim //
    quant_block_size * 4`` bytes of uint8, in ``vllm/model_executor/models/deepseek_v2.py``).
    Replicated on every GPU (``max_tp_shards=1``). n_heads: the indexer's query heads (FLOPs).
    """

    head_dim: int
    n_heads: int = 0
    quant_block: int = 128
    scale_bytes: int = 4

    def __post_init__(self) -> None:
        _check_positive(self, "indexer layer", "head_dim", "quant_block")

    @property
    def kind(self) -> LayerKind:
        return "indexer"

    @property
    def cache_kind(self) -> CacheKind:
        return "indexer"

    def elements_per_token(self, tp: int = 1) -> int:
        _check_tp(tp)
        return self.head_dim

    def scale_bytes_per_token(self, fmt: FormatLike = "bf16", tp: int = 1) -> int:
        kv_format(fmt)
        _check_tp(tp)
        return self.head_dim // self.quant_block * self.scale_bytes

    def bytes_per_token(self, fmt: FormatLike = "bf16", tp: int = 1) -> int:
        """fp8 keys plus their scales, in any KV format (vLLM fixes this cache's layout)."""
        return self.head_dim + self.scale_bytes_per_token(fmt, tp)

    def attention_flops_per_token(self, context_tokens: int, tp: int = 1,
                                  query_heads: int | None = None) -> float:
        """Index scores: 2 · indexer heads · head_dim per cached token (replicated, not split)."""
        return 2 * self.n_heads * self.head_dim * _check_tokens(context_tokens)


@dataclass(frozen=True)
class Mamba1Layer(_StateCache):
    """A Mamba-1 layer (Jamba, Falcon-Mamba): constant per-sequence state, nothing per token.

    conv state: (conv_kernel − 1) × d_inner; SSM state: d_inner × state_size (vLLM
    ``MambaStateShapeCalculator.mamba1_state_shape``). The channels split across GPUs (tp must
    divide d_inner).
    """

    d_inner: int
    state_size: int
    conv_kernel: int

    def __post_init__(self) -> None:
        _check_positive(self, "mamba layer", "d_inner", "state_size", "conv_kernel")

    @property
    def kind(self) -> LayerKind:
        return "mamba1"

    def conv_elements(self, tp: int = 1, width: int | None = None) -> int:
        """Convolution state on one GPU; ``width`` taps kept (vLLM: conv_kernel − 1)."""
        taps = self.conv_kernel - 1 if width is None else width
        return taps * split_evenly(self.d_inner, tp, "mamba channels")

    def ssm_elements(self, tp: int = 1) -> int:
        """SSM state on one GPU: channels × state_size."""
        return split_evenly(self.d_inner, tp, "mamba channels") * self.state_size


@dataclass(frozen=True)
class Mamba2Layer(_StateCache):
    """A Mamba-2 layer: constant per-sequence state, nothing per token.

    conv state: (conv_kernel − 1) × (n_heads × head_dim + 2 × n_groups × state_size);
    SSM state: n_heads × head_dim × state_size (vLLM's ``mamba_utils`` shapes).
    Heads split across GPUs (tp must divide them); groups split when tp divides them, a single
    group replicated.
    """

    n_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int

    def __post_init__(self) -> None:
        _check_positive(self, "mamba layer", "n_heads", "head_dim", "state_size", "n_groups",
                        "conv_kernel")

    @property
    def kind(self) -> LayerKind:
        return "mamba2"

    def conv_elements(self, tp: int = 1, width: int | None = None) -> int:
        """Convolution state on one GPU; ``width`` taps kept (vLLM: conv_kernel − 1)."""
        heads = split_evenly(self.n_heads, tp, "mamba heads")
        groups = mamba_groups_per_gpu(self.n_groups, tp)
        taps = self.conv_kernel - 1 if width is None else width
        return taps * (heads * self.head_dim + 2 * groups * self.state_size)

    def ssm_elements(self, tp: int = 1) -> int:
        """SSM (recurrent) state on one GPU: heads × head_dim × state_size."""
        return split_evenly(self.n_heads, tp, "mamba heads") * self.head_dim * self.state_size


@dataclass(frozen=True)
class GatedDeltaNetLayer(_StateCache):
    """A Gated DeltaNet linear-attention layer (Qwen3-Next, Qwen3.5): constant state.

    conv state: (conv_kernel − 1) × (2 × n_k_heads × k_head_dim + n_v_heads × v_head_dim);
    recurrent state: n_v_heads × k_head_dim × v_head_dim. Heads split across GPUs (tp must
    divide both head counts; vLLM ``gated_delta_net_state_shape``).
    """

    n_k_heads: int
    n_v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int

    def __post_init__(self) -> None:
        _check_positive(self, "linear-attention layer", "n_k_heads", "n_v_heads", "k_head_dim",
                        "v_head_dim", "conv_kernel")

    @property
    def kind(self) -> LayerKind:
        return "gated_deltanet"

    def conv_elements(self, tp: int = 1, width: int | None = None) -> int:
        """Convolution state on one GPU; ``width`` taps kept (vLLM: conv_kernel − 1)."""
        k_heads = split_evenly(self.n_k_heads, tp, "linear-attention key heads")
        v_heads = split_evenly(self.n_v_heads, tp, "linear-attention value heads")
        taps = self.conv_kernel - 1 if width is None else width
        return taps * (2 * k_heads * self.k_head_dim + v_heads * self.v_head_dim)

    def ssm_elements(self, tp: int = 1) -> int:
        """Recurrent state on one GPU: value heads × k_head_dim × v_head_dim."""
        v_heads = split_evenly(self.n_v_heads, tp, "linear-attention value heads")
        return v_heads * self.k_head_dim * self.v_head_dim


@dataclass(frozen=True)
class LightningAttentionLayer(_StateCache):
    """MiniMax lightning attention (MiniMax-Text-01, MiniMax-M1): linear attention whose whole
    memory of the sequence is one running K^T V matrix per head — a constant state, nothing per
    token, no convolution.

    state: n_heads × head_dim × head_dim elements, heads split across GPUs (tp must divide them):
    vLLM ``MambaStateShapeCalculator.linear_attention_state_shape`` gives
    ``(num_heads // tp, head_dim, head_dim)`` and ``linear_attention_state_dtype`` the model's
    dtype unless ``mamba_cache_dtype`` says otherwise (model_executor/layers/mamba/mamba_utils.py,
    layers/mamba/linear/base.py, 0.33.0); transformers' ``MiniMaxCache.linear_cache`` holds a
    (batch, heads, head_dim, head_dim) tensor per layer (models/minimax/modeling_minimax.py, 5.24).
    """

    n_heads: int
    head_dim: int
    conv_kernel = 0  # no convolution: ``all_conv_taps`` changes nothing

    def __post_init__(self) -> None:
        _check_positive(self, "lightning-attention layer", "n_heads", "head_dim")

    @property
    def kind(self) -> LayerKind:
        return "lightning"

    def conv_elements(self, tp: int = 1, width: int | None = None) -> int:
        _check_tp(tp)
        return 0

    def ssm_elements(self, tp: int = 1) -> int:
        """The K^T V state on one GPU: heads on this GPU × head_dim × head_dim."""
        return split_evenly(self.n_heads, tp, "lightning-attention heads") * self.head_dim ** 2


@dataclass(frozen=True)
class StatelessLayer(_NothingPerToken):
    """A layer that keeps no per-sequence state (the MLP/MoE-only layers of Nemotron-H)."""

    @property
    def kind(self) -> LayerKind:
        return "none"

    @property
    def cache_kind(self) -> CacheKind:
        return "none"

    def state_elements(self, tp: int = 1) -> int:
        return self.elements_per_token(tp)

    def state_bytes(self, tp: int = 1, conv_dtype: str = "bf16", ssm_dtype: str | None = None,
                    all_conv_taps: bool = False) -> int:
        return self.elements_per_token(tp)

    def page_bytes(self, block_size: int, fmt: FormatLike = "bf16", tp: int = 1,
                   conv_dtype: str = "bf16", ssm_dtype: str | None = None) -> int:
        return 0

    def pages_per_request(self, max_model_len: int, max_num_batched_tokens: int,
                          block_size: int) -> int:
        return 0

    def attention_flops_per_token(self, context_tokens: int, tp: int = 1,
                                  query_heads: int | None = None) -> float:
        return 0.0


@dataclass(frozen=True)
class SharedKVLayer(StatelessLayer):
    """An attention layer that reads the K/V an earlier layer cached and caches none itself
    (Gemma-3n's last ``num_kv_shared_layers`` layers): 0 bytes per token, no page, no pool group
    (vLLM 0.33 gives it no KV cache spec; transformers 5.24 a ``DummyLayer``), while its
    attention still runs over ``source``'s tokens: ``attention_flops_per_token`` is source's.

    source: the geometry (KV heads, head dim, window) of the layer whose cache it reads.
    """

    source: AttentionLayer

    @property
    def kind(self) -> LayerKind:
        return "shared"

    @property
    def span(self) -> int | None:
        return self.source.span

    def attention_flops_per_token(self, context_tokens: int, tp: int = 1,
                                  query_heads: int | None = None) -> float:
        return self.source.attention_flops_per_token(context_tokens, tp, query_heads)


AnyLayer = Union[AttentionLayer, MLALayer, IndexerKeyLayer, Mamba1Layer, Mamba2Layer,
                 GatedDeltaNetLayer, LightningAttentionLayer, StatelessLayer, SharedKVLayer]
