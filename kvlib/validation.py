"""The book's own memory error: ``kv_pool`` against engine start-up logs.

Every start-up log of ``data/engine_logs.csv`` that names a registry model and GPU is predicted
with ``capacity.log_pool`` (``kv_pool`` from the log's own settings) — the available KV memory, or
the KV tokens, or the weights, whichever the log prints — and every log that prints both its KV
memory and its KV tokens also gets the block arithmetic alone checked (tokens from the logged
memory). Errors are ``predicted ÷ logged − 1``. The speed model's error lives with its fit, in
:mod:`kvlib.calibrate`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd

from . import capacity
from .capacity import NO_OVERHEADS, VLLM, Overheads
from .data import csv_path
from .hardware import load_gpu
from .params import params_for
from .registry import load_model
from .units import GIB

# --- memory ---------------------------------------------------------------------------------

def _num(value: Any) -> float | None:
    text = str(value).strip()
    return float(text) if text else None


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
    pool = capacity.kv_pool(model_slug, gpu, n_gpus=tp, gpu_memory_utilization=1.0,
                            kv_dtype=kv_dtype, block_size=block_size, overheads=NO_OVERHEADS,
                            weights_bytes_per_gpu=0)
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
    logs = capacity.engine_logs()
    rows: list[dict[str, Any]] = []
    for log_id, row in logs.iterrows():
        if not row["model_slug"] or not row["gpu_slug"]:
            continue
        base = {"id": log_id, "model": row["model_slug"], "gpu": row["gpu_slug"],
                "engine": row["engine"], "engine_version": row["engine_version"],
                "tp": int(row["tp"] or row["n_gpus"] or 1), "role": row["calibration"],
                "dense": is_dense(row["model_slug"]), "source": row["source_url"]}
        logged_w, logged_a, logged_t = (_num(row["model_weights_gib"]), _num(row["available_kv_gib"]),
                                        _num(row["kv_cache_tokens"]))
        if row["calibration"] != "weights" and (logged_a is not None or logged_t is not None):
            pool = capacity.log_pool(log_id, overheads, use_logged_weights=True)
            if logged_a is not None:
                rows.append({**base, "check": "full", "quantity": "available KV memory (GiB)",
                             "predicted": pool.available_kv_bytes / GIB, "logged": logged_a})
            else:
                rows.append({**base, "check": "full", "quantity": "KV tokens",
                             "predicted": float(pool.tokens), "logged": logged_t})
        elif logged_w is not None:
            pool = capacity.log_pool(log_id, overheads, use_logged_weights=False)
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
            pool = capacity.log_pool(row["same_settings_as"], overheads, use_logged_weights=True)
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
    """Why each memory row of the book's logs misses by more than 10 % (and each dense row by
    more than 3 %), by log id, each reason computed from the logs: the memory outside torch of
    a consumer card (el01, el02), a weights count that cannot know the kernel path (el07), and
    a 2023 engine's profiler (el30, vl02)."""
    logs = capacity.engine_logs()
    nontorch_gib = overheads.non_torch_bytes / GIB

    def nontorch(log_id: str) -> str:
        logged = float(logs.loc[log_id, "non_torch_gib"])
        pool = float(logs.loc[log_id, "available_kv_gib"])
        return (f"a 24 GB RTX 3090 whose log prints {logged:.2f} GiB of non-torch memory, where "
                f"kvlib's calibrated constant is {nontorch_gib:.2f} GiB (fitted mostly on H100 and "
                f"A100 logs); {nontorch_gib - logged:.2f} GiB is a large share of a {pool:.2f} GiB "
                f"pool")

    weights_el07 = capacity.log_pool("el07", overheads, use_logged_weights=False).weights_bytes_per_gpu
    el07 = (f"gpt-oss-120b at utilization 0.95 logs no weights, so kvlib's count of the MXFP4 "
            f"checkpoint ({weights_el07 / GIB:.1f} GiB) stands in; the Marlin kernel path vLLM "
            f"takes on Hopper held {float(logs.loc['el06', 'model_weights_gib']):.1f} GiB in el06, "
            f"and that miss lands on a {float(logs.loc['el07', 'available_kv_gib']):.2f} GiB pool")
    post_fix = float(logs.loc["el30", "kv_cache_tokens"])
    profiler = (f"vLLM's December 2023 profiling fix (PR #2031) cut this TP-4 pool from "
                f"{PRE_PR2031_TOKENS:,} to {post_fix:,.0f} tokens by charging NCCL memory outside "
                f"torch; kvlib models today's profiler and lands between the two")
    return {"el01": nontorch("el01"), "el02": nontorch("el02"), "el07": el07,
            "el30": profiler, "vl02": profiler}
