"""kvlib.answer (the landing page's grid) and its chart, charts.answer_explorer."""
from __future__ import annotations

import math
import re

import pytest

from kvlib import answer, charts
from kvlib.capacity import kv_pool
from kvlib.cost import cost_per_million_tokens
from kvlib.roofline import CALIBRATED, decode_step


def test_published_weight_format():
    assert answer.published_weight_format("llama-3.1-8b") == "bf16"  # no quantization_config
    assert answer.published_weight_format("deepseek-v3") == "fp8"
    assert answer.published_weight_format("gpt-oss-120b") == {"experts": "mxfp4"}
    assert answer.format_label({"experts": "mxfp4"}) == "experts mxfp4, rest bf16"
    with pytest.raises(ValueError, match="gptq"):  # Mistral-7B-v0.1's stored config is GPTQ
        answer.published_weight_format("mistral-7b-v0.1")


def test_complete_gpus_have_bandwidth_and_flops():
    gpus = answer.complete_gpus()
    assert "h100-sxm" in gpus and "mi300x" in gpus
    assert "a10g" not in gpus  # no sourced bandwidth or FLOP/s
    assert "rtx-3090" not in gpus  # no sourced tensor FLOP/s


def test_llama_8b_on_one_h100_by_hand():
    p = answer.serving_point("llama-3.1-8b", "h100-sxm", 8192)
    # Pool (kvlib fit, tests/test_cli.py): 26,320 blocks of 16 tokens; a request of 8,192
    # tokens needs 512 blocks → 26,320 / 512 = 51.40625 requests; batch 51.
    assert (p.n_gpus, p.max_concurrency, p.batch) == (1, 51.40625, 51)
    # Decode at batch 51, every request at 8,192 tokens, memory-bound: weights without the
    # embedding table (8,030,261,248 − 525,336,576 params) × 2 bytes = 15,009,849,344 bytes,
    # KV 51 × 8,192 × 131,072 = 54,760,833,024 bytes; ÷ (3.35 TB/s × 0.70) → 51 tokens.
    read = 15_009_849_344 + 51 * 8192 * 131_072
    step_s = read / (3.35e12 * CALIBRATED.bandwidth)
    assert p.bound == "memory"
    assert math.isclose(p.step_time_s, step_s, rel_tol=1e-12)
    assert math.isclose(p.tokens_per_s, 51 / step_s, rel_tol=1e-12)  # ≈ 1,714 tokens/s
    assert round(p.tokens_per_s) == 1714
    # $/1M at $2.90 per GPU-hour: 2.90 / (1,714.1 × 3,600) × 10⁶ ≈ $0.47
    assert math.isclose(p.dollars_per_million(2.90), 2.90 / (51 / step_s * 3600) * 1e6)
    assert round(p.dollars_per_million(2.90), 2) == 0.47


def test_smallest_degree_that_holds_one_request():
    # 70B in bf16 is ~131 GiB of weights: half of it (65.7 GiB) plus the start-up overheads
    # overflows an H100's 71.3 GiB budget, a quarter does not.
    p = answer.serving_point("llama-3.1-70b", "h100-sxm", 8192)
    assert p.n_gpus == 4
    step = decode_step("llama-3.1-70b", "h100-sxm", batch=p.batch, context_tokens=8192, n_gpus=4)
    assert p.tokens_per_s == step.tokens_per_s
    assert math.isclose(p.dollars_per_million(3.0), cost_per_million_tokens(12.0, p.tokens_per_s))


def test_gpt_oss_120b_needs_two_h100s_as_vllm_says():
    # One H100 at utilization 0.9: vLLM logs "Available KV cache memory: -2.14 GiB" (vllm#23278)
    # and fails to start even at 0.95 (vllm#27508). With the weights as vLLM loads them (the
    # published checkpoint + Marlin's MXFP4 padding, 65.90 GiB) the pool is negative on one GPU.
    one = kv_pool("gpt-oss-120b", "h100-sxm", weight_dtype={"experts": "mxfp4"})
    assert one.available_kv_bytes < 0 and one.tokens == 0
    assert "Marlin" in one.weights_basis
    p = answer.serving_point("gpt-oss-120b", "h100-sxm", 8192)
    assert p.n_gpus == 2


def test_no_fit_and_unsplittable_degrees():
    big = answer.serving_point("llama-3.1-405b", "h100-sxm", 8192)  # 810 GB of bf16 weights
    assert not big.fits and big.n_gpus == 0 and big.tokens_per_s == 0
    with pytest.raises(ValueError, match="does not fit"):
        big.dollars_per_million(2.0)
    # 8 KV heads cannot be split over 3 GPUs: that degree is skipped, not an error
    assert answer.serving_point("llama-3.1-8b", "h100-sxm", 8192, tp_degrees=(3,)).n_gpus == 0
    assert answer.serving_point("llama-3.1-8b", "h100-sxm", 8192, tp_degrees=(3, 1)).n_gpus == 1


@pytest.mark.parametrize("kwargs,needle", [
    (dict(context_tokens=0), "context_tokens"),
    (dict(context_tokens=8192, tp_degrees=()), "tp_degrees"),
    (dict(context_tokens=8192, tp_degrees=(0,)), "tp_degrees"),
])
def test_bad_input(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        answer.serving_point("llama-3.1-8b", "h100-sxm", **kwargs)


def test_unknown_names():
    with pytest.raises(KeyError, match="unknown GPU"):
        answer.serving_point("llama-3.1-8b", "h100", 8192)
    with pytest.raises(KeyError, match="unknown model"):
        answer.serving_point("llama-9", "h100-sxm", 8192)


def test_grid_shape_prices_and_monotone_context():
    grid = answer.answer_grid(["llama-3.1-8b", "llama-3.1-405b"], ["h100-sxm", "h100-pcie"],
                              [2048, 8192, 32768])
    assert len(grid) == 2 * 2 * 3
    assert set(grid.loc[grid["model"] == "llama-3.1-405b", "fits"]) == {False}
    h100 = grid[grid["gpu"] == "h100-sxm"].iloc[0]
    assert (h100["price_low"], h100["price_high"]) == (1.49, 12.29)  # Vast.ai, AWS list price
    assert grid.loc[grid["gpu"] == "h100-pcie", "price_median"].isna().all()  # no offer listed
    small = grid[(grid["model"] == "llama-3.1-8b") & (grid["gpu"] == "h100-sxm")]
    assert small["max_concurrency"].is_monotonic_decreasing
    assert small["tokens_per_s"].is_monotonic_decreasing
    # full attention: 4× the context, 1/4 the requests (same pool, whole blocks)
    assert small["max_concurrency"].tolist()[0] == 4 * small["max_concurrency"].tolist()[1]
    with pytest.raises(ValueError, match="models"):
        answer.answer_grid([], ["h100-sxm"], [8192])


def _eval_vega(expr: str, datum: dict, **params: float) -> float:
    """Evaluate a Vega arithmetic expression (no function calls) in Python."""
    assert re.fullmatch(r"[\w\s.*/+()-]+", expr), expr
    return eval(expr.replace("datum.", "datum_"),  # noqa: S307 - arithmetic only, checked above
                {"__builtins__": {}}, {**{f"datum_{k}": v for k, v in datum.items()}, **params})


def test_vega_cost_expression_is_kvlibs_formula():
    p = answer.serving_point("llama-3.1-70b", "h100-sxm", 8192)
    in_browser = _eval_vega(charts.ANSWER_COST_EXPR,
                            {"n_gpus": p.n_gpus, "tokens_per_s": p.tokens_per_s}, price=2.5)
    assert math.isclose(in_browser, p.dollars_per_million(2.5), rel_tol=1e-12)


def test_answer_explorer_spec():
    grid = answer.answer_grid(["llama-3.1-8b", "llama-3.1-405b"], ["h100-sxm", "h200"],
                              [8192, 32768])
    spec = charts.answer_explorer(grid, "llama-3.1-8b", "h100-sxm", 8192, 2.9).to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert set(params) == {"model", "gpu", "context", "price"}
    assert params["model"]["bind"]["input"] == "select"
    assert params["model"]["bind"]["options"] == ["llama-3.1-8b", "llama-3.1-405b"]
    assert params["context"]["bind"]["options"] == [8192, 32768]
    assert params["price"]["bind"]["input"] == "range" and params["price"]["value"] == 2.9
    rows = max(spec["datasets"].values(), key=len)
    assert len(rows) == len(grid) and "model_name" not in rows[0]  # names live in lookups
    with pytest.raises(ValueError, match="default gpu"):
        charts.answer_explorer(grid, "llama-3.1-8b", "b200", 8192, 2.9)
