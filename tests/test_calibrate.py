"""kvlib.fit.calibrate: the measured points, the split, the fit that CALIBRATED ships, the bands."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import kvlib
from kvlib.fit import calibrate
from kvlib.speed import roofline
from kvlib.model.registry import data_dir
from kvlib.speed.roofline import CALIBRATED, Efficiency


@pytest.fixture(scope="module")
def points() -> pd.DataFrame:
    return calibrate.speed_points()


@pytest.fixture(scope="module")
def results() -> pd.DataFrame:
    return calibrate.validate()


def test_the_shipped_constants_are_the_train_half_fit():
    assert calibrate.fit_train_half() == CALIBRATED


#: The band files hold errors rounded to 4 decimals, and the fit's last bits differ between
#: machines (BLAS kernels): a value near a rounding boundary may come out one unit (1e-4) apart.
ROUNDED = {"check_dtype": False, "check_exact": False, "rtol": 0, "atol": 1.5e-4}


def test_the_error_band_file_is_current(results):
    stored = pd.read_csv(data_dir() / calibrate.BANDS_FILE, keep_default_na=False,
                         dtype={"batch_range": str})
    pd.testing.assert_frame_equal(calibrate.error_bands(results), stored, **ROUNDED)


def test_the_case_band_files_are_current(results):
    bands, measured = calibrate.case_bands()
    stored = pd.read_csv(data_dir() / calibrate.CASE_BANDS_FILE, keep_default_na=False,
                         dtype={"batch_range": str})
    pd.testing.assert_frame_equal(bands, stored, **ROUNDED)
    pd.testing.assert_frame_equal(measured, pd.read_csv(data_dir() / calibrate.CASE_MEASURED_FILE),
                                  **ROUNDED)
    pd.testing.assert_frame_equal(calibrate.ttft_error_table(), calibrate.ttft_errors(),
                                  check_dtype=False)
    # 2 vendors × 3 engines × 5 families × 5 TP buckets (1, 2, 4, 8, other) × 6 batch ranges
    assert len(bands) == 900
    # a degree no measurement has (TP 3) is looked up as "another degree": the cell without TP
    assert calibrate.case_band("llama-3.1-8b", "h100-sxm", "vllm", 3, 8).scope == (
        "held-out points of NVIDIA GPUs, vLLM, dense GQA")
    # a model built from a config gets the band of its family
    model = kvlib.load_model("llama-3.1-8b")
    assert calibrate.case_band(model, "h100-sxm", "vllm", 1, 8) == calibrate.case_band(
        "llama-3.1-8b", "h100-sxm", "vllm", 1, 8)


def test_modern_points_cover_what_the_issue_asks(points):
    decode = points[points["role"].isin(["train", "test"])]
    assert len(decode) >= 60
    assert set(decode["tp"]) >= {1, 2, 4, 8}
    assert decode["gpu"].nunique() >= 4 and {"mi300x", "mi355x"} <= set(decode["gpu"])
    dense = decode["model"].map(lambda m: roofline.blocks(m).moe_ffn == 0)
    assert dense.any() and (~dense).any()
    assert decode["concurrency"].min() == 1 and decode["concurrency"].max() >= 256
    assert (points["era"] == "history").sum() >= 25  # the older points, reported apart
    assert set(points["role"]) == {"train", "test", "ttft", "history"}


def test_split_is_deterministic_and_covers_every_source(points):
    roles = calibrate.split(points)
    shuffled = calibrate.split(points.sample(frac=1, random_state=3))
    assert roles.equals(shuffled.reindex(points.index))
    decode = points[roles.isin(["train", "test"])]
    assert abs((roles == "train").sum() - (roles == "test").sum()) <= 1
    for _, grp in decode.groupby("source_group"):
        if len(grp) > 1:
            assert set(roles[grp.index]) == {"train", "test"}


def test_assumptions_are_applied_and_stated(points):
    nim = points[points["engine_label"].str.startswith("NVIDIA NIM")]
    assert set(nim["engine"]) == {"tensorrt-llm"} and set(nim["kv_dtype"]) == {"fp8"}
    nvfp4 = points[points["weight_format"] == "experts=nvfp4"]
    assert len(nvfp4) > 0 and set(nvfp4["model"]) == {"deepseek-r1"}
    excluded = calibrate.excluded_points()
    assert excluded["reason"].str.contains("FLOP/s").all()  # only the RTX 3090 rows


def _first_serving_tpot(points, engine):
    """The first serving TPOT point of ``engine``, its parts and the keywords of its case."""
    point = points.loc[points[(points["mode"] == "serving") & (points["engine"] == engine)
                              & (points["metric"] == "time_per_output_token_s")].index[0]]
    parts = calibrate.parts(point)
    case = dict(batch=parts.batch, input_tokens=int(point["input_tokens"]),
                output_tokens=int(point["output_tokens"]), n_gpus=int(point["tp"]),
                weight_dtype=point["weight_format"], kv_dtype=point["kv_dtype"], engine=engine,
                efficiency=CALIBRATED)
    return point, parts, case


def test_parts_reproduce_the_roofline(points):
    # a serving TPOT is the mean step of roofline.serving_steps at the capped batch
    point, parts, case = _first_serving_tpot(points, "vllm")
    s = roofline.serving_steps(point["model"], point["gpu"], **case)
    assert parts.seconds(CALIBRATED) == pytest.approx(s.tpot_s, rel=1e-9)
    # on SGLang, which prefills before it decodes, a closed-loop run goes in waves
    point, parts, case = _first_serving_tpot(points, "sglang")
    w = roofline.lockstep_steps(point["model"], point["gpu"], **case)
    assert parts.seconds(CALIBRATED) == pytest.approx(w.tpot_s, rel=1e-9)
    # a static batch's latency is one prefill plus its decode steps
    static = points.loc[points[points["metric"] == "batch_latency_s"].index[0]]
    seconds = roofline.generation_time_s(
        static["model"], static["gpu"], batch=int(static["concurrency"]),
        prompt_tokens=int(static["input_tokens"]), output_tokens=int(static["output_tokens"]),
        n_gpus=int(static["tp"]), weight_dtype=static["weight_format"],
        kv_dtype=static["kv_dtype"], engine=static["engine"], efficiency=CALIBRATED)
    assert calibrate.parts(static).seconds(CALIBRATED) == pytest.approx(seconds, rel=1e-9)


def test_a_client_beyond_the_pool_decodes_what_the_pool_holds(points):
    p = points.loc[points.index[0]].copy()
    p["model"], p["gpu"], p["tp"], p["weight_format"], p["kv_dtype"] = (
        "llama-3.1-8b", "h100-sxm", 1, "bf16", "bf16")
    p["input_tokens"], p["output_tokens"], p["concurrency"] = 7168, 1024, 1000
    # 27,488 blocks of 16 tokens ÷ 512 blocks per 8,192-token request = 53.7 requests
    assert calibrate.decode_batch(p) == 53
    p["concurrency"] = 8
    assert calibrate.decode_batch(p) == 8


def test_fit_recovers_known_constants(points):
    truth = Efficiency("truth", bandwidth=0.85, kv_bandwidth=0.6, compute=0.5,
                       step_s=(("sglang", 2e-3), ("tensorrt-llm", 1e-3), ("vllm", 1.5e-3)),
                       block_s=(("attention", 0.0), ("mla", 60e-6), ("recurrent", 0.0),
                                ("dense_ffn", 30e-6), ("moe_ffn", 20e-6)),
                       communication=True)
    decode = points[points["role"].isin(["train", "test"]) & points["gpu"].isin(
        ["h100-sxm", "h200", "b200"])]
    chosen = decode.groupby(["engine", "model"]).head(6).index
    parts = {i: calibrate.parts(points.loc[i]) for i in chosen}
    fitted = calibrate.fit(parts, {i: p.predict(truth) for i, p in parts.items()},
                           calibrate.Terms("a step cost per engine build"))
    assert (fitted.bandwidth, fitted.kv_bandwidth, fitted.compute) == (0.85, 0.6, 0.5)
    for (name, value), (_, expected) in zip(fitted.step_s, truth.step_s):
        assert value == pytest.approx(expected, abs=2e-6), name
    for (name, value), (_, expected) in zip(fitted.block_s, truth.block_s):
        assert value == pytest.approx(expected, abs=2e-7), name


def test_fit_recovers_request_and_stage_costs(points):
    # the same recovery with the chosen kind of terms: a cost per request per engine build and
    # per block per doubling of the TP group (the chosen points span TP 1–8 and batches 1–512,
    # so requests and log2 tp are not collinear with the step and block columns)
    truth = Efficiency("truth", bandwidth=0.8, kv_bandwidth=0.7, compute=0.55,
                       step_s=tuple((k, 60e-6) for k in calibrate.ENGINE_KEYS),
                       block_s=(("attention", 5e-6), ("mla", 30e-6), ("recurrent", 0.0),
                                ("dense_ffn", 20e-6), ("moe_ffn", 30e-6)),
                       request_s=(("sglang", 30e-6), ("sglang-rocm", 0.0),
                                  ("tensorrt-llm", 10e-6), ("vllm", 6e-6), ("vllm-rocm", 0.0)),
                       stage_s=5e-6, communication=True)
    decode = points[points["role"].isin(["train", "test"]) & (points["gpu"] != "mi300x")
                    & ~points["gpu"].str.startswith("mi3")]
    chosen = decode.groupby(["engine", "tp"]).head(12).index
    parts = {i: calibrate.parts(points.loc[i]) for i in chosen}
    assert {p.tp for p in parts.values()} >= {1, 2, 4, 8}
    fitted = calibrate.fit(parts, {i: p.predict(truth) for i, p in parts.items()},
                           calibrate.Terms("vendor step, requests per engine, stages",
                                           step="vendor", requests="engine", stages=True))
    assert (fitted.bandwidth, fitted.kv_bandwidth, fitted.compute) == (0.8, 0.7, 0.55)
    assert fitted.stage_s == pytest.approx(5e-6, abs=2e-8)
    for name in ("sglang", "tensorrt-llm", "vllm"):
        assert dict(fitted.request_s)[name] == pytest.approx(dict(truth.request_s)[name],
                                                             abs=2e-8), name
    assert dict(fitted.step_s)["vllm"] == pytest.approx(60e-6, abs=2e-7)
    with pytest.raises(ValueError, match="Terms.requests"):
        calibrate.Terms("x", requests="node")


def test_prefill_peak_share_is_the_prefill_flops_over_the_measured_ttft(points):
    # Llama-3.1-8B on one H100 SXM, one 28,650-token prompt (AccelMark, 1.077 s): the prefill's
    # FLOPs at the 989.5 TFLOP/s bf16 peak take compute_s, about 0.65 s; share ≈ 0.61
    ttft = points[(points["role"] == "ttft") & (points["concurrency"] == 1)
                  & (points["input_tokens"] == 28650) & (points["gpu"] == "h100-sxm")]
    (pid,) = ttft.index
    d = kvlib.Deployment("llama-3.1-8b", "h100-sxm", tp=1, weights=ttft.loc[pid, "weight_format"],
                   kv=ttft.loc[pid, "kv_dtype"], engine="vllm")
    flops = roofline.prefill_step(d, batch=1, prompt_tokens=28650).flops
    share = calibrate.prefill_peak_share(ttft).loc[pid]
    assert share == pytest.approx(flops / 989.5e12 / ttft.loc[pid, "value"], rel=1e-9)
    assert 0.6 < share < 0.62
    with pytest.raises(ValueError, match="one request in flight"):
        calibrate.prefill_peak_share(points[points["role"] == "train"].head(1))


def test_nnls_known_answer():
    # min |a·x − b| with x ≥ 0: a = I, b = (1, −2) → x = (1, 0)
    a, b = np.eye(2), np.array([1.0, -2.0])
    assert np.allclose(calibrate.nnls(a.T @ a, a.T @ b), [1.0, 0.0])
    # unconstrained optimum already positive: x = (2, 3)
    b = np.array([2.0, 3.0])
    assert np.allclose(calibrate.nnls(a.T @ a, a.T @ b, start=[0, 1]), [2.0, 3.0])


def test_fit_refuses_what_it_cannot_use():
    with pytest.raises(ValueError, match="no points"):
        calibrate.fit({}, {})


def test_validation_errors_are_relative_to_the_measurement(results):
    row = results.iloc[0]
    assert row["error"] == pytest.approx(row["predicted"] / row["value"] - 1)
    assert results["predicted"].notna().all() and (results["predicted"] > 0).all()
    test = results[results["role"] == "test"]
    # the datasheet roofline is an upper bound on speed: it predicts too little time
    assert (test["datasheet_error"] < 0).mean() > 0.95


def test_error_summary_by_hand():
    df = pd.DataFrame({"error": [0.1, -0.2, 0.5, -0.05], "tp": [1, 1, 2, 2]})
    s = calibrate.error_summary(df)
    # |errors| 0.05, 0.1, 0.2, 0.5 → median 0.15; one of four beyond 40%
    assert s.loc[0, "median_abs_error"] == pytest.approx(0.15)
    assert s.loc[0, "beyond_40"] == 0.25 and s.loc[0, "worst_abs_error"] == 0.5
    by = calibrate.error_summary(df, ["tp"]).set_index("group")
    assert by.loc[2, "median_abs_error"] == pytest.approx(0.275)


def test_error_band_lookup():
    band = calibrate.error_band(2, 4)
    assert band.tp == 2 and band.batch_range == "2–8" and band.n >= calibrate.MIN_BAND_POINTS
    assert band.low <= 0 <= band.high
    lo, hi = band.speed_range(100.0)
    assert (lo, hi) == pytest.approx((100 * (1 + band.low), 100 * (1 + band.high)))
    assert band.cost_range(1.0) == pytest.approx((1 / (1 + band.high), 1 / (1 + band.low)))
    assert calibrate.error_band(3, 4).scope == "every held-out point"
    with pytest.raises(ValueError, match="tp"):
        calibrate.error_band(0, 4)
    with pytest.raises(ValueError, match="batch"):
        calibrate.error_band(1, 0)


@pytest.mark.parametrize("batch, label", [(1, "1"), (2, "2–8"), (32, "9–32"), (129, "129–512"),
                                          (4096, "513–4096")])
def test_batch_ranges(batch, label):
    assert calibrate.batch_range(batch) == label


def test_unknown_source_and_engine_are_rejected():
    with pytest.raises(ValueError, match="unknown source"):
        calibrate._group("Some vendor's slides", calibrate.SOURCE_GROUPS, "source")
    with pytest.raises(ValueError, match="ENGINES"):
        calibrate._group("MLC-LLM", calibrate.ENGINES, "engine")


def test_leave_one_source_out_refits_without_the_source(points):
    groups = ["Vultr inference cookbook", "AccelMark leaderboard"]  # the two smallest
    loso = calibrate.leave_one_source_out(groups)
    decode = points[points["role"].isin(["train", "test"])]
    assert set(loso["source_group"]) == set(groups)
    counts = decode["source_group"].value_counts()
    assert len(loso) == counts[groups].sum()
    sizes = loso.groupby("source_group")["fitted_without"].first()
    assert all(sizes[g] == len(decode) - counts[g] for g in groups)
    assert math.isfinite(loso["error"].abs().median())
    with pytest.raises(KeyError, match="no modern decode points"):
        calibrate.leave_one_source_out(["Some blog"])
    # the constants a left-out source is predicted with are fit_without's
    eff = calibrate.fit_without("Vultr inference cookbook")
    vultr = loso[loso["source_group"] == "Vultr inference cookbook"]
    every = calibrate._all_parts()
    assert all(math.isclose(every[i].predict(eff), p, rel_tol=1e-12)
               for i, p in vultr["predicted"].items())
    with pytest.raises(KeyError, match="no modern decode points"):
        calibrate.fit_without("Some blog")


def test_kv_read_share_grows_with_the_batch(points):
    # TensorRT-LLM serving Llama-3.1-8B on one H100, 1,024-token prompts, 128 out (aiconfigurator):
    # the weights are read once a step whatever the batch, the cache once per request, so the
    # cache's share of the bytes grows with the requests in flight; at 8 requests, about
    # 8 × 1,088 tokens × 128 KiB (BF16 cache) = 1.14 GB against 16.06 GB of BF16 weights: 6.6%
    # (7.1% with the prompt chunks the serving steps also read the cache for)
    pick = points[(points["model"] == "llama-3.1-8b") & (points["gpu"] == "h100-sxm")
                  & (points["engine"] == "tensorrt-llm") & (points["tp"] == 1)
                  & (points["input_tokens"] == 1024) & (points["output_tokens"] == 128)
                  & points["role"].isin(["train", "test"])].sort_values("concurrency")
    share = calibrate.kv_read_share(pick.index)
    assert list(pick["concurrency"]) == [8, 16, 32, 64, 128]
    assert share.is_monotonic_increasing and 0 < share.iloc[0] < share.iloc[-1] < 1
    assert 0.05 < share.iloc[0] < 0.09


# --- the fresh validation set, the three errors side by side, case bands (issue 22) ---------

def test_the_fresh_set_is_new_and_dated():
    fresh = pd.read_csv(data_dir() / calibrate.FRESH_FILE, keep_default_na=False, dtype=str)
    measured = pd.read_csv(data_dir() / "throughput.csv", keep_default_na=False, dtype=str)
    strip = lambda urls: {u.split("#")[0] for u in urls}  # noqa: E731 (a row's anchor aside)
    assert not strip(fresh["source_url"]) & strip(measured["source_url"])
    assert not set(fresh["id"]) & set(measured["id"])
    assert fresh["dated"].str[:4].isin(["2025", "2026"]).all()
    points = calibrate.fresh_points()
    assert not set(points.index) & set(calibrate.speed_points().index)
    assert set(points["role"]) == {"fresh", "fresh-ttft"}
    assert calibrate.fresh_excluded().empty  # every fresh row names a registry model and GPU


def test_no_fit_split_band_or_loso_reads_the_fresh_set(monkeypatch):
    """The fit, the split, the bands and leave-one-source-out load their points through
    ``csv_path``; none may ask for the fresh file."""
    read = []
    real = calibrate.csv_path
    monkeypatch.setattr(calibrate, "csv_path", lambda name: read.append(name) or real(name))
    calibrate._points_and_excluded.cache_clear()
    calibrate._all_parts.cache_clear()
    # (what the caches hold afterwards is what they held before: the spy reads the same files)
    points = calibrate.speed_points()
    calibrate.error_bands()
    calibrate.leave_one_source_out(["AccelMark leaderboard"])
    train = points[points["role"] == "train"].head(40)
    every = calibrate._all_parts()
    calibrate.fit({i: every[i] for i in train.index}, train["value"].to_dict())
    assert read and calibrate.FRESH_FILE not in read, read
    assert not points["source"].isin(calibrate.fresh_points()["source"]).any()


def test_fresh_validation_predicts_every_fresh_decode_point():
    fresh = calibrate.fresh_validation()
    assert len(fresh) == (calibrate.fresh_points()["role"] == "fresh").sum() >= 60
    assert fresh["predicted"].gt(0).all()
    row = fresh.iloc[0]
    assert row["error"] == pytest.approx(row["predicted"] / row["value"] - 1)
    assert {"AMD", "NVIDIA"} <= set(fresh["vendor"]) and {"sglang", "vllm"} <= set(fresh["engine"])
    assert set(fresh["family"]) == set(calibrate.MODEL_FAMILIES)


@pytest.mark.parametrize("model, family", [
    ("llama-3.1-70b", "dense GQA"), ("qwen3-32b", "dense GQA"), ("gpt-oss-120b", "MoE"),
    ("qwen3-235b-a22b", "MoE"), ("deepseek-v3", "MLA-MoE"), ("kimi-k2-instruct", "MLA-MoE"),
    ("nemotron-3-nano-30b-a3b", "hybrid"), ("qwen3.5-35b-a3b", "hybrid"),
    ("qwen3-next-80b-a3b", "hybrid")])
def test_model_family_from_the_architecture(model, family):
    assert calibrate.model_family(model) == family


def test_generalization_summary_side_by_side():
    summary = calibrate.generalization_summary()
    assert [b for b, _ in calibrate.BREAKDOWNS] == list(dict.fromkeys(summary["breakdown"]))
    overall = summary[summary["breakdown"] == "overall"].iloc[0]
    held = calibrate.error_summary(calibrate.validate().query("role == 'test'")).iloc[0]
    assert overall["random split: median_abs_error"] == pytest.approx(held["median_abs_error"])
    assert overall["fresh set: n"] == len(calibrate.fresh_validation())
    assert overall["leave one source out: n"] == len(calibrate.loso_results())
    assert set(summary.loc[summary["breakdown"] == "TP degree", "goal"]) == {calibrate.GOAL_TP}
    goals = calibrate.generalization_goals().set_index("set")
    assert list(goals.index) == list(calibrate.ERROR_SETS)
    # the split flatters the model: sources it never saw are missed by more
    assert goals.loc["random split", "median_abs_error"] < goals.loc[
        "leave one source out", "median_abs_error"]
    assert not goals.loc["fresh set", "median_met"]
    for name, g in goals.iterrows():
        assert g["median_met"] == (g["median_abs_error"] <= calibrate.GOAL_MEDIAN), name
        assert g["beyond_met"] == (g["beyond_40"] <= calibrate.GOAL_BEYOND_40), name


def test_case_band_says_when_it_has_no_measurements():
    # issue 22: DeepSeek-V3 on MI300X under vLLM: the data hold no vLLM-on-ROCm MLA run, so
    # the band must not be the TP 8 band's "median 8%"
    band = calibrate.case_band("deepseek-v3", "mi300x", "vllm", 8, 16)
    assert band.measured == 0 and band.scope.startswith(calibrate.NO_MEASUREMENTS)
    assert band.basis == "leave-one-source-out" and band.n >= calibrate.MIN_BAND_POINTS
    assert band.median_abs_error > 2 * calibrate.error_band(8, 16).median_abs_error
    assert (band.vendor, band.model_family) == ("AMD", "MLA-MoE")
    # Qwen3.5 has no speed measurement at all
    assert calibrate.case_band("qwen3.5-27b", "h200", "vllm", 1, 8).scope.startswith(
        calibrate.NO_MEASUREMENTS)


def test_case_band_from_held_out_points_like_the_case():
    band = calibrate.case_band("llama-3.1-70b", "h100-sxm", "vllm", 2, 16)
    assert band.basis == "held-out" and band.measured > 0
    assert band.scope == "held-out points of NVIDIA GPUs, vLLM, dense GQA, TP 2, batch 9–32"
    held = calibrate.validate().query("role == 'test'")
    cell = held[(held["engine"] == "vllm") & (held["tp"] == 2) & (held["batch_range"] == "9–32")
                & (held["gpu"].map(calibrate.gpu_vendor) == "NVIDIA")
                & (held["model"].map(calibrate.model_family) == "dense GQA")]
    assert band.n == len(cell) >= calibrate.MIN_BAND_POINTS
    assert band.median_abs_error == pytest.approx(cell["error"].abs().median(), abs=1e-4)
    # a thin cell relaxes the batch band first, then TP: SGLang MLA-MoE on B200 at batch 256
    relaxed = calibrate.case_band("deepseek-r1", "b200", "sglang", 8, 256)
    assert relaxed.scope == "held-out points of NVIDIA GPUs, SGLang, MLA-MoE, TP 8"
    lo, hi = relaxed.speed_range(1000)
    assert lo == pytest.approx(1000 * (1 + relaxed.low)) and hi == pytest.approx(1000 * (1 + relaxed.high))
    with pytest.raises(ValueError, match="engine"):
        calibrate.case_band("llama-3.1-8b", "h100-sxm", "tgi", 1, 1)


def test_error_by_gpu_and_family_cells():
    # one GPU × family with errors −0.5, 0.1, 0.2: median 0.1, one point beyond 40%; another
    # family on the same GPU with one point
    res = pd.DataFrame({"model": ["llama-3.1-8b"] * 3 + ["deepseek-v3"],
                        "gpu": ["h100-sxm"] * 4, "error": [-0.5, 0.1, 0.2, 0.05]})
    cells = calibrate.error_by_gpu_and_family(res).set_index("family")
    assert set(cells.index) == {"dense GQA", "MLA-MoE"}
    assert cells.loc["dense GQA", "n"] == 3 and cells.loc["dense GQA", "n_beyond_40"] == 1
    assert math.isclose(cells.loc["dense GQA", "median_error"], 0.1)
    assert cells.loc["MLA-MoE", "gpu_name"] == "NVIDIA H100 SXM5 80GB"
    with pytest.raises(KeyError, match="error"):
        calibrate.error_by_gpu_and_family(res.drop(columns="error"))


def test_fresh_band_coverage_sets_each_point_beside_its_case_band():
    cov = calibrate.fresh_band_coverage()
    assert len(cov) == len(calibrate.fresh_validation())
    row = cov.iloc[0]
    band = calibrate.case_band(row["model"], row["gpu"], row["engine"], int(row["tp"]),
                               int(row["batch"]))
    assert (row["band_low"], row["band_high"], row["band_basis"]) == (band.low, band.high,
                                                                     band.basis)
    assert (cov["inside"] == cov["error"].between(cov["band_low"], cov["band_high"])).all()
    assert (cov["slower"] == (cov["error"] < cov["band_low"])).all()
    assert not (cov["inside"] & cov["slower"]).any()
