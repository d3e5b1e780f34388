"""Byte units and element sizes.

Everything inside kvlib is in bytes (int), seconds, FLOP/s and bytes/s. Conversions to
KiB/GiB (binary, 1024-based) or KB/GB (decimal, 1000-based) happen only at display time,
and the name of every helper says which one it uses.
"""
from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3
KB = 1000
MB = 1000**2
GB = 1000**3

#: Bits per stored element, by the dtype names kvlib accepts.
DTYPE_BITS: dict[str, int] = {
    "fp32": 32,
    "fp16": 16,
    "bf16": 16,
    "fp8": 8,
    "int8": 8,
    "int4": 4,
    "fp4": 4,
}

#: Hugging Face ``torch_dtype`` strings mapped to kvlib dtype names.
HF_DTYPE_NAMES: dict[str, str] = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
}


def dtype_bits(dtype: str) -> int:
    """Bits per element of ``dtype``; raises ValueError for an unknown name."""
    try:
        return DTYPE_BITS[dtype]
    except (KeyError, TypeError):
        known = ", ".join(DTYPE_BITS)
        raise ValueError(f"unknown dtype {dtype!r}; known dtypes: {known}") from None


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype`` (0.5 for int4/fp4)."""
    return dtype_bits(dtype) / 8


def elements_to_bytes(n_elements: int, dtype: str) -> int:
    """Bytes that ``n_elements`` values of ``dtype`` occupy, rounded up to whole bytes."""
    if n_elements < 0:
        raise ValueError(f"element count must be >= 0, got {n_elements}")
    return -(-n_elements * dtype_bits(dtype) // 8)  # exact integer arithmetic


def to_kib(n_bytes: float) -> float:
    """Bytes → KiB (1 KiB = 1024 bytes)."""
    return n_bytes / KIB


def to_gib(n_bytes: float) -> float:
    """Bytes → GiB (1 GiB = 1024³ bytes)."""
    return n_bytes / GIB


def to_kb(n_bytes: float) -> float:
    """Bytes → KB (1 KB = 1000 bytes)."""
    return n_bytes / KB


def to_gb(n_bytes: float) -> float:
    """Bytes → GB (1 GB = 10⁹ bytes)."""
    return n_bytes / GB
