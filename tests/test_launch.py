"""kvlib.engines.launch: the command that starts each engine as a deployment describes it.

Every vLLM command of a grid (registry models × their checkpoints × GPUs × tp × KV formats ×
limits) is parsed by vLLM's own ``vllm serve`` parser (``make_arg_parser``, then
``EngineArgs.from_cli_args``) and the engine arguments must equal the resolved deployment;
vLLM's ``CacheConfig`` and ``SchedulerConfig`` must accept them. SGLang (not installed: its
wheel and triton add 1.2 GB) and TensorRT-LLM (not on PyPI) are checked against the flags read
from their source, pinned below with the file and commit.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex

import pytest
import yaml

import kvlib
from kvlib import Deployment, launch_command
from kvlib.engines import launch
from kvlib.engines.capacity import derived_max_model_len
from kvlib.model.checkpoints import checkpoint_repository, weight_choices

GPUS = ("h100-sxm", "a100-80gb", "l40s")
TP = (1, 2, 8)
#: (max_model_len, max_num_seqs, max_num_batched_tokens, block_size, utilization); None: default.
LIMITS = ((None, None, None, None, None), (8192, 64, 2048, 32, 0.85), (4096, 8, 8192, 16, 0.95))
#: kvlib KV format → vLLM 0.33's --kv-cache-dtype for it (vllm/config/cache.py, CacheDType).
VLLM_KV = {"bf16": "auto", "fp16": "auto", "fp8": "fp8", "fp8 (vLLM, per-tensor scale)": "fp8",
           "nvfp4 (block of 16, fp8 scale)": "nvfp4"}


@pytest.fixture(scope="module")
def vllm_parse(monkeypatch_module):
    """``argv`` of a ``vllm serve`` command → vLLM's ``EngineArgs`` for it (and the parsed
    namespace). vLLM imports on the CPU with these two variables (set for the session: vLLM
    reads its environment lazily); with HF_HUB_OFFLINE=1, ``EngineArgs`` swaps a repository
    id for its local snapshot (``get_model_path``), which this machine has none of: kept as
    the id."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pytest.importorskip("vllm")
    from vllm.engine import arg_utils
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    monkeypatch_module.setattr(arg_utils, "get_model_path", lambda model, revision=None: model)
    parser = make_arg_parser(FlexibleArgumentParser())

    def parse(argv: list[str]):
        assert argv[:2] == ["vllm", "serve"]
        ns = parser.parse_args(argv[2:])
        ns.model = ns.model_tag  # what `vllm serve` itself does (vllm/entrypoints/cli/serve.py)
        validate_parsed_serve_args(ns)
        return arg_utils.EngineArgs.from_cli_args(ns)

    return parse


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _grid() -> list[Deployment]:
    """Every registry model with a recorded checkpoint, each checkpoint, under each set of
    limits, at each tp that divides its heads — the GPU and the KV format (every one vLLM has a
    flag for) turning over from one command to the next, not every product."""
    out = []
    for slug in kvlib.model_slugs():
        try:
            choices = weight_choices(slug)
        except ValueError:  # a published format kvlib does not map (GPTQ): refused below
            continue
        model = kvlib.load_model(slug)
        sparse = any(isinstance(layer, kvlib.IndexerKeyLayer) for layer in model.layers)
        kvs = ["bf16", "fp8 FlashMLA (DeepSeek-V3.2)"] if sparse else list(VLLM_KV)
        for choice in choices:
            for length, seqs, budget, block, util in LIMITS:
                if length is not None and length > (derived_max_model_len(model) or length):
                    continue
                for tp in TP:
                    if (model.n_heads or 1) % tp:
                        continue
                    k = len(out)
                    out.append(Deployment(slug, GPUS[k % len(GPUS)], tp=tp,
                                          weights=choice.weight_format, kv=kvs[k % len(kvs)],
                                          max_model_len=length, max_num_seqs=seqs,
                                          max_num_batched_tokens=budget, block_size=block,
                                          gpu_memory_utilization=util))
    return out


GRID = _grid()


def test_the_grid_covers_every_checkpoint_kind_and_kv_format():
    assert len(GRID) > 300
    assert {d.gpu.slug for d in GRID} == set(GPUS) and {d.tp for d in GRID} == set(TP)
    assert {d.kv.name for d in GRID} == {*VLLM_KV, "fp8 FlashMLA (DeepSeek-V3.2)"}
    assert {d.weights.family for d in GRID} >= {"bf16", "fp8", "int4", "mxfp4 experts"}


def test_every_vllm_command_parses_back_to_its_deployment(vllm_parse):
    from vllm.config import CacheConfig, SchedulerConfig
    from vllm.config.cache import KV_CACHE_DTYPES

    checked, started = set(), 0
    for d in GRID:
        r = d.resolved()
        length = r.max_model_len or derived_max_model_len(r.model)  # None: vLLM derives it
        try:  # vLLM starts with memory for a KV cache that holds one request of max_model_len
            pool = kvlib.kv_pool(d)
            starts = length is None or pool.max_concurrency(length) >= 1
        except kvlib.NoKVMemory:
            starts = False
        if not starts:
            with pytest.raises(ValueError, match="no memory left for the KV cache|vLLM refuses"):
                launch_command(d)
            continue
        started += 1
        command = launch_command(d)
        args = vllm_parse(command.argv)
        sparse = any(isinstance(layer, kvlib.IndexerKeyLayer) for layer in r.model.layers)
        kv = ("fp8_ds_mla" if r.kv.name == "fp8 FlashMLA (DeepSeek-V3.2)"
              else "bfloat16" if sparse else VLLM_KV[r.kv.name])
        got = (args.model, args.tensor_parallel_size, args.max_model_len,
               args.gpu_memory_utilization, args.kv_cache_dtype, args.max_num_seqs,
               args.max_num_batched_tokens, args.block_size or CacheConfig.DEFAULT_BLOCK_SIZE,
               args.quantization)
        want = (checkpoint_repository(d.slug, d.weights), r.tp, length,
                r.gpu_memory_utilization, kv, r.max_num_seqs, r.max_num_batched_tokens,
                r.block_size, None)
        assert got == want, command.text
        assert shlex.split(command.text) == command.argv
        assert args.kv_cache_dtype in KV_CACHE_DTYPES
        key = (kv, r.block_size, r.gpu_memory_utilization, r.max_num_seqs,
               r.max_num_batched_tokens, length)
        if key not in checked:  # what vLLM's own configs accept
            checked.add(key)
            CacheConfig(block_size=r.block_size, cache_dtype=kv,
                        gpu_memory_utilization=r.gpu_memory_utilization)
            SchedulerConfig(max_num_seqs=r.max_num_seqs,
                            max_num_batched_tokens=r.max_num_batched_tokens,
                            max_model_len=length or r.max_num_batched_tokens,
                            enable_chunked_prefill=True, is_encoder_decoder=False)
    assert started > 200, started  # most of the grid starts; the rest is refused above


#: Deployments beyond one tensor-parallel group: (model, tp, pp, dp, ep).
PARALLEL = (("deepseek-v3", 8, 2, 1, 1), ("deepseek-v3", 1, 1, 8, 8), ("kimi-k2-instruct", 8, 2, 1, 1),
            ("qwen3-235b-a22b", 2, 1, 4, 8), ("qwen3-235b-a22b", 4, 1, 2, 1),
            ("llama-3.1-70b", 4, 2, 2, 1))


@pytest.mark.parametrize(("slug", "tp", "pp", "dp", "ep"), PARALLEL)
def test_parallel_commands_parse_back_to_their_layout(vllm_parse, slug, tp, pp, dp, ep):
    from vllm.config import ParallelConfig

    weights = "bf16" if slug.startswith(("qwen3", "llama")) else "fp8"
    d = Deployment(slug, "h200", tp=tp, pp=pp, dp=dp, ep=ep, weights=weights,
                   max_model_len=8192)
    args = vllm_parse(launch_command(d).argv)
    got = (args.tensor_parallel_size, args.pipeline_parallel_size, args.data_parallel_size,
           args.enable_expert_parallel)
    assert got == (tp, pp, dp, ep > 1)
    # vLLM's own ParallelConfig: world size = tp × pp per data-parallel rank, × dp in all
    pc = ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                        data_parallel_size=dp, enable_expert_parallel=ep > 1)
    assert (pc.world_size, pc.world_size_across_dp) == (d.n_gpus, d.gpus)


def test_long_context_sets_vllms_variable(vllm_parse):
    import vllm.envs

    # four GPUs: a pool of a million tokens (one H100 holds 435,664)
    d = Deployment("llama-3.1-8b", "h100-sxm", tp=4, max_model_len=1_000_000,
                   allow_long_max_model_len=True)
    command = launch_command(d)
    assert command.env == (("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1"),)
    assert command.text.startswith("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve ")
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in vllm.envs.environment_variables
    assert vllm_parse(command.argv).max_model_len == 1_000_000
    assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in note for note in command.notes)
    with pytest.raises(ValueError, match="maximum context"):
        launch_command(d.with_(allow_long_max_model_len=False))
    with pytest.raises(ValueError, match="vLLM refuses to start: its KV pool holds 435,664 "
                       "tokens, fewer than one request of --max-model-len 1,000,000"):
        launch_command(d.with_(tp=1))


def test_three_commands_by_hand():
    # The article's deployment: FP8 weights (Red Hat AI's checkpoint) and an fp8 cache on two
    # H100s; the book's defaults spelled out (0.9, 1,024 sequences on an H100, 8,192 tokens).
    d = Deployment("llama-3.1-70b", "h100-sxm", tp=2, weights="fp8", kv="fp8",
                   max_model_len=8192)
    assert launch_command(d).text == (
        "vllm serve RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8 --tensor-parallel-size 2 "
        "--max-model-len 8192 --gpu-memory-utilization 0.9 --kv-cache-dtype fp8 "
        "--max-num-seqs 1024 --max-num-batched-tokens 8192")
    # no max_model_len: the model's own (131,072); an A100 gets vLLM's 256 sequences
    assert launch_command(Deployment("llama-3.1-8b", "a100-80gb")).argv == [
        "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "1",
        "--max-model-len", "131072", "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "auto", "--max-num-seqs", "256", "--max-num-batched-tokens", "8192"]
    # DeepSeek-V3.2: vLLM's "auto" would be an fp8 cache, so bf16 is named
    v32 = launch_command(Deployment("deepseek-v3.2", "h200", tp=8, weights="fp8",
                                    max_model_len=32768, block_size=64))
    assert v32.argv[2] == "deepseek-ai/DeepSeek-V3.2"
    assert v32.argv[v32.argv.index("--kv-cache-dtype") + 1] == "bfloat16"
    assert v32.argv[-2:] == ["--block-size", "64"]
    # a 16-bit cache of an fp16 model is vLLM's auto: the note says so
    llama2 = launch_command(Deployment("llama-2-7b", "l40s"))
    assert any("fp16" in note for note in llama2.notes)


@pytest.mark.parametrize(("deployment", "needle"), [
    (dict(model="llama-3.1-8b", weights="int4-g128"), "no int4-g128 checkpoint is recorded"),
    (dict(model="deepseek-v3", weights="bf16"), "no bf16 checkpoint is recorded"),
    (dict(model="mistral-7b-v0.1"), "gptq"),
    (dict(model="llama-3.1-8b", kv="int8 (LMDeploy, per token-head)"), "no KV cache dtype"),
    (dict(model="llama-3.1-8b", kv="int4"), "no KV cache dtype"),
    (dict(model="llama-3.1-8b", kv="fp32"), "no KV cache dtype"),
    (dict(model="deepseek-v3.2", weights="fp8", kv="fp8"), "fp8_ds_mla"),
    (dict(model="deepseek-v3", weights="fp8", kv="fp8 FlashMLA (DeepSeek-V3.2)"), "sparse-MLA"),
    (dict(model="llama-3.1-8b", max_num_batched_tokens=512), "at least max_num_seqs"),
    (dict(model="llama-3.1-8b", engine="sglang", kv="fp8 FlashMLA (DeepSeek-V3.2)"),
     "sparse-MLA"),
    (dict(model="llama-3.1-8b", engine="tensorrt-llm", kv="nvfp4 (block of 16, fp8 scale)"),
     "no KV cache dtype"),
])
def test_refused_with_the_reason(deployment, needle):
    with pytest.raises(ValueError, match=needle):
        launch_command(Deployment(gpu="h100-sxm", **deployment))


def test_a_model_outside_the_registry_needs_its_repository():
    model = kvlib.load_model("llama-3.1-8b")
    d = Deployment(model, "h100-sxm", max_model_len=4096)
    with pytest.raises(ValueError, match="repo="):
        launch_command(d)
    assert launch_command(d, repo="me/my-llama").argv[2] == "me/my-llama"
    named = d.with_(weights=kvlib.weight_format("bf16", checkpoint="me/named"))
    assert launch_command(named).argv[2] == "me/named"  # the repository the format names
    with pytest.raises(TypeError):
        launch_command("llama-3.1-8b")  # type: ignore[arg-type]


def test_launch_command_is_public_and_frozen():
    command = kvlib.launch_command(Deployment("qwen3-8b", "h100-sxm"))
    assert isinstance(command, kvlib.LaunchCommand) and command.engine == "vllm"
    with pytest.raises(AttributeError):
        command.engine = "sglang"  # type: ignore[misc]
    command.argv.append("--x")  # a copy
    assert "--x" not in command.argv


# --- SGLang --------------------------------------------------------------------------------
#: ``python -m sglang.launch_server`` flags kvlib emits → (ServerArgs field, type), read from
#: SGLang 0.5.23 (PyPI wheel; python/sglang/srt/arg_groups/fields/model.py, schedule.py,
#: parallel.py; the same kv choices at sgl-project/sglang 0116c6066d6ead4b97c0468f65e04cad47ca021e
#: fields/model.py). Checked once with the wheel's own ServerArgs.add_cli_args too (not here:
#: sglang 0.5.23 + triton add ~1.2 GB and ~26 s to `make install`, and triton beside vLLM's
#: CPU import changes what vLLM loads).
SGLANG_FLAGS = {"--model-path": ("model_path", str), "--tp-size": ("tp_size", int),
                "--mem-fraction-static": ("mem_fraction_static", float),
                "--context-length": ("context_length", int),
                "--kv-cache-dtype": ("kv_cache_dtype", str),
                "--max-running-requests": ("max_running_requests", int),
                "--chunked-prefill-size": ("chunked_prefill_size", int),
                "--page-size": ("page_size", int)}
SGLANG_KV_CHOICES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4",
                     "fp4_mx_block16")


def _mirror(flags: dict[str, tuple[str, type]], **choices: tuple[str, ...]):
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for flag, (dest, kind) in flags.items():
        parser.add_argument(flag, dest=dest, type=kind, choices=choices.get(dest))
    return parser


def test_sglang_commands_use_sglangs_flags():
    parser = _mirror(SGLANG_FLAGS, kv_cache_dtype=SGLANG_KV_CHOICES)
    for d in GRID[::7]:
        if d.kv.name not in launch.KV_CACHE_DTYPES["sglang"] and d.kv.name not in ("bf16", "fp16"):
            continue
        d = d.with_(engine="sglang")
        try:
            kvlib.kv_pool(d)
        except ValueError as exc:  # a cache kvlib does not size for SGLang: no command either
            with pytest.raises(ValueError, match=re.escape(str(exc)[:40])):
                launch_command(d)
            continue
        command = launch_command(d)
        assert command.argv[:3] == ["python", "-m", "sglang.launch_server"]
        args = parser.parse_args(command.argv[3:])
        r = d.resolved()
        pool = kvlib.kv_pool(d)  # the command starts SGLang with the values its pool was sized with
        assert (args.model_path, args.tp_size, args.mem_fraction_static, args.context_length,
                args.max_running_requests, args.chunked_prefill_size, args.page_size) == (
            checkpoint_repository(d.slug, d.weights), r.tp, pool.mem_fraction_static,
            r.max_model_len or derived_max_model_len(r.model), pool.max_running_requests,
            pool.chunked_prefill_size, d.block_size), command.text
    fp8 = launch_command(Deployment("llama-3.1-8b", "h100-sxm", kv="fp8", engine="sglang"))
    assert "--kv-cache-dtype fp8_e4m3" in fp8.text  # SGLang has no plain "fp8"
    long = launch_command(Deployment("llama-3.1-8b", "h100-sxm", engine="sglang",
                                     max_model_len=1_000_000, allow_long_max_model_len=True))
    assert long.env == (("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1"),)


# --- TensorRT-LLM --------------------------------------------------------------------------
#: ``trtllm-serve`` options kvlib emits → (argument name, type): tensorrt_llm/commands/serve.py,
#: NVIDIA/TensorRT-LLM 00209af149e7774406881a37283dce303571eb11 (``--tp_size`` is an alias of
#: ``--tensor_parallel_size``, ``--kv_cache_free_gpu_memory_fraction`` of
#: ``--free_gpu_memory_fraction``, ``--config`` of ``--extra_llm_api_options``).
TRTLLM_FLAGS = {"--tp_size": ("tensor_parallel_size", int), "--max_seq_len": ("max_seq_len", int),
                "--max_num_tokens": ("max_num_tokens", int),
                "--max_batch_size": ("max_batch_size", int),
                "--kv_cache_free_gpu_memory_fraction": ("free_gpu_memory_fraction", float),
                "--config": ("extra_llm_api_options", str)}
#: ``KvCacheConfig`` fields kvlib writes (tensorrt_llm/llmapi/llm_args.py).
TRTLLM_KV_CACHE_CONFIG = {"free_gpu_memory_fraction", "dtype", "tokens_per_block"}


def test_tensorrt_llm_commands_use_trtllm_serves_options():
    parser = _mirror(TRTLLM_FLAGS)
    parser.add_argument("model")
    for d in (Deployment("llama-3.1-70b", "h100-sxm", tp=4, engine="tensorrt-llm",
                         max_model_len=32768, kv="fp8", block_size=64),
              Deployment("qwen3-8b", "l40s", engine="tensorrt-llm")):
        command = launch_command(d)
        r = d.resolved()
        pool = kvlib.kv_pool(d)  # the values TensorRT-LLM's pool was sized with
        assert command.argv[0] == "trtllm-serve"
        args = parser.parse_args(command.argv[1:])
        assert (args.model, args.tensor_parallel_size, args.max_seq_len, args.max_num_tokens,
                args.max_batch_size, args.free_gpu_memory_fraction) == (
            checkpoint_repository(d.slug, d.weights), r.tp,
            r.max_model_len or derived_max_model_len(r.model), pool.max_num_tokens,
            pool.max_batch_size, pool.free_gpu_memory_fraction)
        files = dict(command.files)
        if d.kv.name == "bf16" and d.block_size is None:
            assert args.extra_llm_api_options is None and not files
            continue
        config = yaml.safe_load(files[args.extra_llm_api_options])["kv_cache_config"]
        assert set(config) <= TRTLLM_KV_CACHE_CONFIG
        # the file replaces the flags' kv_cache_config: it repeats the memory fraction
        assert config == {"free_gpu_memory_fraction": 0.9, "dtype": "fp8", "tokens_per_block": 64}


def test_vllm_parses_the_speculative_config(vllm_parse):
    # vLLM 0.33 reads --speculative-config as a JSON dict; "mtp" is its name for every MTP kind
    # ("deepseek_mtp" is deprecated to it, config/speculative.py), ngram needs no draft model
    from typing import get_args

    from vllm.config.speculative import SpeculativeMethod

    d = Deployment("deepseek-v3", "h200", tp=8, weights="fp8", speculative="mtp:1:0.85")
    args = vllm_parse(launch_command(d).argv)
    assert args.speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
    ngram = Deployment("llama-3.1-8b", "h100-sxm", speculative="ngram:3:0.4")
    assert vllm_parse(launch_command(ngram).argv).speculative_config == {
        "method": "ngram", "num_speculative_tokens": 3}
    methods = set(get_args(SpeculativeMethod))
    for t in get_args(SpeculativeMethod):
        methods |= set(get_args(t))
    assert set(kvlib.deployment.SPECULATIVE_METHODS) <= methods
