"""The book's own memory error: ``kv_pool`` against engine start-up logs.

Every start-up log of ``data/engine_logs.csv`` that names a registry model and GPU is predicted
with ``validation.log_pool`` (``kv_pool`` from the log's own settings) — the available KV memory, or
the KV tokens, or the weights, whichever the log prints — and every log that prints both its KV
memory and its KV tokens also gets the block arithmetic alone checked (tokens from the logged
memory). Errors are ``predicted ÷ logged − 1``. The speed model's error lives with its fit, in
:mod:`kvlib.fit.calibrate`.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from ..engines import capacity
from ..engines.capacity import (NO_OVERHEADS, TP_LINKS, VLLM, Overheads, Pool, pool_arithmetic, tp_link)
from ..engines import pools
from ..engines.sglang import SGLangPool
from ..deployment import Deployment, vllm_release, vllm_rule_rows
from ..core.data import csv_path
from ..hardware.gpus import load_gpu
from ..model.weights import params_for
from ..model.registry import load_model
from ..core.units import GIB, MIB


# --- the overheads, fitted on public start-up logs ----------------------------------------------------

def engine_logs() -> pd.DataFrame:
    """``data/engine_logs.csv``: public serving-engine start-up logs, one per row (``id``)."""
    return pd.read_csv(csv_path("engine_logs.csv"), dtype=str,
                       keep_default_na=False).set_index("id")


def log_pool(log_id: str, overheads: Overheads = VLLM, use_logged_weights: bool = True) -> Pool:
    """The pool kvlib predicts for one start-up log of ``data/engine_logs.csv``.

    Uses the log's model, GPU (its logged CUDA total when printed), tensor-parallel degree,
    utilization (else the default of the vLLM release it prints), profiled batch and sampled
    rows, and the memory rules of the release it prints — or, where it prints none, of the
    releases its ``vllm_rules`` column dates it to (``dated_release``: every such log predates
    v0.17, whose sampling pass sorts); with ``use_logged_weights`` the logged
    "Model loading took" replaces the computed weights (isolating the overhead terms). A log
    whose engine could not start (el06 prints −2.14 GiB) keeps its terms: the pool of the
    ``NoKVMemory`` kvlib raises for it.
    """
    logs = engine_logs()
    if log_id not in logs.index:
        raise KeyError(f"unknown engine log {log_id!r} (see data/engine_logs.csv)")
    row = logs.loc[log_id]
    if not row["model_slug"] or not row["gpu_slug"]:
        raise ValueError(f"engine log {log_id} names no registry model and GPU: "
                         f"{row['calibration_note'] or 'not predictable'}")
    gpu = load_gpu(row["gpu_slug"])
    total = _num(row["total_gpu_memory_gib"])
    if total is not None:
        gpu = replace(gpu, memory_bytes_runtime=round(total * GIB))
    weights = _num(row["model_weights_gib"]) if use_logged_weights else None
    kv_dtype = row["kv_cache_dtype"] or "bf16"
    release = (row["engine_version"] if vllm_release(row["engine_version"])
               else dated_release(row["vllm_rules"]))
    d = Deployment(row["model_slug"], gpu, tp=int(row["tp"] or row["n_gpus"] or 1),
                   weights=row["weight_format"] or "bf16", kv=kv_dtype, engine_version=release,
                   gpu_memory_utilization=_num(row["gpu_memory_utilization"]),
                   max_num_batched_tokens=int(row["max_num_batched_tokens"] or 8192),
                   max_num_seqs=int(row["max_num_seqs"]) if row["max_num_seqs"] else None)
    return pool_arithmetic(d, overheads=overheads,
                           weights_bytes_per_gpu=None if weights is None else round(weights * GIB))


def dated_release(rules_label: str) -> str | None:
    """A release the memory rules labelled ``rules_label`` cover ("before 0.17" → "0.16.0",
    "0.17–0.20, V1 runner" → "0.17.0"), for a log that prints no release but is dated by its
    source (``engine_logs.csv`` ``vllm_rules``); None for an empty label (the pinned release's
    rules)."""
    if not rules_label:
        return None
    for rules in vllm_rule_rows():
        if rules.label == rules_label:
            if rules.since:
                return rules.since
            major, minor = vllm_release(rules.until)[:2]
            return f"{major}.{minor - 1}.0"
    raise ValueError(f"engine_logs.csv: no row of vllm_memory_rules.csv is labelled {rules_label!r}")


def calibration(overheads: Overheads = VLLM) -> pd.DataFrame:
    """Predicted against reported, for every log of ``engine_logs.csv`` kvlib can predict.

    Columns: weights (computed vs logged, GiB), available KV memory (predicted with the logged
    weights where the log has them, vs logged, GiB), KV tokens (predicted vs logged) and the
    relative errors; ``use`` is the row's calibration role (fit / validate / weights / history).
    """
    logs = engine_logs()
    rows = []
    for log_id, row in logs.iterrows():
        if row["calibration"] not in ("fit", "validate", "weights", "history"):
            continue
        computed = log_pool(log_id, overheads, use_logged_weights=False)
        pool = log_pool(log_id, overheads, use_logged_weights=True)
        rep_w, rep_a, rep_t = (_num(row["model_weights_gib"]), _num(row["available_kv_gib"]),
                               _num(row["kv_cache_tokens"]))
        pred_a = pool.available_kv_bytes / GIB
        rows.append({
            "id": log_id, "use": row["calibration"], "model": row["model_slug"],
            "gpu": row["gpu_slug"], "tp": pool.n_gpus, "utilization": pool.gpu_memory_utilization,
            "engine": row["engine_version"],
            "weights_gib_computed": computed.weights_bytes_per_gpu / GIB,
            "weights_gib_logged": rep_w,
            "weights_error": (computed.weights_bytes_per_gpu / GIB / rep_w - 1) if rep_w else None,
            "available_gib_predicted": pred_a if row["calibration"] != "weights" else None,
            "available_gib_logged": rep_a,
            "available_error_gib": (pred_a - rep_a) if rep_a is not None and row[
                "calibration"] != "weights" else None,
            "tokens_predicted": pool.tokens if row["calibration"] != "weights" else None,
            "tokens_logged": int(rep_t) if rep_t is not None else None,
            "tokens_error": (pool.tokens / rep_t - 1) if rep_t else None,
            "source": row["source_url"],
        })
    return pd.DataFrame(rows).set_index("id")


def _fit_inputs(forward_factor: float) -> list[dict[str, float]]:
    """Per fit log: the measured overhead (budget − weights − available) and its terms (the
    sampling peak as a part per fitted copy and a part its rule fixes: "triton" logs)."""
    one, two = (Overheads("probe", forward_factor, copies, 0, 0) for copies in (1.0, 2.0))
    logs = engine_logs()
    out = []
    for log_id, row in logs.iterrows():
        if row["calibration"] != "fit" or not row["available_kv_gib"]:
            continue
        pool = log_pool(log_id, one, use_logged_weights=True)
        per_copy = log_pool(log_id, two).activation_sampler_bytes - pool.activation_sampler_bytes
        measured = (pool.budget_bytes - pool.weights_bytes_per_gpu
                    - _num(row["available_kv_gib"]) * GIB)
        out.append({"id": log_id, "measured": measured, "forward": pool.activation_forward_bytes,
                    "sampler_per_copy": per_copy,
                    "sampler_fixed": pool.activation_sampler_bytes - per_copy,
                    "tp": pool.n_gpus, "link": pool.tp_link})
    return out


def fit_forward_factor() -> float:
    """``forward_factor`` from the fit logs that print their activation peak at two batch sizes
    for the same model and GPU (the slope of peak against batched tokens)."""
    logs = engine_logs()
    rows = logs[(logs["calibration"] == "fit") & (logs["activation_peak_gib"] != "")]
    for (_model, _gpu), grp in rows.groupby(["model_slug", "gpu_slug"]):
        mnbt = grp["max_num_batched_tokens"].astype(int)
        if mnbt.nunique() < 2:
            continue
        lo, hi = grp.loc[mnbt.idxmin()], grp.loc[mnbt.idxmax()]
        probe = Overheads("probe", 1.0, 0.0, 0, 0)
        p_lo = log_pool(lo.name, probe)
        p_hi = log_pool(hi.name, probe)
        slope_logged = (float(hi["activation_peak_gib"]) - float(lo["activation_peak_gib"])) * GIB
        return slope_logged / (p_hi.activation_forward_bytes - p_lo.activation_forward_bytes)
    raise ValueError("no fit logs give the activation peak at two batch sizes")


def fit_overheads(forward_factor: float | None = None) -> Overheads:
    """Least-squares fit of ``sampler_copies``, ``non_torch_bytes`` and the tensor-parallel
    add-on of each link (``non_torch_tp_bytes`` over NVLink, ``non_torch_tp_pcie_bytes`` over
    PCIe; ``capacity.tp_link``) to the fit logs' measured overhead (budget − weights −
    available), for a given ``forward_factor`` (default: ``fit_forward_factor()``); sampler
    copies on a 0.05 grid. A link no fit log covers keeps the calibrated constant's add-on
    (``tp_fit_logs`` says which)."""
    k_fwd = fit_forward_factor() if forward_factor is None else forward_factor
    data = _fit_inputs(k_fwd)
    measured = np.array([d["measured"] for d in data])
    links = [link for link in TP_LINKS if any(d["link"] == link for d in data)]
    design = np.column_stack([np.ones(len(data))] + [
        np.array([1.0 if d["link"] == link else 0.0 for d in data]) for link in links])
    best = None
    for k_s in np.arange(0.0, 20.0001, 0.05):
        act = np.array([max(d["forward"], d["sampler_fixed"] + k_s * d["sampler_per_copy"])
                        for d in data])
        coef, *_ = np.linalg.lstsq(design, measured - act, rcond=None)
        coef = np.maximum(coef, 0.0)
        sse = float(((measured - act - design @ coef) ** 2).sum())
        if best is None or sse < best[0] - 1e-6:
            best = (sse, float(k_s), coef)
    _, k_s, (n0, *adds) = best
    add = dict(zip(links, adds))
    return Overheads(name="vllm (refit)", forward_factor=round(k_fwd, 3),
                     sampler_copies=round(k_s, 2), non_torch_bytes=int(n0),
                     non_torch_tp_bytes=int(add.get("nvlink", VLLM.non_torch_tp_bytes)),
                     non_torch_tp_pcie_bytes=int(add.get("pcie", VLLM.non_torch_tp_pcie_bytes)),
                     source="kvlib.fit.validation.fit_overheads")


def tp_fit_logs() -> dict[str, list[str]]:
    """The fit logs behind each link's tensor-parallel add-on (``capacity.TP_LINKS`` → log
    ids; an empty list: no log, the add-on is the rule's, not a fit)."""
    data = _fit_inputs(VLLM.forward_factor)
    return {link: [d["id"] for d in data if d["link"] == link] for link in TP_LINKS}


# --- memory ---------------------------------------------------------------------------------

def _num(value: Any) -> float | None:
    text = str(value).strip()
    return float(text) if text else None


def _count(value: Any) -> int | None:
    text = str(value).strip()
    return int(text) if text else None


def is_dense(model_slug: str) -> bool:
    """True for a model with plain MHA/GQA/MQA attention in every layer and no experts."""
    model = load_model(model_slug)
    return model.attention in ("MHA", "GQA", "MQA") and not params_for(model).n_experts


def _layout_tokens(model_slug: str, available_bytes: int, tp: int, kv_dtype: str,
                   block_size: int) -> int:
    """KV tokens ``kv_pool`` makes of ``available_bytes`` on one GPU: the block arithmetic alone
    (a GPU whose whole memory is the logged KV memory, no weights, no overheads)."""
    gpu = replace(load_gpu("h100-sxm"), slug="logged-kv-memory",
                  memory_bytes_runtime=int(available_bytes))
    d = Deployment(model_slug, gpu, tp=tp, kv=kv_dtype, gpu_memory_utilization=1.0,
                   block_size=block_size)
    pool = capacity.kv_pool(d, overheads=NO_OVERHEADS, weights_bytes_per_gpu=0)
    return pool.tokens


def memory_validation(overheads: Overheads = VLLM) -> pd.DataFrame:
    """One row per (start-up log, checked quantity): predicted, logged, relative error.

    ``check`` is "full" (``kv_pool`` from the log's settings: available KV memory in GiB, else KV
    tokens, else weights in GiB per GPU) or "layout" (KV tokens from the logged KV memory).
    ``dense`` marks plain-attention models without experts; ``role`` is the log's role in
    ``capacity``'s overhead fit ("fit" rows were used to fit the overheads); the logs of
    ``data/validation/engine_logs.csv`` (role "validation only") reuse the settings of the
    ``engine_logs.csv`` row named in ``same_settings_as``.
    """
    logs = engine_logs()
    rows: list[dict[str, Any]] = []
    for log_id, row in logs.iterrows():
        if not row["model_slug"] or not row["gpu_slug"]:
            continue
        if row["engine"] in ("sglang", "tensorrt-llm"):  # their own pools: tests/test_engine_pools.py
            continue
        base = {"id": log_id, "model": row["model_slug"], "gpu": row["gpu_slug"],
                "engine": row["engine"], "engine_version": row["engine_version"],
                "tp": int(row["tp"] or row["n_gpus"] or 1), "role": row["calibration"],
                "dense": is_dense(row["model_slug"]), "source": row["source_url"]}
        logged_w, logged_a, logged_t = (_num(row["model_weights_gib"]), _num(row["available_kv_gib"]),
                                        _num(row["kv_cache_tokens"]))
        if row["calibration"] != "weights" and (logged_a is not None or logged_t is not None):
            pool = log_pool(log_id, overheads, use_logged_weights=True)
            if logged_a is not None:
                rows.append({**base, "check": "full", "quantity": "available KV memory (GiB)",
                             "predicted": pool.available_kv_bytes / GIB, "logged": logged_a})
            else:
                rows.append({**base, "check": "full", "quantity": "KV tokens",
                             "predicted": float(pool.tokens), "logged": logged_t})
        elif logged_w is not None:
            pool = log_pool(log_id, overheads, use_logged_weights=False)
            rows.append({**base, "check": "full", "quantity": "weights per GPU (GiB)",
                         "predicted": pool.weights_bytes_per_gpu / GIB, "logged": logged_w})
        if logged_a is not None and logged_t is not None and logged_a > 0:
            rows.append({**base, "check": "layout", "quantity": "KV tokens from logged KV memory",
                         "predicted": float(_layout_tokens(row["model_slug"], round(logged_a * GIB),
                                                           base["tp"], row["kv_cache_dtype"] or "bf16",
                                                           1 if row["engine"] == "sglang" else 16)),
                         "logged": logged_t})
    extra = pd.read_csv(csv_path("validation/engine_logs.csv"), dtype=str,
                        keep_default_na=False)
    for _, row in extra.iterrows():
        base = {"id": row["id"], "model": row["model_slug"], "gpu": row["gpu_slug"],
                "engine": row["engine"], "engine_version": row["engine_version"],
                "tp": int(row["tp"]), "role": "validation only", "dense": is_dense(row["model_slug"]),
                "source": row["source_url"]}
        logged_a, logged_t = _num(row["available_kv_gib"]), _num(row["kv_cache_tokens"])
        if row["same_settings_as"]:
            pool = log_pool(row["same_settings_as"], overheads, use_logged_weights=True)
            rows.append({**base, "check": "full", "quantity": "KV tokens",
                         "predicted": float(pool.tokens), "logged": logged_t})
        if logged_a is not None and logged_t is not None:
            rows.append({**base, "check": "layout", "quantity": "KV tokens from logged KV memory",
                         "predicted": float(_layout_tokens(row["model_slug"], round(logged_a * GIB),
                                                           base["tp"], row["kv_cache_dtype"] or "bf16",
                                                           int(row["block_size"] or 16))),
                         "logged": logged_t})
    out = pd.DataFrame(rows)
    out["error"] = out["predicted"] / out["logged"] - 1
    return out


#: GPU blocks of vLLM's TP-4 Llama-2-70B pool before its December 2023 profiling fix (PR #2031:
#: "Current main: # GPU blocks: 31615"), in 16-token blocks.
PRE_PR2031_TOKENS = 31_615 * 16


def memory_miss_reasons(overheads: Overheads = VLLM) -> dict[str, str]:
    """Why each memory row of the book's logs misses by more than 10% (and each dense row by
    more than 3%), by log id, each reason computed from the logs: the memory outside torch of
    a consumer card (el01, el02), a weights count that cannot know the kernel path (el07), a
    2023 engine's profiler (el30, vl02), under vLLM 0.27.1's V2 model runner on an RTX 4090,
    the memory outside torch of a consumer card again (el48) and a cold compile cache's
    activation peak (el47), under vLLM 0.30.0 on an A10G and an L4, the CUDA-graph estimate
    kvlib does not size on cards whose CUDA total gpus.csv lacks (el49–el52), and under vLLM
    0.19.0 on two H100s, memory outside torch below kvlib's NVLink add-on
    (``TP_OUTSIDE_TORCH_LOGS``), and under vLLM 0.30.0 on two H100s, a run whose whole non-KV
    memory beside the weights is below that add-on (el59)."""
    logs = engine_logs()
    nontorch_gib = overheads.non_torch_bytes / GIB

    def nontorch(log_id: str) -> str:
        logged = float(logs.loc[log_id, "non_torch_gib"])
        pool = float(logs.loc[log_id, "available_kv_gib"])
        return (f"a 24 GB RTX 3090 whose log prints {logged:.2f} GiB of non-torch memory, where "
                f"kvlib's calibrated constant is {nontorch_gib:.2f} GiB (fitted mostly on H100 and "
                f"A100 logs); {nontorch_gib - logged:.2f} GiB is a large share of a {pool:.2f} GiB "
                f"pool")

    weights_el07 = log_pool("el07", overheads, use_logged_weights=False).weights_bytes_per_gpu
    el07 = (f"gpt-oss-120b at utilization 0.95 logs no weights, so kvlib's count of the MXFP4 "
            f"checkpoint ({weights_el07 / GIB:.1f} GiB) stands in; the Marlin kernel path vLLM "
            f"takes on Hopper held {float(logs.loc['el06', 'model_weights_gib']):.1f} GiB in el06, "
            f"and that miss lands on a {float(logs.loc['el07', 'available_kv_gib']):.2f} GiB pool")
    post_fix = float(logs.loc["el30", "kv_cache_tokens"])
    profiler = (f"vLLM's December 2023 profiling fix (PR #2031) cut this TP-4 pool from "
                f"{PRE_PR2031_TOKENS:,} to {post_fix:,.0f} tokens by charging NCCL memory outside "
                f"torch; kvlib models today's profiler and lands between the two")
    def v2_runner(log_id: str) -> str:
        row, pool = logs.loc[log_id], log_pool(log_id, overheads)
        logged_nt, logged_peak = float(row["non_torch_gib"]), float(row["activation_peak_gib"])
        # the log's consumed memory less its weights holds the sampler state too (0.27 on)
        beside = (pool.non_torch_bytes + pool.sampler_state_bytes) / GIB
        own_nt = pool.available_kv_bytes / GIB + beside - logged_nt
        gpu = load_gpu(row["gpu_slug"]).name
        vocab = load_model(row["model_slug"]).architecture.vocab_size
        rule = (f"vLLM {row['engine_version']}'s V2 model runner profiles one sampler pass over "
                f"{pool.max_num_seqs} × {vocab:,} logits in bf16 "
                f"({pool.activation_sampler_bytes / GIB:.2f} GiB) and subtracts no CUDA-graph "
                f"estimate, so kvlib charges the forward pass, "
                f"{pool.activation_forward_bytes / GIB:.2f} GiB, as the activation peak, and its "
                f"penalty state, {pool.sampler_state_bytes / GIB:.2f} GiB, beside the memory "
                f"outside torch")
        if "Directly load AOT compilation" in row["log_excerpt"]:  # the warm restart
            return (f"{rule}, and the log's peak, on a warm torch.compile cache, is "
                    f"{logged_peak:.2f} GiB; the miss is the memory "
                    f"outside torch of a 24 GB {gpu}: the log's consumed memory less its weights is "
                    f"{logged_nt:.2f} GiB where kvlib charges {beside:.2f} GiB (its calibrated "
                    f"constant, fitted mostly on H100 and A100 logs, and the state): with the "
                    f"log's own figure the pool would be "
                    f"{own_nt:.2f} GiB against the logged {float(row['available_kv_gib']):.2f}")
        return (f"{rule}; this first start on one {gpu} ran on a cold torch.compile cache, and "
                f"its log prints a {logged_peak:.2f} GiB peak "
                f"({float(logs.loc['el48', 'activation_peak_gib']):.2f} GiB on the warm restart, "
                f"el48; the log's source puts the difference down to inductor's autotuning), while "
                f"kvlib's memory outside torch and state is {beside - logged_nt:.2f} GiB "
                f"above the log's {logged_nt:.2f} GiB: the two misses leave the pool "
                f"{pool.available_kv_bytes / GIB - float(row['available_kv_gib']):.2f} GiB above "
                f"the logged {float(row['available_kv_gib']):.2f} GiB")

    def logged_kv_gib(log_id: str) -> float:
        pool = log_pool(log_id, overheads)
        return float(logs.loc[log_id, "kv_cache_tokens"]) / pool.block_size * pool.block_bytes / GIB

    def v2_graphs(log_id: str) -> str:
        row, pool = logs.loc[log_id], log_pool(log_id, overheads)
        card = logs.loc["el47"]  # an RTX 4090 whose log prints its CUDA total
        card_nvml = load_gpu(card["gpu_slug"]).memory_bytes_nvml / GIB
        text = (f"vLLM {row['engine_version']} ({row['vllm_rules']}) subtracts its CUDA-graph "
                f"estimate before it sizes the pool, which kvlib does not size, and gpus.csv has no "
                f"CUDA total for the {load_gpu(row['gpu_slug']).name}, so kvlib budgets "
                f"{pool.gpu_memory_utilization:g} × its nvidia-smi "
                f"{pool.total_memory_bytes / GIB:.2f} GiB (el47's RTX 4090 prints a CUDA total "
                f"{float(card['total_gpu_memory_gib']):.2f} GiB, "
                f"{card_nvml - float(card['total_gpu_memory_gib']):.2f} GiB under its nvidia-smi "
                f"{card_nvml:.2f}); the log's {int(row['kv_cache_tokens']):,} tokens hold "
                f"{logged_kv_gib(log_id):.2f} GiB against kvlib's "
                f"{pool.available_kv_bytes / GIB:.2f}")
        if log_id == "el52":  # el51's settings with 32 sequences instead of 8
            fewer = (int(logs.loc["el51", "kv_cache_tokens"]) - int(row["kv_cache_tokens"]))
            text += (f"; with {pool.max_num_seqs} sequences instead of el51's "
                     f"{int(logs.loc['el51', 'max_num_seqs'])} the log's pool is "
                     f"{fewer // pool.block_size} blocks "
                     f"({fewer / pool.block_size * pool.block_bytes / MIB:.1f} MiB) smaller, where "
                     f"kvlib's does not move (its forward pass, "
                     f"{pool.activation_forward_bytes / GIB:.2f} GiB, outweighs the sampler's "
                     f"{pool.activation_sampler_bytes / MIB:.1f} MiB)")
        if log_id == "el50":  # el49's settings with an fp8 KV cache
            text += (f"; the fp8 pool holds {logged_kv_gib('el49') - logged_kv_gib(log_id):.2f} GiB "
                     f"less than el49's fp16 pool at the same settings")
        return text

    def tp_outside_torch(log_id: str) -> str:
        row, pool = logs.loc[log_id], log_pool(log_id, overheads)
        outside = float(row["non_torch_gib"])
        name = load_gpu(row["gpu_slug"]).name
        gap = pool.non_torch_bytes / GIB - outside
        return (f"vLLM {row['engine_version']} on {pool.n_gpus} × {name} (the llm-d planner's "
                f"sweep) prints {outside:.2f} GiB outside torch, where kvlib charges "
                f"{pool.non_torch_bytes / GIB:.2f} ({overheads.non_torch_bytes / GIB:.2f} on one GPU "
                f"plus the NVLink add-on of {overheads.non_torch_tp_bytes / GIB:.2f} fitted on "
                f"{' and '.join(tp_fit_logs()['nvlink'])}); the {gap:.2f} GiB is "
                f"{100 * gap / float(row['available_kv_gib']):.1f}% of its "
                f"{float(row['available_kv_gib']):.2f} GiB pool")

    def beside_weights(log_id: str) -> str:
        """A log whose run printed its non-KV memory as one figure (requested − weights − KV)."""
        row, pool = logs.loc[log_id], log_pool(log_id, overheads)
        found = re.search(rf"([0-9.]+) GiB for TP{pool.n_gpus}\b", row["log_excerpt"])
        if found is None:
            raise ValueError(f"{log_id}: no non-KV memory for TP{pool.n_gpus} in its excerpt")
        logged = float(found.group(1))
        charged = (pool.activation_peak_bytes + pool.sampler_state_bytes + pool.non_torch_bytes
                   + pool.cuda_graph_bytes) / GIB
        return (f"vLLM {row['engine_version']} on {pool.n_gpus} × {load_gpu(row['gpu_slug']).name} "
                f"over NVLink: the run's own arithmetic leaves {logged:.2f} GiB beside the weights "
                f"and the KV cache, where kvlib charges {charged:.2f} GiB (activations, the sampler's "
                f"state and memory outside torch); its NVLink add-on alone, "
                f"{overheads.non_torch_tp_bytes / GIB:.2f} GiB fitted on "
                f"{' and '.join(tp_fit_logs()['nvlink'])}, is more than the whole")

    return {"el01": nontorch("el01"), "el02": nontorch("el02"), "el07": el07,
            "el30": profiler, "vl02": profiler, "el47": v2_runner("el47"),
            "el48": v2_runner("el48"), **{i: v2_graphs(i) for i in ("el49", "el50", "el51", "el52")},
            **{i: tp_outside_torch(i) for i in TP_OUTSIDE_TORCH_LOGS},
            "el59": beside_weights("el59")}


#: Where the fresh held-out set of start-up logs comes from: the llm-d planner's sweep of vLLM
#: 0.19.0 on H100-80GB (data/README.md, lp01–lp12). No fit or design choice uses them.
FRESH_LOG_SOURCE = "github.com/llm-d-incubation/llm-d-planner/"


def fresh_log_ids() -> list[str]:
    """The ids of ``engine_logs.csv``'s fresh held-out set (``FRESH_LOG_SOURCE``), in file order."""
    logs = engine_logs()
    return list(logs.index[logs["source_url"].str.contains(FRESH_LOG_SOURCE, regex=False)])


#: The llm-d planner's vLLM 0.19.0 logs (H100-80GB, 1,024 sequences) beyond the appendix's
#: lines (±10%, ±3% for dense models): memory outside torch under tensor parallelism below
#: kvlib's NVLink add-on (``memory_miss_reasons``).
TP_OUTSIDE_TORCH_LOGS = ("lp07",)


def engine_pool_validation() -> pd.DataFrame:
    """SGLang's and TensorRT-LLM's pools (``kvlib.engines.sglang`` / ``.tensorrt_llm``) against
    every start-up log of theirs in ``engine_logs.csv``: one row per (log, checked quantity)
    where the log names a registry model and GPU (``predicted``, ``logged``, ``error``), and one
    row per other log with ``check`` "not predictable" and the row's own reason.

    ``check`` "full": the pool from the log's settings (K+V memory in GiB, KV tokens); "layout":
    the tokens the logged K+V memory holds at the engine's cell size. The engine's default
    fraction stands in where the log gives none; the log's tokens per step and running requests
    (``max_num_batched_tokens``, ``max_num_seqs``: TensorRT-LLM's profiled ``max_num_tokens``)
    where it prints them.
    """
    logs = engine_logs()
    rows: list[dict[str, Any]] = []
    for log_id, row in logs.iterrows():
        if row["engine"] not in ("sglang", "tensorrt-llm"):
            continue
        base = {"id": log_id, "engine": row["engine"], "model": row["model_slug"],
                "gpu": row["gpu_slug"], "source": row["source_url"]}
        if not row["model_slug"] or not row["gpu_slug"]:
            rows.append({**base, "check": "not predictable", "quantity": "",
                         "predicted": None, "logged": None,
                         "reason": row["calibration_note"]})
            continue
        util = _num(row["gpu_memory_utilization"])
        d = Deployment(row["model_slug"], row["gpu_slug"], tp=int(row["tp"] or row["n_gpus"] or 1),
                       weights=row["weight_format"] or "bf16", kv=row["kv_cache_dtype"] or "bf16",
                       engine=row["engine"], gpu_memory_utilization=util,
                       max_model_len=int(row["max_model_len"]) if row["max_model_len"] else None,
                       max_num_batched_tokens=_count(row["max_num_batched_tokens"]),
                       max_num_seqs=_count(row["max_num_seqs"]))
        weights = _num(row["model_weights_gib"])
        pool = pools.kv_pool(d, weights_bytes_per_gpu=None if weights is None
                             else round(weights * GIB))
        logged_a, logged_t = _num(row["available_kv_gib"]), _num(row["kv_cache_tokens"])
        reason = "" if util is not None else "the engine's default fraction (the log gives none)"
        if logged_a is not None:
            rows.append({**base, "check": "full", "quantity": "K+V memory (GiB)",
                         "predicted": pool.kv_bytes_per_gpu / GIB, "logged": logged_a,
                         "reason": reason})
        if logged_t is not None:
            rows.append({**base, "check": "full", "quantity": "KV tokens",
                         "predicted": float(pool.tokens), "logged": logged_t, "reason": reason})
        if logged_a is not None and logged_t is not None:
            cell = pool.cell_bytes if isinstance(pool, SGLangPool) else pool.bytes_per_token
            rows.append({**base, "check": "layout", "quantity": "KV tokens from logged KV memory",
                         "predicted": float(round(logged_a * GIB) // cell), "logged": logged_t,
                         "reason": "K+V as logged (2 decimals of GiB) ÷ the engine's cell"})
    out = pd.DataFrame(rows)
    out["error"] = out["predicted"].astype(float) / out["logged"].astype(float) - 1
    return out


#: How the error table names a tensor-parallel group's link (``capacity.tp_link``).
LINK_NAMES = {None: "one GPU", "nvlink": "NVLink / NVSwitch", "pcie": "PCIe"}
#: The rows of ``data/vllm_memory_rules.csv`` (releases and model runner), as the error table
#: and ``engine_logs.csv``'s ``vllm_rules`` name them (``VLLMMemoryRules.label``).
VLLM_RULE_GROUPS = tuple(r.label for r in vllm_rule_rows())


def pool_error_by_group() -> pd.DataFrame:
    """The pool's error against every start-up log kvlib predicts, by engine, engine version
    (vLLM: the row of ``data/vllm_memory_rules.csv`` it was taken under, releases and model
    runner) and interconnect (``LINK_NAMES``): one row per group with ``logs`` (how many),
    ``median_abs_error`` and ``max_abs_error`` (|predicted ÷ logged − 1| of the "full" check:
    the pool from the log's settings; SGLang and TensorRT-LLM: KV tokens, by
    ``ENGINE_VERSIONS``' rules) and the log ids. A vLLM rules row with no log at all gets one
    row of ``logs`` 0 and no error, interconnect "any"; a row with logs, one such row per link
    it lacks; an engine with no log, one row too.
    """
    logs = engine_logs()
    vllm = memory_validation()
    vllm = vllm[(vllm["check"] == "full") & (vllm["quantity"] != "weights per GPU (GiB)")]
    others = engine_pool_validation()
    others = others[(others["check"] == "full") & (others["quantity"] == "KV tokens")]
    rows = []
    for frame in (vllm, others):
        for _, r in frame.iterrows():
            if r["engine"] == "vllm":
                version = (logs.loc[r["id"], "vllm_rules"] if r["id"] in logs.index
                           else "before 0.17")  # the 2023 logs of data/validation/
            else:  # the pool follows ENGINE_VERSIONS' rules; the log's own version if printed
                version = logs.loc[r["id"], "engine_version"] or "not printed"
            tp = int(logs.loc[r["id"], "tp"] or logs.loc[r["id"], "n_gpus"] or 1) if (
                r["id"] in logs.index) else int(r["tp"])
            rows.append({"engine": r["engine"], "version": version,
                         "interconnect": LINK_NAMES[tp_link(load_gpu(r["gpu"]), tp)],
                         "id": r["id"], "abs_error": abs(float(r["error"]))})
    found = pd.DataFrame(rows)
    out = []
    for (engine, version, link), grp in found.groupby(["engine", "version", "interconnect"],
                                                      sort=False):
        out.append({"engine": engine, "version": version, "interconnect": link,
                    "logs": len(grp), "median_abs_error": float(grp["abs_error"].median()),
                    "max_abs_error": float(grp["abs_error"].max()),
                    "ids": ", ".join(sorted(grp["id"]))})
    vllm = found[found["engine"] == "vllm"]
    for version in VLLM_RULE_GROUPS:
        held = set(vllm.loc[vllm["version"] == version, "interconnect"])
        missing = [link for link in LINK_NAMES.values() if link not in held] if held else ["any"]
        out.extend({"engine": "vllm", "version": version, "interconnect": link, "logs": 0,
                    "median_abs_error": None, "max_abs_error": None, "ids": ""}
                   for link in missing)
    for engine in ("sglang", "tensorrt-llm"):
        if not (found["engine"] == engine).any():
            out.append({"engine": engine, "version": "", "interconnect": "", "logs": 0,
                        "median_abs_error": None, "max_abs_error": None, "ids": ""})
    table = pd.DataFrame(out)
    order = {v: i for i, v in enumerate(VLLM_RULE_GROUPS)}  # vLLM's rows in release order
    table["_order"] = [order.get(v, 0) if e == "vllm" else 0
                       for e, v in zip(table["engine"], table["version"])]
    return (table.sort_values(["engine", "_order", "version", "interconnect"])
            .drop(columns="_order").reset_index(drop=True))
