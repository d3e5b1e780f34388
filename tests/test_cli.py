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
    assert "llama-3.1-8b" in run("models").stdout


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
    assert "requests of 8,192 tokens  53.18" in text


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
    # (at 0.9 a sliver of 2,592 tokens is left: test_capacity.py)
    out = run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--util", "0.89")
    assert out.returncode == 0 and "does not fit" in out.stdout
    assert "non-torch 3.48 GiB ≥ 0.89 × 79.22 GiB = 70.51 GiB per GPU" in out.stdout
    assert json.loads(run("fit", "llama-3.1-70b", "h100-sxm", "--tp", "2", "--util", "0.89",
                          "--json").stdout)["fits"] is False


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
    (("fit", "llama-3.1-8b", "h100-sxm", "--util", "1.5"), "gpu_memory_utilization must be in (0, 1]"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--util", "abc"), "invalid float value"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--util", "nan"), "gpu_memory_utilization must be finite"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--context", "0"), "context_tokens must be >= 1"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--tp", "0"), "tp must be >= 1"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--tp", "3"), "cannot be split across tp=3"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--kv-dtype", "bf8"), "unknown dtype 'bf8'"),
    (("fit", "llama-3.1-8b", "h100-sxm", "--weight-dtype", "int3"), "unknown weight format"),
    (("cost", "--price", "0", "--tps", "1"), "dollars_per_hour must be positive"),
    (("cost", "--price", "2", "--tps", "-5"), "tokens_per_second must be positive"),
    (("cost", "--price", "nan", "--tps", "5"), "dollars_per_hour must be finite"),
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
])
def test_fit_and_cost_bad_input_exits_2_with_one_line(args, needle):
    test_bad_input_exits_2_with_one_line(args, needle)


@pytest.mark.parametrize("args,needle", [
    (("kv", "no-such-model"), "unknown model 'no-such-model'"),
    (("kv", "llama-3.1-8b", "--tokens", "-5"), "n_tokens"),
    (("kv", "llama-3.1-8b", "--dtype", "bf8"), "unknown dtype"),
    (("kv", "llama-3.1-8b", "--tokens", "x"), "invalid int value"),
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


def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path):
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "latin1.json").write_bytes(b'{"name": "\xe9"}')
    for name, needle in (("dir.json", "no such config file"), ("bad.json", "is not valid JSON"),
                         ("latin1.json", "cannot read")):
        test_bad_input_exits_2_with_one_line(("kv", str(tmp_path / name)), needle)


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
