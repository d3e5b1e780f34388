"""Claims → recomputed value → verdict.

A claim is one row of a ``data/claims/*.csv`` file: the figure as published, its unit, and which kvlib
computation rechecks it with which inputs (JSON). ``recheck(claim)`` recomputes it and gives a
verdict from a fixed set with a one-line reason; tolerances follow the claim's own precision.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pandas as pd

from .registry import data_dir, load_model
from .units import GB, GIB, KB, KIB, MB, MIB

VERDICTS = ("holds", "rounding", "unit slip", "misleading", "outdated", "wrong", "unverifiable")

#: Byte units a claim may be stated in, and the unit a writer may have meant instead.
BYTE_UNITS = {"bytes": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "KB": KB, "MB": MB, "GB": GB}
UNIT_SLIPS = {"KiB": "KB", "KB": "KiB", "MiB": "MB", "MB": "MiB", "GiB": "GB", "GB": "GiB"}


def _kv_per_token(model: str, dtype: str = "bf16", tp: int = 1) -> int:
    return load_model(model).kv_bytes_per_token(dtype, tp=tp)


def _kv_bytes(model: str, tokens: int, dtype: str = "bf16", requests: int = 1, tp: int = 1) -> int:
    return requests * load_model(model).kv_bytes(tokens, dtype, tp=tp)


def _kv_ratio(model: str, baseline: str, dtype: str = "bf16") -> float:
    """How many times more per-token KV ``baseline`` stores than ``model``."""
    return _kv_per_token(baseline, dtype) / _kv_per_token(model, dtype)


#: Computation name → function of the claim's inputs. Byte-valued ones return bytes.
COMPUTATIONS: dict[str, Callable[..., float]] = {
    "kv_per_token": _kv_per_token,
    "kv_bytes": _kv_bytes,
    "kv_ratio": _kv_ratio,
}


def precision(claimed: str) -> float:
    """Half a unit of the last digit the claim states: '68.6' → 0.05, '40' → 0.5."""
    try:
        exponent = Decimal(str(claimed).replace(",", "")).as_tuple().exponent
    except InvalidOperation:
        raise ValueError(f"claimed value {claimed!r} is not a number") from None
    return 0.5 * 10.0 ** int(exponent)


@dataclass(frozen=True)
class Verdict:
    """A recheck: the value recomputed in the claim's unit, the verdict and why."""

    claimed: float
    recomputed: float
    unit: str
    verdict: str
    reason: str


def _in_unit(value: float, unit: str) -> float:
    return value / BYTE_UNITS[unit] if unit in BYTE_UNITS else value


def judge(claimed: str, recomputed_raw: float, unit: str) -> Verdict:
    """Compare a claim with kvlib's raw result (bytes for byte units) at the claim's precision."""
    value = float(str(claimed).replace(",", ""))
    tol = precision(claimed)
    ours = _in_unit(recomputed_raw, unit)
    if not math.isfinite(ours):
        raise ValueError(f"recomputed value is not finite: {ours}")
    slip = UNIT_SLIPS.get(unit)
    if abs(ours - value) <= tol * (1 + 1e-9):
        exact_in_slip = (slip is not None and ours != value
                         and math.isclose(_in_unit(recomputed_raw, slip), value))
        note = f" (exactly {value:g} {slip}: the source computed in {slip})" if exact_in_slip else ""
        return Verdict(value, ours, unit, "holds", f"{ours:,.4g} {unit} rounds to the claim{note}")
    if abs(ours - value) <= 2 * tol or abs(ours - value) <= 0.01 * abs(value):
        return Verdict(value, ours, unit, "rounding",
                       f"{ours:,.4g} {unit}: within one unit of the last digit or 1 %")
    if slip is not None and abs(_in_unit(recomputed_raw, slip) - value) <= 2 * tol:
        return Verdict(value, ours, unit, "unit slip",
                       f"{ours:,.4g} {unit}; the claim's number is the value in {slip}")
    return Verdict(value, ours, unit, "wrong", f"recomputed {ours:,.4g} {unit}, not {value:g}")


def load_claims() -> pd.DataFrame:
    """Every ``data/claims/*.csv`` as one DataFrame (one claim per row, ``id`` as index).

    Raises ValueError when two rows share an id.
    """
    frames = [pd.read_csv(path, dtype={"claimed": str}, keep_default_na=False).assign(file=path.name)
              for path in sorted((data_dir() / "claims").glob("*.csv"))]
    claims = pd.concat(frames, ignore_index=True)
    dup = claims["id"][claims["id"].duplicated()].tolist()
    if dup:
        raise ValueError(f"duplicate claim ids in data/claims: {dup}")
    return claims.set_index("id")


def recheck(claim: str | Mapping[str, Any]) -> Verdict:
    """Recheck one claim: an id from ``data/claims/`` or a row with the same fields."""
    row = load_claims().loc[claim] if isinstance(claim, str) else claim
    name = row["computation"]
    if name not in COMPUTATIONS:
        raise KeyError(f"unknown computation {name!r}; known: {', '.join(COMPUTATIONS)}")
    inputs = json.loads(row["inputs"]) if row["inputs"] else {}
    return judge(row["claimed"], COMPUTATIONS[name](**inputs), row["unit"])
