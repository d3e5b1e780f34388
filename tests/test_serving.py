"""kvlib.serve.serving: the one serving pipeline (model × GPU × TP × precisions × lengths × price)."""
from __future__ import annotations

import math

import pytest

import kvlib

from kvlib.fit import calibrate
from kvlib.serve.serving import BatchTooLarge, DoesNotFit, batch_sweep, serving_point


def test_a_fixed_degree_and_batch():
    p = serving_point("llama-3.1-70b", "h100-sxm", input_tokens=2048, output_tokens=512,
                      n_gpus=2, weight_dtype="fp8", batch=8)
    assert (p.n_gpus, p.batch, p.weight_format) == (2, 8, "fp8")
    assert p.tokens_per_s == pytest.approx(8 / p.tpot_s)
    assert p.per_user_tokens_per_s == pytest.approx(1 / p.tpot_s)
    assert p.ttft_s > 0 and p.context_tokens == 2560
    assert p.band == calibrate.error_band(2, 8)


def test_refusals_are_typed():
    with pytest.raises(DoesNotFit) as exc:
        serving_point("llama-3.1-70b", "h100-sxm", input_tokens=2048, output_tokens=512, n_gpus=1)
    assert (exc.value.model, exc.value.gpu, exc.value.context_tokens) == (
        "llama-3.1-70b", "h100-sxm", 2560)
    with pytest.raises(BatchTooLarge) as big:
        serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024, batch=500)
    assert big.value.batch == 500 and 51 < big.value.max_concurrency < 52
    with pytest.raises(ValueError, match="input_tokens"):
        serving_point("llama-3.1-8b", "h100-sxm", input_tokens=0, output_tokens=10)
    with pytest.raises(ValueError, match="batch"):
        serving_point("llama-3.1-8b", "h100-sxm", input_tokens=10, output_tokens=10, batch=0)


def test_input_and_output_prices_add_up_to_the_all_in_price():
    p = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024)
    per_input, per_output = p.dollars_per_million_split(2.90)
    # one request: 7,168 input tokens at the first price + 1,024 output tokens at the second
    # costs what 1,024 output tokens cost when all GPU time is charged to output
    request = 7168 * per_input + 1024 * per_output
    assert request == pytest.approx(1024 * p.dollars_per_million(2.90), rel=1e-12)
    assert 0 < per_input < per_output


def test_one_request_at_a_time_pays_for_its_prompt_as_input():
    p = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024, batch=1)
    per_input, per_output = p.dollars_per_million_split(2.90)
    # no other prompt shares a decode step: the output price is all of the decode time, and
    # the prompt's own steps (prompt_s) are charged to its 7,168 tokens: $2.90/h over them
    assert p.prefill_time_share == 0 and per_output == p.dollars_per_million(2.90)
    assert per_input == pytest.approx(2.90 / 3600 * p.prompt_s / 7168 * 1e6, rel=1e-12)
    assert p.prompt_s == pytest.approx(p.ttft_s - p.tpot_s / 2, rel=1e-12) and per_input > 0


def test_degrees_the_hardware_or_the_heads_refuse_are_skipped():
    assert serving_point("llama-3.1-8b", "h100-sxm", input_tokens=100, output_tokens=100,
                         tp_degrees=(3,)).n_gpus == 0  # 32 query heads, 8 KV heads: skipped
    # GH200 has no sourced GPU-to-GPU link: only one GPU is tried
    p = serving_point("llama-3.1-70b", "gh200", input_tokens=2048, output_tokens=512)
    assert not p.fits
    assert serving_point("llama-3.1-8b", "gh200", input_tokens=2048, output_tokens=512).n_gpus == 1


def test_weight_format_label():
    # one labeller for every weight format (kvlib.WeightFormat.label)
    assert kvlib.WeightFormat("fp8").label == "fp8"
    assert kvlib.weight_format({"experts": "mxfp4"}).label == "mxfp4 experts, rest bf16"
    assert math.isfinite(serving_point("gpt-oss-120b", "h200", input_tokens=1024,
                                       output_tokens=1024,
                                       weight_dtype={"experts": "mxfp4"}).tokens_per_s)


def test_batch_sweep_powers_of_two_up_to_the_ceiling_with_bands():
    """Llama-3.1-8B on one H100, 8,192-token requests: batches 1, 2, 4, … below the pool's
    ceiling, then the ceiling itself; each point is serving_point's, with the band at its batch."""
    points = batch_sweep("llama-3.1-8b", ["h100-sxm"], [8192], output_tokens=1024,
                                 gpu_memory_utilization=0.9)
    ceiling = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168,
                                    output_tokens=1024, n_gpus=1, gpu_memory_utilization=0.9)
    batches = [p["batch"] for p in points]
    assert batches == [2**i for i in range(11) if 2**i < ceiling.batch] + [ceiling.batch]
    last = points[-1]
    assert last["context"] == "8,192 tokens" and last["n_gpus"] == 1
    assert math.isclose(last["tokens_per_s"], ceiling.tokens_per_s)
    for p in points:
        band = calibrate.error_band(1, p["batch"])
        assert (p["band_low"], p["band_high"]) == (band.low, band.high)
        assert p["band_low"] <= p["band_high"]
