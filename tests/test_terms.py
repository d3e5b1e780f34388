"""kvlib.fit.terms: the candidate term sets, the rule that picks one, the stored table (issue 22)."""
from __future__ import annotations

import pandas as pd
import pytest

from kvlib.fit import calibrate, terms
from kvlib.model.registry import data_dir
from kvlib.speed.roofline import CALIBRATED


def test_the_rule_reads_leave_one_source_out_only():
    table = pd.DataFrame({"terms": ["per engine", "per vendor", "shared"],
                          "constants": [12, 9, 9],
                          "random_split_median": [0.09, 0.12, 0.13],
                          "loso_median": [0.30, 0.20, 0.20],
                          "fresh_median": [0.50, 0.40, 0.10]})
    # the lowest leave-one-source-out median wins, the first on a tie; the random split and
    # the fresh set do not vote
    assert terms.choose_terms(table) == "per vendor"
    # within half a point of the lowest is a tie, won by the fewest constants: 0.203 ties with
    # 0.200 (9 constants) and has 7; 0.206 would not tie
    close = table.assign(loso_median=[0.30, 0.20, 0.203], constants=[12, 9, 7])
    assert terms.choose_terms(close) == "shared"
    assert terms.choose_terms(close.assign(loso_median=[0.30, 0.20, 0.206])) == "per vendor"
    # the chosen set's constants, counted: η_w = η_kv and η_F, a step and a request cost per
    # GPU vendor, five block kinds and the stage cost: 2 + 2 + 5 + 2 + 1
    assert calibrate.TERM_SETS[7].constants == 12 and calibrate.TERM_SETS[8].constants == 15
    with pytest.raises(ValueError, match="no term sets"):
        terms.choose_terms(table.iloc[:0])
    with pytest.raises(ValueError, match="Terms.step"):
        calibrate.Terms("per node", step="node")


def test_the_stored_selection_is_the_candidates_and_picks_the_shipped_terms():
    stored = terms.stored_term_selection()
    assert list(stored["terms"]) == [t.name for t in calibrate.TERM_SETS]
    assert list(stored["step"]) == [t.step for t in calibrate.TERM_SETS]
    assert terms.choose_terms(stored) == calibrate.CHOSEN_TERMS.name
    assert list(stored["chosen"]) == [t == calibrate.CHOSEN_TERMS for t in calibrate.TERM_SETS]
    assert set(terms.REPORTED_ONLY) <= set(stored.columns) and terms.RULE_COLUMN in stored
    # the chosen row's random-split error is the shipped constants' held-out error, the band
    # of every held-out point (tests/test_calibrate.py checks that band file is current)
    bands = pd.read_csv(data_dir() / calibrate.BANDS_FILE, keep_default_na=False)
    every = bands[bands["tp"] == 0].iloc[0]
    row = stored[stored["chosen"]].iloc[0]
    assert row["random_split_n"] == every["n"]
    assert row["random_split_median"] == every["median_abs_error"]


def test_a_shared_step_cost_is_stored_for_every_engine_build():
    # a fit on a few points whose step cost per vendor: one value for all NVIDIA builds,
    # one for the AMD builds, and an NVIDIA engine the points lack still gets its vendor's
    assert dict(CALIBRATED.step_s).keys() == set(calibrate.ENGINE_KEYS)
    pts = calibrate.speed_points()
    train = pts[(pts["role"] == "train") & (pts["engine"] == "vllm")].head(40)
    every = calibrate._all_parts()
    eff = calibrate.fit({i: every[i] for i in train.index}, train["value"].to_dict(),
                        calibrate.Terms("per vendor", step="vendor"))
    step = dict(eff.step_s)
    assert step.keys() == set(calibrate.ENGINE_KEYS)
    assert step["vllm"] == step["sglang"] == step["tensorrt-llm"]
    assert step["vllm-rocm"] == step["sglang-rocm"]


def test_a_stored_row_is_what_its_fit_gives():
    # the cheapest candidate (η_kv tied to η_w: a one-dimensional bandwidth search), refitted
    # on the train half and judged on the held-out half, as write_term_selection did
    tied = next(t for t in calibrate.TERM_SETS if t.tie_kv)
    assert tied.tie_kv
    pts = calibrate.speed_points()
    every = calibrate._all_parts()
    train, test = pts[pts["role"] == "train"], pts[pts["role"] == "test"]
    eff = calibrate.rounded(calibrate.fit({i: every[i] for i in train.index},
                                          train["value"].to_dict(), tied))
    assert eff.bandwidth == eff.kv_bandwidth
    miss = [abs(every[i].predict(eff) / v - 1) for i, v in test["value"].items()]
    row = terms.stored_term_selection().set_index("terms").loc[tied.name]
    assert row["random_split_median"] == round(float(pd.Series(miss).median()), 4)
