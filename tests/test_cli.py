"""The ``kvlib`` command line: answers, and one-line refusals with exit status 2.

Driven in-process (``kvlib.report.cli.main``) for speed; the few behaviours that need a real process
(the console script, ``python -m kvlib``, a reader closing the pipe) run as subprocesses.
"""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvlib.report import cli
from kvlib.report.cli import main

ROOT = Path(__file__).resolve().parent.parent
KVLIB = Path(sys.executable).parent / "kvlib"


class Run:
    def __init__(self, args: tuple[str, ...]) -> None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            self.returncode = main(list(args))
        self.stdout, self.stderr = out.getvalue(), err.getvalue()


def run(*args: str) -> Run:
    return Run(args)


def test_kv_table_and_json():
    out = run("kv", "llama-3.1-8b", "--tokens", "131072", "--dtype", "fp8")
    assert out.returncode == 0, out.stderr
    # 2 × 32 × 8 × 128 × 1 byte = 65,536 B = 64 KiB; × 131,072 tokens = 8 GiB
    assert "65,536 bytes = 64.00 KiB" in out.stdout
    assert "8.000 GiB" in out.stdout
    data = json.loads(run("kv", "llama-3.1-8b", "--tokens", "10", "--json").stdout)
    assert data["kv_bytes_per_token"] == 131_072 and data["kv_bytes"] == 1_310_720


def test_kv_of_a_huge_token_count_is_exact():
    tokens = 99999999999999999999999999999999  # 10³² − 1
    data = json.loads(run("kv", "llama-3.1-8b", "--tokens", str(tokens), "--json").stdout)
    # 131,072 bytes per token × (10³² − 1) tokens, in integers: no float anywhere on the path
    assert data["kv_bytes"] == 131_072 * tokens == 13_107_199_999_999_999_999_999_999_999_999_868_928
    text = run("kv", "llama-3.1-8b", "--tokens", str(tokens)).stdout
    assert "13,107,199,999,999,999,999,999,999,999,999,868,928 bytes" in text
    # ÷ 2³⁰ = 12,207,031,249,999,999,999,999,999,999.999876… GiB, rounded to 3 places
    assert "= 12,207,031,250,000,000,000,000,000,000.000 GiB" in text


def test_kv_reads_a_config_file(tmp_path):
    cfg = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    data = json.loads(run("kv", str(path), "--tokens", "1", "--json").stdout)
    assert data["kv_bytes_per_token"] == 2 * 2 * 4 * 16 * 2  # 2 × L × K × H × 2 bytes = 512


def test_recheck_and_models():
    out = run("recheck", "a12", "--json")
    assert json.loads(out.stdout)[0]["verdict"] == "unit slip"
    lines = run("models").stdout.splitlines()
    assert any(line.startswith("llama-3.1-8b ") for line in lines)
    # the columns line up whatever the longest name (llama-4-scout-17b-16e-instruct)
    assert len({line.index(" layers") for line in lines}) == 1


def test_fit_by_hand():
    from kvlib.engines.capacity import VLLM

    out = run("fit", "llama-3.1-8b", "h100-sxm", "--util", "0.9", "--context", "8192", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    # vLLM's arithmetic for Llama-3.1-8B on one H100 (chapter 4 walks it term by term):
    budget = int(85_061_827_297 * 0.9)  # CUDA total 79.22 GiB (vllm#10511) × utilization
    weights = 8_030_261_248 * 2  # parameters × 2 bytes (bf16)
    forward = int(VLLM.forward_factor * 8192 * (4096 + 2 * 14_336) * 2)  # 8,192 batched tokens
    sampler = (2 + 4 * 3) * 1024 * 128_256  # 0.33's warm-up pass: bf16 logits + 3 fp32 copies
    state = 4 * 1024 * (128_256 + 4_008)  # the V2 runner's penalty state: int32 counts and mask
    available = budget - weights - max(forward, sampler) - state - VLLM.non_torch_bytes
    block = 16 * 32 * 2 * 8 * 128 * 2  # 16 tokens × 32 layers × K and V × 8 heads × 128 × 2 B
    blocks = available // block  # 27,229 with the calibrated overheads
    assert data["available_kv_bytes"] == available
    assert data["kv_bytes_per_gpu"] == blocks * block == 27_229 * 2 * 1024**2
    assert data["kv_tokens"] == blocks * 16 == 435_664
    assert data["max_concurrency"] == blocks / (8192 // 16) == 27_229 / 512
    assert data["fits"] is True
    text = run("fit", "llama-3.1-8b", "h100-sxm").stdout  # defaults: --util 0.9 --context 8192
    assert "57,103,351,808 bytes = 53.18 GiB" in text and "435,664" in text
    # vLLM's fractional figure, and the requests that fit whole: 27,229 blocks ÷ 512 = 53.18
    assert "requests of 8,192 tokens  53.18 (53 whole requests)" in text


def test_fit_reports_speed_per_user_and_the_error_band():
    from kvlib.fit.calibrate import case_band
    from kvlib.serve.serving import serving_point

    data = json.loads(run("fit", "llama-3.1-8b", "h100-sxm", "--json").stdout)["speed"]
    # 8,192 tokens: 1,024 generated (the default) and 7,168 of prompt; the pool holds 53
    point = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024)
    assert (data["input_tokens"], data["output_tokens"], data["batch"]) == (7168, 1024, 53)
    assert data["tokens_per_s"] == pytest.approx(point.tokens_per_s)
    assert data["per_user_tokens_per_s"] == pytest.approx(1 / data["tpot_s"])
    # the band of measurements like the case: 27 held-out points of dense models on vLLM on one
    # NVIDIA GPU (the TP 1 × batch 33–128 band of every model was "TP 1, batch 33–128")
    band = case_band("llama-3.1-8b", "h100-sxm", "vllm", 1, 51)
    assert data["error_band"]["scope"] == band.scope == (
        "held-out points of NVIDIA GPUs, vLLM, dense GQA, TP 1")
    assert data["error_band"]["basis"] == band.words and data["error_band"]["points"] == 27
    assert data["tokens_per_s_range"] == pytest.approx(list(band.speed_range(point.tokens_per_s)))
    text = run("fit", "llama-3.1-8b", "h100-sxm").stdout
    assert "tok/s per user" in text
    assert "  median miss of 27 measurements like this: 11% (NVIDIA GPUs, vLLM, dense GQA, " \
        "TP 1); 80% within" in text


def test_cost_and_slo_answer_for_every_engine():
    from kvlib.serve.serving import serving_point

    sg = json.loads(run("cost", "llama-3.1-8b", "h100-sxm", "--price", "2.9", "--engine",
                        "sglang", "--json").stdout)
    point = serving_point("llama-3.1-8b", "h100-sxm", input_tokens=7168, output_tokens=1024,
                          engine="sglang", max_model_len=8192)
    # SGLang's pool (1-token pages): 419,358 tokens ÷ 8,192 = 51.19 requests → 51
    assert (sg["engine"], sg["batch"]) == ("sglang", 51) == ("sglang", point.batch)
    assert sg["tokens_per_s"] == pytest.approx(point.tokens_per_s, rel=1e-12)
    assert sg["launch_command"].startswith("python -m sglang.launch_server ")
    assert "SGLang" in sg["error_band"]["scope"]
    trt = run("cost", "llama-3.1-8b", "h100-sxm", "--price", "2.9", "--engine", "tensorrt-llm")
    assert trt.returncode == 0 and "56 requests of 7,168 + 1,024 tokens (TensorRT-LLM" in trt.stdout
    slo = run("slo", "llama-3.1-8b", "h100-sxm", "--engine", "sglang", "--tpot", "0.05",
              "--requests", "40", "--json")
    data = json.loads(slo.stdout)
    assert slo.returncode == 0 and data["engine"] == "sglang" and data["requests_per_s"] > 0


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


def test_cost_split_by_work_adds_up_to_the_cost():
    data = json.loads(run("cost", "llama-3.1-8b", "h100-sxm", "--price", "2.90", "--json").stdout)
    # a request's input at the input price and its output at the output price pay for the GPU
    # time it takes: 7,168 ÷ 1,024 = 7 input tokens per output token, 7 × $0.0197 + $0.4207
    assert 7 * data["dollars_per_million_input_tokens"] + data[
        "dollars_per_million_output_tokens"] == pytest.approx(data["dollars_per_million_tokens"])
    text = run("cost", "llama-3.1-8b", "h100-sxm", "--price", "2.90").stdout
    assert ("split by work  $0.020 per 1M input tokens + $0.421 per 1M output tokens; at 7 input "
            "tokens per output token (7,168 ÷ 1,024): 7 × $0.020 + $0.421 = $0.559, the cost "
            "above") in text and "cost           $0.559 per 1M output tokens" in text
    # at batch 1 no decode step carries a prompt: the cost line leaves the prompt's own steps
    # out, the input price charges them, so the two prices add up to more, and say why
    alone = run("cost", "llama-3.1-8b", "h100-sxm", "--price", "2.90", "--max-num-seqs", "1")
    assert "more than the cost above, which leaves out the steps that run each prompt alone" \
        in alone.stdout


def test_cost_speculative_says_what_its_baseline_is():
    out = run("cost", "llama-3.1-8b", "h100-sxm", "--price", "2.90", "--speculative",
              "eagle3:3:0.7", "--json")
    data = json.loads(out.stdout)
    spec = data["speculative"]
    # the serving point decodes 53 requests, prefill included (1,441 tok/s); the draft's pool,
    # 418,496 tokens = 26,156 blocks of 16, holds 26,156 ÷ 513 = 50.99 → 50 requests of 8,192
    # + 3 lookahead tokens (513 blocks), and both speeds of the speculative row are of decode
    # steps alone at that batch
    assert (data["batch"], spec["batch"], spec["pool_tokens"]) == (53, 50, 418_496)
    assert spec["base_tokens_per_s"] > data["tokens_per_s"]
    text = run("cost", "llama-3.1-8b", "h100-sxm", "--price", "2.90", "--speculative",
               "eagle3:3:0.7").stdout
    assert ("decode steps alone (the speed and cost above also count prefill), at batch 50 (the "
            "draft's weights, KV and lookahead slots leave room for 50 of the 53 requests "
            "above): 4,192 tok/s against 1,889 without speculation at the same batch") in text


def test_fit_and_cost_print_the_launch_command():
    # the command that starts vLLM with the pool `fit` computed: every assumed default spelled
    data = json.loads(run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--weight-dtype",
                          "fp8", "--kv-dtype", "fp8", "--json").stdout)
    assert data["launch_command"] == (
        "vllm serve RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8 --tensor-parallel-size 2 "
        "--max-model-len 8192 --gpu-memory-utilization 0.9 --kv-cache-dtype fp8 "
        "--max-num-seqs 1024 --max-num-batched-tokens 8192")
    text = run("fit", "llama-3.1-8b", "h100-sxm", "--max-num-seqs", "8").stdout
    assert ("launch                    vllm serve meta-llama/Llama-3.1-8B-Instruct "
            "--tensor-parallel-size 1 --max-model-len 8192") in text and "--max-num-seqs 8 " in text
    cost = json.loads(run("cost", "llama-3.1-8b", "h100-sxm", "--price", "2.9", "--util",
                          "0.85", "--json").stdout)
    assert "--gpu-memory-utilization 0.85" in cost["launch_command"]
    # none where nothing starts it: no fit, no recorded checkpoint, a config file
    assert json.loads(run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--json").stdout)[
        "launch_command"] is None
    none = json.loads(run("fit", "llama-3.1-8b", "h100-sxm", "--weight-dtype", "int4-g128",
                          "--json").stdout)
    assert none["launch_command"] is None and "no int4-g128 checkpoint" in none["launch_notes"][0]
    assert "launch  " in run("fit", "llama-3.1-8b", "h100-sxm", "--weight-dtype",
                             "int4-g128").stdout


def test_fit_sizes_the_pool_by_the_vllm_release_named():
    from kvlib.deployment import Deployment
    from kvlib.engines.pools import kv_pool

    # vLLM 0.19.0 on one A100 80GB: the release's own default utilization (0.9, before 0.21)
    # and its Triton sampling pass, the same pool as the library's for that deployment; at 256
    # rows the forward pass outweighs both its and 0.33's sampling passes, so the book's 0.33.0
    # holds less only by the V2 runner's penalty state (4 × 256 × 132,264 B = 0.13 GiB), and
    # 0.16.0 (the sorting term, 8.5 × 4 × 256 × 128,256 B = 1.04 GiB) less again
    out = run("fit", "llama-3.1-8b", "a100-80gb", "--engine-version", "0.19.0", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    pool = kv_pool(Deployment("llama-3.1-8b", "a100-80gb", engine_version="0.19.0",
                              max_model_len=8192))
    assert data["engine_version"] == "0.19.0" and data["gpu_memory_utilization"] == 0.9
    book = kv_pool(Deployment("llama-3.1-8b", "a100-80gb", max_model_len=8192))
    assert data["kv_tokens"] == pool.tokens
    assert json.loads(run("fit", "llama-3.1-8b", "a100-80gb", "--json").stdout)["kv_tokens"] == \
        book.tokens < pool.tokens
    assert pool.available_kv_bytes - book.available_kv_bytes == 4 * 256 * 132_264
    assert json.loads(run("fit", "llama-3.1-8b", "a100-80gb", "--engine-version", "0.16.0",
                          "--json").stdout)["kv_tokens"] < pool.tokens
    text = run("fit", "llama-3.1-8b", "a100-80gb", "--engine-version", "0.21.0").stdout
    assert "(vLLM 0.21.0, memory fraction 0.92)" in text  # 0.92 from 0.21 (vLLM PR #38284)
    assert "(vLLM 0.33.0, memory fraction 0.9)" in run("fit", "llama-3.1-8b", "a100-80gb").stdout


def test_fit_under_a_triton_sampler_release_uses_the_gpus_sourced_sm_count():
    from kvlib.deployment import Deployment
    from kvlib.engines.pools import kv_pool

    # vLLM 0.17+'s Triton sampler sizes its buffer by the GPU's SMs; every GPU in gpus.csv has
    # a sourced count now (L4: 58), so 0.19.0 on one L4 sizes a pool, the library's own (a GPU
    # without a count is refused: test_capacity.py), its Triton term at 256 rows with a buffer
    # of min(next_pow2(58), 58) = 58 rows: (2 × 256 + 4 × (3 × 256 + 58)) × 128,256 B
    out = run("fit", "llama-3.1-8b", "l4", "--engine-version", "0.19.0", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    pool = kv_pool(Deployment("llama-3.1-8b", "l4", engine_version="0.19.0", max_model_len=8192))
    assert data["engine_version"] == "0.19.0" and data["kv_tokens"] == pool.tokens
    assert pool.activation_sampler_bytes == (2 * 256 + 4 * (3 * 256 + 58)) * 128_256


def test_fit_says_why_sglang_and_tensorrt_llm_would_not_start():
    # Llama-3.1-70B bf16 on one H100: 131.42 GiB of weights, in each engine's own terms
    for engine, words in (("sglang", "SGLang would refuse to start"),
                          ("tensorrt-llm", "≥ device total 79.22 GiB per GPU")):
        data = json.loads(run("fit", "llama-3.1-70b", "h100-sxm", "--engine", engine,
                              "--json").stdout)
        assert data["fits"] is False and words in data["does_not_fit"], data


def test_fit_tensor_parallel_and_no_fit():
    data = json.loads(run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "4", "--json").stdout)
    per_token = 2 * 80 * (8 // 4) * 128 * 2  # 80 layers, 2 of the 8 KV heads per GPU: 81,920 B
    assert data["n_gpus"] == 4 and data["kv_bytes_per_gpu"] == data["kv_tokens"] * per_token
    assert data["max_concurrency"] == data["kv_tokens"] / 8192
    # 2 × H100 at 0.89: ~65.7 GiB of weights per GPU + overheads exceed the 70.51 GiB budget
    # (at 0.9 too: test_fit_that_does_not_fit_reports_no_negative_size)
    out = run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--util", "0.89")
    assert out.returncode == 0 and "does not fit" in out.stdout
    assert "non-torch 3.48 GiB ≥ 0.89 × 79.22 GiB = 70.51 GiB per GPU" in out.stdout
    assert json.loads(run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--util", "0.89",
                          "--json").stdout)["fits"] is False


def test_fit_that_does_not_fit_reports_no_negative_size():
    # 2 × H100 at 0.9, bf16 (test_capacity.py works each term): budget 76,555,644,567 B −
    # weights 70,555,025,408 − sampling pass 1,838,678,016 − penalty state 541,753,344 −
    # non-torch 3,736,621,548 = −116,433,749 B: no memory left, and that much short
    data = json.loads(run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--json").stdout)
    assert data["fits"] is False
    assert data["available_kv_bytes"] == 0 and data["kv_shortfall_bytes"] == 116_433_749
    fits = json.loads(run("fit", "llama-3.1-8b", "h100-sxm", "--json").stdout)
    assert fits["kv_shortfall_bytes"] == 0 and fits["available_kv_bytes"] > 0
    text = run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "2").stdout
    assert "requests of 8,192 tokens  0.00 (0 whole requests)" in text


def test_fit_refuses_a_context_past_the_models_maximum_unless_overridden():
    # Llama-3.1-8B's config: max_position_embeddings 131,072 (rope_type llama3: not rescaled)
    out = run("fit", "llama-3.1-8b", "h100-sxm", "--context", "10000000")
    assert out.returncode == 2
    assert "10,000,000 tokens exceed Llama-3.1-8B's maximum context of 131,072" in out.stderr
    assert run("fit", "llama-3.1-8b", "h100-sxm", "--context", "131072").returncode == 0
    data = json.loads(run("fit", "llama-3.1-8b", "h100-sxm", "--context", "10000000",
                          "--allow-long-context", "--json").stdout)
    # 435,664 pool tokens ÷ 10,000,000 tokens per request (625,000 blocks of 16)
    assert data["fits"] is False and data["max_concurrency"] == 27_229 / 625_000


def test_cost_by_hand():
    out = run("cost", "--price", "2.90", "--tps", "1000")
    assert out.returncode == 0, out.stderr
    # $2.90 per hour ÷ (1,000 tok/s × 3,600 s) × 10⁶ = $0.8056 per 1M tokens
    assert "$2.90 per hour" in out.stdout and "$0.81 per 1M tokens" in out.stdout
    data = json.loads(run("cost", "--price", "8", "--tps", "250", "--json").stdout)
    assert data["dollars_per_million_tokens"] == pytest.approx(8 / (250 * 3600) * 1e6)  # $8.89


def test_version():
    from importlib.metadata import version

    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"kvlib {version('kvlib')}"


@pytest.mark.parametrize("args,needle", [
    (("fit", "llama-3.1-8b", "h100"), "unknown GPU 'h100'; close matches"),
    (("fit", "llama-3.1-8b"), "required: gpu"),
    # each flag's value is checked as it is read, and the error names the flag typed
    (("fit", "llama-3.1-8b", "h100-sxm", "--util", "1.5"),
     "argument --util: must be a number in (0, 1], got 1.5"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--util", "abc"),
     "argument --util: expected a number, got 'abc'"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--util", "nan"),
     "argument --util: must be a number in (0, 1], got nan"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--context", "0"),
     "argument --context: must be ≥ 1, got 0"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--tp", "0"), "argument --tp: must be ≥ 1, got 0"),
    # 0 was taken for "not given" (one pipeline stage, the default output length): refused
    (("fit", "llama-3.1-8b", "h100-sxm", "--pp", "0"), "argument --pp: must be ≥ 1, got 0"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--dp", "2", "--output-tokens", "0"),
     "argument --output-tokens: must be ≥ 1, got 0"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--tp", "3"), "cannot be split across tp=3"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--kv-dtype", "bf8"), "unknown dtype 'bf8'"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--weight-dtype", "int3"), "unknown weight format"),
    (("cost", "--price", "0", "--tps", "1"), "argument --price: must be a number > 0, got 0"),
    (("cost", "--price", "2", "--tps", "-5"), "argument --tps: must be a number > 0, got -5"),
    (("cost", "--price", "nan", "--tps", "5"), "argument --price: must be a number > 0, got nan"),
    (("cost", "--tps", "5"), "required: --price"),
    (("cost", "--price", "2"), "either --tps or a model"),
    (("cost", "llama-3.1-8b", "--price", "2"), "required: gpu"),
    (("cost", "llama-3.1-70b", "h100-sxm", "--price", "2"), "does not fit"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--output-tokens", "9000"), "--output-tokens"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--engine-version", "latest"), "names no release"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--engine", "sglang", "--engine-version", "0.5.1"),
     "--engine-version applies to vLLM only"),
    (("cost", "--price", "2", "--tps", "5", "--engine-version", "0.19.0"), "--engine-version"),
    # $10³⁰⁸/h ÷ (10⁻³⁰⁸ tok/s × 3,600) overflows a float: refused, never "Infinity" in JSON
    (("cost", "--price", "1e308", "--tps", "1e-308", "--json"), "too large to represent"),
    (("cost", "--price", "1e-308", "--tps", "1e308"), "too small to represent"),
    # speculative decoding is modelled for one tensor-parallel group: refused beyond it, not
    # dropped from the answer and the launch command
    (("cost", "deepseek-v3", "h200", "--tp", "8", "--ep", "8", "--weight-dtype", "fp8",
      "--price", "3.5", "--speculative", "mtp:1:0.85"),
     "speculative decoding is modelled for one tensor-parallel group (no --pp, --dp or --ep)"),
    (("cost", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--pp", "2", "--price", "3",
      "--speculative", "eagle3:3:0.7"), "speculative decoding is modelled for one tensor-parallel"),
    (("cost", "llama-3.1-8b", "h100-sxm", "--dp", "2", "--price", "3", "--speculative",
      "ngram:3:0.5"), "speculative decoding is modelled for one tensor-parallel group"),
    (("cost", "llama-3.1-8b", "h100-sxm", "--dp", "2", "--price", "3", "--draft-model", "a/b"),
     "--draft-model applies only with --speculative"),
    # an EAGLE head's checkpoint: n-gram and MTP drafts have none
    (("cost", "llama-3.1-8b", "h100-sxm", "--price", "3", "--speculative", "ngram:3:0.5",
      "--draft-model", "a/b"), "--draft-model applies to --speculative eagle or eagle3 (an EAGLE "
                               "head's checkpoint), not ngram"),
    (("cost", "deepseek-v3", "h200", "--tp", "8", "--weight-dtype", "fp8", "--price", "3",
      "--speculative", "mtp:1:0.85", "--draft-model", "a/b"), "not mtp"),
    # SGLang's data-parallel flags: refused up front, not with vLLM's ep = tp × dp advice
    (("fit", "deepseek-v3", "h200", "--tp", "8", "--dp", "8", "--ep", "8", "--engine", "sglang"),
     "--dp 8, --ep 8: kvlib models the SGLang pool as one tensor-parallel group only"),
    # a token budget below the running cap: vLLM does not start, so nothing is priced
    (("cost", "llama-3.1-8b", "h100-sxm", "--price", "2", "--max-num-batched-tokens", "16"),
     "--max-num-batched-tokens 16 is below --max-num-seqs 1,024: vLLM refuses to start"),
])
def test_fit_and_cost_bad_input_exits_2_with_one_line(args, needle):
    test_bad_input_exits_2_with_one_line(args, needle)


@pytest.mark.parametrize("args,needle", [
    (("kv", "no-such-model"), "unknown model 'no-such-model'"),
    (("kv", "llama-3.1-8b", "--tokens", "-5"), "argument --tokens: must be ≥ 0, got -5"),
    (("kv", "llama-3.1-8b", "--dtype", "bf8"), "unknown dtype"),
    (("kv", "llama-3.1-8b", "--tokens", "x"),
     "argument --tokens: expected a whole number, got 'x'"),
    (("kv", "llama-3.1-8b", "--tp", "0"), "argument --tp: must be ≥ 1, got 0"),
    (("kv", "/nonexistent/config.json"), "no such config file"),
    (("kv", "a" * 300), "must be a plain name"),  # longer than a file name may be
    (("kv", "../../x"), "must be a plain name"),  # a slug is never a path
    (("kv", "line\nbreak"), "must be a plain name"),
    (("recheck", "zz99"), "unknown claim"),
    (("frobnicate",), "invalid choice"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    out = run(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr


_SLO = ("slo", "llama-3.1-8b", "h100-sxm", "--tpot", "0.05", "--requests", "40")


@pytest.mark.parametrize("args,needle", [
    # a percentile above 0: p0 is the fastest request, no target; p100 is the slowest
    ((*_SLO, "--percentile", "0"), "argument --percentile: must be a number in (0, 100], got 0"),
    ((*_SLO, "--percentile", "101"), "argument --percentile: must be a number in (0, 100]"),
    # optional, and an explicit 0 or less is refused (0 used to drop the line silently)
    ((*_SLO, "--price", "0"), "argument --price: must be a number > 0, got 0"),
    ((*_SLO, "--price", "-1"), "argument --price: must be a number > 0, got -1"),
    ((*_SLO, "--peak-rps", "0"), "argument --peak-rps: must be a number > 0, got 0"),
    ((*_SLO, "--peak-rps", "nan"), "argument --peak-rps: must be a number > 0, got nan"),
    (("slo", "llama-3.1-8b", "h100-sxm", "--tpot", "0"), "argument --tpot: must be a number > 0"),
    (("slo", "llama-3.1-8b", "h100-sxm", "--ttft", "-1"), "argument --ttft: must be a number > 0"),
    (("slo", "llama-3.1-8b", "h100-sxm"), "give a target: --ttft, --tpot or both"),
    ((*_SLO, "--seed", "-4"), "argument --seed: must be ≥ 0, got -4"),
    ((*_SLO, "--requests", "0"), "argument --requests: must be ≥ 1, got 0"),
    ((*_SLO, "--range-ratio", "1"), "argument --range-ratio: must be a number in [0, 1), got 1"),
    ((*_SLO, "--context", "0"), "argument --context: must be ≥ 1, got 0"),
    # 0 was replaced by min(1,024, context ÷ 2)
    ((*_SLO, "--output-tokens", "0"), "argument --output-tokens: must be ≥ 1, got 0"),
])
def test_slo_bad_input_exits_2_with_one_line(args, needle):
    test_bad_input_exits_2_with_one_line(args, needle)


def test_slo_answers_at_p100_and_prices_a_peak():
    out = run(*_SLO, "--percentile", "100", "--price", "2.9", "--peak-rps", "100")
    assert out.returncode == 0, out.stderr
    assert "p100 TPOT ≤ 0.05 s" in out.stdout
    assert "for 100 requests/s" in out.stdout and "cost  " in out.stdout


def test_counts_of_one_are_singular_and_fractions_say_what_fits_whole():
    # one simulated request: about one user in flight, and one replica for a tenth of its rate
    one = run("slo", "llama-3.1-8b", "h100-sxm", "--tpot", "0.05", "--requests", "1",
              "--peak-rps", "0.1").stdout
    assert " 1 user in flight" in one and "1 replica, 1 GPU" in one
    # n-gram drafts add no KV: the pool is the same
    ngram = run("cost", "llama-3.1-8b", "h100-sxm", "--price", "2.9", "--speculative",
                "ngram:3:0.5").stdout
    assert "+0 bytes per token per GPU; the pool is unchanged, 435,664 tokens" in ngram
    # DeepSeek-V3 fp8 on 8 × H200, one data-parallel rank: 643,664 tokens ÷ 8,192 = 78.57
    tp = run("fit", "deepseek-v3", "h200", "--tp", "8", "--ep", "8", "--weight-dtype", "fp8").stdout
    assert "requests in all           78.57 (78 whole requests; one data-parallel rank)" in tp
    # 8 ranks of 408,784 tokens: 49.90 requests each, 8 × 49 = 392 whole ones in all
    dp = run("fit", "deepseek-v3", "h200", "--tp", "1", "--dp", "8", "--ep", "8",
             "--weight-dtype", "fp8").stdout
    assert ("requests in all           399.20 (392 whole requests; 8 data-parallel ranks, each "
            "with its own pool and requests)") in dp
    single = run("fit", "llama-3.1-8b", "h100-sxm", "--dp", "2", "--max-num-seqs", "1").stdout
    assert "decode pass               1 request per rank: " in single


def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path):
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "latin1.json").write_bytes(b'{"name": "\xe9"}')
    for name, needle in (("dir.json", "no such config file"), ("bad.json", "is not valid JSON"),
                         ("latin1.json", "cannot read")):
        test_bad_input_exits_2_with_one_line(("kv", str(tmp_path / name)), needle)


def test_the_readme_describes_the_bench_pool():
    from kvlib.report.bench import BLOCK_SIZE, POOL_TOKENS

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # (tests/test_readme.py runs the README's commands) the bench's pool is a constant, 56 GiB ÷ 128 KiB = 458,752 tokens (28,672 blocks of 16),
    # not the pool vLLM sizes for that deployment today, which the README names beside it
    fit = json.loads(run("fit", "llama-3.1-8b", "h100-sxm", "--json").stdout)["kv_tokens"]
    sentence = " ".join(readme.split("## Performance", 1)[1].split(":\n\n", 1)[0].split())
    assert f"a fixed {POOL_TOKENS:,}-token pool in {BLOCK_SIZE}-token blocks" in sentence
    assert f"`kvlib fit llama-3.1-8b h100-sxm` gives {fit:,} tokens" in sentence


def test_help_has_examples():
    out = run("--help")
    assert out.returncode == 0 and "kvlib fit llama-3.1-8b h100-sxm" in out.stdout


def test_the_installed_command_and_python_dash_m():
    """The console script and ``python -m kvlib`` are the same program; a reader that closes
    the pipe early (``kvlib models | head -1``) ends it quietly with status 0."""
    script = subprocess.run([str(KVLIB), "--version"], capture_output=True, text=True)
    assert script.returncode == 0 and script.stdout.startswith("kvlib ")
    module = subprocess.run([sys.executable, "-m", "kvlib", "kv", "nope"], capture_output=True,
                            text=True)
    assert module.returncode == 2 and module.stderr.count("\n") == 1
    for reader, shown in (("head -1", 1), ("true", 0)):  # true exits before kvlib writes
        piped = subprocess.run(["bash", "-c", f"'{KVLIB}' models | {reader}; "
                                "echo \"status ${PIPESTATUS[0]}\""], capture_output=True, text=True)
        lines = piped.stdout.splitlines()
        assert len(lines) == shown + 1 and lines[-1] == "status 0", piped.stdout
        assert piped.stderr == "", piped.stderr


def test_slo_simulates_as_many_requests_as_the_landing_page():
    from kvlib.report import answer

    # Llama-3.1-70B FP8 on 2 × H100 holds 25 requests of 8,192 tokens: 40 × 25 = 1,000, the
    # floor of the landing page's rule; the help states the same rule
    out = run("slo", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--weight-dtype", "fp8",
              "--context", "8192", "--ttft", "2", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["requests_simulated"] == 1000
    assert answer.slo_requests(25) == 1000
    lo, hi = answer.SLO_REQUESTS
    help_text = " ".join(run("slo", "--help").stdout.split())
    assert f"{answer.SLO_BATCHES} × the batch the pool holds, within {lo:,}–{hi:,}" in help_text


def test_a_band_beside_its_figure_says_when_the_figure_lies_outside_it():
    # a band of −27% … −1% (time per token): nine in ten ran slower, the speed lies above it
    assert cli._band_side_words(-0.27, -0.01).startswith(" (optimistic: nine in ten "
                                                         "measurements like this ran slower")
    assert "ran faster" in cli._band_side_words(0.05, 0.2)
    assert cli._band_side_words(-0.4, 0.6) == ""


def test_kv_says_why_windowed_layers_hold_less_than_per_token_times_tokens():
    # gpt-oss-120b: 18 full layers × 2 × 8 KV heads × 64 × 2 B = 36,864 B a token, plus 18
    # sliding layers of 2,048 B a token that keep 128 tokens: 36,864 + 18 × 2,048 × 128 ÷
    # 131,072 = 36,900 B a token at 131,072 tokens, not the 73,728 of a short sequence
    out = run("kv", "gpt-oss-120b", "--tokens", "131072").stdout
    assert ("18 layers keep only their last 128 tokens, so 131,072 tokens hold 36,900 bytes a "
            "token, not 73,728") in " ".join(out.split())
    assert "windows" not in run("kv", "gpt-oss-120b", "--tokens", "100").stdout


def test_a_group_past_one_node_says_its_all_reduces_are_flattered():
    # 16 GPUs = two nodes of 8: a pipeline of two 8-GPU stages keeps the all-reduces in a node
    out = " ".join(run("fit", "llama-3.1-405b", "h100-sxm", "--tp", "16").stdout.split())
    assert "--tp 16 spans more than one 8-GPU node" in out
    assert "--tp 8 --pp 2 keeps them inside each node" in out
    assert cli._node_rows(8) == [] and "--pp" not in cli._node_rows(12)[0][1]


def test_recheck_writes_claimed_and_recomputed_numbers_alike():
    # both with thousands separators: "claimed 8,192 tokens, recomputed 2,048"
    assert "claimed 8,192 tokens, recomputed 2,048" in run("recheck", "e10").stdout


def test_a_long_slo_search_says_so_before_it_starts(monkeypatch, capsys):
    from kvlib.serve import load

    def stop(*args, **kwargs):
        raise ValueError("stopped before the search")

    monkeypatch.setattr(load, "max_rate_at_slo", stop)
    base = ["slo", "llama-3.1-8b", "h100-sxm", "--ttft", "2", "--requests"]
    assert cli.main([*base, "20000"]) == 2  # 5 × the landing page's 4,000: no word
    assert capsys.readouterr().err == "kvlib: error: stopped before the search\n"
    assert cli.main([*base, "20001"]) == 2
    first, second = capsys.readouterr().err.splitlines()
    assert first.startswith("kvlib: simulating 20,001 requests at each rate the search tries")
    assert second == "kvlib: error: stopped before the search"
