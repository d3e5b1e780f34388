"""The model registry: real ``config.json`` files in ``data/models``, each with its source."""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.data import data_dir, load_json, resolve_slug
from .model import Model
from .formats import Checkpoint
from ..core.units import KIB


def model_slugs() -> list[str]:
    """Every slug in the registry, sorted."""
    return sorted(p.stem for p in (data_dir() / "models").glob("*.json"))


@lru_cache(maxsize=None)
def _record(path: Path, mtime: float) -> dict[str, Any]:
    """The record in ``path``, checked: a JSON object with a ``config`` object and a ``source``
    object holding a ``url`` (ValueError naming the file otherwise)."""
    try:
        record = load_json(path.read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} holds a JSON {type(record).__name__}, not a registry record "
                         '{"slug", "name", "source": {"url", ...}, "config": {...}}')
    for key in ("source", "config"):
        if not isinstance(record.get(key), dict):
            raise ValueError(f"{path} has no {key!r} object (see data/models/README.md)")
    if not isinstance(record["source"].get("url"), str) or not record["source"]["url"].strip():
        raise ValueError(f"{path}: source has no 'url' (see data/models/README.md)")
    return record


def model_record(slug: str) -> dict[str, Any]:
    """The registry entry for ``slug``: ``{"slug", "name", "source", "config", ...}``.

    Raises KeyError naming close matches for an unknown slug, ValueError for a slug that is not
    a plain name (``"../x"``) or a record that is not one (naming its file).
    """
    resolve_slug("model", slug, model_slugs(), "data/models/")
    path = data_dir() / "models" / f"{slug}.json"
    return _record(path, path.stat().st_mtime)


def load_model(slug: str) -> Model:
    """The Model for a registry slug, e.g. ``load_model("llama-3.1-8b")``, with its published
    checkpoint size where the record has one (``checkpoint.total_size_bytes``). A config or a
    checkpoint entry the reader refuses is an error of the same type whose message starts with
    the record's file."""
    record = model_record(slug)
    path = data_dir() / "models" / f"{slug}.json"
    try:
        return _load(slug, record)
    except (ValueError, TypeError, KeyError) as exc:
        message = exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)
        raise type(exc)(f"{path}: {message}") from None


def _load(slug: str, record: dict[str, Any]) -> Model:
    name = record.get("name", slug)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"'name' must be a non-empty string, got {name!r}")
    model = Model.from_hf_config(record["config"], name=name)
    ckpt = record.get("checkpoint")
    if ckpt is None:
        return model
    if not isinstance(ckpt, dict) or "total_size_bytes" not in ckpt or "format" not in ckpt:
        raise ValueError("'checkpoint' needs total_size_bytes and format")
    source = ckpt.get("source", {})
    return replace(model, checkpoint=Checkpoint(
        total_size_bytes=ckpt["total_size_bytes"], weight_format=ckpt["format"],
        source=source.get("url", "") if isinstance(source, dict) else str(source)))


def resolve_model(model: Model | str) -> Model:
    """A ``Model`` as given, or the registry's model for a slug; TypeError for anything else."""
    if isinstance(model, Model):
        return model
    if isinstance(model, str):
        return load_model(model)
    raise TypeError(f"model must be a Model or a registry slug, got {type(model).__name__}")


def registry_table(dtype: str = "bf16") -> pd.DataFrame:
    """One row per registry model: geometry, per-token KV bytes in ``dtype``, and source."""
    rows = []
    for slug in model_slugs():
        record = model_record(slug)
        model = load_model(slug)
        per_token = model.kv_bytes_per_token(dtype)
        rows.append({
            "slug": slug,
            "model": model.name,
            "attention": model.attention,
            "layers": model.n_layers,
            "layer_kinds": model.layer_summary(),
            "max_window": model.max_window,
            "kv_bytes_per_token": per_token,
            "kv_kib_per_token": per_token / KIB,
            "state_bytes": model.state_bytes() if model.dtype else None,
            "source": record["source"]["url"],
        })
    return pd.DataFrame(rows)
