"""GPUs and their prices, from ``data/gpus.csv`` and ``data/prices.csv``.

Memory is in bytes (binary: the vendor's "80GB" of HBM is 80 GiB), bandwidth in bytes/s and
compute in FLOP/s (decimal, as datasheets give them), dense tensor-core rates (datasheets print
2:4-sparse figures twice as large; ``gpus.csv`` halves them and says so per row).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

from .checks import number, positive_integer
from .data import csv_path, resolve_slug

#: Element formats whose matmuls run on the FP8 tensor cores; everything else (bf16/fp16
#: weights, and weight-only int4/fp4 formats that dequantize to 16-bit) uses the 16-bit rate.
FP8_COMPUTE = ("fp8",)


@dataclass(frozen=True)
class GPU:
    """One accelerator as its datasheet and its runtime describe it.

    memory_bytes_stated: the vendor's capacity in bytes ("80GB" HBM read as 80 GiB);
    memory_bytes_runtime: total memory the CUDA runtime reports (``cudaMemGetInfo``, the
    ``total_gpu_memory`` vLLM multiplies by ``gpu_memory_utilization``), None when unsourced;
    memory_bytes_nvml: the total nvidia-smi prints, None when unsourced;
    hbm_bytes_per_s: peak DRAM bandwidth (decimal bytes/s); bf16_dense_flops /
    fp8_dense_flops: peak dense tensor FLOP/s (None when unsupported or unsourced);
    source: the datasheet URL; notes: caveats from the data row.
    """

    slug: str
    name: str
    memory_bytes_stated: int
    memory_bytes_runtime: int | None = None
    memory_bytes_nvml: int | None = None
    hbm_bytes_per_s: float | None = None
    bf16_dense_flops: float | None = None
    fp8_dense_flops: float | None = None
    source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        positive_integer(f"{self.slug}: memory_bytes_stated", self.memory_bytes_stated)
        for name in ("memory_bytes_runtime", "memory_bytes_nvml"):
            value = getattr(self, name)
            if value is not None:
                positive_integer(f"{self.slug}: {name}", value)
        for name in ("hbm_bytes_per_s", "bf16_dense_flops", "fp8_dense_flops"):
            value = getattr(self, name)
            if value is not None:
                number(f"{self.slug}: {name}", value, positive=True)

    @property
    def usable_memory_bytes(self) -> int:
        """The total an engine sizes against: the CUDA runtime total when sourced, else the
        nvidia-smi total (about 0.5 % larger on HBM parts), else the stated capacity."""
        for value in (self.memory_bytes_runtime, self.memory_bytes_nvml, self.memory_bytes_stated):
            if value is not None:
                return value
        raise AssertionError("unreachable: memory_bytes_stated is required")

    @property
    def usable_memory_source(self) -> str:
        """Which of the three totals ``usable_memory_bytes`` used."""
        if self.memory_bytes_runtime is not None:
            return "cuda runtime"
        return "nvidia-smi" if self.memory_bytes_nvml is not None else "datasheet"

    def bandwidth(self) -> float:
        """Peak memory bandwidth in bytes/s; ValueError when the data has none."""
        if self.hbm_bytes_per_s is None:
            raise ValueError(f"{self.slug}: no sourced memory bandwidth in data/gpus.csv")
        return self.hbm_bytes_per_s

    def dense_flops(self, compute_dtype: str = "bf16") -> float:
        """Peak dense tensor FLOP/s for matmuls in ``compute_dtype`` (bf16/fp16 or fp8)."""
        if compute_dtype in FP8_COMPUTE:
            value, label = self.fp8_dense_flops, "fp8"
        elif compute_dtype in ("bf16", "fp16"):
            value, label = self.bf16_dense_flops, "bf16"
        else:
            raise ValueError(f"compute_dtype must be bf16, fp16 or fp8, got {compute_dtype!r}")
        if value is None:
            raise ValueError(f"{self.slug}: no sourced dense {label} FLOP/s in data/gpus.csv "
                             f"({'unsupported' if label == 'fp8' else 'unsourced'})")
        return value


def compute_dtype_for(weight_dtype: str) -> str:
    """The matmul dtype a weight format runs in: fp8 on FP8 tensor cores (W8A8), otherwise
    bf16 (16-bit weights, and weight-only 4/8-bit formats that dequantize to bf16)."""
    return "fp8" if weight_dtype in FP8_COMPUTE else "bf16"


def _int_or_none(value: str) -> int | None:
    return int(value) if str(value).strip() else None


def _float_or_none(value: str) -> float | None:
    return float(value) if str(value).strip() else None


@lru_cache(maxsize=None)
def _gpu_rows(path: Path, mtime: float) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False).set_index("slug")


def gpu_table() -> pd.DataFrame:
    """``data/gpus.csv`` as a DataFrame indexed by slug (strings, as stored; every row checked
    by ``kvlib.data``)."""
    path = csv_path("gpus.csv")
    return _gpu_rows(path, path.stat().st_mtime).copy()


def gpu_slugs() -> list[str]:
    """Every GPU slug in ``data/gpus.csv``, sorted."""
    return sorted(gpu_table().index)


def load_gpu(slug: str) -> GPU:
    """The GPU for a slug, e.g. ``load_gpu("h100-sxm")``; KeyError names close matches."""
    table = gpu_table()
    resolve_slug("GPU", slug, table.index, "data/gpus.csv")
    row = table.loc[slug]
    return GPU(slug=slug, name=row["name"], memory_bytes_stated=int(row["memory_bytes_stated"]),
               memory_bytes_runtime=_int_or_none(row["memory_bytes_runtime"]),
               memory_bytes_nvml=_int_or_none(row["memory_bytes_nvml"]),
               hbm_bytes_per_s=_float_or_none(row["hbm_bytes_per_s"]),
               bf16_dense_flops=_float_or_none(row["bf16_dense_flops"]),
               fp8_dense_flops=_float_or_none(row["fp8_dense_flops"]),
               source=row["source_url"], notes=row["notes"])


def load_prices() -> pd.DataFrame:
    """``data/prices.csv``: dated $/GPU-hour rows with their source (one row per offer; every
    row checked by ``kvlib.data``: a positive price, a date, a source)."""
    path = csv_path("prices.csv")
    prices = pd.read_csv(path, keep_default_na=False, dtype={"date": str})
    unknown = sorted(set(prices["gpu"]) - set(gpu_slugs()))
    if unknown:
        raise ValueError(f"data/prices.csv names GPUs missing from data/gpus.csv: {unknown}")
    return prices


def price_per_gpu_hour(gpu: str, provider: str, offering: str | None = None) -> float:
    """$ per GPU-hour of one row of ``data/prices.csv``; KeyError when none or several match."""
    prices = load_prices()
    rows = prices[(prices["gpu"] == gpu) & (prices["provider"] == provider)]
    if offering is not None:
        rows = rows[rows["offering"] == offering]
    if len(rows) != 1:
        choices = prices[prices["gpu"] == gpu][["provider", "offering"]].to_dict("records")
        raise KeyError(f"{len(rows)} price rows match gpu={gpu!r}, provider={provider!r}, "
                       f"offering={offering!r}; rows for {gpu}: {choices}")
    return float(rows["dollars_per_gpu_hour"].iloc[0])
