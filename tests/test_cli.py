"""The ``kvlib`` command line, driven as a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlib", *args], capture_output=True, text=True)


def test_kv_table_and_json():
    out = run("kv", "llama-3.1-8b", "--tokens", "131072", "--dtype", "fp8")
    assert out.returncode == 0, out.stderr
    # 2 × 32 × 8 × 128 × 1 byte = 65,536 B = 64 KiB; × 131,072 tokens = 8 GiB
    assert "65,536 bytes = 64.00 KiB" in out.stdout
    assert "8.000 GiB" in out.stdout
    data = json.loads(run("kv", "llama-3.1-8b", "--tokens", "10", "--json").stdout)
    assert data["kv_bytes_per_token"] == 131_072 and data["kv_bytes"] == 1_310_720


def test_kv_reads_a_config_file(tmp_path):
    cfg = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    data = json.loads(run("kv", str(path), "--tokens", "1", "--json").stdout)
    assert data["kv_bytes_per_token"] == 2 * 2 * 4 * 16 * 2  # 2 × L × K × H × 2 bytes = 512


def test_recheck_and_models():
    out = run("recheck", "a12", "--json")
    assert json.loads(out.stdout)[0]["verdict"] == "unit slip"
    assert "llama-3.1-8b" in run("models").stdout


def test_fit_by_hand():
    from kvlib.capacity import VLLM

    out = run("fit", "llama-3.1-8b", "h100-sxm", "--util", "0.9", "--context", "8192", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    # vLLM's arithmetic for Llama-3.1-8B on one H100 (chapter 4 walks it term by term):
    budget = int(85_061_827_297 * 0.9)  # CUDA total 79.22 GiB (vllm#10511) × utilization
    weights = 8_030_261_248 * 2  # parameters × 2 bytes (bf16)
    forward = int(VLLM.forward_factor * 8192 * (4096 + 2 * 14_336) * 2)  # 8,192 batched tokens
    sampler = int(VLLM.sampler_copies * 1024 * 128_256 * 4)  # 1,024 rows of fp32 logits
    available = budget - weights - max(forward, sampler) - VLLM.non_torch_bytes
    block = 16 * 32 * 2 * 8 * 128 * 2  # 16 tokens × 32 layers × K and V × 8 heads × 128 × 2 B
    blocks = available // block  # 26,320 with the calibrated overheads
    assert data["available_kv_bytes"] == available
    assert data["kv_bytes_per_gpu"] == blocks * block == 26_320 * 2 * 1024**2
    assert data["kv_tokens"] == blocks * 16 == 421_120
    assert data["max_concurrency"] == blocks / (8192 // 16) == 51.40625
    assert data["fits"] is True
    text = run("fit", "llama-3.1-8b", "h100-sxm").stdout  # defaults: --util 0.9 --context 8192
    assert "55,197,040,640 bytes = 51.41 GiB" in text and "421,120" in text
    assert "requests of 8,192 tokens  51.41" in text


def test_fit_reports_speed_per_user_and_the_error_band():
    from kvlib.calibrate import error_band
    from kvlib.serving import serving_point

    data = json.loads(run("fit", "llama-3.1-8b", "h100-sxm", "--json").stdout)["speed"]
    # 8,192 tokens: 1,024 generated (the default) and 7,168 of prompt; the pool holds 51
    point = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024)
    assert (data["input_tokens"], data["output_tokens"], data["batch"]) == (7168, 1024, 51)
    assert data["tokens_per_s"] == pytest.approx(point.tokens_per_s)
    assert data["per_user_tokens_per_s"] == pytest.approx(1 / data["tpot_s"])
    band = error_band(1, 51)
    assert data["error_band"]["scope"] == band.scope
    assert data["tokens_per_s_range"] == pytest.approx(list(band.speed_range(point.tokens_per_s)))
    text = run("fit", "llama-3.1-8b", "h100-sxm").stdout
    assert "tok/s per user" in text and f"held-out {band.scope}" in text


def test_cost_of_a_model_on_a_gpu():
    data = json.loads(run("cost", "llama-3.1-70b", "h100-sxm", "--tp", "4", "--price", "3",
                          "--json").stdout)
    # $3 per GPU-hour × 4 GPUs ÷ (tokens/s × 3,600) × 10⁶
    assert data["dollars_per_hour"] == 12
    assert data["dollars_per_million_tokens"] == pytest.approx(12 / (data["tokens_per_s"] * 3600) * 1e6)
    lo, hi = data["dollars_per_million_tokens_range"]
    assert lo < data["dollars_per_million_tokens"] < hi
    assert data["dollars_per_million_input_tokens"] < data["dollars_per_million_output_tokens"]
    assert "per 1M output tokens (held-out range" in run(
        "cost", "llama-3.1-8b", "h100-sxm", "--price", "2.9").stdout


def test_fit_tensor_parallel_and_no_fit():
    data = json.loads(run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "4", "--json").stdout)
    per_token = 2 * 80 * (8 // 4) * 128 * 2  # 80 layers, 2 of the 8 KV heads per GPU: 81,920 B
    assert data["n_gpus"] == 4 and data["kv_bytes_per_gpu"] == data["kv_tokens"] * per_token
    assert data["max_concurrency"] == data["kv_tokens"] / 8192
    # 2 × H100: ~65.7 GiB of weights per GPU + overheads exceed the 71.3 GiB budget
    out = run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "2")
    assert out.returncode == 0 and "does not fit" in out.stdout and "-2.05 GiB" in out.stdout
    assert json.loads(run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--json").stdout)[
        "fits"] is False


def test_cost_by_hand():
    out = run("cost", "--price", "2.90", "--tps", "1000")
    assert out.returncode == 0, out.stderr
    # $2.90 per hour ÷ (1,000 tok/s × 3,600 s) × 10⁶ = $0.8056 per 1M tokens
    assert "$2.90 per hour" in out.stdout and "$0.81 per 1M tokens" in out.stdout
    data = json.loads(run("cost", "--price", "8", "--tps", "250", "--json").stdout)
    assert data["dollars_per_million_tokens"] == pytest.approx(8 / (250 * 3600) * 1e6)  # $8.89


@pytest.mark.parametrize("args,needle", [
    (("fit", "llama-3.1-8b", "h100"), "unknown GPU 'h100'; close matches"),
    (("fit", "llama-3.1-8b"), "required: gpu"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--util", "1.5"), "gpu_memory_utilization must be in (0, 1]"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--util", "abc"), "invalid float value"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--context", "0"), "context_tokens must be a positive"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--tp", "0"), "n_gpus must be a positive"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--tp", "3"), "cannot be split across tp=3"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--kv-dtype", "bf8"), "unknown dtype 'bf8'"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--weight-dtype", "int3"), "unknown weight format"),
    (("cost", "--price", "0", "--tps", "1"), "dollars_per_hour must be positive"),
    (("cost", "--price", "2", "--tps", "-5"), "tokens_per_second must be positive"),
    (("cost", "--price", "nan", "--tps", "5"), "dollars_per_hour must be positive and finite"),
    (("cost", "--tps", "5"), "required: --price"),
    (("cost", "--price", "2"), "either --tps or a model"),
    (("cost", "llama-3.1-8b", "--price", "2"), "required: gpu"),
    (("cost", "llama-3.1-70b", "h100-sxm", "--price", "2"), "does not fit"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--output-tokens", "9000"), "--output-tokens"),
])
def test_fit_and_cost_bad_input_exits_2_with_one_line(args, needle):
    test_bad_input_exits_2_with_one_line(args, needle)


@pytest.mark.parametrize("args,needle", [
    (("kv", "no-such-model"), "unknown model 'no-such-model'"),
    (("kv", "llama-3.1-8b", "--tokens", "-5"), "n_tokens"),
    (("kv", "llama-3.1-8b", "--dtype", "bf8"), "unknown dtype"),
    (("kv", "llama-3.1-8b", "--tokens", "x"), "invalid int value"),
    (("kv", "/nonexistent/config.json"), "no such config file"),
    (("recheck", "zz99"), "unknown claim"),
    (("frobnicate",), "invalid choice"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    out = run(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_help_has_examples():
    out = run("--help")
    assert out.returncode == 0 and "kvlib fit llama-3.1-8b h100-sxm" in out.stdout
