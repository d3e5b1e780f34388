"""The published checkpoints of a registry model: the one its record names and the ones
``data/weight_checkpoints.csv`` lists in other formats — each with its Hugging Face repository.

* ``published_weight_format``: the format the record's own checkpoint is stored in (its
  config's ``quantization_config``, else bf16); ``checkpoint_weight_format``, the same for a
  ``Model`` (the weights a ``Deployment`` serves by default).
* ``weight_choices``: that checkpoint first, then the rows of ``data/weight_checkpoints.csv``
  for the model (FP8, 4-bit AWQ, ...), each with its repository and source. A row in the
  record's own format names the post-trained (chat) checkpoint a launch command loads where the
  record was read from the base model's config (Llama-3.1: same architecture, another repository). A model *has* an
  fp8 or int4 checkpoint when, and only when, its config or such a row says so.
* ``checkpoint_repository``: the repository of the checkpoint stored in a given weight format,
  never a guess (ValueError when none is recorded) — what ``vllm serve <repo>`` loads.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

from ..core.data import csv_path, data_dir
from .formats import WeightFormat, weight_format
from .model import Model
from .registry import load_model, model_record

#: Checkpoint formats read from a config's ``quantization_config.quant_method`` → the weight
#: format kvlib serves them in (others, e.g. GPTQ's bit widths, are not guessed).
QUANT_FORMATS: dict[str, str | dict[str, str]] = {
    "fp8": "fp8",  # DeepSeek-V3/R1, Kimi-K2, MiniMax: block-wise FP8 linear layers
    "mxfp4": {"experts": "mxfp4"},  # gpt-oss: MXFP4 routed experts, the rest bf16
}


def published_weight_format(slug: str) -> str | dict[str, str]:
    """The weight format a registry model's checkpoint is published in: ``"bf16"`` when its
    config has no ``quantization_config``, else the ``QUANT_FORMATS`` entry for its method.

    Raises ValueError for a quantization method kvlib does not map (it never guesses bits).
    """
    return checkpoint_weight_format(load_model(slug))


def checkpoint_weight_format(model: Model) -> str | dict[str, str]:
    """``published_weight_format`` of a ``Model`` (a registry record or one read from a
    config.json): the format of the checkpoint its config describes — what a ``Deployment``
    serves when no weight format is given."""
    method = model.architecture.quant_method if model.architecture is not None else None
    if method is None:
        return "bf16"
    if method not in QUANT_FORMATS:
        raise ValueError(f"{model.name}: quantization method {method!r} has no kvlib weight "
                         f"format (known: {', '.join(QUANT_FORMATS)}); give the weight format "
                         "explicitly")
    fmt = QUANT_FORMATS[method]
    return dict(fmt) if isinstance(fmt, Mapping) else fmt


@dataclass(frozen=True)
class WeightChoice:
    """One checkpoint of a model: label ("bf16", "fp8", "int4", …), weight_format (as
    ``params.weight_bytes`` reads it), repository and source_url (where it is published and
    where that is stated), published (the registry's own config: the model as its publisher
    ships it)."""

    label: str
    weight_format: str | Mapping[str, str]
    repository: str
    source_url: str
    published: bool


def checkpoint_rows() -> pd.DataFrame:
    """``data/weight_checkpoints.csv``: published checkpoints in other formats, one per row."""
    return pd.read_csv(csv_path("weight_checkpoints.csv"), dtype=str, keep_default_na=False)


def weight_choices(slug: str) -> list[WeightChoice]:
    """The checkpoints of registry model ``slug``: the published one first, then the rows of
    ``data/weight_checkpoints.csv`` for it. ValueError when two share a label. Read once per
    version of the two files."""
    model_record(slug)  # an unknown slug is a KeyError naming close matches
    table, record = csv_path("weight_checkpoints.csv"), data_dir() / "models" / f"{slug}.json"
    return list(_weight_choices(slug, table, table.stat().st_mtime_ns, record,
                                record.stat().st_mtime_ns))


@lru_cache(maxsize=256)
def _weight_choices(slug: str, table: Path, table_mtime_ns: int, record_path: Path,
                    record_mtime_ns: int) -> tuple[WeightChoice, ...]:
    record = model_record(slug)
    published = published_weight_format(slug)
    choices = [WeightChoice(weight_format(published).family, published,
                            record["source"].get("repo", slug), record["source"]["url"], True)]
    rows = checkpoint_rows()
    for row in rows[rows["model"] == slug].itertuples():
        if weight_format(row.weight_format) == weight_format(published):
            # the post-trained (chat) checkpoint of a record read from its base model's config
            choices[0] = WeightChoice(choices[0].label, published, row.repository,
                                      row.source_url, True)
            continue
        choices.append(WeightChoice(weight_format(row.weight_format).family, row.weight_format,
                                    row.repository, row.source_url, False))
    labels = [c.label for c in choices]
    if len(set(labels)) < len(labels):
        raise ValueError(f"{slug}: two checkpoints with the same label in {labels} "
                         "(data/weight_checkpoints.csv)")
    return tuple(choices)


def checkpoint_repository(slug: str, weights: WeightFormat | str | Mapping[str, str]) -> str:
    """The Hugging Face repository of registry model ``slug``'s checkpoint stored in
    ``weights``: the record's ``source.repo`` for the published format, else the row of
    ``data/weight_checkpoints.csv`` in that format, e.g. ``checkpoint_repository(
    "llama-3.1-70b", "fp8")`` → ``"RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8"``.

    ValueError when no checkpoint in that format is recorded (or the record names no
    repository): the repository is never guessed.
    """
    wanted = weight_format(weights)
    choices = weight_choices(slug)
    for choice in choices:
        if weight_format(choice.weight_format) != wanted:
            continue
        if choice.published and not model_record(slug)["source"].get("repo"):
            raise ValueError(f"data/models/{slug}.json names no Hugging Face repository "
                             "(source.repo)")
        return choice.repository
    have = ", ".join(f"{weight_format(c.weight_format).text} ({c.repository})" for c in choices)
    raise ValueError(f"{slug}: no {wanted.label} checkpoint is recorded (recorded: {have}); add "
                     "a row naming its repository and source to data/weight_checkpoints.csv")
