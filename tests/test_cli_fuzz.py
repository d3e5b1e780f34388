"""The ``kvlib`` command driven in-process with arbitrary argument values (hypothesis).

Whatever the arguments, the command answers (exit 0, output on stdout, nothing on stderr, no
NaN, no negative size, speed or price in its JSON) or refuses (exit 2, exactly one line on
stderr, nothing on stdout), within a time bound — never a traceback, a hang or a second status.
"""
from __future__ import annotations

import contextlib
import io
import json
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvlib
from kvlib.report.cli import main

#: Seconds one command may take (the slowest, ``models``, reads every registry config).
TIME_BOUND_S = 5.0

_NUMBERS = st.one_of(
    st.integers(min_value=1, max_value=200_000).map(str),  # plausible: many answers
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "-0", "1e308", "1e-308", "5e-324", "nan", "inf", "-inf", "0x10",
                     "1_000", "", " ", "99999999999999999999999999999999"]),
)
_WORDS = st.one_of(
    st.text(max_size=40), st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-/_", min_size=300,
                                  max_size=320),
    st.sampled_from(["../../x", "/", ".", "..", "config.json", "-", "--", "--json", "-h"]),
)
_MODELS = st.one_of(st.sampled_from(kvlib.model_slugs()), _WORDS)
_GPUS = st.one_of(st.sampled_from(kvlib.gpu_slugs()), _WORDS)
_DTYPES = st.one_of(st.sampled_from(["bf16", "fp8", "fp4", "int4", "fp32", "mxfp4"]), _WORDS)
#: Claim ids, known or not; never a flag: ``kvlib recheck`` without ids rechecks every claim
#: (simulations included), a right answer that takes longer than the bound.
_CLAIMS = st.one_of(st.sampled_from(["a01", "a12", "d01", "e01", "x01"]),
                    st.text(max_size=40).filter(lambda text: not text.startswith("-")))
_VALUES = st.one_of(_NUMBERS, _WORDS)


def _options(flags: dict[str, st.SearchStrategy]) -> st.SearchStrategy[list[str]]:
    pairs = st.sampled_from(sorted(flags)).flatmap(
        lambda flag: flags[flag].map(lambda value: [flag, value]) if flags[flag] is not None
        else st.just([flag]))
    return st.lists(st.one_of(pairs, _VALUES.map(lambda v: [v])), max_size=4).map(
        lambda groups: [part for group in groups for part in group])


_ARGV = st.one_of(
    st.tuples(st.just(["kv"]), _MODELS.map(lambda m: [m]),
              _options({"--tokens": _NUMBERS, "--dtype": _DTYPES, "--tp": _NUMBERS,
                        "--json": None})),
    st.tuples(st.just(["fit"]), st.tuples(_MODELS, _GPUS).map(list),
              _options({"--util": _NUMBERS, "--context": _NUMBERS, "--tp": _NUMBERS,
                        "--weight-dtype": _DTYPES, "--kv-dtype": _DTYPES, "--json": None,
                        "--allow-long-context": None, "--output-tokens": _NUMBERS,
                        "--max-num-seqs": _NUMBERS, "--max-num-batched-tokens": _NUMBERS})),
    st.tuples(st.just(["cost"]), st.just([]),
              _options({"--price": _NUMBERS, "--tps": _NUMBERS, "--json": None,
                        "--context": _NUMBERS, "--tp": _NUMBERS})),
    # a model on a GPU: the serving pipeline, its error band and both prices
    st.tuples(st.just(["cost"]), st.tuples(_MODELS, _GPUS).map(list),
              _options({"--price": _NUMBERS, "--util": _NUMBERS, "--context": _NUMBERS,
                        "--output-tokens": _NUMBERS, "--tp": _NUMBERS, "--kv-dtype": _DTYPES,
                        "--weight-dtype": _DTYPES, "--json": None})).map(
        lambda parts: (parts[0], parts[1], ["--price", "2.9", *parts[2]])),
    st.tuples(st.just(["recheck"]), st.lists(_CLAIMS, min_size=1, max_size=2),
              st.sampled_from([[], ["--json"]])),
    st.tuples(st.just(["models"]), st.just([]), _options({"--dtype": _DTYPES, "--json": None})),
    st.tuples(st.just([]), st.just([]), st.lists(_VALUES, max_size=3)),
).map(lambda parts: [*parts[0], *parts[1], *parts[2]])


#: JSON keys that hold a size, a speed or a price: never negative (``available_kv_bytes`` is 0
#: where the weights leave nothing, ``kv_shortfall_bytes`` how far short they fall).
_NON_NEGATIVE = ("bytes", "tokens", "per_s", "dollars", "batch", "concurrency", "_range")


def _no_negative(data: object, argv: list[str], key: str = "") -> None:
    if isinstance(data, dict):
        for k, v in data.items():
            _no_negative(v, argv, k)
    elif isinstance(data, list):
        for v in data:
            _no_negative(v, argv, key)
    elif isinstance(data, (int, float)) and not isinstance(data, bool) \
            and key not in ("low", "high") and any(part in key for part in _NON_NEGATIVE):
        assert data >= 0, (argv, key, data)


def run(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue(), time.perf_counter() - start


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_ARGV)
def test_any_arguments_answer_or_one_line_error(argv):
    status, out, err, elapsed = run(argv)
    assert elapsed < TIME_BOUND_S, f"kvlib {argv} took {elapsed:.1f} s"
    if status == 0:
        assert out.strip() and not err, (argv, err)
        assert "nan" not in out.lower().replace(",", " ").split(), (argv, out)  # never printed
        if "--json" in argv and out.lstrip()[:1] in "[{":  # not --help or --version
            _no_negative(json.loads(out), argv)
    else:
        assert status == 2, (argv, status, err)
        assert not out and len(err.splitlines()) == 1 and err.startswith("kvlib: error: "), \
            (argv, err)
