"""Dollars per million tokens, and back.

$/1M tokens = $/hour ÷ (tokens/s × 3,600 s/hour) × 10⁶. ``dollars_per_hour`` is what the
whole serving unit costs (one GPU's price × the GPUs it uses), ``tokens_per_second`` what the
whole unit produces.
"""
from __future__ import annotations

import math

from ..core.checks import number

SECONDS_PER_HOUR = 3600
TOKENS_PER_MILLION = 1_000_000


def _positive(name: str, value: float) -> float:
    return number(name, value, positive=True)


def _representable(name: str, value: float) -> float:
    """``value`` if a float holds it: the quotient of two positive finite numbers can overflow
    to infinity or underflow to 0, and then no answer is printed rather than a wrong one."""
    if not math.isfinite(value) or value == 0:
        raise ValueError(f"{name} is {'too large' if value else 'too small'} to represent as a "
                         f"float ({value!r}): the inputs are out of range")
    return value


def cost_per_million_tokens(dollars_per_hour: float, tokens_per_second: float) -> float:
    """$ per 10⁶ tokens at a price of ``dollars_per_hour`` and a rate of ``tokens_per_second``.

    Raises ValueError naming the argument when either is zero, negative or not finite.
    """
    price = _positive("dollars_per_hour", dollars_per_hour)
    rate = _positive("tokens_per_second", tokens_per_second)
    return _representable("dollars_per_million_tokens",
                          price / (rate * SECONDS_PER_HOUR) * TOKENS_PER_MILLION)


def tokens_per_second_for_cost(dollars_per_hour: float, dollars_per_million: float) -> float:
    """The throughput (tokens/s) at which ``dollars_per_hour`` buys 10⁶ tokens for
    ``dollars_per_million``: the inverse of ``cost_per_million_tokens``."""
    price = _positive("dollars_per_hour", dollars_per_hour)
    target = _positive("dollars_per_million", dollars_per_million)
    return _representable("tokens_per_second",
                          price / (target * SECONDS_PER_HOUR) * TOKENS_PER_MILLION)


def dollars_per_hour_for_cost(tokens_per_second: float, dollars_per_million: float) -> float:
    """The hourly price at which ``tokens_per_second`` costs ``dollars_per_million`` per 10⁶."""
    rate = _positive("tokens_per_second", tokens_per_second)
    target = _positive("dollars_per_million", dollars_per_million)
    return _representable("dollars_per_hour",
                          target * rate * SECONDS_PER_HOUR / TOKENS_PER_MILLION)


def cost_change(tokens_per_second_before: float, tokens_per_second_after: float) -> float:
    """Relative change of $/token when throughput moves from ``before`` to ``after`` at a fixed
    price: ``before / after − 1`` (−0.368 for the 1,564 → 2,474 tok/s tuning example)."""
    before = _positive("tokens_per_second_before", tokens_per_second_before)
    after = _positive("tokens_per_second_after", tokens_per_second_after)
    return before / after - 1
