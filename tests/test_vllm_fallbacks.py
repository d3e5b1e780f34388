"""The features that send a vLLM deployment from the V2 model runner back to V1
(``data/vllm_runner_fallbacks.csv``, ``kvlib.deployment.vllm_fallbacks``).

The pinned vLLM 0.33's own ``VllmConfig.use_v2_model_runner`` runs on the CPU on a stand-in
config that carries only the attributes it reads (a missing one is an AttributeError): kvlib's
runner must be its runner for every speculative method, pipeline depth and GPU vendor kvlib
models. The older releases' functions (0.22–0.32) are checked against the rows read in their
wheels, by hand-written cases.
"""
from __future__ import annotations

import dataclasses
import os
import types

import pytest

from kvlib import deployment
from kvlib.deployment import Deployment, vllm_fallbacks, vllm_memory_rules
from kvlib.engines.capacity import kv_pool


def runner(version, slug, gpu="h100-sxm", **fields):
    return Deployment(slug, gpu, engine_version=version, **fields).vllm_rules().runner


def test_ngram_speculation_runs_on_v1_until_0_32():
    # _get_v2_model_runner_unsupported_features lists "ngram/ngram_gpu speculative decoding"
    # (0.22–0.29) and "speculative method 'ngram'" (0.30, 0.31); the 0.32 wheel no longer does
    versions = ("0.22.0", "0.24.0", "0.27.1", "0.29.0", "0.31.0", "0.32.0", "0.33.0")
    assert [runner(v, "qwen3-8b", speculative="ngram:3:0.4") for v in versions] == [
        "v1"] * 5 + ["v2"] * 2
    assert [runner(v, "qwen3-8b") for v in versions] == ["v2"] * 7
    # the V1 row of the release: the one every other model of 0.21–0.28 runs on, and from 0.29
    # the fallback-only row
    d = Deployment("qwen3-8b", "h100-sxm", engine_version="0.30.0", speculative="ngram:3:0.4")
    assert (d.vllm_rules().label, d.vllm_rules().default_for) == ("0.29–0.31, V1 runner",
                                                                  "fallback")
    assert [f.reason for f in vllm_fallbacks("0.30.0", "qwen3-8b",
                                             speculative_method="ngram")] == [
        "speculative method 'ngram'"]
    # MTP and EAGLE run on V2 wherever V2 takes the model
    for method in ("mtp", "eagle", "eagle3"):
        assert runner("0.27.1", "qwen3-8b", speculative=f"{method}:2:0.7") == "v2"
    # a model the release runs on V1 anyway keeps its V1 row
    assert vllm_memory_rules("0.25.0", "qwen3-30b-a3b", speculative_method="ngram") == (
        vllm_memory_rules("0.25.0", "qwen3-30b-a3b"))


def test_eagle3_with_pipeline_parallelism_runs_on_v1_until_0_30():
    versions = ("0.23.0", "0.25.0", "0.29.0", "0.30.0")
    assert [runner(v, "llama-3.1-70b", tp=2, pp=2, speculative="eagle3:3:0.7")
            for v in versions] == ["v1", "v1", "v1", "v2"]
    assert [runner(v, "llama-3.1-70b", tp=2, pp=1, speculative="eagle3:3:0.7")
            for v in versions] == ["v2"] * 4
    assert [runner(v, "llama-3.1-70b", tp=2, pp=2, speculative="eagle:3:0.7")
            for v in versions] == ["v2"] * 4


def test_deepseek_v3_2_on_rocm_runs_on_v1_from_0_29_to_0_31():
    # use_v2_model_runner: ROCM_DEFAULT_MRV1_ARCHITECTURES holds DeepseekV32ForCausalLM on ROCm
    versions = ("0.28.0", "0.29.0", "0.31.0", "0.32.0")
    amd = [runner(v, "deepseek-v3.2", "mi300x", tp=8, weights="fp8") for v in versions]
    nvidia = [runner(v, "deepseek-v3.2", "h200", tp=8, weights="fp8") for v in versions]
    assert amd == ["v1", "v1", "v1", "v2"]  # 0.28: a MoE outside the list, V1 by default
    assert nvidia == ["v1", "v2", "v2", "v2"]
    assert runner("0.30.0", "qwen3-8b", "mi300x") == "v2"


def test_a_fallback_changes_the_pool_to_the_v1_runners():
    # Qwen3-8B on an RTX 4090, vLLM 0.27.1: n-gram speculation puts it back on the V1 runner,
    # whose Triton sampling pass the 0.21.0 pool charges too (n-gram adds no draft): the bf16
    # logits, three fp32 tensors and 128 vocabulary rows of buffer (one per SM of the RTX 4090)
    v2 = kv_pool(Deployment("qwen3-8b", "rtx-4090", engine_version="0.27.1",
                            max_num_batched_tokens=2048))
    ngram = kv_pool(Deployment("qwen3-8b", "rtx-4090", engine_version="0.27.1",
                               max_num_batched_tokens=2048, speculative="ngram:3:0.4"))
    v1 = kv_pool(Deployment("qwen3-8b", "rtx-4090", engine_version="0.21.0",
                            max_num_batched_tokens=2048, speculative="ngram:3:0.4"))
    assert (v2.model_runner, ngram.model_runner) == ("v2", "v1")
    assert ngram.activation_sampler_bytes == v1.activation_sampler_bytes == (
        2 * 256 + 4 * (3 * 256 + 128)) * 151_936
    assert ngram.tokens == v1.tokens < v2.tokens


def test_every_fallback_row_has_a_v1_row_and_cites_its_release():
    for f in deployment.vllm_fallback_rows():
        since, until = deployment.vllm_release(f.since), deployment.vllm_release(f.until)
        assert since < until and f"/blob/v{f.since}/" in f.source
        for minor in range(since[1], until[1]):
            rows = {r.runner for r in deployment.vllm_rule_rows()
                    if (not r.since or (0, minor) >= deployment.vllm_release(r.since)[:2])
                    and (not r.until or (0, minor) < deployment.vllm_release(r.until)[:2])}
            assert rows == {"v1", "v2"}, (f.feature, minor)
    # no feature kvlib expresses makes the pinned release fall back
    assert not [f for f in deployment.vllm_fallback_rows()
                if deployment.vllm_release(f.until) > deployment.vllm_release("0.32.0")]


def test_a_fallback_without_a_v1_row_is_refused(monkeypatch):
    def clear():
        for f in vars(deployment).values():
            if hasattr(f, "cache_clear"):
                f.cache_clear()

    rows = tuple(r for r in deployment.vllm_rule_rows() if r.default_for != "fallback")
    clear()
    monkeypatch.setattr(deployment, "vllm_rule_rows", lambda: rows)
    with pytest.raises(ValueError, match=r"^vLLM 0\.30\.0 runs n-gram speculation on its V1 "
                                         r"runner, which data/vllm_memory_rules\.csv has no row"):
        vllm_memory_rules("0.30.0", "qwen3-8b", speculative_method="ngram")
    assert vllm_memory_rules("0.30.0", "qwen3-8b").runner == "v2"
    monkeypatch.undo()
    clear()


@pytest.fixture(scope="module")
def vllm_runner_choice():
    """(pipeline stages, speculative method or None) → the runner vLLM 0.33's own
    ``VllmConfig.use_v2_model_runner`` picks, and the V1 runner's unsupported features: the
    unbound members run on a stand-in carrying vLLM's own ``ParallelConfig`` and
    ``SchedulerConfig`` and a speculative config of ``SpeculativeConfig``'s defaults, on a host
    with Triton (``HAS_TRITON``: the CPU test machine has none)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    pytest.importorskip("vllm")
    from vllm.config import ParallelConfig, SchedulerConfig
    from vllm.config.speculative import SpeculativeConfig
    from vllm.config import vllm as vllm_module
    from vllm.config.vllm import VllmConfig

    members = ("use_v2_model_runner", "_get_v2_model_runner_unsupported_features",
               "_get_v1_model_runner_unsupported_features", "_get_dbo_unsupported_features",
               "_dflash_needs_multi_kv_group", "_is_dflash_candidate_draft")
    stand = type("StandIn", (), {name: vars(VllmConfig)[name] for name in members})
    defaults = {f.name: f.default for f in dataclasses.fields(SpeculativeConfig)
                if f.default is not dataclasses.MISSING}

    def choice(pp, method, architecture="Qwen3ForCausalLM", **parallel):
        config = stand()
        config.parallel_config = ParallelConfig(tensor_parallel_size=2,
                                                pipeline_parallel_size=pp, **parallel)
        config.scheduler_config = SchedulerConfig.default_factory()
        config.attention_config = types.SimpleNamespace(hisparse_config=None)
        config.model_config = types.SimpleNamespace(is_diffusion=False,
                                                    architecture=architecture)
        config.speculative_config = None
        if method is not None:
            spec = types.SimpleNamespace(**{**defaults, "method": method,
                                            "num_speculative_tokens": 2})
            spec.is_xpress = types.MethodType(SpeculativeConfig.is_xpress, spec)
            config.speculative_config = spec
        v1_lacks = config._get_v1_model_runner_unsupported_features()
        with pytest.MonkeyPatch.context() as patch:  # a GPU host: vLLM's CUDA wheel has Triton
            patch.setattr(vllm_module, "HAS_TRITON", True)
            return ("v2" if config.use_v2_model_runner else "v1"), v1_lacks

    return choice


def test_kvlibs_runner_is_vllm_0_33s_own_choice(vllm_runner_choice):
    # the stand-in drives vLLM's checks: a feature 0.33 lists does send it to V1
    assert vllm_runner_choice(1, "suffix")[0] == "v1"
    assert vllm_runner_choice(2, None, distributed_executor_backend="external_launcher")[0] == (
        "v1")
    models = ("qwen3-8b", "qwen3-30b-a3b", "qwen3-next-80b-a3b", "deepseek-v3.2")
    for pp in (1, 2):
        for method in (None, *deployment.SPECULATIVE_METHODS):
            got, v1_lacks = vllm_runner_choice(pp, method)
            # and V1 could run every such deployment: nothing forces V2
            assert (got, v1_lacks) == ("v2", []), (pp, method)
            for slug in models:
                for vendor in ("NVIDIA", "AMD"):
                    assert vllm_memory_rules(deployment.VLLM_VERSION, slug, pp=pp,
                                             speculative_method=method,
                                             gpu_vendor=vendor).runner == got
