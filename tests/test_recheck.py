"""kvlib.report.recheck: verdicts on hand-worked claims, and bad rows reported rather than raised."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

import kvlib
from kvlib.report import recheck
from kvlib.report.recheck import COMPUTATIONS, ERROR, VERDICTS, judge, precision
from kvlib.core.units import GIB

ROOT = Path(__file__).resolve().parent.parent
HEADER = "id,claim,source,section,quantity,claimed,unit,computation,inputs,notes"


# --- precision and judge ----------------------------------------------------------------------

@pytest.mark.parametrize("claimed, half_unit", [
    ("68.6", 0.05), ("40", 0.5), ("1,564", 0.5), ("0.73", 0.005), ("70.272", 0.0005)])
def test_precision_is_half_a_unit_of_the_last_digit(claimed, half_unit):
    assert math.isclose(precision(claimed), half_unit)


@pytest.mark.parametrize("bad", ["about 40", "", "4e", "nan"])
def test_precision_rejects_what_is_not_a_number(bad):
    with pytest.raises(ValueError, match="not a"):
        precision(bad)


def test_exact_value_holds():
    # Llama-3.1-8B: 2 × 32 layers × 8 KV heads × 128 × 2 bytes = 131,072 bytes = 128 KiB
    v = judge("128", 131_072, "KiB")
    assert (v.verdict, v.recomputed, v.auto_verdict) == ("holds", 128.0, "holds")


def test_rounded_value_holds_within_half_a_digit():
    # DeepSeek-V3: 61 × (512 + 64) × 2 = 70,272 bytes = 68.625 KiB, stated as 68.6
    assert judge("68.6", 70_272, "KiB").verdict == "holds"


def test_one_digit_off_is_rounding():
    # Qwen2.5-72B: 327,680 bytes = 327.68 KB, stated as 327 (truncated, not rounded)
    v = judge("327", 327_680, "KB")
    assert v.verdict == "rounding" and "one unit of the claim's last digit" in v.reason
    # a stated tolerance: within twice it is rounding, and the reason says so (56 ± 1 GB read
    # against 57.1 GB: 1.1 over, within 2)
    v = judge("56", 57.1e9, "GB", tolerance=1)
    assert v.verdict == "rounding" and "±2 GB of the claim, twice its stated tolerance" in v.reason
    # past that, within 1% of a large claim: 1,000 against 1,008, tolerance 2
    v = judge("1000", 1008e3, "KB", tolerance=2)
    assert v.verdict == "rounding" and v.reason.endswith("within 1% of the claim")


def test_kib_written_as_kb_is_a_unit_slip():
    # Qwen3-30B-A3B: 2 × 48 × 4 × 128 × 2 = 98,304 bytes = 96 KiB = 98.3 KB, stated "96 KB"
    v = judge("96", 98_304, "KB")
    assert v.verdict == "unit slip" and v.alternative == "KiB"
    assert math.isclose(v.recomputed, 98.304)


def test_gib_written_as_gb_is_a_unit_slip():
    # Llama-2-7B, 4,096 tokens: 4096 × 524,288 B = 2 GiB = 2.147 GB, stated "2.00 GB"
    assert judge("2.00", 2 * GIB, "GB").verdict == "unit slip"


def test_far_off_is_wrong():
    # $2.50/h at 95 tok/s: 2.5 / (95 × 3600) × 1e6 = 7.31 $/M, not 0.73
    v = judge("0.73", 7.3099, "USD/1M tokens")
    assert v.verdict == "wrong" and "7.31" in v.reason


def test_percent_claims_compare_fractions_times_100():
    assert judge("58.17", 2474.2581 / 1564.3040 - 1, "%").verdict == "holds"
    assert judge("58", 0.5817, "%").verdict == "holds"


def test_explicit_tolerance_widens_the_band():
    # "60–80% waste": 1 − 0.382 = 61.8%, stated to the nearest 10%
    assert judge("60", 0.618, "%").verdict == "wrong"
    assert judge("60", 0.618, "%", tolerance=5).verdict == "holds"


def test_reasons_say_how_a_claim_holds():
    # 16 tokens claimed, 16 recomputed: exact; 68.625 KiB claimed as 68.6: rounds
    assert judge("16", 16, "tokens").reason == "16 tokens, exactly the claim"
    assert judge("68.6", 70_272, "KiB").reason == "68.62 KiB, which rounds to the claim"
    assert judge("1", 1, "tokens").reason == "1 token, exactly the claim"


def test_a_tolerance_is_named_not_passed_off_as_rounding():
    # "~0" waste read as the blog's "under 4%": 3.111% is not 0 to the claim's digit, but
    # within the row's ±4 points
    v = judge("0", 0.03111, "%", tolerance=4)
    assert v.verdict == "holds"
    assert v.reason == "3.111%, within ±4 points of the claim, its stated tolerance"


def test_alternative_reading_makes_a_unit_slip():
    # per GPU 8.69 GiB; the claim's 17.38 is the total over two GPUs
    v = judge("17.38", 8.69 * GIB, "GiB", alternatives={"as the total over 2 GPUs": 17.38 * GIB})
    assert v.verdict == "unit slip" and v.alternative == "as the total over 2 GPUs"


def test_alternative_with_its_own_verdict():
    # DeepSeek-V2 vs 67B: 82.2% both in bf16, 93.3% with V2's cache at 6 bits
    v = judge("93.3", 1 - 69_120 / 389_120, "%",
              alternatives={"with 6-bit KV": (1 - 69_120 * 6 / 16 / 389_120, "misleading")})
    assert v.verdict == "misleading" and "only with 6-bit KV" in v.reason


def test_alternative_verdict_must_be_known():
    with pytest.raises(ValueError, match="not one of"):
        judge("1", 2.0, "x", alternatives={"x": (1.0, "sort of")})


def test_non_finite_recomputation_is_rejected():
    with pytest.raises(ValueError, match="not finite"):
        judge("1", float("inf"), "x")


# --- computations --------------------------------------------------------------------------

def test_kv_formula_matches_the_registry():
    # Llama-2-7B (MHA): 2 × 32 × 32 × 128 × 2 = 524,288 bytes
    assert COMPUTATIONS["kv_formula"](32, 32, 128, "fp16") == 524_288
    assert COMPUTATIONS["kv_formula"](32, 32, 128, "fp16") == COMPUTATIONS["kv_per_token"]("llama-2-7b", "fp16")
    with pytest.raises(ValueError, match="n_layers"):
        COMPUTATIONS["kv_formula"](0, 32, 128)


def test_cost_per_million_tokens():
    # $2.90/h at 100 tok/s: 2.90 / 360,000 × 1e6 = 8.0556
    assert math.isclose(COMPUTATIONS["usd_per_million_tokens"](2.90, 100), 8.0556, rel_tol=1e-4)
    with pytest.raises(ValueError):
        COMPUTATIONS["usd_per_million_tokens"](2.90, 0)


def test_change_and_kv_saving():
    assert math.isclose(COMPUTATIONS["change"](1564.3040, 2474.2581), 0.58170, abs_tol=1e-5)
    # DeepSeek-V2 (60 × 576 × 2 = 69,120 B) vs DeepSeek 67B (2 × 95 × 8 × 128 × 2 = 389,120 B)
    assert math.isclose(COMPUTATIONS["kv_saving"]("deepseek-v2", "deepseek-67b"), 1 - 69_120 / 389_120)


def test_kv_tokens_floors_to_whole_tokens():
    # 56 GiB over Llama-3.1-8B's 128 KiB per token: 458,752 tokens
    assert COMPUTATIONS["kv_tokens"]("llama-3.1-8b", 56 * GIB) == 458_752
    assert COMPUTATIONS["kv_tokens"]("llama-3.1-8b", 56 * GIB - 1) == 458_751


def test_arithmetic_evaluates_names_units_and_computations():
    arith = COMPUTATIONS["arithmetic"]
    assert arith("2 * x + 1", x=3) == 7
    assert arith("kv_bytes('llama-3-70b', 131072) / GiB") == 40.0  # 131,072 × 320 KiB
    assert arith("kv_per_token(model='llama-3.1-8b', dtype=d) / KiB", d="fp8") == 64.0


@pytest.mark.parametrize("expr", ["__import__('os').system('true')", "x.real", "[1, 2]", "y + 1",
                                  "open('f')", "1 if 1 else 2", "1 / 0", "(("])
def test_arithmetic_refuses_anything_else(expr):
    with pytest.raises(ValueError):
        COMPUTATIONS["arithmetic"](expr, x=1)


def test_quoted_needs_a_place():
    assert COMPUTATIONS["quoted"](32, "KvCacheConfig.tokens_per_block") == 32
    with pytest.raises(ValueError, match="where"):
        COMPUTATIONS["quoted"](32, " ")


# --- one claim ------------------------------------------------------------------------------

def _row(**fields) -> dict[str, str]:
    base = dict(id="t1", claim="c", source="test", section="", quantity="", claimed="1", unit="x",
                computation="ratio", inputs=json.dumps({"numerator": 1, "denominator": 1}), notes="")
    base.update(fields)
    return base


def test_module_is_callable_and_keeps_its_names():
    assert kvlib.recheck("a01").verdict == "holds"
    assert kvlib.report.recheck.recheck("a01") == kvlib.recheck("a01")
    assert callable(kvlib.recheck_all) and kvlib.VERDICTS == VERDICTS


def test_unknown_id_raises_key_error():
    with pytest.raises(KeyError, match="no claim"):
        recheck.recheck("no-such-claim")


def test_override_keeps_the_recomputed_value():
    v = recheck.recheck(_row(claimed="22", computation="quoted",
                             inputs=json.dumps({"value": 22, "where": "§6.2"}),
                             verdict_override="misleading", override_reason="request rate, not throughput"))
    assert (v.verdict, v.auto_verdict, v.recomputed) == ("misleading", "holds", 22.0)
    assert v.reason == "request rate, not throughput"


def test_a_claim_that_restates_its_source_is_quoted():
    # a measured 5.76× re-read from the report agrees with the claim: quoted, not holds
    v = recheck.recheck(_row(claimed="5.76", computation="quoted",
                             inputs=json.dumps({"value": 5.76, "where": "report §3.2.3"})))
    assert (v.verdict, v.auto_verdict) == ("quoted", "holds")
    assert v.reason == "restated from report §3.2.3; not recomputed"
    # a misquote is still judged by the arithmetic: 4 claimed, the source says 2
    v = recheck.recheck(_row(claimed="4", computation="quoted",
                             inputs=json.dumps({"value": 2, "where": "abstract"})))
    assert v.verdict == "wrong"
    assert set(recheck.QUOTING) <= set(COMPUTATIONS) and "quoted" in VERDICTS


def test_book_quoted_claims_are_not_counted_as_holding(results):
    by_id = results.set_index("id")["verdict"]
    assert {"b05", "c09", "c10", "e02", "p05", "p06", "p07", "x28", "x29"} <= set(
        by_id.index[by_id == "quoted"])
    assert by_id["c08"] == "holds"  # 3.1% within the blog's own "under 4%"


def test_per_gpu_factor_catches_a_total_stated_as_per_gpu():
    # 2 GPUs each keeping 8.69 GiB: a claim of 17.38 "per GPU" is the total
    v = recheck.recheck(_row(claimed="17.38", unit="GiB", computation="arithmetic",
                             inputs=json.dumps({"expr": "8.69 * GiB"}), per_gpu_factor="2"))
    assert v.verdict == "unit slip" and v.alternative == "as the total over 2 GPUs"


def test_alt_inputs_rerun_the_computation():
    v = recheck.recheck(_row(claimed="65", unit="%", computation="ratio",
                             inputs=json.dumps({"numerator": 26e9, "denominator": 40 * GIB}),
                             alt_inputs=json.dumps({"with 40 GB": {"denominator": 40e9}})))
    assert v.verdict == "unit slip" and math.isclose(v.recomputed, 26e9 / (40 * GIB) * 100)


def test_unverifiable_computation():
    v = recheck.recheck(_row(computation="unverifiable", inputs="", override_reason="no source"))
    assert v.verdict == "unverifiable" and math.isnan(v.recomputed) and v.reason == "no source"


# --- every claim, bad rows included ---------------------------------------------------------

BAD_ROWS = {
    "b1": ("unknown computation", _row(id="b1", computation="no_such_thing")),
    "b2": ("missing", _row(id="b2", computation="kv_per_token", inputs=json.dumps({"dtype": "bf16"}))),
    "b3": ("not valid JSON", _row(id="b3", inputs="{numerator: 1")),
    "b4": ("not a number", _row(id="b4", claimed="about one")),
    "b5": ("not one of", _row(id="b5", verdict_override="dubious", override_reason="x")),
    "b6": ("needs an override_reason", _row(id="b6", verdict_override="misleading")),
    "b7": ("unknown model", _row(id="b7", computation="kv_per_token",
                                 inputs=json.dumps({"model": "llama-9-9b"}))),
    "b8": ("must be a JSON object", _row(id="b8", inputs="[1, 2]")),
    "b9": ("zero", _row(id="b9", inputs=json.dumps({"numerator": 1, "denominator": 0}))),
    "b10": ("expected_verdict", _row(id="b10", expected_verdict="fine")),
}


@pytest.fixture()
def claims_dir(tmp_path: Path) -> Path:
    rows = [_row(id="g1", claimed="128", unit="KiB", computation="kv_per_token",
                 inputs=json.dumps({"model": "llama-3.1-8b"}))]
    rows += [r for _, r in BAD_ROWS.values()]
    rows += [_row(id="dup"), _row(id="dup")]
    pd.DataFrame(rows).to_csv(tmp_path / "mixed.csv", index=False)
    (tmp_path / "broken.csv").write_text('id,claim\n"unterminated,x\n')
    (tmp_path / "short.csv").write_text("id,claim\nz1,c\n")
    return tmp_path


def test_recheck_all_reports_bad_rows_without_raising(claims_dir):
    out = recheck.recheck_all(directory=claims_dir).set_index("id")
    assert out.loc["g1", "verdict"] == "holds"
    for claim_id, (fragment, _) in BAD_ROWS.items():
        assert out.loc[claim_id, "verdict"] == ERROR, claim_id
        assert fragment in out.loc[claim_id, "reason"], (claim_id, out.loc[claim_id, "reason"])
        assert out.loc[claim_id, "reason"].startswith(f"row {claim_id}:")
    assert (out.loc["dup", "verdict"] == ERROR).all()
    assert "more than one row" in out.loc["dup", "reason"].iloc[0]
    assert "lacks column" in out.loc["short.csv", "reason"]
    assert out.loc["broken.csv", "verdict"] == ERROR


def test_load_claims_strict_raises_on_the_same_folder(claims_dir):
    with pytest.raises(ValueError):
        recheck.load_claims(claims_dir)
    assert len(recheck.load_claims(claims_dir, strict=False)) == 1 + len(BAD_ROWS) + 2


def test_recheck_all_accepts_a_frame():
    frame = pd.DataFrame([_row(id="f1"), _row(id="f2", claimed="3")]).set_index("id")
    out = recheck.recheck_all(frame)
    assert out["verdict"].tolist() == ["holds", "wrong"]


def test_unexpected_lists_claims_whose_verdict_is_not_the_expected_one():
    frame = pd.DataFrame([_row(id="u1", expected_verdict="holds"),  # 1/1 = 1: holds
                          _row(id="u2", claimed="3", expected_verdict="holds"),  # 1 ≠ 3: wrong
                          _row(id="u3")])  # no expectation
    out = recheck.recheck_all(frame)
    assert recheck.unexpected(out)["id"].tolist() == ["u2"]
    assert recheck.unexpected(out, require=True)["id"].tolist() == ["u2", "u3"]
    assert list(recheck.unexpected(out).columns) == ["id", "claim", "expected_verdict", "verdict",
                                                     "reason"]


def test_a_reader_can_add_a_row_and_rerun(tmp_path):
    (tmp_path / "mine.csv").write_text(
        HEADER + "\nr1,my claim,me,,,7.31,USD/1M tokens,usd_per_million_tokens,"
        '"{""usd_per_hour"": 2.5, ""tokens_per_s"": 95}",\n')
    out = recheck.recheck_all(directory=tmp_path)
    assert out.loc[0, "verdict"] == "holds" and math.isclose(out.loc[0, "recomputed"], 7.30994, rel_tol=1e-5)


# --- the book's own claims -------------------------------------------------------------------

@pytest.fixture(scope="module")
def results() -> pd.DataFrame:
    return recheck.recheck_all()


def test_book_claims_have_the_promised_columns(results):
    for column in ("claim", "source", "claimed", "recomputed", "verdict", "reason"):
        assert column in results.columns
    assert results["claimed"].dtype == float and results["recomputed"].dtype == float


def test_every_book_claim_evaluates(results):
    errors = results[results["verdict"] == ERROR]
    assert errors.empty, errors[["id", "reason"]].to_string()
    assert set(results["verdict"]) <= set(VERDICTS)
    assert results["id"].is_unique
    assert (results["reason"].str.len() > 0).all()
    assert not results["reason"].str.contains("\n").any(), "reasons are one line"


def test_book_claims_give_the_verdicts_the_prose_explains(results):
    """Every chapter's claims file states the verdict its chapter explains (expected_verdict)."""
    chapters = results[results["file"].str.startswith("ch")]
    assert (chapters["expected_verdict"] != "").all()
    surprises = recheck.unexpected(results)
    assert surprises.empty, surprises.to_string()


def test_every_book_claim_states_the_verdict_the_book_explains(results):
    """Chapter 6 asserts ``unexpected(results, require=True)``: every row has an expected verdict."""
    assert (results["expected_verdict"] != "").all()
    assert recheck.unexpected(results, require=True).empty


def test_one_claim_one_verdict_one_recomputation(results):
    """A claim the article restates from its source is one row: the paper's sentence lives in the
    article row's notes, not in a second row with another verdict (issue 21, item 7)."""
    by_id = results.set_index("id")
    merged = {"x02": "c06", "x03": "c08", "x06": "c01", "x09": "e02", "x10": "e03", "x11": "c12",
              "x13": "b03", "x18": "e05"}
    assert not set(merged) & set(by_id.index)
    for kept in merged.values():
        assert by_id.loc[kept, "verdict"] == by_id.loc[kept, "expected_verdict"]
    # "60% waste" is 100% minus the simulated Orca (Oracle) token-state share (c02): one number
    assert abs(by_id.loc["c06", "recomputed"] + by_id.loc["c02", "recomputed"] - 100) < 1e-9
    sixty = results[(results["claimed"] == 60) & (results["unit"] == "%")]
    assert sixty["id"].tolist() == ["c06"]
    # DeepSeek-V2's 93.3%: the paper's figure, which holds as deployed (b03, the abstract's
    # sentence in its notes), and the article's credit of it to the latent alone (b04)
    assert results[results["claimed"] == 93.3]["id"].tolist() == ["b03", "b04"]
    assert "reduces the KV cache by 93.3%" in by_id.loc["b03", "notes"]
    assert "~7k tokens" in by_id.loc["e05", "notes"]


def test_claims_files_follow_the_id_prefixes(results):
    by_file = results.groupby("file")["id"].apply(list)
    assert all(i.startswith("e") for i in by_file["article_misc.csv"])
    assert all(i.startswith("x") for i in by_file["external.csv"])
    assert len(by_file["external.csv"]) >= 15


def test_every_cite_key_is_in_the_bibliography(results):
    bib = set(re.findall(r"@\w+\{([^,\s]+),", (ROOT / "book" / "references.bib").read_text()))
    assert set(results.loc[results["cite"] != "", "cite"]) <= bib


def test_every_external_claim_names_its_url(results):
    external = results[results["file"] == "external.csv"]
    assert external["source_url"].str.startswith("http").all()


def v_recomputed(results, claim_id):
    return float(results.set_index("id").loc[claim_id, "recomputed"])


def test_hand_worked_book_claims(results):
    v = results.set_index("id")["verdict"]
    # x08: 2 × 5120 × 40 × 2 = 819,200 B per token = 800 KiB, written "800 KB"
    assert v["x08"] == "unit slip"
    # x07: 13e9 × 2 B = 26e9 B of a 40 GiB (42.9e9 B) A100 is 60.5%, not 65%: 26/40 mixes units
    assert v["x07"] == "unit slip"
    # x45: per GPU 23.08 − 13.9476 − 0.25 − 0.19 = 8.69 GiB; two GPUs 17.38, not 31.77
    assert v["x45"] == "unit slip"
    # x39: vLLM's pool on a 24 GB RTX 4090 (chapter 4's kv_pool): 0.9 × 23.99 GiB − 12.55 GiB
    # weights − 0.67 GiB activations − 0.03 GiB of the V2 runner's penalty state (4 × 256 ×
    # (32,000 + 1,000) B) − 0.94 GiB non-torch = 947 blocks of 16 tokens; 15,152 tokens / 2,000
    # = 7.6 sessions of Llama-2-7B, not "3 to 4"
    assert v["x39"] == "wrong" and math.isclose(v_recomputed(results, "x39"), 7.576)
    # e06: gpt-oss-20b all-FP8 853.0 vs sliding layers kept bf16 871.8 tok/s: −2.2%, not "0%"
    assert v["e06"] == "misleading" and round(v_recomputed(results, "e06"), 1) == -2.2


def test_claims_table_shows_the_chosen_claims_for_a_reader():
    frame = pd.DataFrame([_row(id="u1", claimed="131072", computation="ratio",
                               inputs=json.dumps({"numerator": 131072, "denominator": 1})),
                          _row(id="u2")])
    results = recheck.recheck_all(frame)
    html = recheck.claims_table(results, ["u1"])._repr_html_()
    # the id first, the claimed figure with a thousands separator, only the rows asked for
    assert ">id<" in html and ">u1<" in html and "u2" not in html
    assert "131,072" in html
    assert list(recheck.claims_table(results).frame["id"]) == ["u1", "u2"]
    with pytest.raises(KeyError, match="u9"):
        recheck.claims_table(results, ["u9"])
