"""Argument checks shared by kvlib's modules: integers and numbers, with errors naming the argument.

Python ints and numpy integers are integers; bools are not. Python and numpy floats are numbers;
NaN and infinities are refused. Every failure is a ValueError that names the argument.
"""
from __future__ import annotations

import math
import numbers
import operator


def integer(name: str, value: object, minimum: int | None = 0, maximum: int | None = None) -> int:
    """``value`` as a Python int within [minimum, maximum] (either bound may be None)."""
    if type(value) is int:  # the common case, without the abstract-class check
        result = value
    elif isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    else:
        result = operator.index(value)
    if minimum is not None and result < minimum:
        raise ValueError(f"{name} must be >= {minimum:,}, got {result:,}")
    if maximum is not None and result > maximum:
        raise ValueError(f"{name} must be <= {maximum:,}, got {result:,}")
    return result


def positive_integer(name: str, value: object, maximum: int | None = None) -> int:
    """``value`` as a Python int >= 1."""
    return integer(name, value, 1, maximum)


def number(name: str, value: object, *, minimum: float | None = None,
           maximum: float | None = None, positive: bool = False) -> float:
    """``value`` as a finite float within the bounds (``positive``: strictly above 0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and result <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    if minimum is not None and result < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {value!r}")
    if maximum is not None and result > maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {value!r}")
    return result
