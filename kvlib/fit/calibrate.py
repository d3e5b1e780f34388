"""The speed model against measurements: the one place that loads measured speeds, fits the
constants of :mod:`kvlib.speed.roofline` and reports their error.

Points (``speed_points``): every row of ``data/throughput.csv`` the roofline can be asked about.

* *modern* rows (engine releases from 2025 on): a serving benchmark's median time per output
  token (TPOT) or time to first token (TTFT) at a client concurrency, or a static batch's
  latency. A serving TPOT is predicted as ``roofline.serving_steps`` gives it — decode steps
  that carry the other requests' prompts — at ``min(concurrency, requests the KV pool holds)``;
  on an engine that prefills before it decodes (``roofline.PREFILL_FIRST_ENGINES``) a
  closed-loop benchmark runs in waves instead (``roofline.lockstep_steps``); a static batch
  as one prefill plus its decode steps.
* *history* rows (the engines of 2023–2024 and the rows mapped by
  ``data/roofline_calibration.csv``, ``data/validation/throughput_mapping.csv`` and
  ``data/validation/throughput.csv``): predicted and reported apart, never fitted.

Modern decode points (TPOT and static latencies) are split in halves, sorted by source then id
and alternating, so every source lands on both sides (``split``); ``fit`` finds the constants
of a term set (``Terms``: which step and block costs, η_kv free or tied to η_w) on the train
half — ``CHOSEN_TERMS``, the candidate of ``TERM_SETS`` chosen by leave-one-source-out
error (``kvlib.fit.terms.choose_terms``); ``validate`` predicts every point with a given ``Efficiency`` (by default
the shipped ``roofline.CALIBRATED``, which is the train-half fit) and the error is
``predicted ÷ measured − 1`` in the measured unit (seconds). TTFT points are validated, not
fitted. ``error_band`` gives the held-out error for a tensor-parallel degree and batch range
(what the what-to-buy search reads at its slow end).

Generalization (issue 22): ``leave_one_source_out`` refits without each publisher in turn;
``fresh_validation`` predicts ``data/speed_fresh.csv`` — public 2025–2026 measurements that no
fit, split, band or design choice reads (``FRESH_FILE`` is read by ``fresh_points`` only);
``generalization_summary`` and ``generalization_goals`` put the three errors side by side by
GPU vendor, engine, TP degree, batch band and model family (``model_family``) against the
issue's goals. ``case_band`` is the band of one case from measurements like it (vendor ×
engine × family × TP × batch band, relaxed in ``CASE_LEVELS`` order, then the
leave-one-source-out errors), and says ``NO_MEASUREMENTS`` when the data hold none of the
model's family on that GPU and engine: the band every serving answer prints next to a speed,
read from tables ``write_case_bands`` stores (``case_bands`` computes them).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from ..deployment import Deployment
from ..engines import capacity

from ..speed import roofline
from ..core.checks import positive_integer
from ..hardware import gpus
from ..hardware.gpus import GPU, load_gpu, resolve_gpu
from ..core.data import band_problem, csv_path, data_dir
from ..model.formats import weight_format
from ..model.model import Model
from ..model.registry import load_model
from ..speed.roofline import BLOCK_KINDS, Efficiency

#: Publishers of the measured points, by the start of the ``source`` column: a publisher's
#: documents count as one source for leave-one-source-out.
SOURCE_GROUPS = {
    "SemiAnalysis InferenceMAX": "SemiAnalysis InferenceMAX",
    "NVIDIA aiconfigurator": "NVIDIA aiconfigurator silicon sample",
    "NVIDIA NIM": "NVIDIA NIM benchmarking guide",
    "Vultr": "Vultr inference cookbook",
    "AMD ROCm": "AMD ROCm performance results",
    "AccelMark": "AccelMark leaderboard",
    "NVIDIA TensorRT-LLM": "NVIDIA TensorRT-LLM documentation and blog",
    "NVIDIA": "NVIDIA TensorRT-LLM documentation and blog",
    "vLLM": "vLLM project blog",
    "LMDeploy": "LMDeploy documentation (InternLM)",
    "Oracle": "Oracle Cloud Infrastructure blog (vLLM on AMD MI300X)",
}

#: The engine of a row, by the start of its ``engine`` column. NIM's profile engine is not
#: stated; its "fp8 TP2" Llama profiles on H100 are TensorRT-LLM builds, so it is read as
#: TensorRT-LLM. LMDeploy (history only) has no fitted step cost: its points use vLLM's.
ENGINES = {"vLLM": "vllm", "SGLang": "sglang", "TensorRT-LLM": "tensorrt-llm",
           "NVIDIA NIM": "tensorrt-llm", "LMDeploy": "vllm"}

#: Weight formats of checkpoints whose ``weight_format`` column is empty, by the start of the
#: ``weight_dtype`` text: what kvlib serves them as, and why.
WEIGHT_FORMAT_RULES: tuple[tuple[str, str | dict[str, str], str], ...] = (
    ("NVFP4 MoE experts", {"experts": "nvfp4"},
     "NVIDIA's DeepSeek-R1 FP4 checkpoint quantizes the MoE experts; the rest read as 16-bit"),
    ("MXFP4 (AMD Quark", {"experts": "mxfp4"},
     "AMD's DeepSeek-R1 MXFP4 preview: experts MXFP4, the rest read as 16-bit (not checked)"),
    ("fp8", "fp8", "FP8 checkpoint or FP8 GEMMs: every linear layer in FP8"),
    ("bf16", "bf16", "16-bit checkpoint"),
    ("not stated", "bf16", "precision not stated: the published checkpoints are BF16"),
)
#: KV dtype when the row leaves it empty: the engines' default ``auto``, the checkpoint's
#: 16-bit dtype — except NIM's fp8 profiles, which quantize the KV cache to FP8.
DEFAULT_KV_DTYPE = "bf16"

#: Metrics predicted, and the part they play: decode points are fitted and judged against the
#: goals, TTFT points are judged apart.
DECODE_METRICS = ("time_per_output_token_s", "batch_latency_s")
TTFT_METRIC = "time_to_first_token_s"

#: Batch ranges the error is reported by (inclusive upper bounds).
BATCH_RANGES = ((1, 1), (2, 8), (9, 32), (33, 128), (129, 512), (513, 4096))


def batch_range(batch: int) -> str:
    """The ``BATCH_RANGES`` label of a batch or concurrency: "1", "2–8", … "513–4096"."""
    for lo, hi in BATCH_RANGES:
        if lo <= batch <= hi:
            return str(lo) if lo == hi else f"{lo}–{hi}"
    raise ValueError(f"batch {batch!r} outside {BATCH_RANGES[0][0]}–{BATCH_RANGES[-1][1]}")


def _group(text: str, table: Mapping[str, str], what: str) -> str:
    for key, value in table.items():
        if text.startswith(key):
            return value
    raise ValueError(f"measured point from an unknown {what} {text!r}: add it to "
                     f"kvlib.fit.calibrate.{'SOURCE_GROUPS (or FRESH_SOURCE_GROUPS)' if what == 'source' else 'ENGINES'}")


def _assumed_format(weight_dtype: str) -> str | dict[str, str] | None:
    for prefix, fmt, _ in WEIGHT_FORMAT_RULES:
        if weight_dtype.startswith(prefix):
            return fmt
    return None


def _num(value: Any) -> float | None:
    text = str(value).strip()
    return float(text) if text else None


def _modern_points(measured: pd.DataFrame, groups: Mapping[str, str] = SOURCE_GROUPS
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, excluded = [], []
    modern = measured[(measured["era"] == "modern")
                      & measured["metric"].isin([*DECODE_METRICS, TTFT_METRIC])]
    for _, t in modern.iterrows():
        reason = None
        fmt = weight_format(t["weight_format"]) if t["weight_format"] else _assumed_format(
            t["weight_dtype"])
        gpu = _gpu(t["gpu_slug"]) if t["gpu_slug"] else None
        if not t["model_slug"] or gpu is None:
            reason = "model or GPU not in the registry"
        elif fmt is None:
            reason = f"weight format {t['weight_dtype']!r} not mapped"
        elif gpu.bf16_dense_flops is None or gpu.hbm_bytes_per_s is None:
            reason = f"{gpu.name}: no sourced dense FLOP/s or bandwidth in data/gpus.csv"
        concurrency = _num(t["concurrency"]) or _num(t["batch"])
        if reason is None and not concurrency:
            reason = "no batch or concurrency"
        if reason:
            excluded.append({"id": t["id"], "source": t["source"], "reason": reason})
            continue
        kv = t["kv_dtype"] or ("fp8" if t["engine"].startswith("NVIDIA NIM") else DEFAULT_KV_DTYPE)
        isl = _num(t["mean_input_tokens"]) or float(t["input_tokens"])
        osl = _num(t["mean_output_tokens"]) or float(t["output_tokens"])
        mode = t["benchmark_mode"]
        rows.append({
            "id": t["id"], "era": "modern", "source": t["source"],
            "source_group": _group(t["source"], groups, "source"),
            "engine": _group(t["engine"], ENGINES, "engine"), "engine_label": t["engine"],
            "engine_version": t["engine_version"], "model": t["model_slug"], "gpu": gpu.slug,
            "tp": int(t["tp"]), "ep": int(_num(t["ep"]) or 1), "weight_format": weight_format(fmt).text,
            "kv_dtype": kv, "mode": mode, "metric": t["metric"],
            "concurrency": int(concurrency), "input_tokens": max(1, round(isl)),
            "output_tokens": max(2, round(osl)), "value": float(t["value"]),
            "run_group": t["run_group"]})
    return rows, excluded


def _history_points(measured: pd.DataFrame) -> list[dict[str, Any]]:
    """The pre-2025 rows the old calibration mapped (static batches and inter-token latencies)."""
    rows = []
    mapped = [pd.read_csv(csv_path("roofline_calibration.csv"), keep_default_na=False)
              .assign(batch=""),
              pd.read_csv(csv_path("validation/throughput_mapping.csv"),
                          keep_default_na=False, dtype={"batch": str})]
    indexed = measured.set_index("id")
    for frame in mapped:
        for _, m in frame.iterrows():
            if m["mode"] not in ("static", "itl"):
                continue
            t = indexed.loc[m["throughput_id"]]
            batch = m["batch"] or t["batch"] or t["concurrency"]
            rows.append({"id": m["throughput_id"], "source": t["source"], "engine_label": t["engine"],
                         "engine_version": t["engine_version"], "model": m["model_slug"],
                         "gpu": m["gpu_slug"], "tp": int(t["tp"]), "weight_format": m["weight_dtype"],
                         "kv_dtype": m["kv_dtype"], "mode": m["mode"], "metric": t["metric"],
                         "concurrency": int(float(batch)), "input_tokens": int(t["input_tokens"]),
                         "output_tokens": int(t["output_tokens"]), "value": float(t["value"])})
    extra = pd.read_csv(csv_path("validation/throughput.csv"), keep_default_na=False)
    for _, t in extra.iterrows():
        rows.append({"id": t["id"], "source": t["source"], "engine_label": t["engine"],
                     "engine_version": "", "model": t["model_slug"], "gpu": t["gpu_slug"],
                     "tp": int(t["tp"]), "weight_format": t["weight_dtype"],
                     "kv_dtype": t["kv_dtype"], "mode": t["mode"], "metric": t["metric"],
                     "concurrency": int(t["batch"]), "input_tokens": int(t["input_tokens"]),
                     "output_tokens": int(t["output_tokens"]), "value": float(t["value"])})
    for row in rows:
        row.update(era="history", ep=1, run_group="",
                   source_group=_group(row["source"], SOURCE_GROUPS, "source"),
                   engine=_group(row["engine_label"], ENGINES, "engine"))
    return rows


@lru_cache(maxsize=1)
def _points_and_excluded() -> tuple[pd.DataFrame, pd.DataFrame]:
    measured = pd.read_csv(csv_path("throughput.csv"), keep_default_na=False, dtype=str)
    modern, excluded = _modern_points(measured)
    points = pd.DataFrame(modern + _history_points(measured)).set_index("id")
    if points.index.duplicated().any():
        raise ValueError(f"measured points listed twice: "
                         f"{sorted(points.index[points.index.duplicated()])}")
    points["role"] = split(points)
    return points, pd.DataFrame(excluded, columns=["id", "source", "reason"]).set_index("id")


def speed_points() -> pd.DataFrame:
    """Every measured point kvlib predicts, one row per ``id``: era (modern/history), source
    and ``source_group``, ``engine`` (``roofline.ENGINES``), model, GPU, tp, weight format and
    KV dtype (assumptions applied), mode (serving/static/itl), metric, concurrency (or static
    batch), mean input and output tokens, value, and ``role``: "train"/"test" (modern decode
    points), "ttft" (modern TTFT points) or "history"."""
    return _points_and_excluded()[0].copy()


def excluded_points() -> pd.DataFrame:
    """Modern rows of ``data/throughput.csv`` kvlib cannot predict, with the reason."""
    return _points_and_excluded()[1].copy()


def split(points: pd.DataFrame) -> pd.Series:
    """"train" or "test" for each modern decode point — sorted by source group, source, then
    id, alternating (train first), so every source lands on both sides; "ttft" and "history"
    for the rest. Deterministic: no random numbers."""
    decode = points[(points["era"] == "modern") & points["metric"].isin(DECODE_METRICS)]
    order = decode.rename_axis("id").reset_index().sort_values(["source_group", "source", "id"])
    roles = pd.Series("history", index=points.index, name="role")
    roles[(points["era"] == "modern") & (points["metric"] == TTFT_METRIC)] = "ttft"
    for i, point_id in enumerate(order["id"]):
        roles[point_id] = "train" if i % 2 == 0 else "test"
    return roles


# --- a point as roofline steps -------------------------------------------------------------

#: The roofline with every fitted constant at its neutral value (η = 1, no fixed costs) and
#: the all-reduces on: the legs a point is decomposed into.
RAW = Efficiency("raw legs (η = 1, no fixed costs)", communication=True)


@dataclass(frozen=True)
class Parts:
    """A point as weighted roofline steps under ``RAW``; ``seconds(eff)`` is what
    ``roofline`` computes for the same steps with ``eff``.

    weight: how many times each step counts; weights_s / kv_s / compute_s: the weight reads, KV
    reads and math at η = 1; requests: the requests each step schedules;
    allreduce_s: the all-reduces of each step; engine_key: for the engine's step and request
    costs; blocks: the model's blocks; tp: the tensor-parallel degree; numerator: 0 when the
    metric is seconds, else the tokens it divides (output tokens of a static batch); batch: the
    decode batch used; attention_s: the attention math of each step at η = 1 (part of
    compute_s); fp8_matmul: its matmuls run on FP8 tensor cores (``roofline.matmul_rate``
    scales them by ``Efficiency.fp8_matmul_share``).
    """

    weight: np.ndarray
    weights_s: np.ndarray
    kv_s: np.ndarray
    compute_s: np.ndarray
    allreduce_s: np.ndarray
    requests: np.ndarray
    engine_key: str
    blocks: roofline.Blocks
    tp: int
    numerator: float
    batch: int
    attention_s: np.ndarray
    fp8_matmul: bool = False

    def compute_at(self, share: float) -> np.ndarray:
        """``compute_s`` with the matmuls at ``share`` of their η = 1 rate where they run in FP8
        (``Efficiency.fp8_matmul_share``)."""
        if not self.fp8_matmul or share == 1:
            return self.compute_s
        return self.attention_s + (self.compute_s - self.attention_s) / share

    def seconds(self, eff: Efficiency) -> float:
        block = eff.block_overhead_s(self.blocks, self.tp)
        step = dict(eff.step_s).get(self.engine_key, 0.0) if eff.step_s else 0.0
        request = dict(eff.request_s).get(self.engine_key, 0.0)
        times = roofline.law_seconds(self.weights_s, self.kv_s,
                                     self.compute_at(eff.fp8_matmul_share),
                                     step + block + request * self.requests,
                                     self.allreduce_s, eff, self.attention_s)
        return float((self.weight * times).sum())

    def predict(self, eff: Efficiency) -> float:
        seconds = self.seconds(eff)
        return self.numerator / seconds if self.numerator else seconds


@lru_cache(maxsize=None)
def _pool(model: str, gpu: str, tp: int, weight_format: str, kv_dtype: str) -> capacity.Pool:
    return capacity.pool_arithmetic(Deployment(_model(model), _gpu(gpu), tp=tp,
                                               weights=weight_format, kv=kv_dtype,
                                               gpu_memory_utilization=0.9))


def _pool_capacity(model: str, gpu: str, tp: int, weight_format: str, kv_dtype: str,
                   context_tokens: int) -> float:
    """Requests of ``context_tokens`` the vLLM pool kvlib computes holds (utilization 0.9)."""
    pool = _pool(model, gpu, tp, weight_format, kv_dtype)
    return pool.max_concurrency(context_tokens) if pool.tokens > 0 else 0.0


def decode_batch(point: Mapping[str, Any]) -> int:
    """The batch a serving point decodes at: its concurrency, capped by the requests of
    input + output tokens the KV pool holds (an engine queues the rest); at least 1."""
    held = _pool_capacity(point["model"], point["gpu"], int(point["tp"]), point["weight_format"],
                          point["kv_dtype"], int(point["input_tokens"]) + int(point["output_tokens"]))
    return max(1, min(int(point["concurrency"]), math.floor(held) if held >= 1 else 1))


@lru_cache(maxsize=None)
def _model(slug: str):
    return load_model(slug)


@lru_cache(maxsize=None)
def _gpu(slug: str):
    return load_gpu(slug)


def parts(point: Mapping[str, Any], samples: int = 16) -> Parts:
    """Decompose one point into roofline steps (see the module docstring and ``Parts``)."""
    model, gpu, tp = _model(point["model"]), _gpu(point["gpu"]), int(point["tp"])
    d = Deployment(model, gpu, tp=tp, weights=point["weight_format"], kv=point["kv_dtype"],
                   engine=point["engine"], efficiency=RAW)
    isl, osl = int(point["input_tokens"]), int(point["output_tokens"])
    mode, metric = point["mode"], point["metric"]
    steps: list[tuple[float, roofline.Step]] = []
    numerator = 0.0
    if mode == "serving" and point["engine"] in roofline.PREFILL_FIRST_ENGINES:
        batch = decode_batch(point)
        w = roofline.lockstep_steps(d, batch=batch, input_tokens=isl, output_tokens=osl)
        steps = ([(w.ttft_wave_share, w.wave)] if metric == TTFT_METRIC
                 else [(1.0, w.decode), (w.tpot_wave_share, w.wave)])
    elif mode == "serving":
        batch = decode_batch(point)
        s = roofline.serving_steps(d, batch=batch, input_tokens=isl, output_tokens=osl)
        if metric == TTFT_METRIC:
            steps = [(float(s.prompt_chunks), s.first), ((1 - s.prefill_share) / 2, s.decode),
                     (s.prefill_share / 2, s.mixed)]
        else:
            steps = [(1 - s.prefill_share, s.decode), (s.prefill_share, s.mixed)]
    elif mode == "itl":
        batch = int(point["concurrency"])
        steps = [(1.0, roofline.decode_step(d, batch=batch, context_tokens=isl + osl // 2))]
    elif mode == "static":
        batch = int(point["concurrency"])
        held = _pool_capacity(point["model"], point["gpu"], tp, point["weight_format"],
                              point["kv_dtype"], isl + osl)
        waves = max(1, math.ceil(batch / math.floor(held))) if held >= 1 else 1
        wave = math.ceil(batch / waves)
        steps = [(float(waves), roofline.prefill_step(d, batch=wave,
                                                      prompt_tokens=max(isl, 1)))]
        n = min(samples, osl)
        steps += [(waves * osl / n, roofline.decode_step(
            d, batch=wave, context_tokens=isl + int((i + 0.5) * osl / n)))
            for i in range(n)]
        if metric not in ("batch_latency_s", TTFT_METRIC):
            numerator = float(batch * osl)
    else:
        raise ValueError(f"unknown mode {mode!r} (serving, static or itl)")
    if metric in ("output_tokens_per_s",) and not numerator:
        raise ValueError(f"{point.get('id', '?')}: a throughput metric needs a static batch")
    return Parts(weight=np.array([w for w, _ in steps]),
                 weights_s=np.array([st.weights_s for _, st in steps]),
                 kv_s=np.array([st.kv_s for _, st in steps]),
                 compute_s=np.array([st.compute_s for _, st in steps]),
                 allreduce_s=np.array([st.allreduce_s for _, st in steps]),
                 requests=np.array([float(st.requests) for _, st in steps]),
                 engine_key=roofline.engine_key(point["engine"], gpu), blocks=roofline.blocks(model),
                 tp=tp, numerator=numerator, batch=batch,
                 attention_s=np.array([st.attention_s for _, st in steps]),
                 fp8_matmul=roofline.fp8_matmuls(gpu, d.weights))


@lru_cache(maxsize=1)
def _all_parts() -> dict[str, Parts]:
    return {i: parts(p) for i, p in speed_points().iterrows()}


# --- the fit -------------------------------------------------------------------------------

#: Grids of the achieved shares, searched coarse to fine (``fit``): weights η_w 0.50–1.00 and
#: KV η_kv 0.30–1.00 in steps of 0.01, compute η_F 0.30–1.00 in steps of 0.05. The fixed costs
#: are solved for exactly at each grid point searched.
BANDWIDTH_GRID = tuple(round(0.50 + 0.01 * i, 2) for i in range(51))
KV_BANDWIDTH_GRID = tuple(round(0.30 + 0.01 * i, 2) for i in range(71))
COMPUTE_GRID = tuple(round(0.30 + 0.05 * i, 2) for i in range(15))
#: Iterations of the reweighted least squares that turn the fixed-cost solve into a least
#: absolute deviations fit, and the smallest residual a weight divides by.
_IRLS_STEPS, _IRLS_FLOOR = 4, 0.01


def nnls(gram: np.ndarray, rhs: np.ndarray, start: Sequence[int] = ()) -> np.ndarray:
    """Non-negative least squares from its normal equations: min ½xᵀGx − cᵀx with x ≥ 0, for
    ``gram`` = AᵀA and ``rhs`` = Aᵀb (Lawson and Hanson's active set). ``start``: columns to try
    as the free set first (the previous solution's, when solving a sequence of close problems)."""
    n = len(rhs)
    ridge = 1e-12 * max(float(np.trace(gram)), 1e-300)

    def solve_on(cols: list[int]) -> np.ndarray:
        z = np.zeros(n)
        if cols:
            sub = gram[np.ix_(cols, cols)]
            sub[np.diag_indices_from(sub)] += ridge
            z[cols] = np.linalg.solve(sub, rhs[cols])
        return z

    passive = sorted(start)
    x = solve_on(passive)
    if passive and not (x[passive] > 0).all():
        passive, x = [], np.zeros(n)
    for _ in range(3 * n + 3):
        gradient = rhs - gram @ x
        free = [j for j in range(n) if j not in passive and gradient[j] > 1e-12 * (1 + abs(rhs[j]))]
        if not free:
            break
        passive.append(max(free, key=lambda j: gradient[j]))
        while passive:
            z = solve_on(passive)
            if (z[passive] > 0).all():
                x = z
                break
            shrink = [j for j in passive if z[j] <= 0]
            alpha = min(x[j] / (x[j] - z[j]) for j in shrink)
            x = x + alpha * (z - x)
            passive = [j for j in passive if x[j] > 1e-15]
    return x


@dataclass(frozen=True)
class Terms:
    """Which fixed costs and shares the fit solves for: a term set, named in words.

    step: one step cost per engine build (``roofline.engine_key``: engine, with ``-rocm`` on
    AMD GPUs), ``"vendor"`` (one per GPU vendor) or ``"shared"`` (one shared by all engines);
    blocks: ``"kind"`` (one cost per block kind, ``BLOCK_KINDS``), ``"common"`` (one cost every
    block pays, plus one more for each of ``OWN_KERNEL_KINDS``) or ``"none"``; tie_kv: the KV reads get the
    weight reads' share (η_kv = η_w) instead of a share of their own; requests: a cost per
    request a step schedules, ``"engine"`` (one per engine build), ``"vendor"`` (one per GPU
    vendor) or ``""`` (none); stages: a cost per block per doubling of the tensor-parallel
    group (``Efficiency.stage_s``); law: how the legs combine (``roofline.LAWS``); gemm: FP8
    matmuls at the measured share of their peak (``kvlib.hardware.gpus.fp8_matmul_share``,
    not fitted) instead of at the same share as 16-bit ones."""

    name: str
    step: str = "engine"
    blocks: str = "kind"
    tie_kv: bool = False
    requests: str = ""
    stages: bool = False
    law: str = "overlap"
    gemm: bool = False

    def __post_init__(self) -> None:
        if self.step not in STEP_TERMS:
            raise ValueError(f"Terms.step {self.step!r}: one of {', '.join(STEP_TERMS)}")
        if self.blocks not in BLOCK_TERMS:
            raise ValueError(f"Terms.blocks {self.blocks!r}: one of {', '.join(BLOCK_TERMS)}")
        if self.requests not in ("", "engine", "vendor"):
            raise ValueError(f"Terms.requests {self.requests!r}: 'engine', 'vendor' or ''")
        if self.law not in roofline.LAWS:
            raise ValueError(f"Terms.law {self.law!r}: one of {', '.join(roofline.LAWS)}")

    @property
    def constants(self) -> int:
        """How many constants the fit solves for: the shares (two with η_kv tied to η_w, else
        three), a step cost per group (``ENGINE_KEYS`` builds, two vendors or one), the block
        costs (``block_costs``), a request cost per group (builds or vendors) and the stage
        cost."""
        groups = {"engine": len(ENGINE_KEYS), "vendor": 2, "shared": 1, "": 0}
        block_names = {c for names in block_costs(self.blocks).values() for c in names}
        return ((2 if self.tie_kv else 3) + groups[self.step] + len(block_names)
                + groups[self.requests] + int(self.stages))


#: The ways a step cost can be shared out (``Terms.step``).
STEP_TERMS = ("engine", "vendor", "shared")
#: The ways blocks can cost time (``Terms.blocks``).
BLOCK_TERMS = ("kind", "common", "none")
#: Block kinds that run kernels a softmax-attention or dense-FFN block does not (latent
#: projections; the recurrent scan; routing, token permutation and grouped expert matmuls):
#: under ``Terms.blocks == "common"`` each costs the common block cost plus one of its own.
OWN_KERNEL_KINDS = ("mla", "recurrent", "moe_ffn")


def block_costs(how: str) -> dict[str, tuple[str, ...]]:
    """The fitted block costs a block of each kind pays under ``Terms.blocks`` ``how``, by
    name: ``"kind"``, its own kind's; ``"common"``, the common one (``"block"``) plus its
    kind's for ``OWN_KERNEL_KINDS``; ``"none"``, nothing."""
    if how == "kind":
        return {k: (k,) for k in BLOCK_KINDS}
    if how == "common":
        return {k: ("block",) + ((k,) if k in OWN_KERNEL_KINDS else ()) for k in BLOCK_KINDS}
    if how == "none":
        return {k: () for k in BLOCK_KINDS}
    raise ValueError(f"Terms.blocks {how!r}: one of {', '.join(BLOCK_TERMS)}")
#: The engine builds a shared or per-vendor step cost is stored for (``roofline.engine_key``):
#: every engine on NVIDIA GPUs, vLLM and SGLang on AMD ones (TensorRT-LLM runs on NVIDIA only).
ENGINE_KEYS = ("sglang", "sglang-rocm", "tensorrt-llm", "vllm", "vllm-rocm")
#: The candidate term sets ``kvlib.fit.terms`` compares by leave-one-source-out error.
TERM_SETS = (
    Terms("a step cost per engine build and a cost per block kind"),
    Terms("one step cost shared by all engines and a cost per block kind", step="shared"),
    Terms("a step cost per GPU vendor and a cost per block kind", step="vendor"),
    Terms("a step cost per engine build, no block costs", blocks="none"),
    Terms("one step cost shared by all engines, a cost per block kind, η_kv = η_w", step="shared",
          tie_kv=True),
    Terms("a step cost per GPU vendor, a cost per block kind and per doubling of the TP group, "
          "a cost per request per GPU vendor", step="vendor", requests="vendor", stages=True),
    Terms("a step cost per GPU vendor, a cost per block kind and per doubling of the TP group, "
          "a cost per request per engine build", step="vendor", requests="engine", stages=True),
    Terms("a step cost per GPU vendor, a cost per block kind and per doubling of the TP group, "
          "a cost per request per GPU vendor, η_kv = η_w", step="vendor", tie_kv=True,
          requests="vendor", stages=True),
    Terms("a step cost per GPU vendor, a cost per block kind and per doubling of the TP group, "
          "a cost per request per engine build, η_kv = η_w", step="vendor", tie_kv=True,
          requests="engine", stages=True),
    Terms("a step cost per GPU vendor, a cost every block pays plus one for latent, recurrent "
          "and MoE blocks, a cost per doubling of the TP group, a cost per request per GPU "
          "vendor, η_kv = η_w", step="vendor", blocks="common", tie_kv=True, requests="vendor",
          stages=True),
    Terms("a step cost per GPU vendor, a cost every block pays plus one for latent, recurrent "
          "and MoE blocks, a cost per doubling of the TP group, a cost per request per engine "
          "build, η_kv = η_w", step="vendor", blocks="common", tie_kv=True, requests="engine",
          stages=True),
    Terms("a step cost per GPU vendor, a cost every block pays plus one for latent, recurrent "
          "and MoE blocks, a cost per doubling of the TP group, a cost per request per GPU "
          "vendor, η_kv = η_w, the kernels of a step in sequence", step="vendor",
          blocks="common", tie_kv=True, requests="vendor", stages=True, law="sequence"),
    Terms("a step cost per GPU vendor, a cost every block pays plus one for latent, recurrent "
          "and MoE blocks, a cost per doubling of the TP group, a cost per request per engine "
          "build, η_kv = η_w, the kernels of a step in sequence", step="vendor",
          blocks="common", tie_kv=True, requests="engine", stages=True, law="sequence"),
    Terms("a step cost per GPU vendor, a cost every block pays plus one for latent, recurrent "
          "and MoE blocks, a cost per doubling of the TP group, a cost per request per GPU "
          "vendor, η_kv = η_w, the kernels of a step in sequence, FP8 matmuls at their measured "
          "share of the peak", step="vendor", blocks="common", tie_kv=True, requests="vendor",
          stages=True, law="sequence", gemm=True),
    Terms("a step cost per GPU vendor, a cost every block pays plus one for latent, recurrent "
          "and MoE blocks, a cost per doubling of the TP group, a cost per request per engine "
          "build, η_kv = η_w, the kernels of a step in sequence, FP8 matmuls at their measured "
          "share of the peak", step="vendor", blocks="common", tie_kv=True, requests="engine",
          stages=True, law="sequence", gemm=True),
)
#: The term set ``roofline.CALIBRATED`` is fitted with: the candidate of ``TERM_SETS``
#: ``kvlib.fit.terms.choose_terms`` picks by leave-one-source-out median, a near tie going to
#: the fewest constants (data/speed_term_selection.csv).
CHOSEN_TERMS = TERM_SETS[13]


def _cost_group(key: str, how: str) -> str:
    """The group an engine build's step or request cost is shared in: the build itself
    (``"engine"``), its GPU vendor (``"vendor"``) or every build (``"shared"``)."""
    if how == "engine":
        return key
    if how == "vendor":
        return "AMD" if key.endswith("-rocm") else "NVIDIA"
    return "every engine"


def _fixed_columns(items: Sequence[Parts], terms: Terms) -> tuple[list[str], np.ndarray]:
    """The design matrix of the fixed costs: one column per step group of ``terms`` (step
    weight sum); one per block cost (``block_costs``: step weight sum × the blocks that pay
    it); with request costs, one per request group (Σ step weight × requests); with stage
    costs, one (step weight sum × blocks × log2 tp)."""
    steps = sorted({_cost_group(p.engine_key, terms.step) for p in items})
    paid = block_costs(terms.blocks)
    kinds = sorted({c for names in paid.values() for c in names})
    requests = sorted({_cost_group(p.engine_key, terms.requests) for p in items}) \
        if terms.requests else []
    names = ([f"step:{e}" for e in steps] + [f"block:{k}" for k in kinds]
             + [f"request:{e}" for e in requests] + (["stage"] if terms.stages else []))
    cols = np.zeros((len(items), len(names)))
    for i, p in enumerate(items):
        total = p.weight.sum()
        cols[i, names.index(f"step:{_cost_group(p.engine_key, terms.step)}")] = total
        for kind, costs in paid.items():
            for cost in costs:
                cols[i, names.index(f"block:{cost}")] += total * getattr(p.blocks, kind)
        if requests:
            cols[i, names.index(f"request:{_cost_group(p.engine_key, terms.requests)}")] = \
                float((p.weight * p.requests).sum())
        if terms.stages:
            cols[i, names.index("stage")] = total * p.blocks.total * math.log2(p.tp)
    return names, cols


def fit(point_parts: Mapping[str, Parts], measured: Mapping[str, float],
        terms: Terms = CHOSEN_TERMS) -> Efficiency:
    """The constants of ``terms`` minimising the summed |log(predicted ÷ measured)| over the
    given points (metric in seconds): for every (η_w, η_kv, η_F) searched, the fixed costs by
    reweighted non-negative least squares on the relative error; the best wins. A shared or
    per-vendor step cost is stored for every engine build it covers (``ENGINE_KEYS``), one the
    points lack included. Deterministic."""
    ids = list(point_parts)
    if not ids:
        raise ValueError("no points to fit")
    items = [point_parts[i] for i in ids]
    if any(p.numerator for p in items):
        raise ValueError("fit takes points measured in seconds (TPOT, latency), not tokens/s")
    y = np.array([measured[i] for i in ids], dtype=float)
    # every step of every point in one flat array; ``owner`` maps a step to its point
    owner = np.concatenate([np.full(len(p.weight), k) for k, p in enumerate(items)])
    share = gpus.fp8_matmul_share() if terms.gemm else 1.0
    compute = np.concatenate([p.compute_at(share) for p in items])
    weight, weights, kv, comm, attention = (
        np.concatenate([getattr(p, a) for p in items])
        for a in ("weight", "weights_s", "kv_s", "allreduce_s", "attention_s"))
    comm_total = np.bincount(owner, weight * comm, minlength=len(items))
    names, cols = _fixed_columns(items, terms)
    design = cols / y[:, None]

    def solve(bw: float, kv_bw: float, fl: float) -> tuple[float, tuple[float, float, float],
                                                           np.ndarray]:
        law = Efficiency("legs", bandwidth=bw, kv_bandwidth=kv_bw, compute=fl, law=terms.law)
        legs = weight * roofline.law_seconds(weights, kv, compute, 0.0, 0.0, law, attention)
        roof = np.bincount(owner, legs, minlength=len(items)) + comm_total
        target = 1 - roof / y
        w = np.ones(len(y))
        support: list[int] = []
        for _ in range(_IRLS_STEPS):
            weighted = design * w[:, None]
            coef = nnls(design.T @ weighted, weighted.T @ target, support)
            support = [j for j in range(len(coef)) if coef[j] > 0]
            w = 1 / np.maximum(np.abs(design @ coef - target), _IRLS_FLOOR)
        return float(np.abs(np.log((roof + cols @ coef) / y)).sum()), (bw, kv_bw, fl), coef

    def near(grid: Sequence[float], centre: float, reach: float) -> list[float]:
        return [v for v in grid if abs(v - centre) <= reach + 1e-9]

    def search(bw: Sequence[float], kv: Sequence[float], fl: Sequence[float]) -> list[tuple]:
        if terms.tie_kv:
            return [solve(b, b, f) for b in bw for f in fl]
        return [solve(b, k, f) for b in bw for k in kv for f in fl]

    # coarse: every 0.1 of each share; then ±0.05 around the best in steps of 0.02 (η_w, η_kv)
    # and 0.05 (η_F); then ±0.01 in steps of 0.01
    tried = search(BANDWIDTH_GRID[::10], KV_BANDWIDTH_GRID[::10], COMPUTE_GRID[::2])
    for reach, stride, fl_reach in ((0.05, 2, 0.05), (0.01, 1, 0.05)):
        centre = min(tried, key=lambda r: r[0])[1]
        tried += search(near(BANDWIDTH_GRID, centre[0], reach)[::stride],
                        near(KV_BANDWIDTH_GRID, centre[1], reach)[::stride],
                        near(COMPUTE_GRID, centre[2], fl_reach))
    _, (bw, kv_bw, fl), coef = min(tried, key=lambda r: r[0])
    values = dict(zip(names, coef))
    if terms.step == "engine":
        step_s = tuple((n.split(":", 1)[1], float(values[n])) for n in names
                       if n.startswith("step:"))
    else:
        step_s = tuple((k, float(values.get(f"step:{_cost_group(k, terms.step)}", 0.0)))
                       for k in ENGINE_KEYS)
    request_s = tuple((k, float(values.get(f"request:{_cost_group(k, terms.requests)}", 0.0)))
                      for k in ENGINE_KEYS) if terms.requests else ()
    return Efficiency("fitted", bandwidth=bw, kv_bandwidth=kv_bw, compute=fl, law=terms.law,
                      fp8_matmul_share=share,
                      step_s=step_s,
                      block_s=tuple((k, float(sum(values.get(f"block:{c}", 0.0)
                                                  for c in block_costs(terms.blocks)[k])))
                                    for k in BLOCK_KINDS),
                      request_s=request_s, stage_s=float(values.get("stage", 0.0)),
                      communication=True, source="kvlib.fit.calibrate.fit")


def rounded(eff: Efficiency) -> Efficiency:
    """``eff`` as ``roofline.CALIBRATED`` stores it: step costs to 1 µs, block, request and
    stage costs to 0.1 µs."""
    return Efficiency(
        "calibrated (data/throughput.csv, train half)", bandwidth=eff.bandwidth,
        kv_bandwidth=eff.kv_bandwidth, compute=eff.compute,
        step_s=tuple((k, round(v * 1e6) / 1e6) for k, v in eff.step_s),
        block_s=tuple((k, round(v * 1e7) / 1e7) for k, v in eff.block_s),
        request_s=tuple((k, round(v * 1e7) / 1e7) for k, v in eff.request_s),
        stage_s=round(eff.stage_s * 1e7) / 1e7,
        communication=eff.communication, source=eff.source, law=eff.law,
        fp8_matmul_share=eff.fp8_matmul_share)


def fit_train_half(terms: Terms = CHOSEN_TERMS) -> Efficiency:
    """``fit`` of ``terms`` on the train half of the modern decode points, rounded as
    ``roofline.CALIBRATED`` stores it (with the chosen terms, tests/test_calibrate.py checks the
    two agree)."""
    pts = speed_points()
    train = pts[pts["role"] == "train"]
    every = _all_parts()
    return rounded(fit({i: every[i] for i in train.index}, train["value"].to_dict(), terms))


# --- errors --------------------------------------------------------------------------------

def validate(efficiency: Efficiency | None = None) -> pd.DataFrame:
    """Every point predicted with ``efficiency`` (default ``roofline.CALIBRATED``) and with the
    datasheet roofline: the point's columns plus ``batch`` (the decode batch used),
    ``predicted``, ``error`` (predicted ÷ measured − 1), ``datasheet``, ``datasheet_error`` and
    ``batch_range``."""
    eff = roofline.CALIBRATED if efficiency is None else efficiency
    pts = speed_points()
    every = _all_parts()
    out = pts.copy()
    out["batch"] = [every[i].batch for i in pts.index]
    out["predicted"] = [every[i].predict(eff) for i in pts.index]
    out["datasheet"] = [every[i].predict(roofline.DATASHEET) for i in pts.index]
    out["error"] = out["predicted"] / out["value"] - 1
    out["datasheet_error"] = out["datasheet"] / out["value"] - 1
    out["batch_range"] = out["concurrency"].map(batch_range)
    return out


def error_summary(results: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Points, median |error|, the 10th and 90th percentile of the signed error, the worst
    |error| and the share beyond 40%, for all ``results`` or per ``by`` group."""
    groups: list[tuple[Any, pd.DataFrame]] = [("all", results)]
    if by:
        groups = list(results.groupby(list(by), observed=True))
    rows = []
    for key, grp in groups:
        err = grp["error"]
        label = key if not isinstance(key, tuple) or len(key) > 1 else key[0]
        rows.append({**({"group": label} if by else {}), "n": len(grp),
                     "median_abs_error": float(err.abs().median()),
                     "p10": float(err.quantile(0.1)), "p90": float(err.quantile(0.9)),
                     "worst_abs_error": float(err.abs().max()),
                     "beyond_40": float((err.abs() > 0.4).mean())})
    return pd.DataFrame(rows)


def _decode_points() -> pd.DataFrame:
    pts = speed_points()
    return pts[pts["role"].isin(["train", "test"])]


def kv_read_share(point_ids: Sequence[str]) -> pd.Series:
    """For each modern decode point: the KV cache's share of the bytes its steps read (KV ÷
    (weights + KV), each step weighted as the point counts it) — how much reading the cache
    weighs in the point, whatever the shares it is read at."""
    every = _all_parts()
    def share(p: Parts) -> float:
        kv = float((p.weight * p.kv_s).sum())
        return kv / (kv + float((p.weight * p.weights_s).sum()))
    return pd.Series({i: share(every[i]) for i in point_ids}, dtype=float)


def fit_without(group: str, terms: Terms = CHOSEN_TERMS) -> Efficiency:
    """``terms`` fitted on every modern decode point (both halves) except source group
    ``group``'s: the constants ``leave_one_source_out`` predicts that group with. KeyError
    naming the known groups for one with no decode points."""
    decode = _decode_points()
    known = sorted(decode["source_group"].unique())
    if group not in known:
        raise KeyError(f"no modern decode points from {group!r}; sources: {known}")
    every = _all_parts()
    rest = decode[decode["source_group"] != group]
    return fit({i: every[i] for i in rest.index}, rest["value"].to_dict(), terms)


def leave_one_source_out(groups: Sequence[str] | None = None,
                         terms: Terms = CHOSEN_TERMS) -> pd.DataFrame:
    """For each source group of the modern decode points (or each of ``groups``): refit
    ``terms`` on every other group's points (both halves) and predict the left-out group. One
    row per point: ``source_group``, ``engine``, ``tp``, ``value``, ``predicted``, ``error`` and
    ``fitted_without`` (the points the refit used)."""
    decode = _decode_points()
    every = _all_parts()
    rows = []
    known = sorted(decode["source_group"].unique())
    unknown = sorted(set(groups or ()) - set(known))
    if unknown:
        raise KeyError(f"no modern decode points from {unknown}; sources: {known}")
    for group in (known if groups is None else sorted(groups)):
        eff = fit_without(group, terms)
        rest_n = int((decode["source_group"] != group).sum())
        for i, p in decode[decode["source_group"] == group].iterrows():
            pred = every[i].predict(eff)
            rows.append({"id": i, "source_group": group, "engine": p["engine"], "tp": p["tp"],
                         "value": p["value"], "predicted": pred, "error": pred / p["value"] - 1,
                         "fitted_without": rest_n})
    return pd.DataFrame(rows).set_index("id")


@dataclass(frozen=True)
class ErrorBand:
    """The held-out error of the shipped model where a case sits: tensor-parallel degree
    ``tp`` and batch range ``batch_range`` (wider when that cell has fewer than
    ``MIN_BAND_POINTS`` points: ``scope`` says which points were used).

    n: held-out points; median_abs_error; low / high: the 10th and 90th percentile of
    predicted ÷ measured − 1 of time per output token. A predicted speed ``r`` then spans
    ``r·(1 + low)`` … ``r·(1 + high)`` (speed is 1 ÷ time), a predicted cost ``c`` spans
    ``c ÷ (1 + high)`` … ``c ÷ (1 + low)``.
    """

    tp: int
    batch_range: str
    scope: str
    n: int
    median_abs_error: float
    low: float
    high: float

    def __post_init__(self) -> None:
        problem = band_problem(self.low, self.high)
        if problem:
            raise ValueError(f"error band {self.scope!r}: {problem}")

    def speed_range(self, tokens_per_s: float) -> tuple[float, float]:
        """(low, high) of a predicted rate, in its unit."""
        return tokens_per_s * (1 + self.low), tokens_per_s * (1 + self.high)

    def cost_range(self, dollars: float) -> tuple[float, float]:
        """(low, high) of a predicted cost per token, in its unit."""
        return dollars / (1 + self.high), dollars / (1 + self.low)


#: Fewest held-out points a (TP, batch range) cell needs to give its own band.
MIN_BAND_POINTS = 10
#: Tensor-parallel degrees the band table covers; any other degree gets the all-points band.
BAND_TP_DEGREES = (1, 2, 4, 8)
#: Where ``write_error_bands`` stores the table ``error_band`` reads.
BANDS_FILE = "speed_error_bands.csv"


def error_bands(results: pd.DataFrame | None = None) -> pd.DataFrame:
    """The band of every (TP, batch range) cell from held-out decode points (``validate()``
    by default): the test-half points of that TP and batch range; with fewer than
    ``MIN_BAND_POINTS``, the test points of that batch range at every TP; then every test point
    at that TP; then every test point (the row with ``tp`` 0). Columns: tp, batch_range, scope,
    n, median_abs_error, low, high."""
    res = validate() if results is None else results
    test = res[res["role"] == "test"]

    def summary(sel: pd.DataFrame, scope: str) -> dict[str, Any]:
        err = sel["error"]
        return {"scope": scope, "n": len(sel),
                "median_abs_error": round(float(err.abs().median()), 4),
                "low": round(float(err.quantile(0.1)), 4),
                "high": round(float(err.quantile(0.9)), 4)}

    rows = [{"tp": 0, "batch_range": "", **summary(test, "every held-out point")}]
    for tp in BAND_TP_DEGREES:
        for lo, _ in BATCH_RANGES:
            label = batch_range(lo)
            choices = [(test[(test["tp"] == tp) & (test["batch_range"] == label)],
                        f"TP {tp}, batch {label}"),
                       (test[test["batch_range"] == label], f"every TP, batch {label}"),
                       (test[test["tp"] == tp], f"TP {tp}, every batch"),
                       (test, "every held-out point")]
            sel, scope = next((c for c in choices if len(c[0]) >= MIN_BAND_POINTS), choices[-1])
            rows.append({"tp": tp, "batch_range": label, **summary(sel, scope)})
    return pd.DataFrame(rows)


def write_error_bands() -> None:
    """Regenerate ``data/<BANDS_FILE>`` from the measurements (after a refit or new data)."""
    error_bands().to_csv(data_dir() / BANDS_FILE, index=False)


@lru_cache(maxsize=None)
def _bands(mtime: float) -> pd.DataFrame:
    return pd.read_csv(csv_path(BANDS_FILE), keep_default_na=False, dtype={"batch_range": str})


def error_band(tp: int, batch: int) -> ErrorBand:
    """The held-out error band of ``roofline.CALIBRATED`` for ``tp`` GPUs at decode ``batch``,
    from ``data/speed_error_bands.csv`` (``error_bands``; tests/test_calibrate.py checks it is
    current). A degree outside ``BAND_TP_DEGREES`` gets the band of every held-out point."""
    tp = positive_integer("tp", tp)
    return _band(tp, batch_range(batch), (data_dir() / BANDS_FILE).stat().st_mtime)


@lru_cache(maxsize=None)
def _band(tp: int, label: str, mtime: float) -> ErrorBand:
    table = _bands(mtime)
    cell = table[(table["tp"] == tp) & (table["batch_range"] == label)]
    if cell.empty:
        cell = table[table["tp"] == 0]
    r = cell.iloc[0]
    return ErrorBand(tp=tp, batch_range=label, scope=str(r["scope"]), n=int(r["n"]),
                     median_abs_error=float(r["median_abs_error"]), low=float(r["low"]),
                     high=float(r["high"]))


# --- model families and the GPU vendor of a point --------------------------------------------

#: Model families the errors are reported by and the case bands are keyed on, from a
#: registry model's blocks (``model_family``).
MODEL_FAMILIES = ("dense GQA", "MoE", "MLA-MoE", "hybrid")


def model_family(model: Model | str) -> str:
    """The family of a registry model, from its architecture record (``roofline.blocks``):
    "hybrid" when any layer has a recurrent mixer (Mamba-2, Gated DeltaNet: Nemotron-H,
    Qwen3-Next, Qwen3.5), else "MLA-MoE" when it has latent attention (DeepSeek-V2/V3/R1,
    Kimi-K2), else "MoE" when any FFN is a mixture of experts (gpt-oss, Qwen3-235B, MiniMax,
    Llama-4), else "dense GQA" (every dense softmax-attention model, MHA and sliding windows
    included); a dense latent-attention model would be "MLA" (the registry has none). E.g.
    ``model_family("deepseek-v3") == "MLA-MoE"`` (a ``Model`` built from a config works too)."""
    return _family(model) if isinstance(model, str) else _blocks_family(roofline.blocks(model))


@lru_cache(maxsize=None)
def _family(model: str) -> str:
    return _blocks_family(roofline.blocks(_model(model)))


def _blocks_family(b: roofline.Blocks) -> str:
    if b.recurrent:
        return "hybrid"
    if b.mla:
        return "MLA-MoE" if b.moe_ffn else "MLA"
    return "MoE" if b.moe_ffn else "dense GQA"


def gpu_vendor(gpu: str) -> str:
    """"NVIDIA" or "AMD": the vendor column of ``data/gpus.csv`` for a GPU slug."""
    return _gpu(gpu).vendor


def _with_groups(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (one row per point, with model, gpu, concurrency) plus ``vendor``, ``family``
    and ``batch_range``: the keys errors are summarised and bands looked up by."""
    return frame.assign(vendor=frame["gpu"].map(gpu_vendor),
                        family=frame["model"].map(model_family),
                        batch_range=frame["concurrency"].map(batch_range))


def error_by_gpu_and_family(results: pd.DataFrame) -> pd.DataFrame:
    """The signed error of ``results`` (one row per point with model, gpu and ``error`` =
    predicted ÷ measured − 1) per GPU × model family (``model_family``): gpu, gpu_name, family,
    n, median_error (fraction) and n_beyond_40 (points missed by more than 40%), a heatmap's
    cells. E.g. errors −0.5, 0.1, 0.2 on one GPU and family: median 0.1, one beyond 40%."""
    missing = [c for c in ("model", "gpu", "error") if c not in results.columns]
    if missing:
        raise KeyError(f"columns not in the results: {missing}")
    grouped = results.assign(family=results["model"].map(model_family)).groupby(
        ["gpu", "family"], sort=True)["error"]
    out = pd.DataFrame({"n": grouped.size(), "median_error": grouped.median(),
                        "n_beyond_40": grouped.agg(lambda e: int((e.abs() > 0.4).sum()))})
    out = out.reset_index()
    out.insert(1, "gpu_name", out["gpu"].map(lambda g: _gpu(g).name))
    return out


# --- the fresh validation set ---------------------------------------------------------------

#: The fresh validation set (data/README.md): public measurements of 2025–2026 outside
#: ``throughput.csv``, read only by ``fresh_points`` — never by the fit, the split, the bands
#: or leave-one-source-out.
FRESH_FILE = "speed_fresh.csv"
#: Publishers of the fresh rows, by the start of their ``source``; a publisher that also
#: appears in ``SOURCE_GROUPS`` keeps its group there (``publisher_in_fit`` says so).
FRESH_SOURCE_GROUPS = {
    "SGLang cookbook": "SGLang cookbook",
    "vLLM recipes": "vLLM recipes",
    "AMD ROCm": "AMD ROCm performance results",
    "GPUStack": "GPUStack performance lab",
    "dstack": "dstack benchmarks",
    "Tensward": "Tensward case studies",
}


@lru_cache(maxsize=1)
def _fresh() -> tuple[pd.DataFrame, pd.DataFrame]:
    measured = pd.read_csv(csv_path(FRESH_FILE), keep_default_na=False, dtype=str)
    rows, excluded = _modern_points(measured, FRESH_SOURCE_GROUPS)
    points = pd.DataFrame(rows).set_index("id")
    dated = measured.set_index("id")["dated"]
    points["dated"] = dated.reindex(points.index)
    points["role"] = np.where(points["metric"] == TTFT_METRIC, "fresh-ttft", "fresh")
    fitted = set(speed_points()["source_group"])
    points["publisher_in_fit"] = points["source_group"].isin(fitted)
    return points, pd.DataFrame(excluded, columns=["id", "source", "reason"]).set_index("id")


def fresh_points() -> pd.DataFrame:
    """Every row of ``data/speed_fresh.csv`` kvlib can predict, with ``speed_points``' columns,
    ``dated`` (publication date), ``role`` ("fresh" for TPOT and static latencies,
    "fresh-ttft") and ``publisher_in_fit`` (the publisher also has points in the fit)."""
    return _fresh()[0].copy()


def fresh_excluded() -> pd.DataFrame:
    """Rows of the fresh set kvlib cannot predict, with the reason."""
    return _fresh()[1].copy()


@lru_cache(maxsize=1)
def _fresh_parts() -> dict[str, Parts]:
    return {i: parts(p) for i, p in fresh_points().iterrows()}


def fresh_validation(efficiency: Efficiency | None = None) -> pd.DataFrame:
    """The fresh decode points (median TPOT of serving benchmarks, static-batch latencies)
    predicted with ``efficiency`` (default ``roofline.CALIBRATED``, which never saw them):
    ``fresh_points``' columns plus ``batch``, ``predicted``, ``error`` (predicted ÷ measured − 1),
    ``vendor``, ``family`` and ``batch_range``."""
    eff = roofline.CALIBRATED if efficiency is None else efficiency
    pts = fresh_points()
    pts = pts[pts["role"] == "fresh"]
    every = _fresh_parts()
    out = pts.copy()
    out["batch"] = [every[i].batch for i in pts.index]
    out["predicted"] = [every[i].predict(eff) for i in pts.index]
    out["error"] = out["predicted"] / out["value"] - 1
    return _with_groups(out)


# --- the three errors side by side -----------------------------------------------------------

#: The issue-22 goals for the error on setups the fit never saw (fractions).
GOAL_MEDIAN, GOAL_TP, GOAL_BEYOND_40 = 0.10, 0.15, 0.05
#: The three ways the speed model is judged, in the order reported.
ERROR_SETS = ("random split", "leave one source out", "fresh set")
#: Breakdowns of ``generalization_summary``: label → column.
BREAKDOWNS = (("overall", ""), ("GPU vendor", "vendor"), ("engine", "engine"),
              ("TP degree", "tp"), ("batch band", "batch_range"), ("model family", "family"))


@lru_cache(maxsize=1)
def _loso_all() -> pd.DataFrame:
    return leave_one_source_out()


def loso_results() -> pd.DataFrame:
    """``leave_one_source_out()`` for every source (computed once), with each point's model,
    GPU, concurrency and the ``vendor`` / ``family`` / ``batch_range`` keys."""
    loso = _loso_all()
    pts = speed_points().loc[loso.index, ["model", "gpu", "concurrency"]]
    return _with_groups(loso.join(pts))


def error_sets() -> dict[str, pd.DataFrame]:
    """The decode points of each of ``ERROR_SETS`` with their ``error`` under the constants
    that never saw them: the held-out half under ``CALIBRATED``, every modern decode point
    under the refit without its source, the fresh set under ``CALIBRATED``."""
    return {"random split": _held_out().copy(), "leave one source out": loso_results(),
            "fresh set": fresh_validation()}


def generalization_summary() -> pd.DataFrame:
    """Median |error| and share beyond 40% of each of ``ERROR_SETS``, side by side, overall
    and per ``BREAKDOWNS`` group: columns breakdown, group, then ``n``, ``median_abs_error``
    and ``beyond_40`` per set (``"<set>: n"`` …; NaN where a set has no point of the group),
    and ``goal``: the bound a median of that row is held to (``GOAL_TP`` on TP rows,
    ``GOAL_MEDIAN`` elsewhere)."""
    sets = error_sets()
    frames = []
    for label, column in BREAKDOWNS:
        per_set = []
        for name, res in sets.items():
            s = error_summary(res, [column] if column else ())
            s = s.assign(group="all") if not column else s
            s["group"] = s["group"].astype(str)
            per_set.append(s.set_index("group")[["n", "median_abs_error", "beyond_40"]]
                           .add_prefix(f"{name}: "))
        joined = pd.concat(per_set, axis=1)
        if column == "batch_range":
            joined = joined.loc[sorted(joined.index, key=lambda g: int(g.split("–")[0]))]
        elif column == "tp":
            joined = joined.loc[sorted(joined.index, key=int)]
        else:
            joined = joined.sort_index()
        frames.append(joined.reset_index().assign(breakdown=label))
    out = pd.concat(frames, ignore_index=True)
    out["goal"] = np.where(out["breakdown"] == "TP degree", GOAL_TP, GOAL_MEDIAN)
    cols = ["breakdown", "group"] + [f"{s}: {k}" for s in ERROR_SETS
                                     for k in ("n", "median_abs_error", "beyond_40")] + ["goal"]
    return out[cols]


def generalization_goals() -> pd.DataFrame:
    """One row per ``ERROR_SETS`` entry: points, median |error|, the worst median at any TP
    degree (degrees with at least ``MIN_BAND_POINTS`` points), the share beyond 40%, and
    whether each of the issue's goals is met (``median_met``, ``tp_met``, ``beyond_met``)."""
    rows = []
    for name, res in error_sets().items():
        overall = error_summary(res).iloc[0]
        by_tp = error_summary(res, ["tp"])
        by_tp = by_tp[by_tp["n"] >= MIN_BAND_POINTS]
        worst = by_tp.loc[by_tp["median_abs_error"].idxmax()]
        rows.append({"set": name, "n": int(overall["n"]),
                     "median_abs_error": float(overall["median_abs_error"]),
                     "worst_tp": int(worst["group"]),
                     "worst_tp_median": float(worst["median_abs_error"]),
                     "beyond_40": float(overall["beyond_40"]),
                     "median_met": bool(overall["median_abs_error"] <= GOAL_MEDIAN),
                     "tp_met": bool(worst["median_abs_error"] <= GOAL_TP),
                     "beyond_met": bool(overall["beyond_40"] <= GOAL_BEYOND_40)})
    return pd.DataFrame(rows)


# --- bands that know what they do not know ---------------------------------------------------

#: The keys a case band matches measurements on, and the order they are relaxed in when a
#: cell has fewer than ``MIN_BAND_POINTS`` points: batch band first, then TP degree, then
#: engine, then model family, then vendor. Held-out points are used while the GPU vendor,
#: engine and model family still match (the first three levels); past that, the
#: leave-one-source-out errors are searched with the same levels.
CASE_KEYS = ("vendor", "engine", "family", "tp", "batch_range")
CASE_LEVELS: tuple[tuple[str, ...], ...] = (
    CASE_KEYS, CASE_KEYS[:4], CASE_KEYS[:3], ("vendor", "family"), ("vendor",), ())
#: Levels at which held-out points still count as "like the case".
HELD_OUT_LEVELS = 3
#: What a case band says when the data hold no decode point of the model's family on that
#: GPU with that engine.
NO_MEASUREMENTS = "no measurements of this model family on this GPU and engine"


@dataclass(frozen=True)
class CaseBand(ErrorBand):
    """An ``ErrorBand`` from measurements like one case (``case_band``): gpu, engine and
    model_family of the case, ``vendor`` of its GPU, ``basis`` ("held-out" or
    "leave-one-source-out") and ``measured``: modern decode points (train or held-out) of
    this model family on this GPU with this engine — 0 makes ``scope`` start with
    ``NO_MEASUREMENTS``. ``words`` says the same for a reader."""

    gpu: str = ""
    engine: str = ""
    model_family: str = ""
    vendor: str = ""
    basis: str = ""
    measured: int = 0
    cell: str = ""

    @property
    def words(self) -> str:
        """The band's basis in a sentence: "median miss of 12 measurements like this: 12%
        (NVIDIA GPUs, vLLM, dense GQA, TP 2, batch 33–128)", or, when the data hold no point of
        the family on this GPU and engine, ``NO_MEASUREMENTS`` and the leave-one-source-out
        (or wider held-out) median it falls back to."""
        miss = f"{self.median_abs_error:.0%}"
        loso = self.basis == "leave-one-source-out"
        if self.measured:
            kind = "leave-one-source-out median miss" if loso else "median miss"
            return f"{kind} of {self.n:,} measurements like this: {miss} ({self.cell})"
        kind = "leave-one-source-out median" if loso else "held-out median"
        return f"{NO_MEASUREMENTS}; {kind} miss of {self.n:,} measurements of {self.cell}: {miss}"


_ENGINE_WORDS = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM"}
#: Tensor-parallel degrees the case-band table keys on; any other degree is looked up (and
#: its measurements pooled) as 0, "another degree".
CASE_TP_DEGREES = (1, 2, 4, 8)
#: Every family ``model_family`` can return, the table's family axis.
CASE_FAMILIES = (*MODEL_FAMILIES, "MLA")
#: Where ``write_case_bands`` stores the tables ``case_band`` reads: the band of every
#: vendor × engine × family × TP × batch range, and the decode points per GPU × engine × family.
CASE_BANDS_FILE = "speed_case_bands.csv"
CASE_MEASURED_FILE = "speed_case_measured.csv"


def _tp_bucket(tp: int) -> int:
    return tp if tp in CASE_TP_DEGREES else 0


def _cell_words(case: Mapping[str, Any], keys: Sequence[str]) -> str:
    tp = case["tp"]
    words = {"vendor": f"{case['vendor']} GPUs",
             "engine": _ENGINE_WORDS.get(case["engine"], case["engine"]),
             "family": case["family"],
             "tp": f"TP {tp}" if tp else "a TP degree other than 1, 2, 4 or 8",
             "batch_range": f"batch {case['batch_range']}"}
    return ", ".join(words[k] for k in keys) if keys else "every point"


def _level_stats(frame: pd.DataFrame) -> list[dict[tuple, tuple[int, float, float, float]]]:
    """Per ``CASE_LEVELS`` entry: key values → (n, median |error|, 10th, 90th percentile)."""
    frame = frame.assign(tp=frame["tp"].map(_tp_bucket), abs_error=frame["error"].abs())
    out = []
    for keys in CASE_LEVELS:
        if not keys:
            e = frame["error"]
            out.append({(): (len(e), float(frame["abs_error"].median()),
                             float(e.quantile(0.1)), float(e.quantile(0.9)))})
            continue
        g = frame.groupby(list(keys), sort=False)
        stats = pd.DataFrame({"n": g.size(), "med": g["abs_error"].median(),
                              "low": g["error"].quantile(0.1), "high": g["error"].quantile(0.9)})
        out.append({(k if isinstance(k, tuple) else (k,)): (int(r.n), r.med, r.low, r.high)
                    for k, r in zip(stats.index, stats.itertuples(index=False))})
    return out


def _first_level(stats: Sequence[Mapping[tuple, tuple[int, float, float, float]]],
                 case: Mapping[str, Any]) -> tuple[int, tuple[int, float, float, float]] | None:
    """The first of ``CASE_LEVELS`` (with its stats) whose cell like ``case`` has
    ``MIN_BAND_POINTS`` points — the last, every point, whatever it has."""
    for i, table in enumerate(stats):
        keys = CASE_LEVELS[i]
        cell = table.get(tuple(case[k] for k in keys))
        if cell is not None and (cell[0] >= MIN_BAND_POINTS or not keys):
            return i, cell
    return None


def case_bands() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tables ``case_band`` reads, computed from the measurements (``write_case_bands``
    stores them; tests/test_calibrate.py checks they are current).

    Bands: one row per GPU vendor of ``data/gpus.csv`` × engine × ``CASE_FAMILIES`` × TP
    (``CASE_TP_DEGREES``, 0 for any other) × batch range: ``basis``, ``level`` (the index in
    ``CASE_LEVELS`` of the keys matched), ``held_out`` (held-out points of vendor × engine ×
    family, the last held-out level), n, median_abs_error, low, high — held-out points while a
    level of the first ``HELD_OUT_LEVELS`` has ``MIN_BAND_POINTS``, else the
    leave-one-source-out errors at the first level that has them (every point at the last).
    Measured: gpu, engine, family, n — modern decode points (train and held-out) of each
    combination the data hold."""
    held, loso = _level_stats(_held_out()), _level_stats(loso_results())
    vendors = sorted(set(pd.read_csv(csv_path("gpus.csv"))["vendor"]))
    rows = []
    for vendor in vendors:
        for engine in _ENGINE_WORDS:
            for family in CASE_FAMILIES:
                for tp in (*CASE_TP_DEGREES, 0):
                    for lo, _ in BATCH_RANGES:
                        case = {"vendor": vendor, "engine": engine, "family": family, "tp": tp,
                                "batch_range": batch_range(lo)}
                        few = held[HELD_OUT_LEVELS - 1].get(
                            tuple(case[k] for k in CASE_LEVELS[HELD_OUT_LEVELS - 1]), (0,))[0]
                        found = _first_level(held[:HELD_OUT_LEVELS], case)
                        basis = "held-out" if found else "leave-one-source-out"
                        level, (n, med, low, high) = found or _first_level(loso, case)
                        rows.append({**case, "basis": basis, "level": level, "held_out": few,
                                     "n": n, "median_abs_error": round(med, 4),
                                     "low": round(low, 4), "high": round(high, 4)})
    decode = _decode_keys()
    measured = (decode.groupby(["gpu", "engine", "family"]).size().rename("n").reset_index()
                .sort_values(["gpu", "engine", "family"], ignore_index=True))
    return pd.DataFrame(rows), measured


def write_case_bands() -> None:
    """Regenerate ``data/<CASE_BANDS_FILE>``, ``data/<CASE_MEASURED_FILE>`` and
    ``data/<TTFT_BANDS_FILE>`` (after a refit or new data)."""
    bands, measured = case_bands()
    bands.to_csv(data_dir() / CASE_BANDS_FILE, index=False)
    measured.to_csv(data_dir() / CASE_MEASURED_FILE, index=False)
    ttft_error_table().to_csv(data_dir() / TTFT_BANDS_FILE, index=False)


@lru_cache(maxsize=None)
def _case_tables(mtimes: tuple[float, float]) -> tuple[dict[tuple, Any], dict[tuple, int]]:
    bands = pd.read_csv(csv_path(CASE_BANDS_FILE), keep_default_na=False,
                        dtype={"batch_range": str})
    measured = pd.read_csv(csv_path(CASE_MEASURED_FILE), keep_default_na=False)
    return ({(r.vendor, r.engine, r.family, int(r.tp), r.batch_range): r
             for r in bands.itertuples(index=False)},
            {(r.gpu, r.engine, r.family): int(r.n) for r in measured.itertuples(index=False)})


def case_band(model: Model | str, gpu: GPU | str, engine: str, tp: int, batch: int) -> CaseBand:
    """The error band of ``roofline.CALIBRATED`` from measurements like this case: held-out
    decode points of the same GPU vendor, engine, model family (``model_family``), TP degree
    and batch band, relaxing ``CASE_LEVELS`` in order while a cell has fewer than
    ``MIN_BAND_POINTS``; when even vendor × engine × family has too few held-out points, the
    leave-one-source-out errors (``loso_results``) at the first level with enough. ``scope``
    names the points used, and starts with ``NO_MEASUREMENTS`` when no modern decode point of
    the family on this GPU and engine exists; ``words`` says it for a reader. Read from the
    stored tables (``case_bands``), so a lookup costs microseconds. ``error_band(tp, batch)``
    stays the band by TP and batch alone."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp must be a positive integer, got {tp!r}")
    if engine not in _ENGINE_WORDS:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(_ENGINE_WORDS)}")
    family = model_family(model)  # KeyError naming an unknown model
    g = resolve_gpu(gpu)
    mtimes = tuple((data_dir() / f).stat().st_mtime for f in (CASE_BANDS_FILE, CASE_MEASURED_FILE))
    return _case_band(family, g.slug, g.vendor, engine, tp, batch_range(batch), mtimes)


@lru_cache(maxsize=None)
def _case_band(family: str, gpu: str, vendor: str, engine: str, tp: int, label: str,
               mtimes: tuple[float, float]) -> CaseBand:
    bands, counts = _case_tables(mtimes)
    key = (vendor, engine, family, _tp_bucket(tp), label)
    if key not in bands:
        raise ValueError(f"no case band for {vendor} GPUs: {CASE_BANDS_FILE} covers "
                         f"{', '.join(sorted({k[0] for k in bands}))}")
    r = bands[key]
    case = dict(zip(("vendor", "engine", "family", "tp", "batch_range"), key))
    cell = _cell_words(case, CASE_LEVELS[r.level])
    if r.basis == "held-out":
        scope = f"held-out points of {cell}"
    else:
        scope = (f"leave-one-source-out errors of {cell} ({r.held_out} held-out points of "
                 f"{_cell_words(case, CASE_LEVELS[HELD_OUT_LEVELS - 1])})")
    measured = counts.get((gpu, engine, family), 0)
    if not measured:
        scope = f"{NO_MEASUREMENTS}; {scope}"
    return CaseBand(tp=tp, batch_range=label, scope=scope, n=int(r.n),
                    median_abs_error=float(r.median_abs_error), low=float(r.low),
                    high=float(r.high), gpu=gpu, engine=engine, model_family=family,
                    vendor=vendor, basis=r.basis, measured=measured, cell=cell)


def fresh_band_coverage() -> pd.DataFrame:
    """Each fresh decode point (``fresh_validation``) against the band the book prints for its
    case (``case_band`` of its model, GPU, engine, TP degree and batch): ``fresh_validation``'s
    columns plus ``band_low`` / ``band_high`` (the band's 10th and 90th percentile of
    predicted ÷ measured − 1), ``band_basis``, ``inside`` (the point's error lies in the band)
    and ``slower`` (it lies below the band: the measurement ran slower than the band's slow
    end). A band of the 10th to 90th percentile holds 80% of points like the ones it was drawn
    from; the share of fresh points inside says how far it holds for setups the fit never saw."""
    fresh = fresh_validation()
    bands = [case_band(p.model, p.gpu, p.engine, int(p.tp), int(p.batch))
             for p in fresh.itertuples()]
    out = fresh.assign(band_low=[b.low for b in bands], band_high=[b.high for b in bands],
                       band_basis=[b.basis for b in bands])
    out["inside"] = (out["error"] >= out["band_low"]) & (out["error"] <= out["band_high"])
    out["slower"] = out["error"] < out["band_low"]
    return out


@lru_cache(maxsize=1)
def _decode_keys() -> pd.DataFrame:
    pts = speed_points()
    return _with_groups(pts[pts["role"].isin(["train", "test"])])


@lru_cache(maxsize=1)
def _held_out() -> pd.DataFrame:
    res = validate()
    return _with_groups(res[res["role"] == "test"])


def banded_batch_limit() -> int:
    """The largest decode batch whose batch range (``BATCH_RANGES``) has held-out
    points enough for a band of its own in ``data/speed_error_bands.csv``; past it a band
    falls back to a wider scope and the speed is an extrapolation."""
    table = pd.read_csv(csv_path(BANDS_FILE), keep_default_na=False)
    own = [hi for lo, hi in BATCH_RANGES
           if table.loc[table["batch_range"] == batch_range(lo), "scope"]
           .str.endswith(f"batch {batch_range(lo)}").any()]
    if not own:
        raise ValueError(f"{BANDS_FILE}: no batch range has a band of its own")
    return max(own)


def slow_end(model: Model | str, gpu: GPU | str, engine: str, n_gpus: int, batch: int,
             limit: int) -> float:
    """The factor on a predicted speed at the slow end of its error band (1 + the 10th
    percentile of ``case_band``, the band the page shows for the case) at ``n_gpus`` and
    ``batch``; past ``limit`` (``banded_batch_limit``) the slower of its own band and the band
    at ``limit``, so an extrapolated batch is never trusted more than the largest measured
    one."""
    low = case_band(model, gpu, engine, n_gpus, batch).low
    if batch > limit:
        low = min(low, case_band(model, gpu, engine, n_gpus, limit).low)
    return 1 + low


#: ``ttft_error_table`` as stored (``write_case_bands``; tests/test_calibrate.py fails when stale).
TTFT_BANDS_FILE = "speed_ttft_bands.csv"


def prefill_peak_share(points: pd.DataFrame) -> pd.Series:
    """For each one-request TTFT point of ``points`` (``speed_points`` rows): the share of the
    GPU's dense peak at which its prompt was prefilled, if the measured TTFT were all prefill —
    the FLOPs of ``roofline.prefill_step`` at η = 1 ÷ peak FLOP/s (its ``compute_s``) ÷ the
    measured seconds. A share above ``CALIBRATED.compute`` means the prefill ran closer to the
    peak than the fitted compute share."""
    def share(p: pd.Series) -> float:
        if p["metric"] != TTFT_METRIC or int(p["concurrency"]) != 1:
            raise ValueError(f"{p.name}: not a time to first token at one request in flight")
        d = Deployment(_model(p["model"]), _gpu(p["gpu"]), tp=int(p["tp"]),
                       weights=p["weight_format"], kv=p["kv_dtype"], engine=p["engine"])
        step = roofline.prefill_step(d, batch=1, prompt_tokens=int(p["input_tokens"]))
        return step.compute_s / float(p["value"])
    return pd.Series({i: share(p) for i, p in points.iterrows()}, dtype=float)


def ttft_errors() -> pd.DataFrame:
    """The time-to-first-token model against measurements it was never fitted to, by requests
    in flight: ``ttft_error_table`` as stored in ``data/<TTFT_BANDS_FILE>``."""
    return pd.read_csv(csv_path(TTFT_BANDS_FILE), dtype={"batch_range": str})


def ttft_error_table() -> pd.DataFrame:
    """The time-to-first-token model against measurements it was never fitted to
    (``validate``'s TTFT points), by requests in flight (``BATCH_RANGES``):
    batch_range, n, median (signed), low and high (10th and 90th percentile; NaN under
    ``MIN_BAND_POINTS`` runs) of predicted ÷ measured − 1. Negative: measured TTFTs
    were longer (the model assumes arrivals spread out, benchmarks send them in waves)."""
    res = validate()
    ttft = res[res["role"] == "ttft"]
    rows = []
    for lo, _ in BATCH_RANGES:
        label = batch_range(lo)
        err = ttft.loc[ttft["batch_range"] == label, "error"]
        spread = len(err) >= MIN_BAND_POINTS
        if len(err):
            rows.append({"batch_range": label, "n": len(err), "median": float(err.median()),
                         "low": float(err.quantile(0.1)) if spread else math.nan,
                         "high": float(err.quantile(0.9)) if spread else math.nan})
    return pd.DataFrame(rows, columns=["batch_range", "n", "median", "low", "high"])
