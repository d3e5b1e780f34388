"""kvlib.report.answer (the landing page's calculator: checkpoints, market prices, the grid, what to
buy, the page's data) and kvlib.report.calculator (its HTML and the CSV downloads)."""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import nbformat
import pandas as pd
import pytest

import kvlib

from kvlib.model import checkpoints
from kvlib.report import answer, calculator, cli, tables
from kvlib.fit import calibrate
from kvlib.fit.calibrate import error_band
from kvlib.serve.prefix_cost import input_cost_per_million
from kvlib.serve.serving import Engine, serving_point
from kvlib.speed import roofline

MODELS = ["llama-3.1-8b", "llama-3.1-405b"]
GPUS = ["h100-sxm", "a100-80gb"]


@pytest.fixture(scope="module")
def grid() -> pd.DataFrame:
    return answer.answer_grid(MODELS, GPUS, lengths=[8192], requests=[(7168, 1024), (1024, 1024)],
                              utilizations=[0.9], kv_dtypes=["bf16"])


def test_published_weight_format():
    assert answer.published_weight_format("llama-3.1-8b") == "bf16"  # no quantization_config
    assert answer.published_weight_format("deepseek-v3") == "fp8"
    assert answer.published_weight_format("gpt-oss-120b") == {"experts": "mxfp4"}
    with pytest.raises(ValueError, match="gptq"):  # Mistral-7B-v0.1's stored config is GPTQ
        answer.published_weight_format("mistral-7b-v0.1")


def test_weight_choices_are_the_published_checkpoint_and_the_listed_ones():
    llama = answer.weight_choices("llama-3.1-70b")
    assert [c.label for c in llama] == ["bf16", "fp8", "int4"]
    # the chat checkpoint of the bf16 row of weight_checkpoints.csv, not the base repository
    # (meta-llama/Meta-Llama-3.1-70B) the record's config was read from
    assert llama[0].published and llama[0].repository == "meta-llama/Llama-3.1-70B-Instruct"
    assert llama[1].repository == "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8"
    assert llama[2].weight_format == "int4-g128-zp" and not llama[2].published
    assert [c.label for c in answer.weight_choices("deepseek-v3")] == ["fp8"]
    assert [c.label for c in answer.weight_choices("gpt-oss-120b")] == ["mxfp4 experts"]
    assert kvlib.weight_format("int4-g128").family == "int4"
    with pytest.raises(ValueError, match="unknown weight format 'int3'"):
        kvlib.weight_format("int3")


def test_a_second_checkpoint_with_the_same_label_is_refused(monkeypatch):
    rows = answer.checkpoint_rows()
    twin = rows[rows["model"] == "llama-3.1-8b"].iloc[:1].assign(repository="someone/else")
    monkeypatch.setattr(checkpoints, "checkpoint_rows", lambda: pd.concat([rows, twin]))
    checkpoints._weight_choices.cache_clear()  # read once per version of the files
    with pytest.raises(ValueError, match="same label"):
        answer.weight_choices("llama-3.1-8b")


def test_market_prices_are_medians_of_each_providers_newest_dated_offer():
    table = answer.market_prices().set_index(["gpu", "kind"])
    h100 = table.loc[("h100-sxm", "on-demand")]
    # 14 dated on-demand rows from 10 providers; each provider's newest counts once:
    # 2.99 3.00 3.20 3.90 3.99 | 3.99 4.50 6.155 6.88 12.29 → median (3.99 + 3.99) / 2; AWS's
    # March $3.90, Lambda's $2.99, RunPod's $2.69 and CoreWeave's February row are superseded.
    # RunPod's serverless worker (4.176) is a kind of its own; the assumed 2.90 is no offer.
    assert (h100["dollars_per_gpu_hour"], h100["n"], h100["superseded"]) == (3.99, 10, 4)
    assert (h100["low"], h100["high"], h100["dated"]) == (2.99, 12.29, True)
    assert "Lambda, 8x NVIDIA H100 SXM (2026-09-20): $3.99" in h100["rows"]
    assert "$2.69" not in h100["rows"] and "(article assumption)" not in h100["rows"]
    assert h100["basis"] == "the median of 10 dated on-demand offers ($2.99–$12.29)"
    assert table.loc[("h100-sxm", "serverless"), "dollars_per_gpu_hour"] == 4.176
    spot = table.loc[("h100-sxm", "spot")]  # 0.79 2.00 | 2.25 2.46: a median of four
    assert (spot["dollars_per_gpu_hour"], spot["n"]) == ((2.00 + 2.25) / 2, 4)
    assert spot["basis"] == "the median of 4 dated spot offers ($0.79–$2.46)"
    # a one-year contract, a reservation of unstated term and a Capacity Block (short-term,
    # priced above on-demand) are three kinds; nothing 3-year is on file
    assert table.loc[("h100-sxm", "committed-1y"), "dollars_per_gpu_hour"] == 2.35
    assert table.loc[("h100-sxm", "reserved"), "dollars_per_gpu_hour"] == (1.85 + 2.72) / 2
    block = table.loc[("h100-sxm", "capacity block")]
    assert (block["dollars_per_gpu_hour"], block["basis"]) == (4.916,
                                                               "1 dated capacity block offer")
    assert "committed-3y" not in set(table.index.get_level_values("kind"))
    # B200: 3.75 6.00 6.03 | 6.69 | 6.79 8.50 8.60 (CoreWeave's February row superseded)
    b200 = table.loc[("b200", "on-demand")]
    assert (b200["dollars_per_gpu_hour"], b200["n"], b200["superseded"]) == (6.69, 7, 1)
    assert table.loc[("l4", "on-demand"), "dollars_per_gpu_hour"] == (0.70 + 0.80) / 2
    # MI300X: six dated offers 1.50 1.85 1.99 | 3.45 6.00 6.00; its two undated rows are unused
    mi300x = table.loc[("mi300x", "on-demand")]
    assert (mi300x["dollars_per_gpu_hour"], mi300x["n"]) == ((1.99 + 3.45) / 2, 6)
    assert "undated" not in mi300x["rows"]
    undated = table.loc[("l40s", "serverless")]  # its only serverless row is undated: used, and said so
    assert (undated["dated"], undated["basis"]) == (False, "1 undated serverless offer")
    assert answer.market_price("h100-pcie") is None  # no offer on file
    assert answer.offers_text(1) == "1 offer" and answer.offers_text(7) == "7 offers"
    # every H100 row, offer or not, from Nebius's $0.79 spot to Azure's $12.29 ND H100 v5
    low, _, high = answer.price_range("h100-sxm")
    assert (low, high) == (0.79, 12.29)


def test_every_pricing_value_is_a_kind_or_no_offer():
    from kvlib.core.data import PRICINGS
    assert set(answer.PRICING_KINDS) | answer.NOT_OFFERS == set(PRICINGS)


def test_one_offer_per_provider_kind_and_date(monkeypatch):
    twice = pd.DataFrame({"gpu": ["b200"] * 2, "provider": ["Me"] * 2, "offering": ["a", "b"],
                          "pricing": ["on-demand"] * 2, "dollars_per_gpu_hour": [5.0, 6.0],
                          "date": ["2026-11"] * 2, "source_url": ["", ""], "notes": ["q", "q"]})
    monkeypatch.setattr(answer, "load_prices", lambda: twice)
    with pytest.raises(ValueError, match="Me has several on-demand rows for b200 dated 2026-11"):
        answer.market_prices()
    newer = twice.assign(date=["2026-10", "2026-11-02"])  # the newer quote replaces the older
    monkeypatch.setattr(answer, "load_prices", lambda: newer)
    row = answer.market_prices().iloc[0]
    assert (row["dollars_per_gpu_hour"], row["n"], row["superseded"]) == (6.0, 1, 1)


def test_max_model_len_never_past_the_models_maximum():
    assert answer.max_model_lens("llama-3.1-8b", [8192, 32768, 131072]) == [8192, 32768, 131072]
    # Qwen3-32B accepts 40,960 tokens: 131,072 is not offered, its own maximum is
    assert answer.max_model_lens("qwen3-32b", [8192, 32768, 131072]) == [8192, 32768, 40960]
    # Gemma-3's config names no length key: Gemma3TextConfig's default, 131,072, as vLLM reads it
    assert answer.max_model_lens("gemma-3-27b", [8192, 32768, 131072]) == [8192, 32768, 131072]
    with pytest.raises(ValueError, match="no maximum context"):  # Falcon-7B's config names none
        answer.max_model_lens("falcon-7b", [8192])


def test_grid_rows_are_the_serving_pipeline(grid):
    # 8B: 3 checkpoints, 405B: 3; × 2 GPUs × 2 max_model_len (8,192 and the 131,072 maximum)
    # × 2 requests = 24 rows each
    assert len(grid) == 48 and list(grid.columns) == answer.GRID_COLUMNS
    row = grid[(grid["model"] == "llama-3.1-8b") & (grid["weights"] == "bf16")
               & (grid["gpu"] == "h100-sxm") & (grid["max_model_len"] == 8192)
               & (grid["input_tokens"] == 7168)].iloc[0]
    # the pool holds 27,229 blocks; a request of 8,192 tokens needs 512: 53.18 → batch 53
    assert (row["n_gpus"], row["max_concurrency"], row["batch"]) == (1, 27_229 / 512, 53)
    p = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024,
                      max_model_len=8192)
    assert row["tokens_per_s"] == p.tokens_per_s and row["ttft_s"] == p.ttft_s
    assert row["output_cost"] == p.dollars_per_million(1.0)  # at $1 per GPU-hour
    assert (row["input_cost"], row["output_cost_split"]) == p.dollars_per_million_split(1.0)
    # the band of measurements like the case (27 held-out points of dense models on vLLM on
    # one NVIDIA GPU: batch 33–128 alone has too few), not of every model at TP 1
    band = calibrate.case_band("llama-3.1-8b", "h100-sxm", "vllm", 1, 51)
    assert p.band == band and band.scope == "held-out points of NVIDIA GPUs, vLLM, dense GQA, TP 1"
    assert (row["tokens_per_s_low"], row["tokens_per_s_high"]) == band.speed_range(p.tokens_per_s)
    assert row["band_scope"] == band.scope and row["why_not"] == row["would_fit"] == ""


def test_a_case_that_does_not_fit_says_why_and_what_would(grid):
    big = grid[(grid["model"] == "llama-3.1-405b") & (grid["weights"] == "bf16")
               & (grid["gpu"] == "h100-sxm") & (grid["max_model_len"] == 8192)].iloc[0]
    # 405,853,388,800 bf16 parameters ÷ 8 GPUs = 94.5 GiB each, over 0.9 × 79.22 GiB = 71.3 GiB
    assert big["limit"] == "weights" and math.isnan(big["tokens_per_s"])
    assert big["why_not"] == ("the weights alone, 94.5 GiB per GPU on 8 GPUs, exceed the 71.3 GiB "
                              "vLLM may use at --gpu-memory-utilization 0.9")
    assert big["would_fit"] == "would fit with fp8 weights (8 GPUs) or int4 weights (4 GPUs)"
    # FP8 weights on an A100 (no FP8 tensor cores): vLLM serves them weight-only, and so does
    # the grid, at the A100's bf16 FLOP/s
    fp8 = grid[(grid["model"] == "llama-3.1-8b") & (grid["weights"] == "fp8")
               & (grid["gpu"] == "a100-80gb")].iloc[0]
    assert fp8["n_gpus"] == 1 and fp8["limit"] == ""
    d = kvlib.Deployment("llama-3.1-8b", "a100-80gb", weights="fp8")
    assert roofline.matmul_flops(d.gpu, d.weights) == d.gpu.bf16_dense_flops


def test_the_kv_cache_limit_is_named():
    # Llama-3.1-8B on one L4 at 131,072 tokens: the weights fit, one request's KV does not
    p = serving_point("llama-3.1-8b", "l4", input_tokens=1024, output_tokens=1024,
                      max_model_len=131072, tp_degrees=(1,))
    assert p.limit == "kv" and "holds less than one request of --max-model-len 131,072" in p.why_not()
    assert p.request_kv_bytes == 131072 * 131072  # 128 KiB per token, whole 16-token blocks


def test_answer_grid_refuses_empty_axes():
    with pytest.raises(ValueError, match="models"):
        answer.answer_grid([], ["h100-sxm"], lengths=[8192], requests=[(1024, 1024)])


def test_prefix_line_is_chapter_sevens_price(grid):
    prefix = answer.prefix_input_costs(grid)
    fitting = grid[grid["n_gpus"] > 0]
    assert len(prefix) == len(fitting.drop_duplicates(
        ["model", "weights", "kv_dtype", "gpu", "n_gpus", "input_tokens"]))
    r = prefix[(prefix["model"] == "llama-3.1-8b") & (prefix["weights"] == "bf16")
               & (prefix["gpu"] == "h100-sxm") & (prefix["input_tokens"] == 7168)].iloc[0]
    assert r["cached"] == input_cost_per_million("llama-3.1-8b", "h100-sxm", dollars_per_gpu_hour=1.0,
                                                 hit_rate=0.6, prompt_tokens=7168)
    assert r["cached"] < r["cold"]


def test_one_request_at_a_time_pays_for_its_own_prompt():
    """At batch 1 no other request's prompt shares the decode steps (prefill share 0): the
    input price is the request's own prompt prefilled alone, never $0."""
    grid = answer.answer_grid(["llama-3.1-70b"], ["h100-sxm"], lengths=[131072],
                              requests=[(130048, 1024)])
    row = grid[(grid["weights"] == "fp8") & (grid["n_gpus"] > 0)].iloc[0]
    assert (row["n_gpus"], row["batch"], row["prefill_time_share"]) == (2, 1, 0.0)
    point = serving_point("llama-3.1-70b", "h100-sxm", input_tokens=130048, output_tokens=1024,
                          weight_dtype="fp8", max_model_len=131072)
    # $1/GPU-hour × 2 GPUs over the prompt's 130,048 tokens in the seconds of its own steps
    assert row["input_cost"] == point.dollars_per_million_split(1.0)[0] == pytest.approx(
        2 / 3600 / (130048 / point.prompt_s) * 1e6, rel=1e-12)
    # the prompt's own steps are chapter 6's prefill-alone time, but chunked (a step per chunk)
    alone = input_cost_per_million("llama-3.1-70b", "h100-sxm", dollars_per_gpu_hour=1.0,
                                   prompt_tokens=130048, n_gpus=2, weight_dtype="fp8")
    assert row["input_cost"] == pytest.approx(alone, rel=0.1)
    assert row["output_cost_split"] == row["output_cost"]  # all decode time is output's


def test_band_side_and_the_measured_batch_limit():
    assert answer.band_side(-0.5608, -0.1735) == "optimistic"  # nine in ten ran slower
    assert answer.band_side(0.05, 0.2) == "pessimistic"
    assert answer.band_side(-0.3874, 0.1361) == ""
    # batch 129–512 has held-out points of its own; 513–4096 falls back to "TP 1, every batch"
    assert calibrate.banded_batch_limit() == 512
    # the fallback may look better than the band at 512, so a batch past 512 is read at the
    # slower of its own case band and the band at 512
    case = ("llama-3.1-8b", "h100-sxm", "vllm", 1)
    at_512, past = calibrate.case_band(*case, 512).low, calibrate.case_band(*case, 1024).low
    assert calibrate.slow_end(*case, 1024, 512) == 1 + min(at_512, past)
    assert calibrate.slow_end(*case, 51, 512) == 1 + calibrate.case_band(*case, 51).low
    # the what-to-buy ranking reads the case's band, not the TP × batch one
    mi300x = ("deepseek-v3", "mi300x", "vllm", 8)
    assert calibrate.slow_end(*mi300x, 16, 512) == 1 + calibrate.case_band(*mi300x, 16).low
    assert calibrate.case_band(*mi300x, 16).low < error_band(8, 16).low
    # Llama-3.1-8B on one MI300X, 1,024 + 1,024 tokens: 622 requests in flight, past 512, so
    # the grid gives it the case's band at 512: the 17 held-out points of dense models on vLLM
    # on AMD GPUs (TP 1 and batch 129–512 have too few), 10th–90th percentile −11% … +8%,
    # where the batch 129–512 band of every model and TP says −43% … −8%
    row = answer.answer_grid(["llama-3.1-8b"], ["mi300x"], lengths=[8192],
                             requests=[(1024, 1024)]).query("weights == 'bf16'").iloc[0]
    band = calibrate.case_band("llama-3.1-8b", "mi300x", "vllm", 1, 512)
    assert band.scope == "held-out points of AMD GPUs, vLLM, dense GQA" and band.n == 17
    assert row["batch"] == 622 and (row["band_low"], row["band_high"]) == (band.low, band.high)
    assert (band.low, band.high) == (-0.1142, 0.0787)
    assert error_band(1, 512).low < band.low < 0 < band.high
    assert row["tokens_per_s_low"] < row["tokens_per_s"] < row["tokens_per_s_high"]
    assert answer.band_side(row["band_low"], row["band_high"]) == ""


def test_would_fit_names_every_gpu_that_holds_the_case():
    keys = dict(model="m", weights="bf16", kv_dtype="bf16", gpu_memory_utilization=0.9,
                max_model_len=8192, input_tokens=7168, output_tokens=1024)
    grid = pd.DataFrame([{**keys, "gpu": g, "gpu_name": name, "n_gpus": n} for g, name, n in (
        ("h100-sxm", "H100", 0), ("h200", "H200", 8), ("mi300x", "MI300X", 4),
        ("b200", "B200", 4))])
    assert answer.would_fit(grid).tolist() == [
        "would fit with 4 × B200, 4 × MI300X or 8 × H200", "", "", ""]


def test_cheapest_meets_the_floor_at_the_lowest_price(grid):
    buy = answer.cheapest(grid, speed_floor=20, output_tokens=1024).set_index(
        ["model", "input_tokens"])
    eight = buy.loc[("llama-3.1-8b", 1024)]
    assert eight["per_user_slow"] >= 20 and eight["per_user_tokens_per_s"] > eight["per_user_slow"]
    # every candidate, exhaustively: each checkpoint on each priced GPU, the largest power-of-two
    # batch (or the full pool) that keeps every user at 20 tokens/s at the slow end of its band
    # (10th percentile of the case's band; past 512 requests, the slower of its band and the
    # band at 512), priced
    # there too
    prices = {g: answer.market_price(g) for g in ("h100-sxm", "a100-80gb")}  # $3.99, $2.50
    best = math.inf
    for choice in answer.weight_choices("llama-3.1-8b"):
        for gpu, price in prices.items():
            if choice.label == "fp8" and gpu == "a100-80gb":
                continue
            eng = Engine("llama-3.1-8b", gpu, weight_dtype=choice.weight_format)
            full = eng.point(1024, 1024, max_model_len=8192)
            for b in [full.batch] + [2 ** k for k in range(12, -1, -1) if 2 ** k < full.batch]:
                p = eng.point(1024, 1024, max_model_len=8192, batch=b)
                band = [calibrate.case_band("llama-3.1-8b", gpu, "vllm", 1, n).low
                        for n in (b, min(b, 512))]
                low = min(band)
                if p.per_user_tokens_per_s * (1 + low) >= 20:
                    best = min(best, p.dollars_per_million(price) / (1 + low))
                    break
    assert eight["output_cost_slow"] == pytest.approx(best, rel=1e-12)
    assert eight["output_cost"] == pytest.approx(best * eight["slow_end"], rel=1e-12)
    with pytest.raises(ValueError, match="speed_floor"):
        answer.cheapest(grid, speed_floor=0)


def test_the_grid_the_cli_and_chapter_four_agree_on_a_shared_case(capsys):
    """One answer: the landing page's grid and `kvlib cost` are the same pipeline at the same
    settings — here the article's central case, a 70B with FP8 weights on two H100s."""
    row = answer.answer_grid(["llama-3.1-70b"], ["h100-sxm"], lengths=[8192],
                             requests=[(7168, 1024)], kv_dtypes=["bf16"]).query(
        "weights == 'fp8' and max_model_len == 8192").iloc[0]
    assert cli.main(["cost", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--weight-dtype", "fp8",
                     "--price", "2.9", "--context", "8192", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert row["n_gpus"] == 2 and data["batch"] == row["batch"]
    assert data["tokens_per_s"] == row["tokens_per_s"]
    assert data["dollars_per_million_tokens"] == pytest.approx(row["output_cost"] * 2.9, rel=1e-12)
    assert data["dollars_per_million_input_tokens"] == pytest.approx(row["input_cost"] * 2.9,
                                                                     rel=1e-12)


def test_calculator_data_and_html(grid):
    prefix = answer.prefix_input_costs(grid)
    start = dict(model="llama-3.1-8b", weights="bf16", kv_dtype="bf16",
                 gpu_memory_utilization=0.9, gpu="h100-sxm", max_model_len=8192,
                 input_tokens=7168, output_tokens=1024, kind="on-demand")
    ttft = pd.DataFrame({"batch_range": ["1", "33–128"], "n": [18, 390],
                         "median": [0.1, -0.88], "low": [-0.2, -0.98], "high": [0.3, -0.68]})
    data = answer.calculator_data(grid, prefix, models=MODELS, default=start, ttft=ttft)
    assert len(data["rows"]) == len(grid) and data["default"] == start
    assert [m["lengths"] for m in data["models"]] == [[8192, 131072], [8192, 131072]]
    h100 = data["gpus"][0]["prices"]["on-demand"]
    assert (h100["price"], h100["n"], h100["low"], h100["high"]) == (3.99, 10, 2.99, 12.29)
    cols = data["cols"]
    key = [0, 0, 0, 0, 0, 0, 8192, data["prompts"].index(7168), data["outputs"].index(1024)]
    (row,) = [r for r in data["rows"] if r[:9] == key]
    assert row[cols.index("n_gpus")] == 1 and row[cols.index("batch")] == 53
    assert data["ttft_bands"][row[cols.index("ttft_band")]][0] == "33–128"  # batch 53's range
    band = data["bands"][row[cols.index("band")]]
    # NVIDIA GPUs, vLLM, dense GQA, TP 1 (27 held-out points): the band holds the figure
    assert band[0] == "held-out points of NVIDIA GPUs, vLLM, dense GQA, TP 1"
    assert band[3:] == [-0.3851, 0.7195, "", "median miss of 27 measurements like this: 11% "
                        "(NVIDIA GPUs, vLLM, dense GQA, TP 1)"]
    exact = grid.iloc[0]
    assert row[cols.index("output_cost")] == pytest.approx(exact["output_cost"], rel=1e-3)
    (nofit,) = [r for r in data["rows"] if r[:9] == [0, 1, 0, 0, 0, 0, 8192] + key[7:]]
    assert nofit[10] == "weights" and data["texts"][nofit[11]].startswith("the weights alone")
    # the command that starts the case, and the fraction it starts with
    assert data["texts"][row[cols.index("launch")]] == exact["launch"]
    assert exact["launch"].startswith("vllm serve ") and "--gpu-memory-utilization 0.9 " in \
        exact["launch"]
    assert row[cols.index("memory_fraction")] == 0.9
    assert data["engines"] == [{"slug": "vllm", "name": "vLLM", "flag": "--gpu-memory-utilization",
                                "share": "of the GPU's whole memory", "settings": [0.9]}]
    html = calculator.calculator(data, "<p>start</p>")._repr_mimebundle_()[0]["text/html"]
    packed = json.loads(html.split('data-target="')[1].split('">', 1)[1].split("</script>")[0])
    assert json.loads(calculator.unpack(packed["data"])) == json.loads(json.dumps(data))
    assert "<p>start</p>" in html and len(html) < 60_000


def test_downloads_carry_their_files():
    bundle, metadata = calculator.downloads({"grid.csv": ("The grid", "a,b\n1,2\n")},
                                            also={"claims.csv": "Claims"})._repr_mimebundle_()
    assert calculator.unpack(metadata[calculator.DOWNLOADS_KEY]["grid.csv"]) == "a,b\n1,2\n"
    assert 'href="../_static/downloads/grid.csv"' in bundle["text/html"]
    assert 'href="../_static/downloads/claims.csv"' in bundle["text/html"]
    assert "(CSV, 1 row," in bundle["text/html"]
    # records, not lines: a field may hold a newline (a launch command writing a file)
    quoted = calculator.downloads({"g.csv": ("g", 'a,b\n1,"x\ny"\n2,z\n')})
    assert "(CSV, 2 rows," in quoted._repr_mimebundle_()[0]["text/html"]
    with pytest.raises(ValueError, match="plain .csv"):
        calculator.downloads({"../x.csv": ("x", "")})


def _record(notebook: Path, name: str) -> str:
    """What a chapter glued under ``name``, as papermill records it (the value's repr)."""
    for cell in nbformat.read(notebook, as_version=4).cells:
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                return out["data"]["application/papermill.record/text/plain"]
    raise KeyError(f"{notebook.name} glues no {name!r}")


def _glued(notebook: Path, name: str) -> float:
    """The number a chapter glued under ``name``."""
    return float(_record(notebook, name))


def _glued_text(notebook: Path, name: str) -> str:
    """The text a chapter glued under ``name``."""
    return ast.literal_eval(_record(notebook, name))


def test_landing_page_and_chapter_four_give_one_answer(executed_book):
    """The same case — Llama-3.1-8B on one H100, 7,168 + 1,024 tokens, bf16, utilization 0.9 —
    is one price on the landing page, in chapter 4's serving case and at the end of chapter 4's
    cost curve. (They once read $0.47/M and "$0.530 at batch 32": chapter 4 quoted the cheapest
    power-of-two batch, 32, below the 51 requests the pool then held; its curve now ends at the
    pool's ceiling, 53 requests.)"""
    row = answer.answer_grid(["llama-3.1-8b"], ["h100-sxm"], lengths=[8192],
                             requests=[(7168, 1024)]).query(
        "weights == 'bf16' and max_model_len == 8192").iloc[0]
    ch4 = executed_book / "04_cost.ipynb"
    price = _glued(ch4, "c4_price")
    for name in ("c4_case_cost", "c4_best_cost"):
        assert _glued(ch4, name) == pytest.approx(row["output_cost"] * price, rel=1e-12), name
    assert _glued(ch4, "c4_best_batch") == _glued(ch4, "c4_case_batch") == row["batch"] == 53
    landing = executed_book / "00_answer.ipynb"
    # the landing page writes these as its calculator does (three significant digits)
    assert _glued_text(landing, "a_cost") == tables.sig3(
        row["output_cost"] * _glued(landing, "a_price"))
    assert _glued_text(landing, "a_tps") == tables.sig3(_glued(ch4, "c4_case_tps"))


def test_the_prefix_line_uses_chapter_sevens_example_hit_rate():
    source = (Path(__file__).resolve().parent.parent / "chapters" / "07_prefix_caching.md").read_text()
    (rate,) = [line.split("=")[1].split("#")[0] for line in source.splitlines()
               if line.startswith("landing_hit_rate =")]
    assert float(rate) == answer.PREFIX_HIT_RATE


def test_buy_table_puts_the_deciding_column_first():
    """The "What should I buy" table opens with $ per 1M output tokens (visible at 390 px), the
    deployment in words, * for a capped and † for an extrapolated batch, the GPU-hour price with
    the number of offers behind it; unserved rows dropped."""
    price = answer.market_price("h100-sxm")
    buy = pd.DataFrame([
        {"model_name": "NVIDIA-Nemotron-X", "input_tokens": 7168, "n_gpus": 2, "gpu": "h100-sxm",
         "gpu_name": "NVIDIA H100 SXM5 80GB", "weights": "mxfp4 experts", "kv_dtype": "fp8",
         "batch": 1024, "capped": True, "extrapolated": True, "per_user_slow": 21.25,
         "output_cost_slow": 0.4321, "dollars_per_gpu_hour": price},
        {"model_name": "Llama", "input_tokens": 131072, "n_gpus": 0}])
    t = answer.buy_table(buy)
    assert list(t.frame.columns)[0] == "$ per 1M output tokens"
    assert list(t.frame.columns) == list(answer.BUY_COLUMNS.values())
    row = t.frame.iloc[0]
    assert len(t.frame) == 1 and row["model"] == "Nemotron-X"
    assert row["GPUs, weights · KV cache"] == "2 × H100, mxfp4 · fp8"
    assert row["requests in flight"] == "1,024*†"
    assert row["$ per GPU-hour (offers)"] == "$3.99 (10 offers)"
    assert "$0.432" in t._repr_html_()
    assert answer.buy_table(buy.assign(dollars_per_gpu_hour=2.35), kind="committed-1y").frame.iloc[
        0]["$ per GPU-hour (offers)"] == "$2.35 (1 offer)"
    with pytest.raises(ValueError, match="not priced at its spot market price"):
        answer.buy_table(buy, kind="spot")  # priced on demand, labelled spot


def _slo_frame(rates: dict[tuple[str, float], float]) -> pd.DataFrame:
    """A latency grid of one case (8B on one H100, 7,168 + 1,024 tokens) with ``rates``."""
    case = dict(engine="vllm", model="llama-3.1-8b", weights="bf16", kv_dtype="bf16",
                gpu_memory_utilization=0.9, gpu="h100-sxm", max_model_len=8192,
                input_tokens=7168, output_tokens=1024, n_gpus=1)
    return pd.DataFrame([{**case, "bound": b, "target": t, "rate_rps": r, "saturated_rps": 2.0,
                          "concurrency": 40 * r, "n_requests": 200, "tolerance": 0.02}
                         for (b, t), r in rates.items()])


def test_at_target_takes_the_lower_rate_and_prices_a_day():
    slo = _slo_frame({("ttft", 2.0): 1.5, ("speed", 20.0): 1.2, ("speed", 40.0): 0.0})
    (row,) = answer.at_target(slo, ttft_s=2.0, speed=20.0, peak_rps=5, prices={"h100-sxm": 3.0},
                              duty_cycle=0.25).itertuples()
    # the speed bound binds: 1.2 requests/s, 48 users; ⌈5 ÷ 1.2⌉ = 5 replicas of 1 GPU, $15/h;
    # a day: 5 × 0.25 × 86,400 = 108,000 requests × 1,024 tokens for 24 × $15 = $360
    assert (row.rate_rps, row.users, row.replicas, row.gpus) == (1.2, 48.0, 5, 5)
    assert row.dollars_per_hour == 15.0
    assert row.output_cost == pytest.approx(360 / (108_000 * 1024) * 1e6)  # $3.255
    missed = answer.at_target(slo, ttft_s=2.0, speed=40.0, peak_rps=5, prices={"h100-sxm": 3.0})
    assert missed["replicas"].iloc[0] == 0 and math.isnan(missed["output_cost"].iloc[0])
    with pytest.raises(ValueError, match="no speed target 30"):
        answer.at_target(slo, ttft_s=2.0, speed=30.0, peak_rps=5, prices={})
    buy = answer.cheapest_at_slo(slo, ttft_s=2.0, speed=20.0, peak_rps=5)
    assert buy["gpu"].iloc[0] == "h100-sxm" and buy["replicas"].iloc[0] == 5
    small = answer.answer_grid(["llama-3.1-8b"], ["h100-sxm"], lengths=[8192],
                               requests=[(7168, 1024)])
    no_ttft = pd.DataFrame({"batch_range": [], "n": [], "median": [], "low": [], "high": []})
    data = answer.calculator_data(small, answer.prefix_input_costs(small),
                                  models=["llama-3.1-8b"], default={}, ttft=no_ttft, slo=slo)
    # the page's case key: indices of engine, model, weights, kv, utilization (into the
    # engine's), gpu; lengths; n_gpus
    assert data["slo"]["cases"]["0|0|0|0|0|0|8192|0|0|1"] == [2, [1.5, 60], [1.2, 48], [0, 0]]


def test_more_gpus_per_replica_are_the_serving_pipeline(grid):
    more = answer.tp_choices(grid)
    def case(frame):
        return frame[(frame["model"] == "llama-3.1-8b") & (frame["gpu"] == "h100-sxm")
                     & (frame["weights"] == "bf16") & (frame["max_model_len"] == 8192)
                     & (frame["input_tokens"] == 7168)]
    one, counts = case(grid).iloc[0], case(more)
    assert one["n_gpus"] == 1 and sorted(counts["n_gpus"]) == [2, 4, 8]
    four = counts[counts["n_gpus"] == 4].iloc[0]
    point = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024,
                          n_gpus=4, max_model_len=8192, kv_dtype="bf16",
                          gpu_memory_utilization=0.9)
    assert (four["batch"], four["tokens_per_s"]) == (point.batch, point.tokens_per_s)
    assert not (more["gpu"] == "a100-80gb").any() or (more["n_gpus"] > 1).all()


def test_other_engines_run_at_their_defaults_and_say_where_they_do_not_run(grid):
    kw = dict(lengths=[8192], requests=[(7168, 1024)], utilizations=[None])
    sgl = answer.answer_grid(["llama-3.1-8b"], ["h100-sxm"], engine="sglang", **kw)
    trt = answer.answer_grid(["llama-3.1-8b"], ["mi300x"], engine="tensorrt-llm", **kw)
    (row,) = sgl[(sgl["weights"] == "bf16") & (sgl["max_model_len"] == 8192)].itertuples()
    # the setting is the engine's default (NaN), the fraction what SGLang chose for 1 H100
    assert math.isnan(row.gpu_memory_utilization)
    assert row.memory_fraction == kvlib.kv_pool(kvlib.Deployment(
        "llama-3.1-8b", "h100-sxm", engine="sglang", max_model_len=8192)).mem_fraction_static
    assert row.launch.startswith("python -m sglang.launch_server --model-path ")
    assert f"--mem-fraction-static {row.memory_fraction!r} " in row.launch
    assert set(trt["limit"]) == {"engine"} and set(trt["why_not"]) == {  # no ROCm build
        "TensorRT-LLM runs on NVIDIA GPUs only, not the AMD Instinct MI300X"}
    with pytest.raises(ValueError, match="one engine"):
        answer.would_fit(pd.concat([grid, sgl]))
    both = pd.concat([grid, sgl], ignore_index=True)
    data = answer.calculator_data(both, answer.prefix_input_costs(both), models=MODELS,
                                  default={}, ttft=pd.DataFrame(
                                      {"batch_range": [], "n": [], "median": [], "low": [],
                                       "high": []}))
    assert [(e["slug"], e["settings"]) for e in data["engines"]] == [("vllm", [0.9]),
                                                                     ("sglang", [None])]


def test_a_case_no_group_of_eight_holds_is_placed_on_two_nodes():
    from kvlib.speed.parallel import parallel_decode
    small = answer.answer_grid(["deepseek-v3"], ["h100-sxm"], lengths=[8192],
                               requests=[(7168, 1024)])
    wide = answer.two_nodes(small)
    (r,) = wide[(wide["weights"] == "fp8") & (wide["max_model_len"] == 8192)].itertuples()
    d = kvlib.Deployment("deepseek-v3", "h100-sxm", tp=8, pp=2, weights="fp8",
                         gpu_memory_utilization=0.9, max_model_len=8192)
    held = kvlib.engines.capacity.pool_arithmetic(d).max_concurrency(8192)
    step = parallel_decode(d.resolved(), batch=r.batch, context_tokens=7168 + 512)
    assert (r.n_gpus, r.max_concurrency, r.batch) == (16, held, int(held))
    assert r.decode_tokens_per_s == step.tokens_per_s
    assert r.output_cost == pytest.approx(16 / (3600 * step.tokens_per_s) * 1e6)  # $1/GPU-h
    assert r.launch.startswith("vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 "
                               "--pipeline-parallel-size 2 ")
    data = answer.calculator_data(small, answer.prefix_input_costs(small), models=["deepseek-v3"],
                                  default={}, ttft=pd.DataFrame(
                                      {"batch_range": [], "n": [], "median": [], "low": [],
                                       "high": []}), wider=wide)
    cols = data["cols"]
    (row,) = [x for x in data["rows"] if x[cols.index("n_gpus")] == 0 and x[1:3] == [0, 0]
              and x[6] == 8192]
    words, cost, launch = row[cols.index("n_gpus") + 4:]
    assert data["texts"][words].startswith("On two nodes of eight (16 × H100, one pipeline stage")
    assert data["texts"][launch] == r.launch and cost == pytest.approx(r.output_cost, rel=1e-3)


def test_an_mla_mixture_of_experts_is_also_placed_as_eight_data_parallel_ranks():
    from kvlib.speed.parallel import parallel_decode
    grid = answer.answer_grid(["deepseek-v3", "llama-3.1-8b"], ["h200"], lengths=[8192],
                              requests=[(7168, 1024)])
    assert answer.uses_dp_attention("deepseek-v3") and not answer.uses_dp_attention("llama-3.1-8b")
    assert not answer.uses_dp_attention("gpt-oss-120b")  # experts, but GQA attention
    dp = answer.dp_attention(grid)
    assert set(dp["model"]) == {"deepseek-v3"}
    (r,) = dp[(dp["weights"] == "fp8") & (dp["max_model_len"] == 8192)].itertuples()
    d = kvlib.Deployment("deepseek-v3", "h200", tp=1, dp=8, ep=8, weights="fp8",
                         gpu_memory_utilization=0.9, max_model_len=8192)
    pool = kvlib.engines.capacity.pool_arithmetic(d)
    # the batch is one rank's (its pool's requests, at most max_num_seqs); the requests held
    # are all eight pools'
    batch = min(int(pool.max_concurrency(8192)), d.resolved().max_num_seqs)
    assert (r.n_gpus, r.batch, r.max_concurrency) == (8, batch, pool.deployment_concurrency(8192))
    assert r.decode_tokens_per_s == parallel_decode(d.resolved(), batch=batch,
                                                    context_tokens=7168 + 512).tokens_per_s
    assert r.output_cost == pytest.approx(8 / (3600 * r.decode_tokens_per_s) * 1e6)  # $1/GPU-h
    assert "--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel" in r.launch
    # MLA's latent cache is whole on each GPU of a group of eight: eight ranks hold far more
    (tp8,) = grid[(grid["model"] == "deepseek-v3") & (grid["weights"] == "fp8")
                  & (grid["max_model_len"] == 8192) & (grid["n_gpus"] == 8)].itertuples()
    assert r.max_concurrency > 4 * tp8.max_concurrency
    data = answer.calculator_data(grid, answer.prefix_input_costs(grid),
                                  models=["deepseek-v3", "llama-3.1-8b"], default={},
                                  ttft=pd.DataFrame({"batch_range": [], "n": [], "median": [],
                                                     "low": [], "high": []}),
                                  data_parallel=dp, data_parallel_error={"n": 4, "median": -0.7})
    cases = data["data_parallel"]["cases"]
    assert len(cases) == len(dp) and data["data_parallel"]["error"] == {"n": 4, "median": -0.7}
    weights = [c.label for c in answer.weight_choices("deepseek-v3")]
    key = "|".join(map(str, (0, 0, weights.index("fp8"), data["kv_dtypes"].index("bf16"), 0, 0,
                             8192, 0, 0)))
    words, cost, launch = cases[key]
    assert data["texts"][words].startswith("With data-parallel attention and expert parallelism")
    assert data["texts"][launch] == r.launch and cost == pytest.approx(r.output_cost, rel=1e-3)


def test_speculation_uses_only_a_measured_chain_of_the_same_model():
    from kvlib.fit.speculative import measured_speculation
    llama = measured_speculation("llama-3.1-8b")
    # the fastest measured chain of vLLM issue #20780: EAGLE-3, k = 4, τ = 3.08 (1.746× at
    # batch 1); α solves 1 + α + α² + α³ + α⁴ = 3.08: α ≈ 0.755 (1 + 0.755 + 0.570 + 0.430
    # + 0.325 = 3.080)
    assert (llama.id, llama.speculative.method, llama.speculative.num_speculative_tokens) == (
        "sp12", "eagle3", 4)
    assert llama.speculative.tokens_per_step == pytest.approx(3.08)
    assert llama.speculative.acceptance == pytest.approx(0.755, abs=5e-4)
    assert llama.speculative.model == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert llama.stated == "mean acceptance length 3.08" and (llama.speedup, llama.batch) == (
        1.746, 1)  # 7.07 ms ÷ 4.05 ms TPOT
    # DeepSeek-V3: its report's MTP, k = 1, the low end of 85–90%: τ = 1.85
    ds = measured_speculation("deepseek-v3")
    assert (ds.id, ds.speculative.method, ds.speculative.acceptance) == ("sp01", "mtp", 0.85)
    assert ds.stated == "acceptance rate 0.85–0.9" and ds.speculative.model is None
    # Llama-3.1-70B has none: the 70B row is Llama-3.3-70B's, and a draft tree; none borrowed
    assert measured_speculation("llama-3.1-70b") is None
    assert measured_speculation("llama-3.1-405b") is None


def test_grid_prices_speculation_at_the_cases_batch(grid):
    case = grid[(grid["model"] == "llama-3.1-8b") & (grid["weights"] == "bf16")
                & (grid["gpu"] == "h100-sxm") & (grid["max_model_len"] == 8192)
                & (grid["input_tokens"] == 7168)].iloc[0]
    assert (case["spec_source"], case["spec_method"], case["spec_k"]) == ("sp12", "eagle3", 4)
    assert case["spec_why_not"] == "" and 1 <= case["spec_batch"] <= case["batch"] == 53
    # the draft layer holds 8 KV heads × 128 × 2 (K, V) × 2 bytes = 4,096 bytes a token beside
    # the target's 32 × 4,096 = 131,072, and its weights come first: at most 32/33 of the tokens
    assert case["spec_pool_tokens"] <= case["spec_base_pool_tokens"] * 32 / 33
    # $ per 10⁶ output tokens at $1 per GPU-hour: 10⁶ ÷ (3,600 s × batch × tokens/s per user)
    assert case["spec_output_cost"] == pytest.approx(
        1e6 / (3600 * case["spec_batch"] * case["spec_per_user_tokens_per_s"]), rel=1e-12)
    assert case["spec_speedup"] == pytest.approx(
        case["spec_per_user_tokens_per_s"] / case["spec_base_per_user_tokens_per_s"], rel=1e-12)
    assert case["spec_speedup"] > 1
    # the same figures from kvlib.speculative_decode at that batch and the mean context
    d = kvlib.Deployment("llama-3.1-8b", "h100-sxm", max_model_len=8192,
                         gpu_memory_utilization=0.9, speculative=kvlib.Speculative(
                             "eagle3", 4, case["spec_acceptance"],
                             model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"))
    r = kvlib.speculative_decode(d, int(case["spec_batch"]), 7168 + 512, dollars_per_hour=1.0)
    assert r.dollars_per_million == pytest.approx(case["spec_output_cost"], rel=1e-12)
    assert r.pool_tokens == case["spec_pool_tokens"]
    assert case["spec_launch"] == case["launch"] + (
        " --speculative-config '{\"method\": \"eagle3\", \"num_speculative_tokens\": 4, "
        "\"model\": \"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B\"}'")
    # another checkpoint: not measured; another model: nothing at all
    fp8 = grid[(grid["model"] == "llama-3.1-8b") & (grid["weights"] == "fp8")
               & (grid["n_gpus"] > 0)].iloc[0]
    assert "published checkpoint" in fp8["spec_why_not"] and math.isnan(fp8["spec_batch"])
    big = grid[grid["model"] == "llama-3.1-405b"]
    assert (big["spec_source"] == "").all() and big["spec_batch"].isna().all()


def test_cli_speculative_and_the_calculator_agree(grid, capsys):
    """`kvlib cost --speculative` and the landing page's grid: one pipeline, one answer."""
    case = grid[(grid["model"] == "llama-3.1-8b") & (grid["weights"] == "bf16")
                & (grid["gpu"] == "h100-sxm") & (grid["max_model_len"] == 8192)
                & (grid["input_tokens"] == 7168)].iloc[0]
    assert cli.main(["cost", "llama-3.1-8b", "h100-sxm", "--tp", "1", "--price", "2.9",
                     "--context", "8192", "--speculative",
                     f"eagle3:4:{float(case['spec_acceptance'])!r}", "--draft-model",
                     "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    spec = data["speculative"]
    assert spec["batch"] == case["spec_batch"] and spec["pool_tokens"] == case["spec_pool_tokens"]
    assert spec["tokens_per_s"] / spec["batch"] == pytest.approx(
        case["spec_per_user_tokens_per_s"], rel=1e-12)
    assert spec["speedup"] == pytest.approx(case["spec_speedup"], rel=1e-12)
    assert spec["dollars_per_million_tokens"] == pytest.approx(case["spec_output_cost"] * 2.9,
                                                               rel=1e-12)
    assert data["launch_command"] == case["spec_launch"]


def test_calculator_data_carries_the_speculative_cases(grid):
    prefix = answer.prefix_input_costs(grid)
    ttft = pd.DataFrame({"batch_range": ["1"], "n": [18], "median": [0.1], "low": [-0.2],
                         "high": [0.3]})
    start = dict(model="llama-3.1-8b", weights="bf16", kv_dtype="bf16",
                 gpu_memory_utilization=0.9, gpu="h100-sxm", max_model_len=8192,
                 input_tokens=7168, output_tokens=1024, kind="on-demand")
    data = answer.calculator_data(grid, prefix, models=MODELS, default=start, ttft=ttft,
                                  speculative_error={"n": 14, "median": 0.19})
    spec = data["speculative"]
    assert set(spec["sources"]) == {"llama-3.1-8b"} and spec["error"] == {"n": 14, "median": 0.19}
    src = spec["sources"]["llama-3.1-8b"]
    assert (src["id"], src["name"], src["k"], src["tokens_per_step"]) == ("sp12", "EAGLE-3", 4,
                                                                          3.08)
    case = grid[(grid["model"] == "llama-3.1-8b") & (grid["weights"] == "bf16")
                & (grid["gpu"] == "h100-sxm") & (grid["max_model_len"] == 8192)
                & (grid["input_tokens"] == 7168)].iloc[0]
    key = "|".join(str(x) for x in [0, 0, 0, 0, 0, 0, 8192, data["prompts"].index(7168),
                                    data["outputs"].index(1024), 1])
    figures = spec["cases"][key]
    assert figures[0] == case["spec_batch"] and data["texts"][figures[8]] == case["spec_launch"]
    assert figures[4] == pytest.approx(case["spec_output_cost"], rel=1e-3)
    fp8 = [v for k, v in spec["cases"].items() if k.split("|")[2] == "1"]  # the fp8 checkpoint
    assert fp8 and all(len(v) == 1 and "published" in data["texts"][v[0]] for v in fp8)


def test_bounds_at_capacity_names_the_capped_targets_and_the_loosest_per_bound():
    """TTFT targets 0.5, 2 and 5 s at 0.57, 1.20 and 1.23 requests/s under a saturated 1.32:
    none capped, the loosest (5 s) holds to 1.23; speed targets 10, 20, 40 tokens/s at 1.32,
    1.32 and 1.15: 10 and 20 capped, the loosest (the slowest, 10) holds to 1.32."""
    case = dict.fromkeys(answer.SLO_CASE_KEYS, "x")
    rows = pd.DataFrame([{**case, "bound": b, "target": t, "rate_rps": r, "saturated_rps": 1.32}
                         for b, t, r in (("ttft", 0.5, 0.57), ("ttft", 2.0, 1.20),
                                         ("ttft", 5.0, 1.23), ("speed", 10.0, 1.32),
                                         ("speed", 20.0, 1.32), ("speed", 40.0, 1.15))])
    got = answer.bounds_at_capacity(rows).set_index("bound")
    assert got.loc["ttft", "capped"] == [] and got.loc["ttft", "n"] == 3
    assert (got.loc["ttft", "loosest"], got.loc["ttft", "loosest_rate"]) == (5.0, 1.23)
    assert got.loc["speed", "capped"] == [10.0, 20.0]
    assert (got.loc["speed", "loosest"], got.loc["speed", "loosest_rate"]) == (10.0, 1.32)


def test_slo_runs_hold_forty_batches_within_their_bounds():
    # 40 × 53 = 2,120; 40 × 10 = 400 → the floor 1,000; 40 × 142 = 5,680 → the cap 4,000
    assert [answer.slo_requests(b) for b in (53, 10, 142)] == [2120, 1000, 4000]
    # Llama-3.1-8B on one H100 holds 53 requests of 8,192 tokens (chapter 4)
    assert answer.slo_requests_for(kvlib.Deployment("llama-3.1-8b", "h100-sxm"), 8192) == 2120


def test_targets_at_capacity_counts_targets_met_with_the_queue_full():
    """Three targets of one case: two hold up to the saturated 1.16 requests/s (the search
    returned it), one binds below it at 0.8; rows of two cases are refused."""
    case = dict.fromkeys(answer.SLO_CASE_KEYS, "x")
    rows = pd.DataFrame([{**case, "bound": b, "target": t, "rate_rps": r, "saturated_rps": 1.16}
                         for b, t, r in (("ttft", 2.0, 1.16), ("ttft", 0.5, 0.8),
                                         ("speed", 20.0, 1.16))])
    assert answer.targets_at_capacity(rows) == (2, 3, 1.16)
    other = rows.assign(gpu="y")
    with pytest.raises(ValueError, match="one case's rows, got 2 cases"):
        answer.targets_at_capacity(pd.concat([rows, other]))
    with pytest.raises(ValueError, match="got 0 cases"):
        answer.targets_at_capacity(rows.iloc[:0])


def test_price_text_names_how_many_offers_it_is_the_median_of():
    offer = answer.market_prices().set_index(["gpu", "kind"]).loc[("h100-sxm", "on-demand")]
    assert answer.price_text("h100-sxm") == (f"${offer['dollars_per_gpu_hour']:.2f} "
                                             f"({answer.offers_text(int(offer['n']))})")
    with pytest.raises(KeyError, match="no spot offer for nope"):
        answer.price_text("nope", "spot")
