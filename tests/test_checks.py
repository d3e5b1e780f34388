"""kvlib.core.checks: integers and numbers accepted as Python or numpy values, bools and NaN refused."""
import numpy as np
import pytest

from kvlib.core import checks


def test_integer_accepts_python_and_numpy_ints():
    assert checks.integer("n", 3) == 3
    assert checks.integer("n", np.int64(3)) == 3
    assert type(checks.integer("n", np.int32(7))) is int


@pytest.mark.parametrize("bad", [True, 3.0, np.float64(3.0), "3", None])
def test_integer_refuses_non_integers(bad):
    with pytest.raises(ValueError, match="n must be an integer"):
        checks.integer("n", bad)


def test_integer_bounds_name_the_argument():
    with pytest.raises(ValueError, match=r"tokens must be >= 1, got 0"):
        checks.positive_integer("tokens", 0)
    with pytest.raises(ValueError, match=r"layers must be <= 10, got 11"):
        checks.integer("layers", 11, maximum=10)


def test_number_accepts_ints_and_floats_and_refuses_nan_inf_bool():
    assert checks.number("x", np.float32(0.5)) == 0.5
    assert checks.number("x", np.int64(2), positive=True) == 2.0
    for bad in (float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="x must be"):
            checks.number("x", bad)
    with pytest.raises(ValueError, match="price must be positive"):
        checks.number("price", 0, positive=True)
