"""A model as a stack of layers, built from the architecture record of its ``config.json``.

:mod:`kvlib.model.hf_config` reads the config; this module turns the record into cache layers.

Symbols (the book's notation): L layers, K KV heads, H head dim, T tokens, b bytes/element.
For plain attention the per-token cache is 2 × L × K × H × b; MLA, sliding windows and
recurrent (hybrid) layers depart from it, each layer kind knowing its own state.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from .hf_config import Architecture, read_config
from .formats import Checkpoint
from .layers import (KIND_NAMES, AnyLayer, AttentionLayer, FormatLike, GatedDeltaNetLayer,
                     IndexerKeyLayer, LightningAttentionLayer, Mamba1Layer, Mamba2Layer,
                     MLALayer, SharedKVLayer, StatelessLayer)
from ..core.checks import integer, positive_integer
from .formats import kv_format
from ..core.units import dtype_bits

#: The layer classes a Model is made of (``AnyLayer``; SharedKVLayer is a StatelessLayer).
LAYER_CLASSES = (AttentionLayer, MLALayer, IndexerKeyLayer, Mamba1Layer, Mamba2Layer,
                 GatedDeltaNetLayer, LightningAttentionLayer, StatelessLayer)


@dataclass(frozen=True)
class Model:
    """A transformer (or hybrid) as the per-sequence state each of its layers keeps.

    name: display name; layers: one entry per decoder layer; n_heads: query heads (for the
    MHA/GQA/MQA label); dtype: the checkpoint's dtype (``torch_dtype``), the default dtype of
    constant recurrent state; ssm_dtype: the recurrent (SSM) state dtype the config asks for, if
    any; architecture: the record it was read from (:mod:`kvlib.model.hf_config`), for parameter
    counts and activation sizes; None for models built from explicit layers; checkpoint: the
    published checkpoint's size, where the registry records it (``kvlib.model.params.loaded_weights``).
    """

    name: str
    layers: tuple[AnyLayer, ...]
    n_heads: int | None = None
    dtype: str | None = None
    ssm_dtype: str | None = None
    architecture: Architecture | None = field(default=None, compare=False, repr=False)
    checkpoint: Checkpoint | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.layers, (str, bytes)) or not isinstance(self.layers, Sequence):
            raise TypeError(f"model {self.name!r}: layers must be a sequence of kvlib layers, "
                            f"got {type(self.layers).__name__}")
        if not self.layers:
            raise ValueError(f"model {self.name!r} has no layers")
        if not isinstance(self.layers, tuple):  # a list would make the model unhashable
            object.__setattr__(self, "layers", tuple(self.layers))
        for i, layer in enumerate(self.layers):
            if not isinstance(layer, LAYER_CLASSES):
                shown = " ".join(repr(layer).split())  # one line, at most 60 characters
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                raise TypeError(f"model {self.name!r}: layers[{i}] is {shown} "
                                f"({type(layer).__name__}), not a kvlib layer (AttentionLayer, "
                                "MLALayer, Mamba2Layer, ...)")
        if self.n_heads is not None:  # numpy integers too, stored as int
            object.__setattr__(self, "n_heads", integer("n_heads", self.n_heads))
        for dtype in (self.dtype, self.ssm_dtype):
            if dtype is not None:
                dtype_bits(dtype)

    @cached_property
    def distinct_layers(self) -> tuple[tuple[AnyLayer, int], ...]:
        """Each distinct layer once, with how many decoder layers it stands for (in order of
        first appearance): sums over the stack multiply instead of repeating equal layers."""
        return tuple(Counter(self.layers).items())

    def __hash__(self) -> int:
        # Hashed once: the caches keyed by a model (kv_bytes, the roofline's attention FLOPs)
        # would otherwise hash every layer on every call, which costs more than the cached work.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.name, self.layers, self.n_heads, self.dtype, self.ssm_dtype))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict[str, Any]:
        # the cached hash belongs to this process (string hashes are salted per process)
        return {key: value for key, value in self.__dict__.items() if key != "_hash"}

    # --- the public arithmetic -------------------------------------------------------------
    def kv_bytes_per_token(self, dtype: FormatLike = "bf16", tp: int = 1) -> int:
        """Bytes one GPU adds per token while the context is shorter than every window.

        ``dtype``: the KV format — a plain dtype (``"bf16"``, ``"fp8"``), a name from
        ``kvlib.KV_FORMATS`` or a ``KVFormat``; per-token scales are included. Sums the layers
        that store per-token state (full, sliding, MLA); constant recurrent state is excluded.
        ``tp``: tensor-parallel degree (bytes are per GPU).
        """
        fmt = kv_format(dtype)
        tp = self.check_tp(tp)
        return sum(n * layer.bytes_per_token(fmt, tp) for layer, n in self.distinct_layers)

    def kv_scale_bytes_per_token(self, dtype: FormatLike = "bf16", tp: int = 1) -> int:
        """The part of :meth:`kv_bytes_per_token` that is scales and zero points."""
        fmt = kv_format(dtype)
        tp = self.check_tp(tp)
        return sum(n * layer.scale_bytes_per_token(fmt, tp) for layer, n in self.distinct_layers)


    def kv_scale_share(self, dtype: FormatLike = "bf16", tp: int = 1) -> float:
        """Share of the per-token bytes that are scales and zero points (0 for unscaled
        formats)."""
        total = self.kv_bytes_per_token(dtype, tp)
        return self.kv_scale_bytes_per_token(dtype, tp) / total if total else 0.0

    def kv_elements_per_token(self, tp: int = 1) -> int:
        """Elements one GPU adds per token (K and V, or latent + RoPE key), before any format."""
        tp = self.check_tp(tp)
        return sum(n * layer.elements_per_token(tp) for layer, n in self.distinct_layers)

    def state_dtypes(self, state_dtype: str | None = None) -> tuple[str, str]:
        """(conv dtype, recurrent-state dtype) of the recurrent layers: by default the conv state
        in the model's dtype and the SSM/recurrent state in the dtype the config asks for
        (``mamba_ssm_cache_dtype`` / ``mamba_ssm_dtype``, e.g. fp32), else the model's dtype;
        ``state_dtype`` overrides both."""
        conv_dtype = state_dtype or self.dtype
        ssm_dtype = state_dtype or self.ssm_dtype or self.dtype
        if conv_dtype is None or ssm_dtype is None:
            raise ValueError(f"model {self.name!r} keeps recurrent state but its config gives "
                             "no torch_dtype: pass state_dtype")
        dtype_bits(conv_dtype)
        dtype_bits(ssm_dtype)
        return conv_dtype, ssm_dtype

    @property
    def has_state(self) -> bool:
        """Whether some layer keeps constant per-sequence (recurrent) state."""
        return any(layer.cache_kind == "state" for layer, _ in self.distinct_layers)

    def state_bytes(self, state_dtype: str | None = None, tp: int = 1) -> int:
        """Constant per-sequence state of the recurrent layers on one GPU, in bytes
        (dtypes as in :meth:`state_dtypes`)."""
        if not self.has_state:
            return sum(n * layer.state_bytes(tp) for layer, n in self.distinct_layers)  # 0; validates tp
        conv_dtype, ssm_dtype = self.state_dtypes(state_dtype)
        return sum(n * layer.state_bytes(tp, conv_dtype, ssm_dtype)
                   for layer, n in self.distinct_layers)

    def kv_bytes(self, n_tokens: int, dtype: FormatLike = "bf16", tp: int = 1,
                 state_dtype: str | None = None) -> int:
        """Exact bytes one sequence of ``n_tokens`` tokens holds on one GPU.

        Per-token layers hold ``tokens_held(n_tokens)`` tokens (sliding layers capped at
        window − 1) in the KV format ``dtype`` (as in :meth:`kv_bytes_per_token`); recurrent
        layers add their constant state in ``state_dtype`` (default: the model's own dtypes, as
        engines keep it even with an fp8 KV cache).
        """
        n = integer("n_tokens", n_tokens, 0)
        tp = positive_integer("tp (tensor-parallel degree)", tp)
        return _kv_bytes(self, n, kv_format(dtype), tp, state_dtype)

    def check_tp(self, tp: int) -> int:
        """``tp`` as a positive int, refused where vLLM refuses it: tp must divide the query
        heads (``ModelConfig.verify_with_parallel_config``), and every layer must split across
        tp GPUs (KV heads divide tp or tp divides them; recurrent heads divide evenly)."""
        return _check_tp(self, positive_integer("tp (tensor-parallel degree)", tp))

    def supports_tp(self, tp: int) -> bool:
        """Whether vLLM would run this model on ``tp`` tensor-parallel GPUs (``check_tp``)."""
        try:
            self.check_tp(tp)
        except ValueError:
            return False
        return True

    # --- descriptions ----------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        """Decoder layers (L), every kind counted (a Falcon-H1 layer holding attention and
        Mamba-2 side by side is one layer)."""
        return self.architecture.n_layers if self.architecture is not None else len(self.layers)

    def layer_counts(self) -> dict[str, int]:
        """Layers of each kind, e.g. ``{"sliding": 36, "full": 12}``."""
        return dict(Counter(layer.kind for layer in self.layers))

    def layer_summary(self) -> str:
        """The layer counts in words, kinds in alphabetical order of their keys:
        "12 full, 36 sliding", "6 full, 23 Mamba-2"."""
        return ", ".join(f"{n} {KIND_NAMES[k]}" for k, n in sorted(self.layer_counts().items()))

    @property
    def attention(self) -> str:
        """Architecture label: MHA/GQA/MQA/MLA, with '+SWA', '+chunked' or '+hybrid' where it
        applies; 'SSM' for a model without attention."""
        counts = self.layer_counts()
        attn = [lay for lay in self.layers if isinstance(lay, AttentionLayer)]
        if counts.get("mla"):
            label = "MLA"
        elif not attn:
            return "SSM" if self.has_state else "none"
        else:
            kv = attn[0].n_kv_heads
            label = ("MQA" if kv == 1 else "MHA" if kv == self.n_heads else "GQA")
        if counts.get("sliding"):
            label += "+SWA"
        if counts.get("chunked"):
            label += "+chunked"
        if self.has_state:
            label += "+hybrid"
        return label

    @property
    def max_window(self) -> int | None:
        """Largest sliding window in tokens, or None when no layer is windowed."""
        windows = [lay.window for lay in self.layers
                   if isinstance(lay, AttentionLayer) and lay.window is not None]
        return max(windows) if windows else None

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], name: str | None = None) -> Model:
        """Read a Hugging Face ``config.json`` (as a dict) as published.

        Handles MHA (no ``num_key_value_heads``), MQA flags (``multi_query``, read for GPT-BigCode
        and Falcon only, as the engines read it), explicit
        ``head_dim``, nested ``text_config``, sliding windows (``layer_types``,
        ``sliding_window_pattern``, the Gemma-2 alternation, the Gemma-3 default of every 6th layer
        global, ``use_sliding_window: false``),
        MLA (``kv_lora_rank`` + ``qk_rope_head_dim``) and hybrid stacks (``layer_types`` with
        linear attention, ``full_attention_interval``, Nemotron-H ``hybrid_override_pattern``).
        Raises ValueError naming the field that is missing or invalid. The reading itself is
        :func:`kvlib.model.hf_config.read_config`; the record is kept as ``architecture``.
        """
        return model_from_architecture(read_config(config, name))


# --- from the architecture record ----------------------------------------------------------

def _layers(arch: Architecture) -> tuple[AnyLayer, ...]:
    """The cache layers of a record, decoder layer by decoder layer (layers of one kind are one
    shared object). A Falcon-H1 layer contributes an attention and a Mamba-2 cache layer, a
    DeepSeek-V3.2 layer its MLA latent and its indexer keys; other layers one each."""
    att, mla, m1, m2, gdn = (arch.attention, arch.mla, arch.mamba1, arch.mamba2,
                             arch.gated_deltanet)

    def attention(kind: str, own: Any = None) -> AttentionLayer:
        geometry = own or att  # a layer's own geometry (Gemma-4 global, Nemotron-NAS) or shared
        assert geometry is not None
        return AttentionLayer(n_kv_heads=geometry.n_kv_heads, head_dim=geometry.head_dim,
                              v_head_dim=geometry.v_head_dim,
                              window=geometry.sliding_window if kind == "sliding" else None,
                              chunk=geometry.chunk_size if kind == "chunked" else None)

    def mamba2() -> Mamba2Layer:
        assert m2 is not None
        return Mamba2Layer(n_heads=m2.n_heads, head_dim=m2.head_dim, state_size=m2.state_size,
                           n_groups=m2.n_groups, conv_kernel=m2.conv_kernel)

    def build(mixer: str, own: Any = None, shared_indexer: bool = False,
              kv_shared: bool = False) -> tuple[AnyLayer, ...]:
        if kv_shared:  # Gemma-3n: attention over an earlier layer's K/V, nothing cached here
            return (SharedKVLayer(source=attention(mixer, own)),)
        if mixer in ("full", "sliding", "chunked"):
            return (attention(mixer, own),)
        if mixer == "parallel":
            return attention("full"), mamba2()
        if mixer == "mla":
            assert mla is not None
            latent = MLALayer(kv_lora_rank=mla.kv_lora_rank, rope_dim=mla.qk_rope_head_dim)
            if mla.indexer is None or shared_indexer:  # IndexCache: no indexer keys here
                return (latent,)
            return latent, IndexerKeyLayer(head_dim=mla.indexer.head_dim,
                                           n_heads=mla.indexer.n_heads)
        if mixer == "mamba1":
            assert m1 is not None
            return (Mamba1Layer(d_inner=m1.d_inner, state_size=m1.state_size,
                                conv_kernel=m1.conv_kernel),)
        if mixer == "mamba2":
            return (mamba2(),)
        if mixer == "gated_deltanet":
            assert gdn is not None
            return (GatedDeltaNetLayer(n_k_heads=gdn.n_k_heads, n_v_heads=gdn.n_v_heads,
                                       k_head_dim=gdn.k_head_dim, v_head_dim=gdn.v_head_dim,
                                       conv_kernel=gdn.conv_kernel),)
        if mixer == "lightning":
            assert arch.lightning is not None
            return (LightningAttentionLayer(n_heads=arch.lightning.n_heads,
                                            head_dim=arch.lightning.head_dim),)
        return (StatelessLayer(),)

    built: dict[tuple[str, Any], tuple[AnyLayer, ...]] = {}
    out: list[AnyLayer] = []
    for spec in arch.layers:
        key = (spec.mixer, spec.attention, spec.shared_indexer, spec.kv_shared)
        if key not in built:
            built[key] = build(*key)
        out.extend(built[key])
    return tuple(out)


def model_from_architecture(arch: Architecture) -> Model:
    """The Model (its cache layers) of an architecture record from :mod:`kvlib.model.hf_config`."""
    return Model(name=arch.name, layers=_layers(arch), n_heads=arch.query_heads,
                 dtype=arch.dtype, ssm_dtype=arch.ssm_dtype, architecture=arch)


def model_from_layers(name: str, layers: Sequence[AnyLayer], n_heads: int | None = None,
                      dtype: str | None = "bf16") -> Model:
    """A Model from explicit layers (for what-if geometries in the chapters); TypeError naming
    the first entry that is not a kvlib layer."""
    if isinstance(layers, (str, bytes, Mapping)) or not isinstance(layers, Iterable):
        raise TypeError(f"model {name!r}: layers must be a sequence of kvlib layers, got "
                        f"{type(layers).__name__}")
    return Model(name=name, layers=tuple(layers), n_heads=n_heads, dtype=dtype)


@lru_cache(maxsize=8192)
def _kv_bytes(model: Model, n_tokens: int, fmt: Any, tp: int, state_dtype: str | None) -> int:
    """``Model.kv_bytes`` for checked arguments (memoized: the serving grid asks for the same
    model, length and format many times)."""
    tp = model.check_tp(tp)
    per_token = sum(count * layer.bytes_per_token(fmt, tp) * layer.tokens_held(n_tokens)
                    for layer, count in model.distinct_layers)
    return per_token + (model.state_bytes(state_dtype, tp) if n_tokens > 0 else 0)


@lru_cache(maxsize=4096)
def _check_tp(model: Model, tp: int) -> int:
    """``Model.check_tp`` for a positive int (memoized: pools and steps ask it every time)."""
    if model.n_heads is not None and model.n_heads % tp:
        raise ValueError(f"model {model.name!r}: {model.n_heads} query heads cannot be split "
                         f"across tp={tp} GPUs: tp must divide them")
    own = {spec.attention.n_heads for spec in (model.architecture.layers if model.architecture
                                               else ()) if spec.attention is not None}
    for heads in sorted(own):  # per-layer query heads (Laguna): each layer's must split too
        if heads % tp:
            raise ValueError(f"model {model.name!r}: a layer's {heads} query heads cannot be "
                             f"split across tp={tp} GPUs: tp must divide them")
    for layer, _ in model.distinct_layers:
        try:
            layer.elements_per_token(tp)
            layer.state_elements(tp)
        except ValueError as exc:
            raise ValueError(f"model {model.name!r}: {exc}") from None
    return tp
