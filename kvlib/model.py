"""A model as a stack of layers, and how to read one from a Hugging Face ``config.json``.

Symbols (the book's notation): L layers, K KV heads, H head dim, T tokens, b bytes/element.
For plain attention the per-token cache is 2 × L × K × H × b; MLA, sliding windows and
recurrent (hybrid) layers depart from it, each layer kind knowing its own state.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .layers import (AnyLayer, AttentionLayer, GatedDeltaNetLayer, Mamba2Layer, MLALayer,
                     StatelessLayer)
from .units import HF_DTYPE_NAMES, dtype_bits, elements_to_bytes


def _check_tokens(n_tokens: int) -> None:
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 0:
        raise ValueError(f"n_tokens must be a non-negative integer, got {n_tokens!r}")


@dataclass(frozen=True)
class Model:
    """A transformer (or hybrid) as the per-sequence state each of its layers keeps.

    name: display name; layers: one entry per decoder layer; n_heads: query heads (for the
    MHA/GQA/MQA label); dtype: the checkpoint's dtype (``torch_dtype``), the default dtype of
    constant recurrent state; ssm_dtype: the recurrent (SSM) state dtype the config asks for, if
    any; config: the (text) config it was read from, for parameter counts.
    """

    name: str
    layers: tuple[AnyLayer, ...]
    n_heads: int | None = None
    dtype: str | None = None
    ssm_dtype: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.layers:
            raise ValueError(f"model {self.name!r} has no layers")
        for dtype in (self.dtype, self.ssm_dtype):
            if dtype is not None:
                dtype_bits(dtype)

    # --- the public arithmetic -------------------------------------------------------------
    def kv_bytes_per_token(self, dtype: str = "bf16", tp: int = 1) -> int:
        """Bytes one GPU adds per token while the context is shorter than every window.

        Sums the layers that store per-token state (full, sliding, MLA); constant recurrent
        state is excluded. ``tp``: tensor-parallel degree (bytes are per GPU).
        """
        self._check_query_heads(tp)
        return sum(elements_to_bytes(layer.elements_per_token(tp), dtype) for layer in self.layers)

    def state_bytes(self, state_dtype: str | None = None, tp: int = 1) -> int:
        """Constant per-sequence state of the recurrent layers on one GPU, in bytes.

        By default the conv state is kept in the model's dtype and the SSM/recurrent state in
        the dtype the config asks for (``mamba_ssm_cache_dtype`` / ``mamba_ssm_dtype``, e.g.
        fp32), else the model's dtype; ``state_dtype`` overrides both.
        """
        conv = sum(layer.conv_elements(tp) for layer in self.layers if hasattr(layer, "conv_elements"))
        ssm = sum(layer.ssm_elements(tp) for layer in self.layers if hasattr(layer, "ssm_elements"))
        if conv + ssm == 0:
            return 0
        conv_dtype = state_dtype or self.dtype
        ssm_dtype = state_dtype or self.ssm_dtype or self.dtype
        if conv_dtype is None or ssm_dtype is None:
            raise ValueError(f"model {self.name!r} keeps recurrent state but its config gives "
                             "no torch_dtype: pass state_dtype")
        return elements_to_bytes(conv, conv_dtype) + elements_to_bytes(ssm, ssm_dtype)

    def kv_bytes(self, n_tokens: int, dtype: str = "bf16", tp: int = 1,
                 state_dtype: str | None = None) -> int:
        """Exact bytes one sequence of ``n_tokens`` tokens holds on one GPU.

        Per-token layers hold ``tokens_held(n_tokens)`` tokens (sliding layers capped at
        window − 1) in ``dtype``; recurrent layers add their constant state in ``state_dtype``
        (default: the model's own dtype, as engines keep it even with an fp8 KV cache).
        """
        _check_tokens(n_tokens)
        self._check_query_heads(tp)
        per_token = sum(elements_to_bytes(layer.elements_per_token(tp) * layer.tokens_held(n_tokens),
                                          dtype) for layer in self.layers)
        return per_token + (self.state_bytes(state_dtype, tp) if n_tokens > 0 else 0)

    def _check_query_heads(self, tp: int) -> None:
        """vLLM requires tp to divide the query heads (``ModelConfig.verify_with_parallel_config``)."""
        if (self.n_heads is not None and not isinstance(tp, bool) and isinstance(tp, int)
                and tp > 0 and self.n_heads % tp):
            raise ValueError(f"model {self.name!r}: {self.n_heads} query heads cannot be split "
                             f"across tp={tp} GPUs: tp must divide them")

    # --- descriptions ----------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        """Decoder layers (L), every kind counted."""
        return len(self.layers)

    def layer_counts(self) -> dict[str, int]:
        """Layers of each kind, e.g. ``{"sliding": 36, "full": 12}``."""
        return dict(Counter(layer.kind for layer in self.layers))

    @property
    def attention(self) -> str:
        """Architecture label: MHA/GQA/MQA/MLA, with '+SWA' or '+hybrid' where it applies."""
        counts = self.layer_counts()
        attn = [lay for lay in self.layers if isinstance(lay, AttentionLayer)]
        if counts.get("mla"):
            label = "MLA"
        elif not attn:
            label = "none"
        else:
            kv = attn[0].n_kv_heads
            label = ("MQA" if kv == 1 else "MHA" if kv == self.n_heads else "GQA")
        if counts.get("sliding"):
            label += "+SWA"
        if counts.get("mamba2") or counts.get("gated_deltanet"):
            label += "+hybrid"
        return label

    @property
    def max_window(self) -> int | None:
        """Largest sliding window in tokens, or None when no layer is windowed."""
        windows = [lay.window for lay in self.layers
                   if isinstance(lay, AttentionLayer) and lay.window is not None]
        return max(windows) if windows else None

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], name: str | None = None) -> "Model":
        """Read a Hugging Face ``config.json`` (as a dict) as published.

        Handles MHA (no ``num_key_value_heads``), MQA flags (``multi_query``), explicit
        ``head_dim``, nested ``text_config``, sliding windows (``layer_types``,
        ``sliding_window_pattern``, the Gemma-2 alternation, the Gemma-3 default of every 6th layer
        global, ``use_sliding_window: false``),
        MLA (``kv_lora_rank`` + ``qk_rope_head_dim``) and hybrid stacks (``layer_types`` with
        linear attention, ``full_attention_interval``, Nemotron-H ``hybrid_override_pattern``).
        Raises ValueError naming the field that is missing or invalid.
        """
        return _parse_hf_config(config, name)


# --- Hugging Face config parsing ----------------------------------------------------------

_LAYER_TYPE_NAMES = {
    "full_attention": "full", "attention": "full", "global": "full",
    "sliding_attention": "sliding", "sliding_window": "sliding", "local": "sliding",
    "linear_attention": "gated_deltanet", "mamba": "mamba2",
}
#: Fields that change the cache geometry in ways kvlib does not model: a config carrying one is
#: rejected rather than silently mis-sized (MiMo-V2 separate SWA geometry, Gemma-4 global heads).
_UNSUPPORTED_FIELDS = ("hybrid_layer_pattern", "swa_num_key_value_heads", "global_head_dim",
                       "attention_k_eq_v", "num_global_key_value_heads")
#: Nemotron-H ``hybrid_override_pattern`` characters: M Mamba-2, * attention, - MLP, E MoE.
_NEMOTRON_CHARS = {"M": "mamba2", "*": "full", "-": "none", "E": "none"}


class _Config:
    """A config dict with field look-ups that raise ValueError naming the model and field."""

    def __init__(self, cfg: Mapping[str, Any], model: str) -> None:
        self.cfg, self.model = cfg, model

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        value = self.cfg.get(key)
        return default if value is None else value

    def int(self, *keys: str, default: int | None = None) -> int:
        for key in keys:
            if self.has(key):
                value = self.cfg[key]
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise ValueError(f"{self.model}: config field {key!r} must be a positive "
                                     f"integer, got {value!r}")
                return value
        if default is not None:
            return default
        raise ValueError(f"{self.model}: config field {' / '.join(map(repr, keys))} is missing")


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language-model part of a config: ``text_config`` for multimodal wrappers."""
    inner = config.get("text_config")
    if isinstance(inner, Mapping) and inner.get("num_hidden_layers") is not None:
        return inner
    return config


def _layer_kinds(c: _Config, n_layers: int) -> list[str]:
    """Kind of each layer: full, sliding, gated_deltanet, mamba2 or none."""
    if c.has("hybrid_override_pattern"):
        pattern = c.get("hybrid_override_pattern")
        unknown = sorted(set(pattern) - set(_NEMOTRON_CHARS))
        if unknown:
            raise ValueError(f"{c.model}: hybrid_override_pattern has unknown characters {unknown}")
        kinds = [_NEMOTRON_CHARS[ch] for ch in pattern]
        source = "hybrid_override_pattern"
    elif c.has("layer_types"):
        unknown = sorted({t for t in c.get("layer_types") if t not in _LAYER_TYPE_NAMES})
        if unknown:
            raise ValueError(f"{c.model}: layer_types has unknown entries {unknown}")
        kinds = [_LAYER_TYPE_NAMES[t] for t in c.get("layer_types")]
        source = "layer_types"
    elif c.has("full_attention_interval"):
        every = c.int("full_attention_interval")
        kinds = ["full" if (i + 1) % every == 0 else "gated_deltanet" for i in range(n_layers)]
        source = "full_attention_interval"
    elif c.has("sliding_window_pattern"):
        pattern = c.get("sliding_window_pattern")
        if isinstance(pattern, str):  # e.g. EXAONE-4 "LLLG": L local, G global, repeating
            if not pattern or set(pattern) - {"L", "G"}:
                raise ValueError(f"{c.model}: sliding_window_pattern {pattern!r} must use L and G")
            kinds = ["sliding" if pattern[i % len(pattern)] == "L" else "full"
                     for i in range(n_layers)]
        else:  # Gemma-3: every pattern-th layer is global
            every = c.int("sliding_window_pattern")
            kinds = ["full" if (i + 1) % every == 0 else "sliding" for i in range(n_layers)]
        source = "sliding_window_pattern"
    elif c.get("model_type") == "gemma3_text":
        # Gemma-3: the published google/gemma-3-27b-it config.json has no sliding_window_pattern
        # and no layer_types; transformers' Gemma3TextConfig supplies the pattern as a class
        # default, kwargs.get("sliding_window_pattern", 6): every 6th layer global
        # (transformers 5.24.0, models/gemma3/configuration_gemma3.py, __post_init__).
        kinds = ["full" if (i + 1) % 6 == 0 else "sliding" for i in range(n_layers)]
        source = "the Gemma-3 default pattern"
    elif c.get("model_type") == "gemma2":  # Gemma-2: even layers local, odd layers global
        kinds = ["sliding" if i % 2 == 0 else "full" for i in range(n_layers)]
        source = "the Gemma-2 alternation"
    elif c.get("use_sliding_window") is True and c.has("max_window_layers"):
        # Qwen2 convention: layers from max_window_layers on use the window
        first = c.int("max_window_layers")
        kinds = ["sliding" if i >= first else "full" for i in range(n_layers)]
        source = "max_window_layers"
    elif c.has("sliding_window"):  # Mistral-7B-v0.1: every layer windowed
        kinds = ["sliding"] * n_layers
        source = "sliding_window"
    else:
        kinds = ["full"] * n_layers
        source = "num_hidden_layers"
    if len(kinds) != n_layers:
        raise ValueError(f"{c.model}: {source} describes {len(kinds)} layers but "
                         f"num_hidden_layers is {n_layers}")
    if c.get("use_sliding_window") is False:  # the window is switched off
        kinds = ["full" if k == "sliding" else k for k in kinds]
    return kinds


def _n_kv_heads(c: _Config, n_heads: int) -> int:
    if c.has("multi_query") or c.has("new_decoder_architecture"):  # Falcon / GPT-BigCode flags
        if c.get("new_decoder_architecture") or not c.get("multi_query"):
            return c.int("num_key_value_heads", "num_kv_heads", default=n_heads)
        return 1
    return c.int("num_key_value_heads", "num_kv_heads", default=n_heads)


def _head_dim(c: _Config, n_heads: int) -> int:
    if c.has("head_dim"):
        return c.int("head_dim")
    hidden = c.int("hidden_size", "d_model", "n_embd")
    if hidden % n_heads:
        raise ValueError(f"{c.model}: hidden_size {hidden} is not divisible by "
                         f"{n_heads} attention heads and no head_dim is given")
    return hidden // n_heads


def _attention_layer(c: _Config, kind: str, n_heads: int) -> AnyLayer:
    if c.has("kv_lora_rank"):
        return MLALayer(kv_lora_rank=c.int("kv_lora_rank"), rope_dim=c.int("qk_rope_head_dim"))
    window = c.int("sliding_window") if kind == "sliding" else None
    return AttentionLayer(n_kv_heads=_n_kv_heads(c, n_heads), head_dim=_head_dim(c, n_heads),
                          window=window)


def _mamba2_layer(c: _Config) -> Mamba2Layer:
    return Mamba2Layer(n_heads=c.int("mamba_num_heads"), head_dim=c.int("mamba_head_dim"),
                       state_size=c.int("ssm_state_size"), n_groups=c.int("n_groups"),
                       conv_kernel=c.int("conv_kernel"))


def _gdn_layer(c: _Config) -> GatedDeltaNetLayer:
    return GatedDeltaNetLayer(n_k_heads=c.int("linear_num_key_heads"),
                              n_v_heads=c.int("linear_num_value_heads"),
                              k_head_dim=c.int("linear_key_head_dim"),
                              v_head_dim=c.int("linear_value_head_dim"),
                              conv_kernel=c.int("linear_conv_kernel_dim"))


def _model_dtype(config: Mapping[str, Any], text: Mapping[str, Any],
                 keys: tuple[str, ...] = ("torch_dtype", "dtype")) -> str | None:
    for cfg in (text, config):
        for key in keys:
            value = cfg.get(key)
            if isinstance(value, str) and value in HF_DTYPE_NAMES:
                return HF_DTYPE_NAMES[value]
    return None


def _parse_hf_config(config: Mapping[str, Any], name: str | None) -> Model:
    if not isinstance(config, Mapping) or not config:
        raise ValueError("config is empty: expected the fields of a Hugging Face config.json")
    text = _text_config(config)
    label = name or str(config.get("_name_or_path") or config.get("model_type") or "model")
    c = _Config(text, label)
    unsupported = [key for key in _UNSUPPORTED_FIELDS if c.has(key)]
    if unsupported:
        raise ValueError(f"{label}: config fields {unsupported} describe a cache layout kvlib "
                         "does not model; refusing to guess its size")
    n_layers = c.int("num_hidden_layers", "n_layer", "num_layers")
    kinds = _layer_kinds(c, n_layers)
    n_heads = c.int("num_attention_heads", "n_head", "num_heads") if (
        {"full", "sliding"} & set(kinds)) else None
    builders = {
        "full": lambda: _attention_layer(c, "full", n_heads),
        "sliding": lambda: _attention_layer(c, "sliding", n_heads),
        "mamba2": lambda: _mamba2_layer(c),
        "gated_deltanet": lambda: _gdn_layer(c),
        "none": StatelessLayer,
    }
    built: dict[str, AnyLayer] = {}
    layers = []
    for kind in kinds:  # layers of one kind are identical: build each kind once
        if kind not in built:
            built[kind] = builders[kind]()
        layers.append(built[kind])
    return Model(name=label, layers=tuple(layers), n_heads=n_heads,
                 dtype=_model_dtype(config, text),
                 ssm_dtype=_model_dtype(config, text, ("mamba_ssm_cache_dtype", "mamba_ssm_dtype")),
                 config=dict(text))


def model_from_layers(name: str, layers: Sequence[AnyLayer], n_heads: int | None = None,
                      dtype: str | None = "bf16") -> Model:
    """A Model from explicit layers (for what-if geometries in the chapters)."""
    return Model(name=name, layers=tuple(layers), n_heads=n_heads, dtype=dtype)
