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

A plain dtype is a format too (``plain``). Each layer kind turns a format into its bytes
(:mod:`kvlib.layers`); :meth:`kvlib.Model.kv_bytes_per_token` and :meth:`kvlib.Model.kv_bytes`
take a format wherever they take a dtype. Per-tensor constants are left out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .units import DTYPE_BITS, dtype_bits

if TYPE_CHECKING:
    from .model import Model


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
        """Bytes of the elements of one vector of ``n_elements`` (rounded up to a byte; exact
        integer arithmetic)."""
        bits = self.mla_rope_bits if (rope and self.mla_rope_bits) else self.bits
        return -(-n_elements * bits // 8)

    def scale_bytes(self, n_elements: int, rope: bool = False) -> int:
        """Bytes of scales stored with one vector of ``n_elements`` (0 for an unquantized part)."""
        if n_elements == 0 or (rope and self.mla_rope_bits):
            return 0
        blocks = -(-n_elements // self.block) if self.block else 0
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


_PLAIN = {dtype: plain(dtype) for dtype in DTYPE_BITS}


def kv_format(name: str | KVFormat) -> KVFormat:
    """A format from :data:`FORMATS` by name, or a plain dtype name such as ``"fp16"``;
    ValueError for anything else."""
    if isinstance(name, KVFormat):
        return name
    if isinstance(name, str) and name in FORMATS:
        return FORMATS[name]
    if isinstance(name, str) and name in _PLAIN:
        return _PLAIN[name]
    raise ValueError(f"unknown dtype {name!r}, and no KV format has that name; known dtypes: "
                     f"{', '.join(DTYPE_BITS)}; known formats: {', '.join(map(repr, FORMATS))}")


def scale_overhead(model: Model, fmt: str | KVFormat, tp: int = 1) -> float:
    """Share of a model's per-token bytes that are scales and zero points (0 for unscaled
    formats)."""
    total = model.kv_bytes_per_token(fmt, tp)
    return model.kv_scale_bytes_per_token(fmt, tp) / total if total else 0.0
