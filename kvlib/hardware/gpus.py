"""GPUs, their interconnects and their prices, from ``data/gpus.csv``, ``data/allreduce.csv`` and
``data/prices.csv``.

Memory is in bytes (binary: the vendor's "80GB" of HBM is 80 GiB), bandwidth in bytes/s and
compute in FLOP/s (decimal, as datasheets give them), dense tensor-core rates (datasheets print
2:4-sparse figures twice as large; ``gpus.csv`` halves them and says so per row). GPU-to-GPU
bandwidth is per direction; the latency of one all-reduce comes from published microbenchmarks
(``allreduce_latency``), never from a fit.
"""
from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

from ..core.checks import integer, number, positive_integer
from ..core.data import GPU_VENDORS, MEMORY_ABOVE_STATED, csv_path, resolve_slug

@dataclass(frozen=True)
class GPU:
    """One accelerator as its datasheet and its runtime describe it.

    memory_bytes_stated: the vendor's capacity in bytes ("80GB" HBM read as 80 GiB);
    memory_bytes_runtime: total memory the CUDA runtime reports (``cudaMemGetInfo``, the
    ``total_gpu_memory`` vLLM multiplies by ``gpu_memory_utilization``), None when unsourced;
    memory_bytes_nvml: the total nvidia-smi prints, None when unsourced;
    hbm_bytes_per_s: peak DRAM bandwidth (decimal bytes/s); bf16_dense_flops /
    fp8_dense_flops: peak dense tensor FLOP/s (None when unsupported or unsourced);
    source: the datasheet URL; notes: caveats from the data row; vendor: "NVIDIA", "AMD"
    (``kvlib.core.data.GPU_VENDORS``) or "" (none: no vendor's engine rules or case bands);
    interconnect: the GPU-to-GPU link kind; link_bytes_per_s: one GPU's GPU-to-GPU bandwidth in
    one direction (decimal B/s, None when unsourced); peer_bytes_per_s: the part of it that
    reaches one peer (equal to it behind a switch, one link of a full mesh otherwise).
    The runtime and nvidia-smi totals may not exceed the stated capacity by more than
    ``kvlib.core.data.MEMORY_ABOVE_STATED`` (they lie just below it), nor the peer's
    bandwidth the link's.
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
    vendor: str = ""
    interconnect: str = ""
    link_bytes_per_s: float | None = None
    peer_bytes_per_s: float | None = None
    compute_units: int | None = None

    def __post_init__(self) -> None:
        positive_integer(f"{self.slug}: memory_bytes_stated", self.memory_bytes_stated)
        for name in ("memory_bytes_runtime", "memory_bytes_nvml", "compute_units"):
            value = getattr(self, name)
            if value is not None:
                positive_integer(f"{self.slug}: {name}", value)
        for name in ("hbm_bytes_per_s", "bf16_dense_flops", "fp8_dense_flops", "link_bytes_per_s",
                     "peer_bytes_per_s"):
            value = getattr(self, name)
            if value is not None:
                number(f"{self.slug}: {name}", value, positive=True)
        if self.vendor and self.vendor not in GPU_VENDORS:
            raise ValueError(f"{self.slug}: vendor must be one of {', '.join(GPU_VENDORS)} (or "
                             f"empty), got {self.vendor!r}")
        for name in ("memory_bytes_runtime", "memory_bytes_nvml"):
            value = getattr(self, name)
            if value is not None and value > self.memory_bytes_stated * (1 + MEMORY_ABOVE_STATED):
                raise ValueError(f"{self.slug}: {name} {value} is more than "
                                 f"{MEMORY_ABOVE_STATED:.0%} above memory_bytes_stated "
                                 f"{self.memory_bytes_stated}")
        if (self.link_bytes_per_s is not None and self.peer_bytes_per_s is not None
                and self.peer_bytes_per_s > self.link_bytes_per_s):
            raise ValueError(f"{self.slug}: peer_bytes_per_s {self.peer_bytes_per_s:g} is above "
                             f"link_bytes_per_s {self.link_bytes_per_s:g}")

    @property
    def usable_memory_bytes(self) -> int:
        """The total an engine sizes against: the CUDA runtime total when sourced, else the
        nvidia-smi total (about 0.5% larger on HBM parts), else the stated capacity."""
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
        if compute_dtype == "fp8":
            value, label = self.fp8_dense_flops, "fp8"
        elif compute_dtype in ("bf16", "fp16"):
            value, label = self.bf16_dense_flops, "bf16"
        else:
            raise ValueError(f"compute_dtype must be bf16, fp16 or fp8, got {compute_dtype!r}")
        if value is None:
            raise ValueError(f"{self.slug}: no sourced dense {label} FLOP/s in data/gpus.csv "
                             f"({'unsupported' if label == 'fp8' else 'unsourced'})")
        return value

    def group_link_bytes_per_s(self, n_gpus: int) -> float:
        """Bandwidth (B/s, one direction) one GPU has towards the other ``n_gpus − 1`` of its
        tensor-parallel group: the whole link behind a switch; on a full mesh (one link per
        peer: MI300X, MI325X, MI355X) only the ``n_gpus − 1`` links that reach the group."""
        if self.link_bytes_per_s is None or self.peer_bytes_per_s is None:
            raise ValueError(f"{self.slug}: no sourced GPU-to-GPU bandwidth in data/gpus.csv")
        integer("n_gpus", n_gpus, 2)
        return min(self.link_bytes_per_s, self.peer_bytes_per_s * (n_gpus - 1))


def _unknown_gpus(path: Path, column: str, known: Iterable[str]) -> None:
    """ValueError naming ``path``, the line of its first row whose ``column`` names a GPU not
    in ``known`` (the slugs of ``data/gpus.csv``), and every such GPU; nothing when none does."""
    slugs = set(known)
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        unknown = [(reader.line_num, value) for row in reader
                   if (value := (row.get(column) or "").strip()) and value not in slugs]
    if unknown:
        names = sorted({value for _, value in unknown})
        raise ValueError(f"{path}: line {unknown[0][0]}, column {column} names GPUs missing from "
                         f"data/gpus.csv: {names}")


@lru_cache(maxsize=None)
def _gpu_refs_checked(path: Path, mtime_ns: int, size: int, column: str,
                      known: frozenset[str]) -> None:
    _unknown_gpus(path, column, known)


def _int_or_none(value: str) -> int | None:
    return int(value) if str(value).strip() else None


def _float_or_none(value: str) -> float | None:
    return float(value) if str(value).strip() else None


@lru_cache(maxsize=None)
def _gpu_rows(path: Path, mtime: float) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False).set_index("slug")


def gpu_table() -> pd.DataFrame:
    """``data/gpus.csv`` as a DataFrame indexed by slug (strings, as stored; every row checked
    by ``kvlib.core.data``)."""
    path = csv_path("gpus.csv")
    return _gpu_rows(path, path.stat().st_mtime).copy()


def gpu_slugs() -> list[str]:
    """Every GPU slug in ``data/gpus.csv``, sorted."""
    return sorted(gpu_table().index)


def load_gpu(slug: str) -> GPU:
    """The GPU for a slug, e.g. ``load_gpu("h100-sxm")``; KeyError names close matches."""
    path = csv_path("gpus.csv")
    mtime = path.stat().st_mtime
    resolve_slug("GPU", slug, _gpu_rows(path, mtime).index, "data/gpus.csv")
    return _gpu(slug, path, mtime)


@lru_cache(maxsize=None)
def resolve_gpu(gpu: GPU | str) -> GPU:
    """A ``GPU`` as given, or the row of ``data/gpus.csv`` for a slug; TypeError otherwise."""
    if isinstance(gpu, GPU):
        return gpu
    if isinstance(gpu, str):
        return load_gpu(gpu)
    raise TypeError(f"gpu must be a GPU or a slug from data/gpus.csv, got {type(gpu).__name__}")


def _gpu(slug: str, path: Path, mtime: float) -> GPU:
    row = _gpu_rows(path, mtime).loc[slug]

    def cell(column: str) -> str:  # a column the schema does not require may be left out
        return row.get(column, "")
    return GPU(slug=slug, name=row["name"], memory_bytes_stated=int(row["memory_bytes_stated"]),
               memory_bytes_runtime=_int_or_none(cell("memory_bytes_runtime")),
               memory_bytes_nvml=_int_or_none(cell("memory_bytes_nvml")),
               hbm_bytes_per_s=_float_or_none(cell("hbm_bytes_per_s")),
               bf16_dense_flops=_float_or_none(cell("bf16_dense_flops")),
               fp8_dense_flops=_float_or_none(cell("fp8_dense_flops")),
               source=row["source_url"], notes=cell("notes"), vendor=row["vendor"],
               interconnect=cell("interconnect"),
               link_bytes_per_s=_float_or_none(cell("interconnect_bytes_per_s_per_direction")),
               peer_bytes_per_s=_float_or_none(cell("interconnect_peer_bytes_per_s_per_direction")),
               compute_units=_int_or_none(cell("compute_units")))


#: Largest message (bytes) whose all-reduce time is read as latency: below it the published
#: times stay within a few µs of their minimum on every GPU in ``data/allreduce.csv``.
LATENCY_MESSAGE_BYTES = 32 * 1024


@dataclass(frozen=True)
class AllReduceLatency:
    """The fixed time of one all-reduce on a tensor-parallel group, from published rows.

    seconds: the median over ``rows`` of the measured time (µs in the file); rows: the
    ``data/allreduce.csv`` ids used; basis: which GPU and group size they were measured on, and
    why (this GPU, a GPU with the same interconnect, or — for interconnects no row covers — every
    row, a lower bound).
    """

    seconds: float
    rows: tuple[str, ...]
    basis: str


def _engine_kernel(row: pd.Series) -> bool:
    """Rows timing the all-reduce an engine runs in a captured decode step: graph-captured (or
    not stated: the AMD pull-request tables) and shipped. Left out: eager launches and
    nccl-tests (no graph), AMD QuickReduce (SGLang enables it only for messages above ~1 MB) and
    the unmerged branch of vLLM PR #39080."""
    return (row["cuda_graph"] != "no" and not row["library"].startswith("AMD quick")
            and "not merged" not in row["engine_version"])


@lru_cache(maxsize=None)
def _allreduce_rows(path: Path, mtime: float) -> pd.DataFrame:
    rows = pd.read_csv(path, dtype=str, keep_default_na=False)
    rows = rows[rows.apply(_engine_kernel, axis=1)]
    rows = rows[rows["message_bytes"].astype(int) <= LATENCY_MESSAGE_BYTES]
    return rows.assign(n_gpus=rows["n_gpus"].astype(int), latency_us=rows["latency_us"].astype(float))


@lru_cache(maxsize=None)
def allreduce_latency(gpu: str, n_gpus: int) -> AllReduceLatency:
    """The latency of one decode-size all-reduce over ``n_gpus`` ``gpu``s (a slug).

    The median time of the published engine all-reduce rows (``_engine_kernel``) with messages
    up to ``LATENCY_MESSAGE_BYTES``, measured on this GPU — else on a GPU with the same
    ``interconnect`` in ``data/gpus.csv`` (A100-40GB uses the A100-80GB rows, MI325X the MI300X
    ones) — at the group size nearest ``n_gpus``. An interconnect no row covers (PCIe cards) gets
    the median of every row, which a PCIe all-reduce can only exceed.
    """
    integer("n_gpus", n_gpus, 2)
    g = load_gpu(gpu)
    path = csv_path("allreduce.csv")
    stat = path.stat()
    table = gpu_table()
    _gpu_refs_checked(path, stat.st_mtime_ns, stat.st_size, "gpu_slug", frozenset(table.index))
    rows = _allreduce_rows(path, stat.st_mtime)
    if rows.empty:
        raise ValueError(f"{path}: no row times an engine's all-reduce (graph-captured or not "
                         f"stated, shipped) of at most {LATENCY_MESSAGE_BYTES} bytes: "
                         "kvlib reads the latency from those")
    links = table["interconnect"] if "interconnect" in table else pd.Series("", table.index)
    same_link = [s for s in table.index if links[s] == g.interconnect]
    own = rows[rows["gpu_slug"] == g.slug]
    if not own.empty:
        sel, where = own, f"measured on {g.name}"
    elif not (kin := rows[rows["gpu_slug"].isin(same_link)]).empty:
        names = sorted(set(kin["gpu"]))
        sel, where = kin, f"measured on {', '.join(names)} (same interconnect: {g.interconnect})"
    else:
        median = float(rows["latency_us"].median()) * 1e-6
        return AllReduceLatency(median, tuple(rows["id"]),
                                f"no published all-reduce for {g.interconnect}: median of every "
                                "row (NVLink and Infinity Fabric), a lower bound")
    nearest = min(sorted(set(sel["n_gpus"])), key=lambda n: (abs(n - n_gpus), n))
    sel = sel[sel["n_gpus"] == nearest]
    return AllReduceLatency(float(sel["latency_us"].median()) * 1e-6, tuple(sel["id"]),
                            f"{where}, {nearest} GPUs, messages up to "
                            f"{LATENCY_MESSAGE_BYTES // 1024} KiB")


def load_prices() -> pd.DataFrame:
    """``data/prices.csv``: dated $/GPU-hour rows with their source (one row per offer; every
    row checked by ``kvlib.core.data``: a positive price, a date, a source; and a GPU of
    ``data/gpus.csv``, else a ValueError naming the line)."""
    path = csv_path("prices.csv")
    prices = pd.read_csv(path, keep_default_na=False, dtype={"date": str})
    slugs = gpu_slugs()
    if not set(prices["gpu"]) <= set(slugs):
        _unknown_gpus(path, "gpu", slugs)  # the line and every unknown GPU
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


#: The dtypes of ``data/gemm_rates.csv`` that time FP8 matmuls (per-tensor and block-scaled).
FP8_GEMMS = ("fp8", "fp8_block")


@lru_cache(maxsize=None)
def _gemm_rows(path: Path, mtime: float) -> pd.DataFrame:
    rows = pd.read_csv(path, dtype=str, keep_default_na=False)
    return rows.assign(median_tflops=rows["median_tflops"].astype(float))


def fp8_matmul_share() -> float:
    """How much of its datasheet peak an FP8 matmul reaches, as a share of what a 16-bit one
    reaches of its own: for each GPU of ``data/gemm_rates.csv`` timed in both, (median FP8 rate ÷
    FP8 peak) ÷ (median bf16 rate ÷ bf16 peak), over the engines' large GEMMs (M, N, K ≥ 4,096,
    NVIDIA's aiconfigurator tables); the median over those GPUs, to 0.01. ValueError when no
    GPU is timed in both."""
    path = csv_path("gemm_rates.csv")
    rows = _gemm_rows(path, path.stat().st_mtime)
    ratios = []
    for slug, own in rows.groupby("gpu"):
        g = load_gpu(slug)
        fp8 = own.loc[own["gemm_dtype"].isin(FP8_GEMMS), "median_tflops"]
        bf16 = own.loc[own["gemm_dtype"] == "bf16", "median_tflops"]
        if fp8.empty or bf16.empty or g.fp8_dense_flops is None or g.bf16_dense_flops is None:
            continue
        ratios.append((fp8.median() * 1e12 / g.fp8_dense_flops)
                      / (bf16.median() * 1e12 / g.bf16_dense_flops))
    if not ratios:
        raise ValueError(f"{path}: no GPU is timed in both bf16 and FP8 GEMMs")
    return round(float(pd.Series(ratios).median()), 2)
