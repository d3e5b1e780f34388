"""kvlib.fit.terms: the candidate term sets, the rule that picks one, the stored table (issue 22)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kvlib.fit import calibrate, terms
from kvlib.model.registry import data_dir
from kvlib.speed import roofline
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
    # constants, counted: η_w = η_kv and η_F, a step and a request cost per GPU vendor, five
    # block kinds and the stage cost: 2 + 2 + 5 + 2 + 1 = 12; with a request cost per engine
    # build (five) instead, 15; one cost every block pays plus one each for latent, recurrent
    # and MoE blocks instead of five kinds, 2 + 2 + 4 + 2 + 1 = 11
    assert calibrate.TERM_SETS[7].constants == 12 and calibrate.TERM_SETS[8].constants == 15
    assert calibrate.CHOSEN_TERMS.constants == 11
    with pytest.raises(ValueError, match="no term sets"):
        terms.choose_terms(table.iloc[:0])
    with pytest.raises(ValueError, match="Terms.step"):
        calibrate.Terms("per node", step="node")
    with pytest.raises(ValueError, match="Terms.blocks"):
        calibrate.Terms("per layer", blocks="layer")


def test_a_common_block_cost_is_paid_by_every_kind():
    # under "common", softmax-attention and dense-FFN blocks pay the one common cost; latent,
    # recurrent and MoE blocks pay it plus one of their own
    paid = calibrate.block_costs("common")
    assert paid["attention"] == paid["dense_ffn"] == ("block",)
    assert paid["moe_ffn"] == ("block", "moe_ffn") and paid["mla"] == ("block", "mla")
    assert calibrate.block_costs("none")["mla"] == () and calibrate.block_costs("kind")["mla"] == ("mla",)
    # three one-GPU steps with no bytes or FLOPs, step cost s = 100 µs, common cost a = 10 µs,
    # MoE's own m = 5 µs: 2 attention + 2 dense FFN blocks take s + 4a = 140 µs, 2 attention +
    # 2 MoE blocks s + 4a + 2m = 150 µs, 4 + 4 dense blocks s + 8a = 180 µs; the fit finds them
    def step(attention, dense, moe):
        zero = np.zeros(1)
        return calibrate.Parts(weight=np.ones(1), weights_s=zero, kv_s=zero, compute_s=zero,
                               allreduce_s=zero, requests=np.ones(1), engine_key="vllm",
                               blocks=roofline.Blocks(attention, 0, 0, dense, moe), tp=1,
                               numerator=0.0, batch=1, attention_s=zero)
    points = {"dense": step(2, 2, 0), "moe": step(2, 0, 2), "deep": step(4, 4, 0)}
    eff = calibrate.fit(points, {"dense": 140e-6, "moe": 150e-6, "deep": 180e-6},
                        calibrate.Terms("common", step="vendor", blocks="common", tie_kv=True))
    got = dict(eff.block_s)
    assert got["attention"] == got["dense_ffn"] == pytest.approx(10e-6, rel=1e-6)
    assert got["moe_ffn"] == pytest.approx(15e-6, rel=1e-6)
    assert dict(eff.step_s)["vllm"] == pytest.approx(100e-6, rel=1e-6)
    # the shipped constants: attention and dense FFN blocks cost the same, the others more
    block = dict(CALIBRATED.block_s)
    assert block["attention"] == block["dense_ffn"] > 0
    assert min(block["mla"], block["recurrent"], block["moe_ffn"]) > block["attention"]


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
