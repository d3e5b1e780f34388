"""Storage formats: of the KV cache (``KVFormat``, bytes per token with scales included) and of the
weights (``WeightFormat``, bits per value of every component of a checkpoint).

## KV formats

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
(:mod:`kvlib.model.layers`); :meth:`kvlib.Model.kv_bytes_per_token` and :meth:`kvlib.Model.kv_bytes`
take a format wherever they take a dtype. Per-tensor constants are left out.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..core.checks import integer
from ..core.units import DTYPE_BITS, dtype_bits


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
        for field_name in ("bits", "vector_scale_bits", "block_scale_bits", "block",
                           "mla_rope_bits"):
            value = getattr(self, field_name)
            if value is not None:  # numpy integers too, stored as int
                object.__setattr__(self, field_name, integer(
                    f"KV format {self.name!r}: {field_name}", value,
                    minimum=1 if field_name == "block" else 0))
        if self.bits == 0:
            raise ValueError(f"KV format {self.name!r}: bits must be positive")
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
    """A format from :data:`FORMATS` by name, or a plain dtype name such as ``"fp16"``, or the
    first word of exactly one format's name that is not a dtype (``"nvfp4"``); ValueError for
    anything else."""
    if isinstance(name, KVFormat):
        return name
    if isinstance(name, str) and name in FORMATS:
        return FORMATS[name]
    if isinstance(name, str) and name in _PLAIN:
        return _PLAIN[name]
    short = [f for key, f in FORMATS.items() if isinstance(name, str) and key.split()[0] == name]
    if len(short) == 1:
        return short[0]
    raise ValueError(f"unknown dtype {name!r}, and no KV format has that name; known dtypes: "
                     f"{', '.join(DTYPE_BITS)}; known formats: {', '.join(map(repr, FORMATS))}")


# --- weight formats -------------------------------------------------------------------------

#: Components whose weights a quantized checkpoint stores in the quantized format; all other
#: components (embeddings, LM head, norms, routers, biases, small state vectors) stay 16-bit,
#: as in FP8/AWQ/GPTQ/MXFP4 checkpoints served by vLLM.
LINEAR_COMPONENTS = ("attention", "mlp", "experts", "shared_experts", "recurrent")
COMPONENTS = ("embedding", "position_embedding", "lm_head", "attention", "mlp", "experts",
              "shared_experts", "router", "recurrent", "norms", "small")

#: Effective bits per weight of the storage formats kvlib accepts for weights: the plain dtypes
#: of ``units.DTYPE_BITS`` plus block-scaled formats, scales included.
#: mxfp4: 4-bit E2M1 + one 8-bit E8M0 scale per 32 values (OCP MX spec) = 4.25 bits;
#: nvfp4: 4-bit + one FP8 scale per 16 values = 4.5 bits;
#: int4-g128: 4-bit + one fp16 scale per 128 values (GPTQ/AWQ group size 128) = 4.125 bits
#: (AWQ's 4-bit zero points add 4/128 more: ``int4-g128-zp`` = 4.15625 bits).
WEIGHT_FORMAT_BITS: dict[str, float] = {
    **{k: float(v) for k, v in DTYPE_BITS.items()},
    "mxfp4": 4.25,
    "nvfp4": 4.5,
    "int4-g128": 4.125,
    "int4-g128-zp": 4.15625,
}
#: Element formats whose matmuls run on the FP8 tensor cores (W8A8); everything else (bf16/fp16
#: weights, and weight-only int4/fp4 formats that dequantize to 16-bit) uses the 16-bit rate.
FP8_COMPUTE = ("fp8",)
#: The family a format belongs to, as the landing page's menu names checkpoints: every 4-bit
#: integer format is "int4".
_FAMILY = {"int4-g128": "int4", "int4-g128-zp": "int4"}


def weight_bits(fmt: str) -> float:
    """Effective bits per weight of a storage format; ValueError for an unknown name."""
    try:
        return WEIGHT_FORMAT_BITS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"unknown weight format {fmt!r}; known: "
                         f"{', '.join(WEIGHT_FORMAT_BITS)}") from None


@dataclass(frozen=True)
class WeightFormat:
    """How a checkpoint stores its weights: one format for its linear layers, or one per
    component (``weight_format`` parses every spelling kvlib accepts).

    linear: the format of every linear layer (attention, MLP, experts, shared experts,
    recurrent projections) when ``components`` is empty; the other components keep the same
    format when it is 16/32-bit and 16-bit otherwise; components: (component, format) pairs,
    sorted, for a checkpoint that quantizes only some components (gpt-oss: experts MXFP4) —
    every component not named is then 16-bit; checkpoint: the repository it stands for, where
    known (not compared).
    """

    linear: str = "bf16"
    components: tuple[tuple[str, str], ...] = ()
    checkpoint: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        weight_bits(self.linear)
        for comp, fmt in self.components:
            if comp not in COMPONENTS:
                raise ValueError(f"weight format names unknown component {comp!r}; known: "
                                 f"{', '.join(COMPONENTS)}")
            weight_bits(fmt)
        if list(self.components) != sorted(dict(self.components).items()):
            raise ValueError("WeightFormat.components must be sorted (component, format) pairs "
                             "with each component once: build it with weight_format()")

    @property
    def bits(self) -> dict[str, float]:
        """Bits per stored value of every component (``COMPONENTS``)."""
        if self.components:
            named = {k: weight_bits(v) for k, v in self.components}
            return {comp: named.get(comp, 16.0) for comp in COMPONENTS}
        b = weight_bits(self.linear)
        other = b if b >= 16 else 16.0
        return {comp: (b if comp in LINEAR_COMPONENTS else other) for comp in COMPONENTS}

    @property
    def compute_dtype(self) -> str:
        """The matmul dtype it runs in: "fp8" when every quantized component is FP8 (W8A8),
        else "bf16"."""
        used = {v for _, v in self.components} if self.components else {self.linear}
        return "fp8" if used <= set(FP8_COMPUTE) else "bf16"

    @property
    def label(self) -> str:
        """The reader's name: "bf16", "fp8", "mxfp4 experts, rest bf16"."""
        if not self.components:
            return self.linear
        return ", ".join(f"{v} {k}" for k, v in self.components) + ", rest bf16"

    @property
    def family(self) -> str:
        """The landing page's menu name: "bf16", "fp8", "int4", "mxfp4 experts"."""
        if not self.components:
            return _FAMILY.get(self.linear, self.linear)
        return ", ".join(f"{_FAMILY.get(v, v)} {k}" for k, v in self.components)

    @property
    def text(self) -> str:
        """The data files' spelling, which ``weight_format`` reads back: "fp8",
        "experts=mxfp4;mlp=fp8"."""
        if not self.components:
            return self.linear
        return ";".join(f"{k}={v}" for k, v in self.components)

    def expert_format(self) -> str:
        """The format of the routed experts."""
        return dict(self.components).get("experts", "bf16") if self.components else self.linear


def weight_format(spec: WeightFormat | str | Mapping[str, str], checkpoint: str = "") -> WeightFormat:
    """The one parser of a weight format: a ``WeightFormat``; a format name ("fp8",
    ``WEIGHT_FORMAT_BITS``) for every linear layer; a component → format mapping
    (``{"experts": "mxfp4"}``); or the data files' text "component=format[;…]".
    ValueError naming what is unknown."""
    if isinstance(spec, WeightFormat):
        return spec
    if isinstance(spec, str) and "=" in spec:
        try:
            spec = dict(part.split("=", 1) for part in spec.split(";"))
        except ValueError:
            raise ValueError(f"weight format {spec!r} is not component=format[;...]") from None
    if isinstance(spec, Mapping):
        if not spec:
            raise ValueError("a weight format mapping names no component")
        items = sorted((str(k).strip(), str(v).strip()) for k, v in spec.items())
        return WeightFormat(components=tuple(items), checkpoint=checkpoint)
    if isinstance(spec, str):
        return WeightFormat(linear=spec.strip(), checkpoint=checkpoint)
    raise TypeError(f"a weight format is a name, a component → format mapping or a "
                    f"WeightFormat, got {type(spec).__name__}")


@dataclass(frozen=True)
class Checkpoint:
    """A published checkpoint's size: ``total_size_bytes`` (``model.safetensors.index.json``
    ``metadata.total_size``, the bytes of every stored tensor), the weight format it is stored
    in and where it is stated."""

    total_size_bytes: int
    weight_format: WeightFormat
    source: str = ""

    def __post_init__(self) -> None:
        integer("checkpoint total_size_bytes", self.total_size_bytes, 1)
        object.__setattr__(self, "weight_format", weight_format(self.weight_format))
