"""Which terms the speed model fits (issue 22): the candidate term sets of
``calibrate.TERM_SETS`` judged three ways, and the rule that picks ``calibrate.CHOSEN_TERMS``.

For each candidate: ``fit`` on the train half, rounded as ``roofline.CALIBRATED`` stores it, and
the median |error| on the held-out half (random split); the leave-one-source-out median |error| and share beyond 40% (each publisher
predicted by a refit without it); and the fresh-set median and share beyond 40% under the
train-half fit — reported, never read by the rule (the fresh set is held out from every design
choice). The rule (``choose_terms``): the lowest leave-one-source-out median, where candidates
within ``TIE_MARGIN`` of it are a tie that the one with the fewest fitted constants wins (a
difference that small moves with a few logs or points; the smaller model is the safer bet on a
source not yet seen). Computing the
table refits each candidate seven times (about 2 s a candidate), so ``write_term_selection``
stores it in ``data/speed_term_selection.csv`` and the book reads the file.
"""
from __future__ import annotations

import pandas as pd

from ..core.data import csv_path, data_dir
from . import calibrate
from .calibrate import TERM_SETS, Terms

#: Where ``write_term_selection`` stores ``term_selection``.
TERMS_FILE = "speed_term_selection.csv"
#: The column the choice rule reads, and the columns it must not.
RULE_COLUMN = "loso_median"
#: Leave-one-source-out medians this close to the lowest (a fraction) tie with it.
TIE_MARGIN = 0.005
REPORTED_ONLY = ("fresh_median", "fresh_beyond_40")


def term_errors(terms: Terms) -> dict[str, float | int | str | bool]:
    """One row of ``term_selection`` for ``terms``: its name and switches, then n and median
    |error| of the random split, n, median and share beyond 40% of leave-one-source-out, and
    the same of the fresh set (fractions)."""
    eff = calibrate.fit_train_half(terms)
    held = calibrate.validate(eff)
    held = held.loc[held["role"] == "test", "error"].abs()
    loso = calibrate.leave_one_source_out(terms=terms)["error"].abs()
    fresh = calibrate.fresh_validation(eff)["error"].abs()
    return {"terms": terms.name, "step": terms.step, "blocks": terms.blocks,
            "tie_kv": terms.tie_kv, "requests": terms.requests, "stages": terms.stages,
            "law": terms.law, "gemm": terms.gemm, "constants": terms.constants,
            "random_split_n": len(held), "random_split_median": round(float(held.median()), 4),
            "loso_n": len(loso), "loso_median": round(float(loso.median()), 4),
            "loso_beyond_40": round(float((loso > 0.4).mean()), 4),
            "fresh_n": len(fresh), "fresh_median": round(float(fresh.median()), 4),
            "fresh_beyond_40": round(float((fresh > 0.4).mean()), 4)}


def choose_terms(table: pd.DataFrame) -> str:
    """The name (``terms`` column) of the chosen row: of the rows whose ``RULE_COLUMN`` is
    within ``TIE_MARGIN`` of the lowest, the one with the fewest ``constants``, then the lowest
    ``RULE_COLUMN``, then the first. Reads no other error column."""
    if table.empty:
        raise ValueError("no term sets to choose from")
    best = table[RULE_COLUMN].min()
    tied = table[table[RULE_COLUMN] <= best + TIE_MARGIN + 1e-12]
    order = tied.sort_values(["constants", RULE_COLUMN], kind="stable")
    return str(order.iloc[0]["terms"])


def term_selection() -> pd.DataFrame:
    """``term_errors`` of every ``TERM_SETS`` entry, in that order, and ``chosen``: the row
    ``choose_terms`` picks."""
    table = pd.DataFrame([term_errors(t) for t in TERM_SETS])
    table["chosen"] = table["terms"] == choose_terms(table)
    return table


def write_term_selection() -> None:
    """Regenerate ``data/<TERMS_FILE>`` (after new data or a new candidate)."""
    term_selection().to_csv(data_dir() / TERMS_FILE, index=False)


def stored_term_selection() -> pd.DataFrame:
    """``data/<TERMS_FILE>`` as ``term_selection`` wrote it."""
    return pd.read_csv(csv_path(TERMS_FILE), keep_default_na=False)
