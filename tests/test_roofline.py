"""Decode and prefill steps on the roofline: known answers, MoE expert touching, calibration."""
from __future__ import annotations

import pytest

import kvlib
from kvlib import roofline
from kvlib.hardware import GPU
from kvlib.roofline import (CALIBRATED, DATASHEET, Efficiency, critical_batch, decode_step,
                            expected_experts, prefill_step)
from kvlib.units import GIB


def test_critical_batch_from_datasheet_figures():
    # H100 SXM: 989.5e12 FLOP/s ÷ 3.35e12 B/s × 2 B ÷ 2 = 295.37 tokens
    assert critical_batch("h100-sxm", "bf16") == pytest.approx(295.373, abs=1e-3)
    # fp8 weights: twice the FLOP/s, half the bytes → the same batch
    assert critical_batch("h100-sxm", "fp8") == pytest.approx(295.373, abs=1e-3)
    # weight-only int4 computes in bf16: a quarter
    assert critical_batch("h100-sxm", "int4") == pytest.approx(295.373 / 4, abs=1e-3)
    # H200: same FLOP/s, 4.8 TB/s → 206.1; A100: 312e12 / 2.039e12 = 153.0
    assert critical_batch("h200") == pytest.approx(206.146, abs=1e-3)
    assert critical_batch("a100-80gb") == pytest.approx(153.016, abs=1e-3)


def test_scaling_book_tpu_v5e_is_240():
    # the scaling book: 1.97e14 bf16 FLOP/s ÷ 8.2e11 B/s = 240
    tpu = GPU(slug="tpu-v5e", name="TPU v5e", memory_bytes_stated=16 * GIB,
              hbm_bytes_per_s=8.2e11, bf16_dense_flops=1.97e14)
    assert round(critical_batch(tpu)) == 240


def test_batch_one_decode_is_the_weight_read():
    # Llama-3.1-8B, batch 1, no context: every weight but the input embedding, once
    step = decode_step("llama-3.1-8b", "h100-sxm", batch=1, context_tokens=0, efficiency=DATASHEET)
    assert step.weight_bytes == 2 * (8_030_261_248 - 128_256 * 4096)
    assert step.kv_bytes == 0 and step.bound == "memory"
    assert step.time_s == pytest.approx(step.weight_bytes / 3.35e12)
    assert step.tokens_per_s == pytest.approx(1 / step.time_s)


def test_kv_reads_grow_with_batch_and_context():
    a = decode_step("llama-3.1-8b", "h100-sxm", batch=8, context_tokens=4096)
    b = decode_step("llama-3.1-8b", "h100-sxm", batch=16, context_tokens=4096)
    assert b.kv_bytes == 2 * a.kv_bytes == 2 * 8 * 4096 * 128 * 1024 * 2 // 2


def test_windows_cap_kv_reads():
    short = decode_step("mistral-7b-v0.1", "h100-sxm", batch=1, context_tokens=4095)
    long = decode_step("mistral-7b-v0.1", "h100-sxm", batch=1, context_tokens=100_000)
    assert short.kv_bytes == long.kv_bytes  # every layer keeps W − 1 = 4,095 tokens


def test_decode_turns_compute_bound_near_the_critical_batch():
    n = roofline.model_critical_batch("llama-3.1-8b", "h100-sxm", context_tokens=0)
    # weights of 2 bytes, embeddings excluded from the reads: close to B_crit = 295
    assert 270 < n < 330
    assert roofline.model_critical_batch("llama-3.1-8b", "h100-sxm", context_tokens=32_768) is None


def test_expected_experts():
    assert expected_experts(128, 8, 1) == pytest.approx(8)
    assert expected_experts(128, 8, 10_000) == pytest.approx(128)
    assert expected_experts(8, 2, 2) == pytest.approx(8 * (1 - (6 / 8) ** 2))
    with pytest.raises(ValueError, match="exceed"):
        expected_experts(8, 9, 1)


def test_moe_reads_more_experts_as_batch_grows():
    one = decode_step("qwen3-30b-a3b", "h100-sxm", batch=1, context_tokens=1024)
    many = decode_step("qwen3-30b-a3b", "h100-sxm", batch=256, context_tokens=1024)
    total = kvlib.weight_bytes(kvlib.params_for("qwen3-30b-a3b"), "bf16")
    assert one.weight_bytes < 0.2 * total < many.weight_bytes <= total


def test_prefill_is_compute_bound_and_writes_kv():
    p = prefill_step("llama-3.1-8b", "h100-sxm", batch=1, prompt_tokens=8192)
    assert p.bound == "compute"
    assert p.kv_bytes == 8192 * 128 * 1024
    assert p.flops > 2 * 7.5e9 * 8192


def test_tensor_parallel_adds_all_reduce_latency():
    s = decode_step("llama-3.1-70b", "h100-sxm", batch=1, context_tokens=1024, n_gpus=4)
    assert s.overhead_s == pytest.approx(2 * 80 * CALIBRATED.allreduce_s)
    d = decode_step("llama-3.1-70b", "h100-sxm", batch=1, context_tokens=1024, n_gpus=4,
                    efficiency=DATASHEET)
    assert d.overhead_s == 0 and d.time_s < s.time_s


def test_calibrated_factors_are_the_fit():
    fit = roofline.fit_efficiency()
    assert (fit.bandwidth, fit.compute) == (CALIBRATED.bandwidth, CALIBRATED.compute)
    assert fit.allreduce_s == pytest.approx(CALIBRATED.allreduce_s)


def test_calibration_errors():
    rc = roofline.roofline_calibration()
    fit = rc[rc["role"] == "fit"]
    assert fit["error"].abs().median() < 0.15
    assert fit["error"].abs().median() < fit["datasheet_error"].abs().median()
    assert rc[rc["role"] == "validate"]["error"].abs().max() < 0.25


def test_bad_inputs():
    with pytest.raises(ValueError, match="batch"):
        decode_step("llama-3.1-8b", "h100-sxm", batch=0, context_tokens=10)
    with pytest.raises(ValueError, match="context_tokens"):
        decode_step("llama-3.1-8b", "h100-sxm", batch=1, context_tokens=-1)
    with pytest.raises(ValueError, match="prompt_tokens"):
        prefill_step("llama-3.1-8b", "h100-sxm", batch=1, prompt_tokens=0)
    with pytest.raises(ValueError, match="bandwidth"):
        Efficiency("x", bandwidth=0)
    with pytest.raises(ValueError, match="no sourced"):
        decode_step("llama-3.1-8b", "a10g", batch=1, context_tokens=1)
    with pytest.raises(KeyError):
        critical_batch("h1000")
    with pytest.raises(TypeError):
        decode_step("llama-3.1-8b", "h100-sxm", batch=1, context_tokens=1, efficiency=0.5)


def test_numpy_integers_are_integers_and_numpy_floats_numbers():
    import numpy as np

    step = decode_step("llama-3.1-8b", "h100-sxm", batch=np.int64(8), context_tokens=np.int32(1024))
    assert step == decode_step("llama-3.1-8b", "h100-sxm", batch=8, context_tokens=1024)
    with pytest.raises(ValueError, match="batch must be an integer"):
        decode_step("llama-3.1-8b", "h100-sxm", batch=np.float64(8.0), context_tokens=1024)
    assert Efficiency("x", bandwidth=np.float32(0.5)).bandwidth == 0.5
    with pytest.raises(ValueError, match="Efficiency.allreduce_s must be finite"):
        Efficiency("x", allreduce_s=float("inf"))
