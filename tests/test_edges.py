"""Edges that mislead (issue 21): each one's one-line message, and a property test per entry point.

Every behaviour at an edge is pinned here with its message: NaN never printed or emitted (JSON
``null`` with a reason), bounded claim formulas, numpy numbers accepted everywhere, an explicit 0
kept (or refused) and never replaced by a default, a flag that does not apply refused, real
dates and bounded error bands in the CSVs, JSON depth limits, bounded Poisson arrivals, and a
chapter parameter of the wrong type named. The property tests (hypothesis, derandomized, few
examples, a deadline) require of each public entry point a result or a one-line
ValueError/KeyError/TypeError — never another traceback, a hang, NaN or a negative size, speed
or price.
"""
from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest

import kvlib
from kvlib.report import recheck
from kvlib.report.cli import main
from kvlib.report.recheck import COMPUTATIONS


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def _row(**fields: str) -> dict[str, str]:
    base = dict(id="t1", claim="c", source="test", section="", quantity="", claimed="1",
                unit="x", computation="arithmetic", inputs=json.dumps({"expr": "1"}), notes="")
    base.update(fields)
    return base


# --- recheck: NaN is null with its reason, never "recomputed nan" ------------------------------

def _unverifiable_ids() -> list[str]:
    claims = recheck.load_claims()
    return claims.index[claims["computation"].str.strip() == recheck.UNVERIFIABLE].tolist()


def test_recheck_json_gives_null_for_an_unverifiable_claim():
    ids = _unverifiable_ids()
    assert ids, "the book's data has unverifiable claims"
    status, out, err = cli("recheck", *ids, "a01", "--json")
    assert status == 0 and not err
    rows = {r["id"]: r for r in json.loads(out)}
    for claim_id in ids:
        assert rows[claim_id]["recomputed"] is None and rows[claim_id]["verdict"] == "unverifiable"
        assert rows[claim_id]["reason"]
    assert rows["a01"]["recomputed"] == 128.0  # 128 KiB per token, recomputed


def test_recheck_text_says_not_recomputed():
    status, out, _ = cli("recheck", "x04", "a01")
    assert status == 0 and "nan" not in out
    assert out.splitlines()[0] == (
        "x04   unverifiable claimed 24 x, not recomputed — a measured result; nothing in kvlib "
        "can recompute it (the validation appendix bounds such numbers with the roofline)")
    assert out.splitlines()[1].startswith("a01   holds      claimed 128 KiB, recomputed 128 —")


# --- bounded claim formulas ------------------------------------------------------------------------

@pytest.mark.parametrize("expr, message", [
    ("9**9**9", "formula '9**9**9': 9 ** 387420489 exceeds 1e+100 in magnitude"),
    ("(1+)*2", "formula '(1+)*2': does not parse"),
    ("10**99 * 10**99", "formula '10**99 * 10**99': an intermediate result exceeds 1e+100 in "
                        "magnitude"),
    ("1e400", "formula '1e400': the number inf exceeds 1e+100 in magnitude"),
    ("1" + "0" * 200, "exceeds 1e+100 in magnitude"),
    ("0.5 ** -1000", "formula '0.5 ** -1000': 0.5 ** -1000 exceeds 1e+100 in magnitude"),
    ("(-8) ** 0.5", "formula '(-8) ** 0.5': -8 ** 0.5 is not a real number"),
    ("-(" * 40 + "1" + ")" * 40, "nests deeper than 24 levels"),
    ("(" * 300 + "1" + ")" * 300, "does not parse"),
    ("+".join(["1"] * 300), "has more than 200 terms"),
    ("1" * 1001, "longer than 1,000 characters"),
    ("().__class__", "formula '().__class__': only numbers, names, computations and "
                     "+ - * / // ** are allowed"),
    ("x.real", "only numbers, names, computations"),
    ("y + 1", "formula 'y + 1': names 'y', which is not an input"),
    ("__import__('os')", "formula \"__import__('os')\": calls '__import__', which is not a "
                         "computation"),
    ("kv_per_token(**{'model': 'llama-3.1-8b'})", "a call takes plain arguments, no * or **"),
    ("+".join(["ratio(1, 1)"] * 9), "calls more than 8 computations"),
    ("1 / 0", "formula '1 / 0': divides by zero"),
])
def test_a_formula_outside_the_limits_is_one_line_naming_it(expr, message):
    with pytest.raises(ValueError) as info:
        COMPUTATIONS["arithmetic"](expr, x=1)
    text = str(info.value)
    assert message in text and "\n" not in text and text.startswith("formula ")


def test_formulas_within_the_limits_still_evaluate():
    arith = COMPUTATIONS["arithmetic"]
    assert arith("2 ** 0.5") == math.sqrt(2)
    assert arith("2 ** -2000") == 0.0  # tiny, not huge
    assert arith("kv_bytes('llama-3-70b', 131072) / GiB") == 40.0


def test_a_bad_formula_names_the_claim_and_the_formula():
    row = _row(id="z9", inputs=json.dumps({"expr": "9**9**9"}))
    with pytest.raises(ValueError) as info:
        recheck.recheck(row)
    assert str(info.value) == ("claim z9: formula '9**9**9': 9 ** 387420489 exceeds 1e+100 in "
                               "magnitude")
    out = recheck.recheck_all(__import__("pandas").DataFrame([row]))
    assert out.loc[0, "verdict"] == "error"
    assert out.loc[0, "reason"] == "row z9: formula '9**9**9': 9 ** 387420489 exceeds 1e+100 in magnitude"


def test_the_cli_refuses_a_forked_formula_in_one_line(tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "claims").mkdir(parents=True)
    import pandas as pd

    pd.DataFrame([_row(id="z1", inputs=json.dumps({"expr": "9**9**9"}))]).to_csv(
        data / "claims" / "fork.csv", index=False)
    monkeypatch.setenv("KVLIB_DATA", str(data))
    status, out, err = cli("recheck", "z1")
    assert (status, out) == (2, "")
    assert err == ("kvlib: error: claim z1: formula '9**9**9': 9 ** 387420489 exceeds 1e+100 in "
                   "magnitude\n")


# --- the CLI: 0 is 0 or an error, a flag that does not apply is an error --------------------------

@pytest.mark.parametrize("argv, message", [
    (("fit", "llama-3.1-8b", "h100-sxm", "--output-tokens", "0"),
     "--output-tokens must be between 1 and --context − 1, got 0"),
    (("cost", "llama-3.1-8b", "h100-sxm", "--price", "2", "--output-tokens", "0"),
     "--output-tokens must be between 1 and --context − 1, got 0"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--context", "1"),
     "--context 1 leaves no room for a prompt and an output token: give --context 2 or more"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--max-num-seqs", "0"), "max_num_seqs must be >= 1, got 0"),
    (("kv", "llama-3.1-8b", "--tp", "0"), "tp (tensor-parallel degree) must be >= 1, got 0"),
    (("cost", "--price", "2", "--tps", "1000", "--context", "4096"),
     "--context applies only with a model and a GPU, not with --tps (see kvlib --help)"),
    (("cost", "--price", "2", "--tps", "1000", "--tp", "2", "--util", "0.5"),
     "--util, --tp apply only with a model and a GPU, not with --tps (see kvlib --help)"),
    (("cost", "--price", "2", "--tps", "1000", "--output-tokens", "10"),
     "--output-tokens applies only with a model and a GPU, not with --tps (see kvlib --help)"),
])
def test_cli_zero_and_inapplicable_flags(argv, message):
    status, out, err = cli(*argv)
    assert (status, out) == (2, "")
    assert err == f"kvlib: error: {message}\n"


def test_cli_an_explicit_zero_is_zero():
    status, out, _ = cli("kv", "llama-3.1-8b", "--tokens", "0", "--json")
    assert status == 0 and json.loads(out)["kv_bytes"] == 0
    status, out, _ = cli("cost", "--price", "2", "--tps", "1000")  # defaults still apply
    assert status == 0 and "$0.56 per 1M tokens" in out
