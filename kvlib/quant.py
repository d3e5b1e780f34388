"""Quantized KV caches: bytes per token by storage format, scales included.

A quantized cache stores low-bit elements plus the scales (and zero points) needed to read them
back. Where an engine keeps one scale per tensor or per head for the whole run, the scales do
not grow with tokens and cost nothing per token. Where it keeps scales per token — one per
token per head, or one per small block of elements — they are part of every token's bytes:

* **vLLM fp8** (``--kv-cache-dtype fp8``): per-tensor scales (``k/v_scale = [1]``) or
  per-attention-head scales (``[num_kv_heads]``) per layer — constant, 0 bytes per token
  (vLLM docs, "Quantized KV Cache"); SGLang's fp8 cache likewise uses per-tensor scales.
* **LMDeploy int8 / int4** (``quant_policy=8/4``): per-head, per-token asymmetric quantization;
  the PyTorch engine allocates, next to each K and V block, a ``(..., num_heads, 2)`` tensor in
  the model's dtype — one scale and one zero point per token per head
  (``lmdeploy/pytorch/engine/cache_engine.py``, ``get_cache_block_size``).
* **NVFP4** (TensorRT-LLM / FlashInfer, SGLang ``fp4_e2m1``): 4-bit elements with one FP8 (E4M3)
  scale per block of 16 elements, plus a per-tensor fp32 global scale
  (FlashInfer ``nvfp4_kv_quantize`` returns block scales of shape ``[M, K/16]``)
  — 4.5 bits per element (SGLang docs: FP4 holds ~3.56× the tokens of BF16).
* **FlashMLA fp8** (DeepSeek-V3.2's sparse decoding kernel): per token per layer 656 bytes —
  512 fp8 latent values, 4 fp32 scales (one per 128 values) and the 64 RoPE values kept in bf16
  (``deepseek-ai/FlashMLA`` README, "FP8 KV Cache").

Everything is in bytes per GPU (``tp`` as in :mod:`kvlib.layers`); per-tensor constants are
left out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .layers import AttentionLayer, MLALayer
from .model import Model
from .units import dtype_bits


@dataclass(frozen=True)
class KVFormat:
    """How one engine stores a K, V or MLA-latent vector.

    bits: bits per stored element; vector_scale_bits: bits of scale (+ zero point) stored per
    vector, i.e. per token per head; block: elements sharing one block scale (None: no block
    scales); block_scale_bits: bits per block scale; mla_rope_bits: for MLA, bits of the
    decoupled RoPE part when it is kept unquantized (None: stored like the latent);
    mla_only: the layout exists for MLA caches only; engine, source: who stores it, and where
    that is documented.
    """

    name: str
    bits: int
    vector_scale_bits: int = 0
    block: int | None = None
    block_scale_bits: int = 0
    mla_rope_bits: int | None = None
    mla_only: bool = False
    engine: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        for field_name in ("bits", "vector_scale_bits", "block_scale_bits"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"KV format {self.name!r}: {field_name} must be a non-negative "
                                 f"integer, got {value!r}")
        if self.bits == 0:
            raise ValueError(f"KV format {self.name!r}: bits must be positive")
        if self.block is not None and (isinstance(self.block, bool) or self.block <= 0):
            raise ValueError(f"KV format {self.name!r}: block must be a positive integer")
        if (self.vector_scale_bits + self.block_scale_bits) % 8:
            raise ValueError(f"KV format {self.name!r}: scales must be whole bytes")

    def data_bytes(self, n_elements: int, rope: bool = False) -> int:
        """Bytes of the elements of one vector of ``n_elements`` (rounded up to a byte)."""
        bits = self.mla_rope_bits if (rope and self.mla_rope_bits) else self.bits
        return math.ceil(n_elements * bits / 8)

    def scale_bytes(self, n_elements: int, rope: bool = False) -> int:
        """Bytes of scales stored with one vector of ``n_elements`` (0 for an unquantized part)."""
        if n_elements == 0 or (rope and self.mla_rope_bits):
            return 0
        blocks = math.ceil(n_elements / self.block) if self.block else 0
        return (self.vector_scale_bits + blocks * self.block_scale_bits) // 8

    def vector_bytes(self, n_elements: int, rope: bool = False) -> int:
        """Bytes one stored vector takes: its elements plus its per-token scales."""
        return self.data_bytes(n_elements, rope) + self.scale_bytes(n_elements, rope)


def plain(dtype: str) -> KVFormat:
    """An unscaled cache of ``dtype`` elements (bf16, fp16, fp32: the model's own precision)."""
    return KVFormat(name=dtype, bits=dtype_bits(dtype), engine="any",
                    source="unquantized: bits per element only")


#: The formats the book compares, by name. Sources are BibTeX keys in ``book/references.bib``.
FORMATS: dict[str, KVFormat] = {
    "bf16": plain("bf16"),
    "fp8 (vLLM, per-tensor scale)": KVFormat(
        "fp8 (vLLM, per-tensor scale)", bits=8, engine="vLLM, SGLang",
        source="vllm_quantkv"),
    "int8 (LMDeploy, per token-head)": KVFormat(
        "int8 (LMDeploy, per token-head)", bits=8, vector_scale_bits=2 * 16, engine="LMDeploy",
        source="lmdeploy_kvquant"),
    "int4 (LMDeploy, per token-head)": KVFormat(
        "int4 (LMDeploy, per token-head)", bits=4, vector_scale_bits=2 * 16, engine="LMDeploy",
        source="lmdeploy_kvquant"),
    "nvfp4 (block of 16, fp8 scale)": KVFormat(
        "nvfp4 (block of 16, fp8 scale)", bits=4, block=16, block_scale_bits=8,
        engine="TensorRT-LLM / FlashInfer, SGLang fp4_e2m1",
        source="flashinfer_nvfp4kv"),
    "fp8 FlashMLA (DeepSeek-V3.2)": KVFormat(
        "fp8 FlashMLA (DeepSeek-V3.2)", bits=8, block=128, block_scale_bits=32,
        mla_rope_bits=16, mla_only=True, engine="FlashMLA (DeepSeek)", source="flashmla"),
}


def kv_format(name: str | KVFormat) -> KVFormat:
    """A format from :data:`FORMATS` by name, or a plain dtype name such as ``"fp16"``."""
    if isinstance(name, KVFormat):
        return name
    if name in FORMATS:
        return FORMATS[name]
    try:
        return plain(name)
    except ValueError:
        raise KeyError(f"unknown KV format {name!r}; known: {', '.join(FORMATS)} "
                       "or a dtype name") from None


def _layer_bytes(layer: object, fmt: KVFormat, tp: int, part: str) -> int:
    """Per-token bytes of one layer on one GPU: ``part`` is 'all', 'data' or 'scales'."""
    pick = {"all": fmt.vector_bytes, "data": fmt.data_bytes, "scales": fmt.scale_bytes}[part]
    if isinstance(layer, MLALayer):
        layer.elements_per_token(tp)  # validates tp; the latent is replicated
        if fmt.mla_rope_bits:
            return pick(layer.kv_lora_rank) + pick(layer.rope_dim, rope=True)
        return pick(layer.kv_lora_rank + layer.rope_dim)
    if isinstance(layer, AttentionLayer):
        if fmt.mla_only:
            raise ValueError(f"KV format {fmt.name!r} stores MLA latents only; this model has "
                             f"{layer.kind} attention layers")
        heads = layer.elements_per_token(tp) // (layer.head_dim + (layer.v_head_dim
                                                                   or layer.head_dim))
        v_dim = layer.v_head_dim or layer.head_dim
        return heads * (pick(layer.head_dim) + pick(v_dim))
    layer.elements_per_token(tp)  # validates tp
    return 0


def kv_bytes_per_token(model: Model, fmt: str | KVFormat = "bf16", tp: int = 1,
                       part: str = "all") -> int:
    """Bytes one GPU adds per token in format ``fmt``, per-token scales included.

    ``part="data"`` or ``"scales"`` splits the total. Constant recurrent state is excluded, as in
    :meth:`kvlib.Model.kv_bytes_per_token`; for a plain dtype the two agree exactly.
    """
    fmt = kv_format(fmt)
    if part not in ("all", "data", "scales"):
        raise ValueError(f"part must be 'all', 'data' or 'scales', got {part!r}")
    model._check_query_heads(tp)
    return sum(_layer_bytes(layer, fmt, tp, part) for layer in model.layers)


def kv_bytes(model: Model, n_tokens: int, fmt: str | KVFormat = "bf16", tp: int = 1,
             state_dtype: str | None = None) -> int:
    """Bytes one sequence of ``n_tokens`` holds on one GPU in format ``fmt``.

    Sliding layers hold ``tokens_held(n_tokens)`` tokens; recurrent layers add their constant
    state in ``state_dtype`` (default: the model's dtype — engines keep it unquantized).
    """
    fmt = kv_format(fmt)
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 0:
        raise ValueError(f"n_tokens must be a non-negative integer, got {n_tokens!r}")
    model._check_query_heads(tp)
    per_token = sum(_layer_bytes(layer, fmt, tp, "all") * layer.tokens_held(n_tokens)
                    for layer in model.layers)
    return per_token + (model.state_bytes(state_dtype, tp) if n_tokens > 0 else 0)


def kv_elements_per_token(model: Model, tp: int = 1) -> int:
    """Elements one GPU adds per token (K and V, or latent + RoPE key), before any dtype."""
    model._check_query_heads(tp)
    return sum(layer.elements_per_token(tp) for layer in model.layers)


def kv_bytes_per_token_at_bits(model: Model, bits: float, tp: int = 1) -> float:
    """Per-token bytes if every element took ``bits`` on average (e.g. DeepSeek-V2's "6 bits")."""
    if not bits > 0:
        raise ValueError(f"bits must be positive, got {bits!r}")
    return kv_elements_per_token(model, tp) * bits / 8


def scale_overhead(model: Model, fmt: str | KVFormat, tp: int = 1) -> float:
    """Share of the per-token bytes that are scales and zero points (0 for unscaled formats)."""
    total = kv_bytes_per_token(model, fmt, tp)
    return kv_bytes_per_token(model, fmt, tp, part="scales") / total if total else 0.0
