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


def test_a_formula_past_its_time_is_refused(monkeypatch):
    monkeypatch.setitem(recheck.FORMULA_LIMITS, "seconds", -1.0)  # every step is past the deadline
    with pytest.raises(ValueError) as info:
        COMPUTATIONS["arithmetic"]("1 + 1")
    assert str(info.value) == "formula '1 + 1': took more than -1 s"


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


@pytest.mark.parametrize("computation, inputs, message", [
    ("sim", {"quantity": "free", "pool_tokens": 1000, "n_requests": 10**7},
     "n_requests must be <= 100,000, got 10,000,000"),
    ("kv_ratio", {"model": "falcon-mamba-7b", "baseline": "llama-3.1-8b"},
     "falcon-mamba-7b caches nothing per token (only a constant state): no per-token ratio"),
    ("kv_saving", {"model": "llama-3.1-8b", "baseline": "falcon-mamba-7b"},
     "falcon-mamba-7b caches nothing per token (only a constant state): no per-token ratio"),
    ("ratio", {"numerator": [1], "denominator": 2}, "numerator must be a number, got [1]"),
    ("kv_formula", {"n_layers": [1], "n_kv_heads": 8, "head_dim": 128},
     "n_layers must be a number, got [1]"),
    ("weight_bytes", {"n_params": "x"}, "n_params must be a number, got 'x'"),
])
def test_a_forked_claims_inputs_are_checked_by_name(computation, inputs, message):
    with pytest.raises(ValueError) as info:
        recheck.recheck(_row(id="q1", computation=computation, inputs=json.dumps(inputs)))
    assert str(info.value) == f"claim q1: {message}"


# --- the CLI: 0 is 0 or an error, a flag that does not apply is an error --------------------------

@pytest.mark.parametrize("argv, message", [
    (("fit", "llama-3.1-8b", "h100-sxm", "--output-tokens", "0"),
     "argument --output-tokens: must be ≥ 1, got 0 (see kvlib --help)"),
    (("cost", "llama-3.1-8b", "h100-sxm", "--price", "2", "--output-tokens", "0"),
     "argument --output-tokens: must be ≥ 1, got 0 (see kvlib --help)"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--output-tokens", "8192"),
     "--output-tokens must be between 1 and --context − 1, got 8192"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--context", "1"),
     "--context 1 leaves no room for a prompt and an output token: give --context 2 or more"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--max-num-seqs", "0"),
     "argument --max-num-seqs: must be ≥ 1, got 0 (see kvlib --help)"),
    (("kv", "llama-3.1-8b", "--tp", "0"), "argument --tp: must be ≥ 1, got 0 (see kvlib --help)"),
    (("cost", "--price", "2", "--tps", "1000", "--context", "4096"),
     "--context applies only with a model and a GPU, not with --tps (see kvlib --help)"),
    (("cost", "--price", "2", "--tps", "1000", "--tp", "2", "--util", "0.5"),
     "--util, --tp apply only with a model and a GPU, not with --tps (see kvlib --help)"),
    (("cost", "--price", "2", "--tps", "1000", "--output-tokens", "10"),
     "--output-tokens applies only with a model and a GPU, not with --tps (see kvlib --help)"),
    (("cost", "--price", "2", "--tps", "1000", "--allow-long-context"),
     "--allow-long-context applies only with a model and a GPU, not with --tps (see kvlib --help)"),
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
    # cost on a model accepts --allow-long-context, as fit does (its refusal names the flag)
    status, _, err = cli("cost", "llama-2-7b", "h100-sxm", "--price", "2.9")
    assert status == 2 and "--allow-long-context" in err
    assert cli("cost", "llama-2-7b", "h100-sxm", "--price", "2.9", "--allow-long-context")[0] == 0


# --- numpy numbers are numbers everywhere ----------------------------------------------------

_M, _G = "llama-3.1-8b", "h100-sxm"


def _d(**kw):
    return kvlib.Deployment(_M, _G, **kw)


#: Every public entry point of ``kvlib.__all__`` that takes numbers, with its numbers given by
#: ``n`` (int, or np.int64) and ``f`` (float, or np.float64); each must answer the same.
ENTRY_POINTS = {
    "AttentionLayer": lambda n, f: kvlib.AttentionLayer(n(8), n(128), window=n(4096)),
    "MLALayer": lambda n, f: kvlib.MLALayer(n(512), n(64)),
    "IndexerKeyLayer": lambda n, f: kvlib.IndexerKeyLayer(n(128), n(64)),
    "Mamba1Layer": lambda n, f: kvlib.Mamba1Layer(n(64), n(16), n(4)),
    "Mamba2Layer": lambda n, f: kvlib.Mamba2Layer(n(64), n(64), n(128), n(8), n(4)),
    "GatedDeltaNetLayer": lambda n, f: kvlib.GatedDeltaNetLayer(n(16), n(32), n(128), n(128), n(4)),
    "LightningAttentionLayer": lambda n, f: kvlib.LightningAttentionLayer(n(64), n(128)),
    "simulate_serving": lambda n, f: kvlib.simulate_serving(
        [[n(100), n(5)]] * 3, [f(0.0), f(0.1), f(0.2)], pool_blocks=n(64), block_size=n(16),
        step_time=lambda b: 0.01, max_num_seqs=n(8), max_num_batched_tokens=n(512)).summary(),
    "bench_serve": lambda n, f: kvlib.bench_serve(
        _d(), [[n(100), n(5)]] * 4, request_rate=f(2.0), concurrency=n(2), seed=n(0)).summary(),
    "SLO": lambda n, f: kvlib.SLO(ttft_s=f(2.0), tpot_s=f(0.05), percentile=f(99.0)),
    "max_rate_at_slo": lambda n, f: kvlib.max_rate_at_slo(
        _d(), [[n(200), n(8)]] * 20, kvlib.SLO(tpot_s=f(0.05)), seed=n(0),
        tolerance=f(0.1)).rate_rps,
    "KVFormat": lambda n, f: kvlib.KVFormat("t", n(8), block=n(32), block_scale_bits=n(8)),
    "heads_per_gpu": lambda n, f: kvlib.heads_per_gpu(n(8), n(2)),
    "mamba_groups_per_gpu": lambda n, f: kvlib.mamba_groups_per_gpu(n(8), n(2)),
    "split_evenly": lambda n, f: kvlib.split_evenly(n(8), n(2), "x"),
    "Model.kv_bytes": lambda n, f: kvlib.load_model(_M).kv_bytes(n(1000), "bf16", tp=n(2)),
    "weight_bytes": lambda n, f: kvlib.weight_bytes(kvlib.params_for(_M), "bf16", n(2)),
    "loaded_weights": lambda n, f: kvlib.loaded_weights(_M, "fp8", n(2)).computed_bytes,
    "Deployment": lambda n, f: _d(tp=n(2), max_model_len=n(8192), max_num_seqs=n(64),
                                  max_num_batched_tokens=n(4096), block_size=n(16),
                                  gpu_memory_utilization=f(0.9)).resolved(),
    "kv_pool": lambda n, f: kvlib.kv_pool(_d(tp=n(2), gpu_memory_utilization=f(0.9))).tokens,
    "pool_arithmetic": lambda n, f: kvlib.pool_arithmetic(
        _d(tp=n(2), gpu_memory_utilization=f(0.9))).tokens,
    "kv_pool keywords": lambda n, f: kvlib.kv_pool(_M, _G, n_gpus=n(2)).tokens,
    "kv_pool sglang": lambda n, f: kvlib.kv_pool(_d(engine="sglang", tp=n(2),
                                                    max_model_len=n(8192))).tokens,
    "kv_pool tensorrt-llm": lambda n, f: kvlib.kv_pool(_d(engine="tensorrt-llm", tp=n(2))).tokens,
    "engine_comparison": lambda n, f: kvlib.engine_comparison(
        _d(tp=n(2)), context_tokens=n(8192)).to_dict(orient="list"),
    "Pool.max_concurrency": lambda n, f: kvlib.kv_pool(_d()).max_concurrency(n(8192)),
    "decode_step": lambda n, f: kvlib.decode_step(_d(), batch=n(8), context_tokens=n(4096)).time_s,
    "prefill_step": lambda n, f: kvlib.prefill_step(_d(), batch=n(1), prompt_tokens=n(4096)).time_s,
    "step_time": lambda n, f: kvlib.step_time(_d(), [(n(1), n(100)), (n(64), n(0))]),
    "serving_point": lambda n, f: kvlib.serving_point(
        _d(), input_tokens=n(1000), output_tokens=n(100), batch=n(4)).dollars_per_million(f(2.9)),
    "serving_point degrees": lambda n, f: kvlib.serving_point(
        _M, _G, input_tokens=n(1000), output_tokens=n(100), tp_degrees=(n(1), n(2))).tokens_per_s,
    "cost_per_million_tokens": lambda n, f: kvlib.cost_per_million_tokens(f(2.9), n(1000)),
    "dollars_per_hour_for_cost": lambda n, f: kvlib.dollars_per_hour_for_cost(n(1000), f(0.5)),
    "tokens_per_second_for_cost": lambda n, f: kvlib.tokens_per_second_for_cost(f(2.9), n(2)),
    "input_cost_per_million": lambda n, f: kvlib.input_cost_per_million(
        _d(), dollars_per_gpu_hour=f(2.9), hit_rate=f(0.5), prompt_tokens=n(2048)),
    "reserved_tokens": lambda n, f: kvlib.reserved_tokens(n(100), n(50), "reserve_max", n(2048)),
    "prefix_reuse_lost": lambda n, f: kvlib.prefix_reuse_lost(n(100), n(16)),
    "BlockAllocator": lambda n, f: kvlib.BlockAllocator(n(10), n(16)).allocate(n(1), n(40)),
    "BuddyAllocator": lambda n, f: kvlib.BuddyAllocator(n(1024)).allocate(n(100)),
    "ContiguousAllocator": lambda n, f: kvlib.ContiguousAllocator(n(1024)).allocate(n(100)),
    "simulate": lambda n, f: kvlib.simulate(np.array([[100, 50]] * 4, dtype=np.int64), n(4096),
                                            block_size=n(16), seed=n(1), max_batch=n(2),
                                            max_model_len=n(2048), arrival_rate=f(0.5)).steps,
    "replay_prefix_cache": lambda n, f: kvlib.replay_prefix_cache(
        [[1, 2, 3], [1, 2, 4]], block_size=n(16), capacity_blocks=n(8)).hit_rate,
    "route_requests": lambda n, f: kvlib.route_requests(
        [[1, 2, 3], [1, 2, 4]], n(2), "round_robin", block_size=n(16), seed=n(0)).hit_tokens.tolist(),
    "Speculative": lambda n, f: kvlib.Speculative("eagle3", n(3), f(0.8),
                                                  draft_layers=n(1)).tokens_per_step,
    "speculative_decode": lambda n, f: kvlib.speculative_decode(
        _d(speculative=kvlib.Speculative("eagle3", n(2), f(0.7))), n(4), n(1024),
        dollars_per_hour=f(2.9)).dollars_per_million,
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_numpy_numbers_are_numbers_everywhere(name):
    entry = ENTRY_POINTS[name]
    assert entry(np.int64, np.float64) == entry(int, float), name


def test_numpy_integers_are_stored_as_python_ints():
    layer = kvlib.AttentionLayer(np.int64(8), np.int64(128))
    assert type(layer.n_kv_heads) is int and type(layer.head_dim) is int
    assert type(kvlib.KVFormat("t", np.int64(8)).bits) is int


@pytest.mark.parametrize("bad, message", [
    (lambda: kvlib.AttentionLayer(8, 128.0), "attention layer: head_dim must be an integer, got 128.0"),
    (lambda: kvlib.AttentionLayer(True, 128), "attention layer: n_kv_heads must be an integer, got True"),
    (lambda: kvlib.MLALayer(0, 64), "MLA layer: kv_lora_rank must be >= 1, got 0"),
    (lambda: kvlib.KVFormat("t", np.float64(8)), "KV format 't': bits must be an integer"),
    (lambda: kvlib.KVFormat("t", 8, block=0), "KV format 't': block must be >= 1, got 0"),
    (lambda: kvlib.weight_bytes(kvlib.params_for(_M), "bf16", 2.0),
     "tp (tensor-parallel degree) must be an integer, got 2.0"),
    (lambda: kvlib.serving_point(_d(), input_tokens=1000.0, output_tokens=10),
     "input_tokens must be an integer, got 1000.0"),
    (lambda: kvlib.serving_point(_M, _G, input_tokens=1000, output_tokens=10, tp_degrees=(1, 0)),
     "tp_degrees / n_gpus must be >= 1, got 0"),
    (lambda: kvlib.serving_point(_M, _G, input_tokens=1000, output_tokens=10,
                                 tp_degrees=()), "tp_degrees / n_gpus must be positive integers"),
    (lambda: kvlib.serving_point(_d(tp=2), input_tokens=1000, output_tokens=10, tp_degrees=(1,)),
     "tp_degrees does not apply to a Deployment: its tp (2) is the degree served; give a model "
     "and a GPU to try several degrees"),
    (lambda: kvlib.BuddyAllocator(1024.5), "pool_tokens must be an integer, got 1024.5"),
    (lambda: kvlib.BlockAllocator(0, 16), "num_blocks must be >= 1, got 0"),
    (lambda: kvlib.step_time(_d(), [1, 2, 3]), "batch must be pairs (tokens scheduled this step, "
                                               "tokens already computed) of integers"),
])
def test_one_set_of_checks_names_the_argument(bad, message):
    with pytest.raises(ValueError) as info:
        bad()
    assert message in str(info.value) and "\n" not in str(info.value)


# --- CSV schemas, JSON depth, arrivals ----------------------------------------------------------

def test_dates_must_be_real():
    from kvlib.core.data import DATE

    assert DATE("2024-02-29") is None and DATE("2026-12") is None and DATE("2026") is None
    for bad in ("2026-02-30", "2025-02-29", "2026-04-31", "2026-00-01", "2026-01-00"):
        assert DATE(bad) == f"{bad!r} is not a real date"


def _fork_bands(tmp_path, monkeypatch, low: str, high: str):
    import shutil

    from kvlib.core.data import data_dir

    data = tmp_path / "data"
    shutil.copytree(data_dir(), data)
    paths = [data / "speed_error_bands.csv", data / "speed_case_bands.csv"]
    for path in paths:  # low and high are the last two columns of both
        lines = path.read_text().splitlines()
        cells = lines[1].split(",")
        cells[-2:] = [low, high]
        lines[1] = ",".join(cells)
        path.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("KVLIB_DATA", str(data))
    return paths


@pytest.mark.parametrize("low, high, problem", [
    ("-1.5", "0.2", "low -1.5 must be above -1: the speed r·(1 + low) would be 0 or negative "
                    "and the price infinite or negative"),
    ("-1", "0.2", "low -1 must be above -1: the speed r·(1 + low) would be 0 or negative "
                  "and the price infinite or negative"),
    ("-0.2", "-0.3", "high -0.3 is below low -0.2"),
])
def test_an_error_band_that_would_print_a_negative_speed_is_refused(tmp_path, monkeypatch, low,
                                                                     high, problem):
    from kvlib.core.data import csv_path

    paths = _fork_bands(tmp_path, monkeypatch, low, high)
    for path in paths:
        with pytest.raises(ValueError) as info:
            csv_path(path.name)
        assert str(info.value) == f"{path}: line 2: {problem}"
    path = paths[1]  # the case bands: what the serving answer reads
    status, out, err = cli("fit", _M, _G)
    assert (status, out) == (2, "") and err == f"kvlib: error: {path}: line 2: {problem}\n"


def test_an_error_band_object_is_checked_too():
    from kvlib.fit.calibrate import ErrorBand

    with pytest.raises(ValueError, match=r"error band 'x': low -2 must be above -1"):
        ErrorBand(tp=1, batch_range="1", scope="x", n=10, median_abs_error=0.1, low=-2, high=0.1)


def test_deep_json_is_one_line_not_a_recursion_error(tmp_path):
    from kvlib.core.data import MAX_JSON_DEPTH, json_depth, load_json

    deep = "[" * 100_000 + "]" * 100_000
    assert json_depth('{"a": "[[[[", "b": [[1]]}') == 3  # brackets in strings do not count
    with pytest.raises(ValueError) as info:
        load_json(deep, "x.json")
    assert str(info.value) == f"x.json nests arrays and objects 100000 deep; kvlib reads at most {MAX_JSON_DEPTH}"
    config = tmp_path / "config.json"
    config.write_text('{"num_hidden_layers": 2, "x": ' + deep + "}")
    status, out, err = cli("kv", str(config))
    assert (status, out) == (2, "")
    assert err == (f"kvlib: error: {config} nests arrays and objects 100001 deep; kvlib reads at "
                   f"most {MAX_JSON_DEPTH}\n")
    row = _row(inputs='{"expr": "1", "x": ' + deep + "}")
    with pytest.raises(ValueError, match=r"^claim t1: inputs nests arrays and objects 100001 deep"):
        recheck.recheck(row)


def test_a_deep_registry_record_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "deep.json").write_text("[" * 5000 + "]" * 5000)
    monkeypatch.setenv("KVLIB_DATA", str(tmp_path))
    with pytest.raises(ValueError, match=r"deep.json nests arrays and objects 5000 deep"):
        kvlib.load_model("deep")


@pytest.mark.parametrize("rate", [1e-300, 5e-324, 1e-18])
def test_an_arrival_rate_that_would_overflow_the_step_counter_is_refused(rate):
    with pytest.raises(ValueError) as info:
        kvlib.simulate([[10, 5]] * 3, 1024, arrival_rate=rate)
    assert str(info.value) == (f"arrival rate {rate:g} requests/step spreads 3 requests past step "
                               "1,099,511,627,776, the last simulate counts")
    with pytest.raises(ValueError, match="arrival_steps must be 3 integer steps from 0 to "
                                         "1,099,511,627,776"):
        kvlib.simulate([[10, 5]] * 3, 1024, arrival_steps=[0, 1, 2**62])


# --- a chapter parameter of the wrong type names the parameter -----------------------------------

def _pipeline():
    import sys
    from pathlib import Path

    book = str(Path(__file__).resolve().parents[1] / "book")
    if book not in sys.path:
        sys.path.insert(0, book)
    import pipeline

    return pipeline


@pytest.mark.parametrize("name, value, message", [
    ("dollars_per_hour", "cheap", "04_cost: parameter 'dollars_per_hour' takes a number like its "
                                  "default 2.9, got str 'cheap'"),
    ("context_tokens", "8192.5", "04_cost: parameter 'context_tokens' takes an integer like its "
                                 "default 8192, got float 8192.5"),
    ("model", "5", "04_cost: parameter 'model' takes a text like its default 'llama-3.1-8b', "
                   "got int 5"),
    ("gpu_memory_utilization", "True", "04_cost: parameter 'gpu_memory_utilization' takes a "
                                       "number like its default 0.9, got bool True"),
])
def test_a_chapter_parameter_of_the_wrong_type_is_named(capfd, tmp_path, name, value, message):
    out = tmp_path / "04.ipynb"
    assert _pipeline().main(["04_cost", "-p", name, value, "-o", str(out)]) == 2
    captured = capfd.readouterr()
    assert captured.out == "" and not out.exists()  # refused before anything ran
    assert captured.err == f"pipeline.py: error: {message}\n"


def test_chapter_parameters_of_the_right_kind_pass():
    from pathlib import Path

    pipeline = _pipeline()
    chapters = Path(__file__).resolve().parents[1] / "chapters"
    pipeline.check_parameters(chapters / "04_cost.md", {"dollars_per_hour": 3,  # int for a float
                                                        "context_tokens": np.int64(4096)})
    pipeline.check_parameters(chapters / "02_architecture_savings.md", {"contexts": [1024]})
    with pytest.raises(ValueError, match="'contexts' takes a list of integers like its default"):
        pipeline.check_parameters(chapters / "02_architecture_savings.md", {"contexts": [1, "a"]})


#: Public names that take numbers but are records kvlib builds for its results (their fields
#: are checked where kvlib computes them), with the entry point that covers them.
RECORDS = {"Pool": "kv_pool", "Step": "decode_step", "SimResult": "simulate",
           "ServingPoint": "serving_point", "PrefixReplay": "replay_prefix_cache",
           "ParamCounts": "weight_bytes", "DoesNotFit": "serving_point",
           "BatchTooLarge": "serving_point", "Overheads": "kv_pool", "GPU": "kv_pool",
           "Model": "model_from_layers", "count_params": "weight_bytes",
           "critical_batch": "decode_step", "WeightFormat": "weight_bytes",
           "ServingRun": "simulate_serving", "SLOCapacity": "max_rate_at_slo",
           "SpeculativeDecode": "speculative_decode", "NoKVMemory": "kv_pool"}


def test_every_public_function_taking_numbers_is_fed_numpy_numbers():
    import inspect

    covered = {name.split(" ")[0].split(".")[0] for name in ENTRY_POINTS} | {
        "Efficiency", "model_from_layers", "BlockTrace"}
    for name in kvlib.__all__:
        obj = getattr(kvlib, name)
        if not callable(obj) or name in RECORDS:
            continue
        try:
            parameters = inspect.signature(obj).parameters.values()
        except ValueError:  # a builtin exception class
            continue
        if any(t in str(p.annotation) for p in parameters for t in ("int", "float")):
            assert name in covered, f"kvlib.{name} takes numbers: add it to ENTRY_POINTS"


def test_records_built_from_numpy_numbers_hold_python_numbers():
    m = kvlib.model_from_layers("t", [kvlib.AttentionLayer(8, 128)] * 2, n_heads=np.int64(32))
    assert type(m.n_heads) is int
    trace = kvlib.BlockTrace.from_lists([[1, 2], [1, 3]], [32, 40], np.int64(16))
    assert type(trace.block_size) is int
    assert kvlib.Efficiency("x", bandwidth=np.float64(0.8)) == kvlib.Efficiency("x", bandwidth=0.8)


# --- property tests: a result or a one-line error, per entry point ------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: Derandomized, few examples, a deadline per example (ms): each entry point's property runs
#: in a second or two.
PROPERTY = settings(derandomize=True, database=None, max_examples=120, deadline=3000,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_SLUGS = ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "gpt-oss-120b", "qwen3-next-80b-a3b",
          "nemotron-3-nano-30b-a3b", "gemma-2-9b", "falcon-mamba-7b"]


def _mostly(good: st.SearchStrategy, bad: st.SearchStrategy) -> st.SearchStrategy:
    """``good`` nine times in ten, ``bad`` the tenth: most examples reach the arithmetic."""
    return st.integers(0, 9).flatmap(lambda i: bad if i == 9 else good)


_MODEL = _mostly(st.sampled_from(_SLUGS), st.sampled_from(["no-such-model", "../x", "", 7]))
_GPU = _mostly(st.sampled_from(["h100-sxm", "a100-40gb", "l4", "h200", "b200", "gh200"]),
               st.sampled_from(["no-such-gpu", "", None, 3.5]))
_BAD_NUMBERS = st.sampled_from([0, -1, 0.5, float("nan"), float("inf"), -0.0, True, "8", None,
                                10**30, np.int64(-3), np.float64("nan")])


def _count(low: int, high: int) -> st.SearchStrategy:
    """Integers in [low, high], numpy's too, and now and then a value no count can be."""
    good = st.integers(low, high)
    return _mostly(st.one_of(good, good.map(np.int64)), _BAD_NUMBERS)


def _fraction() -> st.SearchStrategy:
    good = st.floats(0.05, 1.0)
    return _mostly(st.one_of(good, good.map(np.float64)),
                   st.one_of(_BAD_NUMBERS, st.floats(allow_nan=True)))


_WEIGHTS = _mostly(st.sampled_from(["bf16", "fp8", "int4-g128", "mxfp4", {"experts": "mxfp4"}]),
                   st.sampled_from(["fp7", 4, ""]))
_KV = _mostly(st.sampled_from(["bf16", "fp8", "fp4", "int8", None]), st.sampled_from(["nope", 8]))


def _one_line(call):
    """``call()``'s result, or None after a ValueError/KeyError/TypeError of one line; any
    other exception (a traceback of another kind) fails the property."""
    try:
        return call()
    except (ValueError, KeyError, TypeError) as exc:
        text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        assert text.strip() and "\n" not in text, f"{type(exc).__name__} not on one line: {text!r}"
        return None


def _sane(value: float, what: str, positive: bool = False) -> None:
    assert isinstance(value, (int, float)) and math.isfinite(value), f"{what} = {value!r}"
    assert value > 0 if positive else value >= 0, f"{what} = {value!r}"


@st.composite
def _deployments(draw) -> dict:
    return dict(model=draw(_MODEL), gpu=draw(_GPU), tp=draw(_count(1, 8)),
                engine=draw(_mostly(st.sampled_from(["vllm", "sglang", "tensorrt-llm"]),
                                    st.sampled_from(["trtllm", ""]))),
                weights=draw(_WEIGHTS), kv=draw(_KV),
                gpu_memory_utilization=draw(st.one_of(st.none(), _fraction())),
                max_model_len=draw(st.one_of(st.none(), _count(1, 300_000))),
                max_num_seqs=draw(st.one_of(st.none(), _count(1, 2048))),
                max_num_batched_tokens=draw(st.one_of(st.none(), _count(1, 65536))))


def _deployment(kw: dict):
    return kvlib.Deployment(**{k: v for k, v in kw.items() if not (k == "kv" and v is None)})


@PROPERTY
@given(_deployments())
def test_property_deployment_and_kv_pool(kw):
    d = _one_line(lambda: _deployment(kw).resolved())
    if d is None:
        return
    pool = _one_line(lambda: kvlib.kv_pool(d))
    if pool is None:
        return
    for what in ("tokens", "kv_bytes_per_gpu", "num_blocks", "budget_bytes", "weights_bytes_per_gpu"):
        if hasattr(pool, what):  # each engine's pool has its own terms; these are sizes
            _sane(getattr(pool, what), f"{type(pool).__name__}.{what}")
    _sane(pool.max_concurrency(d.max_model_len or 8192), "max_concurrency")


@PROPERTY
@given(_deployments(), _count(1, 4096), _count(0, 1_000_000))
def test_property_decode_step(kw, batch, context):
    d = _one_line(lambda: _deployment(kw))
    if d is None:
        return
    step = _one_line(lambda: kvlib.decode_step(d, batch=batch, context_tokens=context))
    if step is not None:
        _sane(step.time_s, "time_s", positive=True)
        _sane(step.tokens_per_s, "tokens_per_s", positive=True)
        _sane(step.kv_bytes, "kv_bytes")


@PROPERTY
@given(_deployments(), _count(1, 200_000), _count(1, 20_000), st.one_of(st.none(), _count(1, 512)))
def test_property_serving_point(kw, input_tokens, output_tokens, batch):
    d = _one_line(lambda: _deployment(kw))
    if d is None:
        return
    p = _one_line(lambda: kvlib.serving_point(d, input_tokens=input_tokens,
                                              output_tokens=output_tokens, batch=batch))
    if p is None or p.n_gpus == 0:
        return
    for what in ("tokens_per_s", "per_user_tokens_per_s", "tpot_s", "ttft_s"):
        _sane(getattr(p, what), what, positive=True)
    _sane(p.batch, "batch", positive=True)
    for value in (*p.band.speed_range(p.tokens_per_s), p.dollars_per_million(2.9),
                  *p.dollars_per_million_split(2.9), *p.band.cost_range(p.dollars_per_million(2.9))):
        _sane(value, "speed or price", positive=True)


@PROPERTY
@given(_deployments(), _fraction(), st.one_of(_fraction(), st.just(0.0)), _count(1, 300_000))
def test_property_input_cost_per_million(kw, price, hit_rate, prompt_tokens):
    d = _one_line(lambda: _deployment(kw))
    if d is None:
        return
    dollars = _one_line(lambda: kvlib.input_cost_per_million(
        d, dollars_per_gpu_hour=price if not isinstance(price, float) else price * 10,
        hit_rate=hit_rate, prompt_tokens=prompt_tokens))
    if dollars is not None:
        _sane(dollars, "$ per 1M input tokens")


_REQUESTS = st.lists(st.tuples(st.integers(1, 4096), st.integers(1, 4096)), min_size=1, max_size=30)


@PROPERTY
@given(_REQUESTS, st.one_of(st.none(), st.floats(min_value=0, allow_infinity=True),
                            st.floats(-323, 6).map(lambda e: 10.0 ** e)),  # every magnitude
       st.sampled_from([*kvlib.POLICIES, "reserve_all"]), st.integers(0, 3))
def test_property_simulate_with_poisson_arrivals(requests, rate, policy, seed):
    r = _one_line(lambda: kvlib.simulate(requests, 65_536, policy, max_model_len=8192,
                                         arrival_rate=rate, seed=seed))
    if r is not None:
        assert r.completed + r.rejected == len(requests) and r.steps >= 0
        for what in ("token_utilization", "mean_batch", "pool_token_share", "completed_per_step"):
            _sane(getattr(r, what), what)


_INPUT_NAMES = ["model", "baseline", "dtype", "tokens", "requests", "tp", "n_layers", "n_kv_heads",
                "head_dim", "numerator", "denominator", "before", "after", "usd_per_hour",
                "tokens_per_s", "value", "where", "expr", "x", "gpu", "n_gpus", "pool_bytes",
                "n_params", "quantity", "pool_tokens", "policy", "n_requests", "context_tokens",
                "batch_from", "batch_to", "engine", "stat", "bits", "pattern", "kind"]
_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20),
              st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(_SLUGS),
              st.sampled_from(["bf16", "fp8", "h100-sxm", "paged", "free", "vllm", "LLLG", ""]),
              st.text(max_size=8)),
    lambda inner: st.lists(inner, max_size=3), max_leaves=6)
_TOKENS = ["1", "2.5", "x", "GiB", "+", "-", "*", "/", "//", "**", "(", ")", "9", "1e300",
           "kv_per_token('llama-3.1-8b')", "ratio(1, 0)", "y", ".real", ",", "[]"]
# the simulator and the trace replay are bounded by their own checks and tested above; a row
# that names them here would only make the property slow
_FAST = sorted(set(COMPUTATIONS) - {"sim", "prefix_trace_stat", "decode_speedup"})


#: A plausible value for a computation's input, by its name.
_INPUT_VALUES = {"model": st.sampled_from(_SLUGS), "baseline": st.sampled_from(_SLUGS),
                 "dtype": _KV, "baseline_dtype": _KV, "kv_dtype": _KV, "weight_dtype": _WEIGHTS,
                 "gpu": _GPU, "where": st.sampled_from(["§1", ""]), "pattern": st.text("LG", max_size=6),
                 "per": st.sampled_from(["gpu", "total", "x"]),
                 "overheads": st.sampled_from(["vllm", "none", "x"]),
                 "efficiency": st.sampled_from(["calibrated", "datasheet", "x"]),
                 "engine": st.sampled_from(["vllm", "sglang", "x"]),
                 "provider": st.sampled_from(["openai", "x"]), "kind": st.just("sliding")}


def _input_value(name: str, annotation: str) -> st.SearchStrategy:
    if name in _INPUT_VALUES:
        return _INPUT_VALUES[name]
    good = (st.integers(1, 10**6) if annotation == "int" else
            st.one_of(st.integers(1, 10**6), st.floats(0.01, 1e6)))
    return _mostly(good, _JSON_VALUES)


@st.composite
def _forked_rows(draw) -> dict:
    import inspect

    computation = draw(_mostly(st.sampled_from(_FAST), st.sampled_from(["unverifiable", "no_such"])))
    parameters = [] if computation not in COMPUTATIONS else [
        p for p in inspect.signature(COMPUTATIONS[computation]).parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    inputs = {p.name: draw(_input_value(p.name, str(p.annotation))) for p in parameters
              if draw(_mostly(st.just(True), st.just(False)) if p.default is p.empty
                      else st.booleans())}
    inputs.update(draw(_mostly(st.just({}), st.dictionaries(st.sampled_from(_INPUT_NAMES),
                                                            _JSON_VALUES, max_size=1))))
    if computation == "arithmetic":
        inputs["expr"] = draw(st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=12).map(
            " ".join))
    text = draw(_mostly(st.just(json.dumps(inputs)), st.text(max_size=20)))
    return _row(id="f1", computation=computation, inputs=text,
                claimed=draw(_mostly(st.sampled_from(["1", "0", "-3.5", "1,024", "0.25"]),
                                     st.sampled_from(["1e400", "nan", "abc"]))),
                unit=draw(st.sampled_from(["x", "%", "GiB", "GB", "tokens", "K tokens"])),
                tolerance=draw(_mostly(st.sampled_from(["", "0.5"]), st.sampled_from(["-1", "nan", "x"]))),
                alt_inputs=draw(_mostly(st.sampled_from(["", '{"a": {"tp": 2}}']),
                                        st.sampled_from(["[1]", '{"a": 3}']))),
                per_gpu_factor=draw(_mostly(st.sampled_from(["", "2"]), st.sampled_from(["0", "-1", "x"]))))


@PROPERTY
@given(_forked_rows())
def test_property_recheck_forked_claim_rows(row):
    v = _one_line(lambda: recheck.recheck(row))
    if v is None:
        return
    assert v.verdict in recheck.VERDICTS and v.reason.strip() and "\n" not in v.reason
    assert math.isfinite(v.recomputed) or v.verdict == "unverifiable", v
    assert "nan" not in v.reason.lower().split(), v.reason


# --- workloads: every argument checked by name (kvlib.engines.workloads) ---------------------

@pytest.mark.parametrize("call, message", [
    (lambda W: W.sharegpt(2.5), "n must be an integer, got 2.5"),
    (lambda W: W.sharegpt(True), "n must be an integer, got True"),
    (lambda W: W.sharegpt("5"), "n must be an integer, got '5'"),
    (lambda W: W.sharegpt(0), "n must be >= 1, got 0"),
    (lambda W: W.sharegpt(5, -1), "seed must be >= 0, got -1"),
    (lambda W: W.alpaca(5, seed=1.5), "seed must be an integer, got 1.5"),
    (lambda W: W.fixed(2.5, 10, 10), "n must be an integer, got 2.5"),
    (lambda W: W.fixed(2, 0, 10), "prompt_tokens must be >= 1, got 0"),
    (lambda W: W.fixed(2, 10, 1.5), "output_tokens must be an integer, got 1.5"),
    (lambda W: W.random_lengths(3, 0, 10), "input_len must be >= 1, got 0"),
    (lambda W: W.random_lengths(3, -5, 10), "input_len must be >= 1, got -5"),
    (lambda W: W.random_lengths(3, 1.5, 10), "input_len must be an integer, got 1.5"),
    (lambda W: W.random_lengths(3, 10, 0), "output_len must be >= 1, got 0"),
    (lambda W: W.random_lengths(3, 10, 10, "x"), "range_ratio must be a number, got 'x'"),
    (lambda W: W.random_lengths(3, 10, 10, float("nan")), "range_ratio must be finite, got nan"),
    (lambda W: W.random_lengths(3, 10, 10, seed=-1), "seed must be >= 0, got -1"),
    (lambda W: W.poisson_arrivals(3, 0.5, seed=-1), "seed must be >= 0, got -1"),
    (lambda W: W.sharegpt(20, output_sigma=math.inf), "output_sigma must be finite, got inf"),
    (lambda W: W.sharegpt(20, output_sigma=0), "output_sigma must be positive, got 0"),
    (lambda W: W.sharegpt(20, output_sigma=100),
     "output_sigma 100: no log-normal of that spread truncated to [4, 1,024] tokens solves to a "
     "mean of 337.99 tokens (got 338); use a spread nearer 1"),
    (lambda W: W.sharegpt(20, max_output_tokens=1500.5),
     "max_output_tokens must be an integer, got 1500.5"),
    (lambda W: W.LengthDist(300, math.nan, 4, 1024), "sigma must be finite, got nan"),
    (lambda W: W.LengthDist(300, 100, 4, 1024).pmf(),
     "sigma 100: no log-normal of that spread truncated to [4, 1,024] tokens solves to a mean "
     "of 300 tokens (got 299); use a spread nearer 1"),
])
def test_a_bad_workload_argument_is_named_in_one_line(call, message):
    import warnings

    from kvlib.engines import workloads

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the way
        with pytest.raises(ValueError) as info:
            call(workloads)
    assert str(info.value) == message


def test_workloads_accept_numpy_integers_and_keep_their_streams():
    from kvlib.engines import workloads as W

    assert np.array_equal(W.sharegpt(np.int64(50), np.int32(3)), W.sharegpt(50, 3))
    assert np.array_equal(W.random_lengths(np.int64(9), np.int64(100), 20, 0.5, seed=2),
                          W.random_lengths(9, 100, 20, 0.5, seed=2))
    assert W.fixed(np.int64(2), np.int16(7), 3).tolist() == [[7, 3], [7, 3]]
    # an output spread in the range that works gives the published mean exactly
    _, out = W.sharegpt_dists(output_sigma=2.0)
    assert out.mean() == pytest.approx(337.99, rel=1e-9)


def _fork_workloads(tmp_path, monkeypatch, edit):
    import shutil

    from kvlib.core.data import data_dir

    data = tmp_path / "data"
    shutil.copytree(data_dir(), data)
    path = data / "workloads.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    monkeypatch.setenv("KVLIB_DATA", str(data))
    return path


def test_a_forked_workloads_csv_missing_a_row_is_named(tmp_path, monkeypatch):
    from kvlib.engines import workloads

    path = _fork_workloads(tmp_path, monkeypatch, lambda lines: [
        line for line in lines if not line.startswith("sharegpt,mean_output_tokens,")])
    with pytest.raises(ValueError) as info:
        workloads.sharegpt(5)
    assert str(info.value) == (f"{path} has no row with name sharegpt and stat "
                               "mean_output_tokens")
    assert str(path).endswith("data/workloads.csv")
    assert workloads.alpaca(3).shape == (3, 2)  # the alpaca rows are still there


def test_a_forked_workloads_csv_value_out_of_range_is_named(tmp_path, monkeypatch):
    from kvlib.engines import workloads

    path = _fork_workloads(tmp_path, monkeypatch, lambda lines: [
        line.replace("sharegpt,mean_output_tokens,337.99,", "sharegpt,mean_output_tokens,5000,")
        for line in lines])
    with pytest.raises(ValueError) as info:
        workloads.sharegpt(5)
    assert str(info.value) == (f"{path} line 3 (sharegpt, mean_output_tokens): 5000 tokens must "
                               "lie strictly inside [4, 1,024] (sharegpt min_tokens, "
                               "max_prompt_tokens)")
    path = _fork_workloads(tmp_path / "b", monkeypatch, lambda lines: [
        line.replace("sharegpt,min_tokens,4,", "sharegpt,min_tokens,4.5,") for line in lines])
    with pytest.raises(ValueError, match=r"line 8 \(sharegpt, min_tokens\): 4.5 must be a whole "
                                         r"number of tokens >= 1$"):
        workloads.alpaca(5)
    monkeypatch.delenv("KVLIB_DATA")  # the package's data again, read afresh
    assert workloads.sharegpt_dists()[1].mean() == pytest.approx(337.99)


# --- prompt workloads (kvlib.engines.prompts): seeds, lengths and flags named ----------------

@pytest.mark.parametrize("call, message", [
    (lambda P: P.system_prompt_chat(5, seed=-1), "seed must be >= 0, got -1"),
    (lambda P: P.multi_turn_chat(2, seed=1.5), "seed must be an integer, got 1.5"),
    (lambda P: P.system_prompt_chat(5, user_tokens=0), "user_tokens must be >= 1, got 0"),
    (lambda P: P.system_prompt_chat(5, output_tokens=2.5),
     "output_tokens must be an integer, got 2.5"),
    (lambda P: P.system_prompt_chat(5, dynamic_first="no"),
     "dynamic_first must be True or False, got 'no'"),
    (lambda P: P.multi_turn_chat(2, user_tokens=-3), "user_tokens must be >= 1, got -3"),
    (lambda P: P.multi_turn_chat(2, geometric_turns=1),
     "geometric_turns must be True or False, got 1"),
    (lambda P: P.few_shot(3, shot_tokens=0), "shot_tokens must be >= 1, got 0"),
    (lambda P: P.few_shot(3, system_tokens=-1), "system_tokens must be >= 0, got -1"),
    (lambda P: P.rag(3, doc_tokens=1.5), "doc_tokens must be an integer, got 1.5"),
    (lambda P: P.agent_loop(2, observation_tokens=0), "observation_tokens must be >= 1, got 0"),
    (lambda P: P.agent_loop(2, shuffle_tools=None), "shuffle_tools must be True or False, got None"),
])
def test_a_bad_prompt_workload_argument_is_named_in_one_line(call, message):
    from kvlib.engines import prompts

    with pytest.raises(ValueError) as info:
        call(prompts)
    assert str(info.value) == message
