"""Weights as an engine loads them: the published checkpoint's bytes where it is served in its own
format, else the parameter count at the format, plus the padding an engine's kernels add; the
parameter counts of a registry model.

Above ``params`` (counting), ``model`` and ``registry`` (what a slug names) in the model layer.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.data import csv_path, resolve_slug
from .formats import WeightFormat, weight_format
from .model import Model
from .params import ParamCounts, count_cached, count_params, marlin_padding_bytes, weight_bytes
from .registry import resolve_model


def params_for(model: Model | str | Mapping[str, Any]) -> ParamCounts:
    """Parameter counts for a registry slug, a ``Model`` or a config dict (memoized for slugs
    and models)."""
    if isinstance(model, Mapping):
        return count_params(model)
    m = resolve_model(model)
    if m.architecture is None:
        raise ValueError(f"model {m.name!r} carries no config: parameter counts need "
                         "the config.json fields (build it with Model.from_hf_config)")
    return count_cached(m.architecture)


@dataclass(frozen=True)
class LoadedWeights:
    """The weights one GPU holds as an engine loads them (bytes).

    computed_bytes: ``weight_bytes`` of the parameter count; checkpoint_bytes: this GPU's share
    of the published checkpoint when it is served in its own format (the total split as the
    count splits: sharded components by tp, replicated ones whole), else None; padding_bytes:
    what the engine adds to lay the format out for its kernels; basis: one line saying which.
    """

    computed_bytes: int
    checkpoint_bytes: int | None
    padding_bytes: int
    basis: str

    @property
    def total_bytes(self) -> int:
        """The weight term of the KV pool: the checkpoint where it applies, else the count,
        plus the engine's padding."""
        base = self.computed_bytes if self.checkpoint_bytes is None else self.checkpoint_bytes
        return base + self.padding_bytes


@lru_cache(maxsize=8)
def _gpu_slugs(path: Path, mtime: float) -> tuple[str, ...]:
    return tuple(pd.read_csv(path, usecols=["slug"], dtype=str)["slug"])


def _gpu_slug(gpu: Any) -> str | None:
    """``gpu`` as a slug of data/gpus.csv (a ``GPU`` gives its own): KeyError naming close
    matches for an unknown one, ValueError for one that is not a plain name; None stays None."""
    if gpu is None:
        return None
    slug = gpu if isinstance(gpu, str) else getattr(gpu, "slug", gpu)  # a kvlib.GPU too
    path = csv_path("gpus.csv")
    return resolve_slug("GPU", slug, _gpu_slugs(path, path.stat().st_mtime), "data/gpus.csv")


def loaded_weights(model: Model | str, weight_dtype: WeightFormat | str | Mapping[str, str] = "bf16",
                   tp: int = 1, gpu: str | None = None) -> LoadedWeights:
    """The weights of ``model`` (a registry slug or a Model) on one of ``tp`` GPUs of kind
    ``gpu`` (a slug of data/gpus.csv; None: a GPU with FP4 kernels is not assumed), as vLLM loads
    them: the published checkpoint's bytes when ``weight_dtype`` is the checkpoint's own format,
    else the parameter count at that format; plus Marlin's MXFP4 padding on GPUs without FP4
    kernels. ``tp`` must split the model's heads (``Model.check_tp``), an unknown ``gpu`` is a
    KeyError naming close matches."""
    m = resolve_model(model)
    if m.architecture is None:
        raise ValueError(f"loaded_weights needs a registry slug or a Model read from a config, "
                         f"got {model!r}")
    tp = m.check_tp(tp)
    gpu = _gpu_slug(gpu)
    fmt = weight_format(weight_dtype)
    counts = params_for(m)
    computed = weight_bytes(counts, fmt, tp)
    padding = marlin_padding_bytes(counts, m.architecture, fmt, tp, gpu)
    ckpt = m.checkpoint
    share = None
    if ckpt is not None and ckpt.weight_format.bits == fmt.bits:
        share = ckpt.total_size_bytes * computed // weight_bytes(counts, fmt, 1)
    basis = ("published checkpoint size" if share is not None
             else f"parameter count at {fmt.label}")
    if padding:
        basis += " + Marlin MXFP4 padding (no FP4 kernels on this GPU)"
    return LoadedWeights(computed_bytes=computed, checkpoint_bytes=share, padding_bytes=padding,
                         basis=basis)
def checkpoint_gap(model: Model | str) -> dict[str, Any]:
    """The published checkpoint against the parameter count at the checkpoint's format, and why
    they differ: ``computed_bytes``, ``checkpoint_bytes``, ``gap_bytes`` (checkpoint −
    computed) and ``explanation``. KeyError when the registry has no checkpoint size."""
    m = resolve_model(model)
    if m.checkpoint is None:
        raise KeyError(f"{m.name}: the registry has no published checkpoint size")
    fmt, counts, arch = m.checkpoint.weight_format, params_for(m), m.architecture
    computed = weight_bytes(counts, fmt)
    gap = m.checkpoint.total_size_bytes - computed
    bits = fmt.bits
    if gap == 0:
        why = "the checkpoint holds exactly the counted parameters at the format's bits"
    elif (arch.moe is not None and arch.moe.expert_bias and arch.hidden_size
          and arch.moe.intermediate_size):
        biases = (counts.n_moe_layers * counts.n_experts
                  * (2 * arch.moe.intermediate_size + arch.hidden_size))
        bias_gap = math.ceil(biases * (16 - bits["experts"]) / 8)
        why = (f"the experts' {biases:,} bias values are stored in bf16, where the count prices "
               f"every expert value at {bits['experts']:g} bits: {bias_gap:,} bytes")
        if bias_gap != gap:
            why += f"; {gap - bias_gap:,} bytes unexplained"
    else:
        why = f"{gap:,} bytes unexplained"
    return {"model": m.name, "format": fmt.label, "computed_bytes": computed,
            "checkpoint_bytes": m.checkpoint.total_size_bytes, "gap_bytes": gap,
            "explanation": why, "source": m.checkpoint.source}
