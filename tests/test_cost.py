"""$/1M tokens: the article's arithmetic, the inverse, and bad input."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kvlib
from kvlib.serve.cost import cost_change, dollars_per_hour_for_cost


@pytest.mark.parametrize("rate, expected", [(100, 8.06), (1000, 0.81), (3000, 0.27)])
def test_article_examples_at_290_per_hour(rate, expected):
    # 2.90 / (rate × 3600) × 10⁶: 8.0556, 0.8056, 0.2685
    assert round(kvlib.cost_per_million_tokens(2.90, rate), 2) == expected


def test_blog_figure_is_off_by_ten():
    # 2.50 / (95 × 3600) × 10⁶ = 7.3099; $0.73/M needs 950 tok/s
    assert round(kvlib.cost_per_million_tokens(2.50, 95), 2) == 7.31
    assert round(kvlib.tokens_per_second_for_cost(2.50, 0.731), -1) == 950


def test_tuning_example_cost_change():
    # 1,564.304 → 2,474.2581 tok/s: +58.17% throughput, −36.78% cost per token
    assert math.isclose(cost_change(1564.304, 2474.2581), -0.3678, abs_tol=1e-4)


@given(st.floats(0.01, 1000), st.floats(0.1, 1e6))
def test_inverse_round_trips(price, rate):
    cost = kvlib.cost_per_million_tokens(price, rate)
    assert math.isclose(kvlib.tokens_per_second_for_cost(price, cost), rate, rel_tol=1e-9)
    assert math.isclose(dollars_per_hour_for_cost(rate, cost), price, rel_tol=1e-9)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "3"])
def test_bad_inputs_name_the_argument(bad):
    with pytest.raises(ValueError, match="dollars_per_hour"):
        kvlib.cost_per_million_tokens(bad, 100)
    with pytest.raises(ValueError, match="tokens_per_second"):
        kvlib.cost_per_million_tokens(2.9, bad)
    with pytest.raises(ValueError, match="dollars_per_million"):
        kvlib.tokens_per_second_for_cost(2.9, bad)


def test_numpy_numbers_pass_and_results_beyond_a_float_are_refused():
    import numpy as np

    # $2.90 ÷ (1,000 tok/s × 3,600 s) × 10⁶ = $0.8056 per 1M tokens, numpy or not
    assert kvlib.cost_per_million_tokens(np.float32(2.5), np.int64(1000)) == \
        kvlib.cost_per_million_tokens(2.5, 1000)
    with pytest.raises(ValueError, match="dollars_per_million_tokens is too large"):
        kvlib.cost_per_million_tokens(1e308, 1e-308)  # 10³⁰⁸ ÷ 3.6×10⁻³⁰⁵ × 10⁶ = ∞
    with pytest.raises(ValueError, match="dollars_per_million_tokens is too small"):
        kvlib.cost_per_million_tokens(1e-308, 1e308)  # underflows to 0
    with pytest.raises(ValueError, match="dollars_per_hour is too large"):
        dollars_per_hour_for_cost(1e300, 1e300)
