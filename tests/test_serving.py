"""kvlib.serve.serving: the one serving pipeline (model × GPU × TP × precisions × lengths × price)."""
from __future__ import annotations

import math

import pytest

import kvlib

from kvlib.fit import calibrate
from kvlib.speed import roofline
from kvlib.serve.serving import BatchTooLarge, DoesNotFit, batch_sweep, serving_point


def test_a_fixed_degree_and_batch():
    p = serving_point("llama-3.1-70b", "h100-sxm", input_tokens=2048, output_tokens=512,
                      n_gpus=2, weight_dtype="fp8", batch=8)
    assert (p.n_gpus, p.batch, p.weight_format) == (2, 8, "fp8")
    assert p.tokens_per_s == pytest.approx(8 / p.tpot_s)
    assert p.per_user_tokens_per_s == pytest.approx(1 / p.tpot_s)
    assert p.ttft_s > 0 and p.context_tokens == 2560
    # the band of measurements like the case, not of every model at TP 2 and batch 2–8
    assert p.band == calibrate.case_band("llama-3.1-70b", "h100-sxm", "vllm", 2, 8)
    assert p.band.scope == "held-out points of NVIDIA GPUs, vLLM, dense GQA, TP 2, batch 2–8"
    assert p.band.words.startswith("median miss of 12 measurements like this: ")


def test_the_band_says_when_no_measurement_is_like_the_case():
    # DeepSeek-V3 on 8 × MI300X under vLLM at 16 requests: the data hold no vLLM-on-ROCm MLA-MoE
    # run, so the band is the leave-one-source-out error of AMD MLA-MoE points (median 22%),
    # not the TP 8 × batch 9–32 band of every model (median 9.3%)
    p = serving_point("deepseek-v3", "mi300x", input_tokens=2048, output_tokens=512, n_gpus=8,
                      weight_dtype="fp8", batch=16)
    assert p.band.median_abs_error == 0.2194 and p.band.n == 65
    assert calibrate.error_band(8, 16).median_abs_error == 0.0925
    assert p.band.words == (f"{calibrate.NO_MEASUREMENTS}; leave-one-source-out median miss of "
                            "65 measurements of AMD GPUs, MLA-MoE: 22%")
    # Llama-3.1-70B on 2 × H100 at 64 requests: 12 held-out points like it, median 10.6%
    # (the TP 2 × batch 33–128 band of every model says 8.6%)
    p = serving_point("llama-3.1-70b", "h100-sxm", input_tokens=2048, output_tokens=512,
                      n_gpus=2, weight_dtype="fp8", batch=64)
    assert (p.band.median_abs_error, p.band.n, p.band.basis) == (0.1058, 12, "held-out")
    assert calibrate.error_band(2, 64).median_abs_error == 0.0858


def test_each_engine_serves_from_its_own_pool():
    # 100 + 100 tokens on one H100: vLLM's 16-token blocks hold ⌈200/16⌉ = 13 blocks (208
    # tokens) a request, SGLang's 1-token pages exactly 200
    vllm = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=100, output_tokens=100)
    sg = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=100, output_tokens=100,
                       engine="sglang")
    sg_pool = kvlib.kv_pool(kvlib.Deployment("llama-3.1-8b", "h100-sxm", engine="sglang",
                                             max_model_len=200))
    assert vllm.max_concurrency == 435_664 / 208 and vllm.batch == 1024  # max_num_seqs
    assert sg.max_concurrency == sg_pool.tokens / 200 and sg_pool.block_size == 1
    assert sg.batch == 2096 and sg.gpu_memory_utilization == 0.835  # SGLang's H100 default
    assert sg.band.engine == "sglang"
    # TensorRT-LLM: 32-token blocks, at most max_batch_size (max_num_seqs) requests
    trt = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024,
                        engine="tensorrt-llm")
    trt_pool = kvlib.kv_pool(kvlib.Deployment("llama-3.1-8b", "h100-sxm",
                                              engine="tensorrt-llm"))
    assert trt.max_concurrency == trt_pool.num_blocks / (8192 // 32) and trt.batch == 56
    assert serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024,
                         engine="tensorrt-llm", max_num_seqs=8).batch == 8
    # the same batch on two engines of one GPU vendor takes the same decode step: the step cost
    # and the request cost are one per GPU vendor (calibrate.CHOSEN_TERMS); SGLang runs the
    # arriving prompts as prefill batches of their own, which costs a second weight read
    a, b = (serving_point("llama-3.1-8b", "h100-sxm", input_tokens=1000, output_tokens=100,
                          batch=8, engine=e) for e in ("vllm", "sglang"))
    steps = {e: roofline.serving_steps("llama-3.1-8b", "h100-sxm", batch=8, input_tokens=1000,
                                       output_tokens=100, engine=e) for e in ("vllm", "sglang")}
    assert steps["vllm"].decode.time_s == steps["sglang"].decode.time_s
    assert a.tpot_s == pytest.approx(steps["vllm"].tpot_s)
    assert b.tpot_s == pytest.approx(steps["sglang"].tpot_s) and b.tpot_s > a.tpot_s
    big = serving_point("llama-3.1-405b", "h100-sxm", input_tokens=7168, output_tokens=1024,
                        engine="sglang")
    assert big.limit == "weights" and "SGLang keeps for weights and KV cache at " \
        "mem_fraction_static 0.818" in big.why_not()


@pytest.mark.parametrize("engine, weights", [("sglang", "fp8"), ("tensorrt-llm", "bf16")])
def test_an_engine_that_would_not_start_does_not_fit(engine, weights):
    # Llama-3.1-70B on one H100: SGLang's 66.15 GiB hold no 67.67 GiB of fp8 weights, the
    # 79.22 GiB device no 131.42 GiB of bf16 ones — the answer vLLM's refusal gives
    keywords = dict(engine=engine, weights=weights, input_tokens=1000, output_tokens=200)
    with pytest.raises(DoesNotFit, match="the weights alone"):
        serving_point("llama-3.1-70b", "h100-sxm", n_gpus=1, **keywords)
    point = serving_point("llama-3.1-70b", "h100-sxm", tp_degrees=(1,), **keywords)
    assert (point.fits, point.limit, point.n_gpus, point.batch) == (False, "weights", 0, 0)


def test_refusals_are_typed():
    with pytest.raises(DoesNotFit) as exc:
        serving_point("llama-3.1-70b", "h100-sxm", input_tokens=2048, output_tokens=512, n_gpus=1)
    assert (exc.value.model, exc.value.gpu, exc.value.context_tokens) == (
        "llama-3.1-70b", "h100-sxm", 2560)
    with pytest.raises(BatchTooLarge) as big:
        serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024, batch=500)
    assert big.value.batch == 500 and 53 < big.value.max_concurrency < 54
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
        band = calibrate.case_band("llama-3.1-8b", "h100-sxm", "vllm", 1, p["batch"])
        assert (p["band_low"], p["band_high"]) == (band.low, band.high)
        assert p["band_low"] <= p["band_high"]
