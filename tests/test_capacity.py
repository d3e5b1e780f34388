"""The KV pool, term by term: worked examples, vLLM's grouping rules, properties, calibration."""
from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvlib
from kvlib.engines import capacity
from kvlib import deployment
from kvlib.fit import validation
from kvlib.engines.capacity import NO_OVERHEADS, VLLM, NoKVMemory, cache_groups, kv_pool
from kvlib.core.units import GIB, KIB, MIB


def test_article_example_every_term_budget_minus_weights():
    # H100: CUDA total 79.22 GiB = 85,061,827,297 B (vLLM log); × 0.9 = 76,555,644,567
    # weights 8,030,261,248 × 2 = 16,060,522,496 → available 60,495,122,071
    # one block: 16 tokens × 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 2 MiB
    # 60,495,122,071 // 2,097,152 = 28,846 blocks × 16 = 461,536 tokens
    p = kv_pool("llama-3.1-8b", "h100-sxm", overheads=NO_OVERHEADS)
    assert p.total_memory_bytes == 85_061_827_297
    assert p.budget_bytes == 76_555_644_567
    assert p.weights_bytes_per_gpu == 16_060_522_496
    assert p.available_kv_bytes == 60_495_122_071
    assert p.page_bytes * p.layers_per_group == 2 * MIB
    assert p.num_blocks == 28_846 and p.tokens == 461_536
    assert p.block_rounding_bytes == 60_495_122_071 - 28_846 * 2 * MIB
    # 461,536 tokens ÷ 8,192 per request (512 blocks each)
    assert p.max_concurrency(8192) == 28_846 / 512


def test_article_example_with_vllm_overheads():
    # sampler peak (vLLM 0.33's warm-up pass, FlashInfer on an H100): the bf16 logits and three
    # fp32 tensors, (2 + 12) × 1,024 rows × 128,256 vocab = 1,838,678,016 B (sampled rows
    # default to 1,024 on an H100); forward: 1.675 × 8,192 × (4,096 + 2 × 14,336) × 2 B, smaller
    p = kv_pool("llama-3.1-8b", "h100-sxm")
    assert p.max_num_seqs == 1024
    assert p.activation_sampler_bytes == 14 * 1024 * 128_256 == 1_838_678_016
    assert p.activation_forward_bytes == int(1.675 * 8192 * 32_768 * 2)
    assert p.activation_peak_bytes == p.activation_sampler_bytes
    assert p.non_torch_bytes == round(0.94 * GIB)
    # the V2 runner's penalty state, counted since 0.27: int32 counts of every vocabulary token
    # per request slot and the prompt's bit mask, 4 × 1,024 × (128,256 + ⌈128,256 ÷ 32⌉ = 4,008)
    assert p.sampler_state_bytes == 4 * 1024 * (128_256 + 4_008) == 541_753_344
    assert p.available_kv_bytes == (p.budget_bytes - p.weights_bytes_per_gpu
                                    - p.activation_peak_bytes - p.sampler_state_bytes
                                    - p.non_torch_bytes)
    # 0.9 × 85,061,827,297 − 16,060,522,496 weights − 1,838,678,016 − 541,753,344 −
    # 1,009,317,315 = 57,105,373,396 B; ÷ 2 MiB blocks (16 tokens × 131,072 B) → 27,229 blocks
    assert p.available_kv_bytes == 57_105_373_396
    assert p.tokens == p.num_blocks * 16 == 435_664
    terms = p.terms()
    assert terms["bytes"].iloc[-1] == p.kv_bytes_per_gpu


def test_a100_gets_the_small_defaults():
    g = kvlib.load_gpu("a100-80gb")
    assert deployment.default_max_num_seqs(g) == 256
    assert deployment.default_max_num_batched_tokens(g) == 2048
    assert deployment.default_max_num_seqs(kvlib.load_gpu("h200")) == 1024


def test_tensor_parallel_shards_weights_and_kv_heads():
    one = kv_pool("llama-3.1-70b", "h100-sxm", n_gpus=4, overheads=NO_OVERHEADS)
    # per GPU per token: 320 KiB / 4; page = 16 × 80 KiB
    assert one.page_bytes * one.layers_per_group == 16 * 80 * KIB
    assert one.weights_bytes_per_gpu < 33.0 * GIB  # 131.4 GiB / 4


def test_bf16_70b_on_two_h100s_is_refused_at_0_9_and_leaves_a_sliver_at_0_92():
    # 70.6 B params × 2 B / 2 GPUs = 70,555,025,408 B (65.71 GiB) of weights; 0.9 × 79.22 GiB =
    # 76,555,644,567 B budget; − 1,838,678,016 (0.33's warm-up sampling pass, 1,024 rows) −
    # 541,753,344 (the V2 sampler's penalty state) − 3,736,621,548 non-torch (0.94 + 2.54 GiB,
    # NVLink TP) = −116,433,749 B: the engine refuses, in a one-line refusal naming every term
    with pytest.raises(NoKVMemory, match=r"weights 65\.71 GiB \+ activations 1\.71 GiB \+ sampler "
                       r"state 0\.50 GiB \+ non-torch 3\.48 GiB ≥ 0\.9 × 79\.22 GiB = 71\.30 "
                       r"GiB") as err:
        kv_pool("llama-3.1-70b", "h100-sxm", n_gpus=2)
    assert err.value.pool.available_kv_bytes == -116_433_749 and isinstance(err.value, ValueError)
    assert err.value.pool.weights_bytes_per_gpu == 70_555_025_408
    # at vLLM's own default of 0.92 the budget is 78,256,881,113 B: 1,584,802,797 B left, 604
    # blocks of 16 tokens × 80 layers × 8 KV heads ÷ 2 GPUs × 128 × 2 × 2 B: 9,664 tokens
    pool = kv_pool("llama-3.1-70b", "h100-sxm", n_gpus=2, gpu_memory_utilization=0.92)
    assert pool.available_kv_bytes == 1_584_802_797 and pool.tokens == 9_664
    assert kv_pool("llama-3.1-70b", "h100-sxm", n_gpus=2, weight_dtype="fp8").tokens > 150_000


def test_hybrid_attention_block_grows_to_hold_recurrent_state():
    # Qwen3.5-27B with an fp8 KV cache: GDN state per layer = 61,440 B (bf16 conv) +
    # 3,145,728 B (fp32 SSM) = 3,207,168 B; attention = 2 × 4 × 256 B per token per layer;
    # 16 × ceil(3,207,168 / (16 × 2,048)) = 1,568 — as vLLM logs ("Setting attention block
    # size to 1568 tokens", noonghunna/club-3090 issue #1047)
    groups = cache_groups(kvlib.load_model("qwen3.5-27b"), kv_dtype="fp8")
    full = next(g for g in groups if g.kind == "full")
    assert full.block_size == 1568
    assert len({g.page_bytes for g in groups}) == 1  # state page padded to the attention page


def test_sliding_and_full_groups_gpt_oss():
    # gpt-oss-20b: 12 sliding + 12 full layers, equal counts: 2 groups of 12 layers
    p = kv_pool("gpt-oss-20b", "h100-sxm", weight_dtype={"experts": "mxfp4"})
    assert (p.layers_per_group, p.n_groups) == (12, 2)
    assert p.tokens == p.num_blocks // 2 * 16
    sliding = next(g for g in p.groups if g.kind == "sliding")
    # window 128: min(127 + 8,192, L) tokens → ceil(/16) + 1 pages
    assert sliding.pages_per_request(131_072, 8192) == math.ceil(8319 / 16) + 1
    assert p.blocks_per_request(131_072) == 8192 + math.ceil(8319 / 16) + 1


def test_mla_cache_is_replicated_across_tp():
    one = kv_pool("deepseek-v3", "h200", n_gpus=8, weight_dtype="fp8", overheads=NO_OVERHEADS)
    assert one.page_bytes == 16 * 576 * 2  # one latent per layer on every GPU


@settings(max_examples=30, deadline=None)
@given(st.floats(0.5, 0.99), st.floats(0.5, 0.99))
def test_tokens_fall_as_utilization_falls(u1, u2):
    lo, hi = sorted((u1, u2))
    assert (kv_pool("llama-3.1-8b", "h100-sxm", gpu_memory_utilization=lo).tokens
            <= kv_pool("llama-3.1-8b", "h100-sxm", gpu_memory_utilization=hi).tokens)


@pytest.mark.parametrize("slug", ["llama-3.1-8b", "qwen3-8b", "mistral-7b-v0.1"])
def test_tokens_fall_as_weights_grow(slug):
    tokens = [kv_pool(slug, "h100-sxm", weight_dtype=w).tokens for w in ("int4", "fp8", "bf16")]
    assert tokens[0] > tokens[1] > tokens[2]


def test_tokens_fall_as_tp_shrinks():
    tokens = [kv_pool("llama-3.1-70b", "h100-sxm", n_gpus=n, weight_dtype="fp8").tokens
              for n in (8, 4, 2)]
    assert tokens[0] > tokens[1] > tokens[2]


def test_fp8_kv_doubles_attention_tokens():
    bf16 = kv_pool("llama-3.1-8b", "h100-sxm")
    fp8 = kv_pool("llama-3.1-8b", "h100-sxm", kv_dtype="fp8")
    assert fp8.num_blocks in (2 * bf16.num_blocks, 2 * bf16.num_blocks + 1)


def test_bad_inputs():
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        kv_pool("llama-3.1-8b", "h100-sxm", gpu_memory_utilization=0)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        kv_pool("llama-3.1-8b", "h100-sxm", gpu_memory_utilization=1.2)
    with pytest.raises(ValueError, match="n_gpus"):
        kv_pool("llama-3.1-8b", "h100-sxm", n_gpus=0)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        kv_pool("llama-3.1-8b", "h100-sxm", max_num_batched_tokens=-1)
    with pytest.raises(ValueError, match="context_tokens"):
        kv_pool("llama-3.1-8b", "h100-sxm").max_concurrency(0)
    with pytest.raises(KeyError, match="unknown GPU"):
        kv_pool("llama-3.1-8b", "h100")
    with pytest.raises(KeyError, match="unknown model"):
        kv_pool("llama-9", "h100-sxm")
    with pytest.raises(ValueError, match="dtype"):
        kv_pool("llama-3.1-8b", "h100-sxm", kv_dtype="fp7")
    with pytest.raises(ValueError, match="Overheads"):
        dataclasses.replace(VLLM, sampler_copies=-1)


def test_calibration_constants_are_the_fit():
    assert validation.fit_forward_factor() == pytest.approx(VLLM.forward_factor, abs=1e-3)
    refit = validation.fit_overheads()
    assert refit.sampler_copies == pytest.approx(VLLM.sampler_copies, abs=0.05)
    assert refit.non_torch_bytes == pytest.approx(VLLM.non_torch_bytes, abs=0.01 * GIB)
    assert refit.non_torch_tp_bytes == pytest.approx(VLLM.non_torch_tp_bytes, abs=0.01 * GIB)


def test_calibration_table_errors():
    cal = validation.calibration()
    assert {"fit", "validate", "weights", "history"} <= set(cal["use"])
    fit = cal[cal["use"] == "fit"]
    assert fit["available_error_gib"].abs().max() < 1.3
    # weights from the config match dense bf16 logs to 0.3% (lp02 quantizes to fp8 at load)
    bf16 = validation.engine_logs()["weight_format"].isin(["", "bf16"])
    dense = cal[cal["model"].isin(["llama-3-8b", "llama-3.1-8b"]) & bf16.reindex(cal.index)]
    assert dense["weights_error"].abs().max() < 0.003
    # KV tokens: Qwen3-235B-FP8 on 4×H100 within 5%, Llama-2-7B (2023) within 3%
    assert abs(cal.loc["el09", "tokens_error"]) < 0.05
    assert abs(cal.loc["el29", "tokens_error"]) < 0.03
    scored = cal[cal["use"].isin(["fit", "validate"])]["tokens_error"].dropna().abs()
    assert scored.median() < 0.10


def test_log_pool_rejects_unpredictable_logs():
    with pytest.raises(ValueError, match="registry"):
        validation.log_pool("el03")
    with pytest.raises(KeyError):
        validation.log_pool("el99")


def test_arguments_numpy_integers_and_floats_are_numbers():
    import numpy as np

    base = kv_pool("llama-3.1-8b", "h100-sxm", n_gpus=1, max_num_batched_tokens=8192)
    same = kv_pool("llama-3.1-8b", "h100-sxm", n_gpus=np.int64(1),
                   gpu_memory_utilization=np.float32(0.9), max_num_batched_tokens=np.int32(8192))
    assert same.num_blocks == base.num_blocks
    assert base.max_concurrency(np.int64(8192)) == base.max_concurrency(8192)
    with pytest.raises(ValueError, match="weights_bytes_per_gpu must be >= 0, got -5"):
        kv_pool("llama-3.1-8b", "h100-sxm", weights_bytes_per_gpu=-5)
    with pytest.raises(ValueError, match="weights_bytes_per_gpu must be an integer"):
        kv_pool("llama-3.1-8b", "h100-sxm", weights_bytes_per_gpu=1.5)
    with pytest.raises(ValueError, match="n_gpus must be an integer"):
        kv_pool("llama-3.1-8b", "h100-sxm", n_gpus=np.float64(1.0))
    with pytest.raises(ValueError, match="gpu_memory_utilization must be finite"):
        kv_pool("llama-3.1-8b", "h100-sxm", gpu_memory_utilization=float("nan"))


@pytest.mark.parametrize("slug,limit", [
    ("llama-3.1-8b", 131_072),   # max_position_embeddings; rope_type llama3 is not rescaled
    ("deepseek-v3", 163_840),    # YaRN: original_max_position_embeddings 4,096 × factor 40
    ("gpt-oss-120b", 131_072),   # YaRN: 4,096 × 32
    ("qwen3-8b", 40_960),        # max_position_embeddings, no RoPE scaling
    ("llama-65b", 2_048),        # max_sequence_length
    ("gemma-3-27b", 131_072),    # no length key: Gemma3TextConfig's default, which vLLM reads
    ("falcon-7b", None),         # no key even after defaults: vLLM assumes 2,048 unless told
])
def test_derived_max_model_len_follows_vllm(slug, limit):
    assert capacity.derived_max_model_len(kvlib.load_model(slug)) == limit


def test_max_model_len_past_the_model_is_refused_unless_allowed():
    with pytest.raises(ValueError, match="10,000,000 tokens exceed Llama-3.1-8B's maximum"):
        kv_pool("llama-3.1-8b", "h100-sxm", max_model_len=10_000_000)
    pool = kv_pool("llama-3.1-8b", "h100-sxm", max_model_len=10_000_000,
                   allow_long_max_model_len=True)
    assert pool == kv_pool("llama-3.1-8b", "h100-sxm", max_model_len=131_072)
    # a context of 10⁴⁰ tokens needs ⌈10⁴⁰ / 16⌉ blocks: integer arithmetic, no float overflow
    assert pool.blocks_per_request(10**40) == 10**40 // 16


def test_vllm_memory_rules_by_version():
    # vLLM PR #38284 (for v0.21): the CUDA-graph estimate counted by default and the default
    # utilization raised 0.9 → 0.92 to compensate; every release before keeps 0.9, graphs outside
    r19, r33 = deployment.vllm_memory_rules("0.19.0"), deployment.vllm_memory_rules("0.33.0")
    assert (r19.default_gpu_memory_utilization, r19.cuda_graphs_in_profile) == (0.9, False)
    assert (r33.default_gpu_memory_utilization, r33.cuda_graphs_in_profile) == (0.92, True)
    r21 = deployment.vllm_memory_rules("0.21.0")
    assert (r21.default_gpu_memory_utilization, r21.cuda_graphs_in_profile) == (0.92, True)
    assert deployment.vllm_memory_rules("0.20.2rc1.dev5+gabc") == r19
    assert deployment.vllm_release("0.15.2rc1.dev93+g11a4c9d30") == (0, 15, 2)
    assert deployment.vllm_release("main, 2024-12-13 (v0 worker)") is None
    with pytest.raises(ValueError, match="names no release"):
        deployment.Deployment("llama-3.1-8b", "h100-sxm", engine_version="nightly")


def test_the_model_runner_each_release_gives_a_model():
    # each wheel's VllmConfig._is_default_v2_model_runner_model: Qwen3 dense from 0.22, Llama and
    # Mistral from 0.23, quantized and six listed architectures (MoE ones too) in 0.24, every
    # dense model from 0.25, all models from 0.29
    def runner(version, slug, quantized=False):
        return deployment.vllm_memory_rules(version, slug, quantized=quantized).runner

    assert [runner(v, "qwen3-8b") for v in ("0.21.0", "0.22.0", "0.27.1", "0.33.0")] == [
        "v1", "v2", "v2", "v2"]
    assert runner("0.22.0", "qwen3-8b", quantized=True) == "v1"
    assert runner("0.24.0", "qwen3-8b", quantized=True) == "v2"
    assert [runner(v, "llama-3.1-8b") for v in ("0.22.0", "0.23.0")] == ["v1", "v2"]
    assert [runner(v, "gemma-3-27b") for v in ("0.24.0", "0.25.0")] == ["v1", "v2"]
    assert [runner(v, "deepseek-v2") for v in ("0.23.0", "0.24.0", "0.25.0")] == ["v1", "v2", "v2"]
    # MoE and hybrids stay on V1 until 0.29
    assert [runner(v, "qwen3-30b-a3b") for v in ("0.25.0", "0.28.0", "0.29.0")] == ["v1", "v1", "v2"]
    assert [runner(v, "qwen3-next-80b-a3b") for v in ("0.28.0", "0.29.0")] == ["v1", "v2"]
    assert runner("0.27.1", None) == "v1" and runner("0.29.0", None) == "v2"
    # one default utilization per release, whatever the runner; the V2 runner of 0.22–0.28
    # subtracts no CUDA-graph estimate, and only 0.22–0.32's profiles no fp32 sampling pipeline
    # (0.33's profiles its warm-up pass)
    for minor in range(0, 40):
        version = f"0.{minor}.0"
        pair = {deployment.vllm_memory_rules(version, m).default_gpu_memory_utilization
                for m in ("qwen3-8b", "qwen3-30b-a3b")}
        assert len(pair) == 1, version
    v2 = {r.label: r for r in deployment.vllm_rule_rows() if r.runner == "v2"}
    assert [(r.cuda_graphs_in_profile, r.sampler_term, r.sampler_state_in_profile)
            for r in v2.values()] == [(False, "logits", False)] * 4 + [
        (False, "logits", True), (True, "logits", True), (True, "warmup", True)]
    assert list(v2) == ["0.22, V2 runner", "0.23, V2 runner", "0.24, V2 runner",
                        "0.25–0.26, V2 runner", "0.27–0.28, V2 runner", "0.29–0.32, V2 runner",
                        "0.33 and later, V2 runner"]
    # the V1 runner keeps no sampler state the size of the vocabulary
    assert not any(r.sampler_state_in_profile for r in deployment.vllm_rule_rows()
                   if r.runner == "v1")


def test_the_v2_runner_of_0_22_to_0_32_profiles_bf16_logits_only():
    # Qwen3-8B on an RTX 4090 at 256 sequences: 0.21.0's V1 runner (Triton top-k/top-p) holds
    # the bf16 logits, three fp32 tensors of them and a buffer of 128 vocabulary rows (one per
    # SM): (2 × 256 + 4 × (3 × 256 + 128)) × 151,936 B = 0.58 GiB; the V2 runner of 0.27.1 holds
    # one bf16 logits tensor, 2 × 256 × 151,936 B = 0.07 GiB, under the forward pass's 0.18 GiB,
    # and its penalty state, 4 × 256 × (151,936 + 4,748) B = 0.15 GiB, which its profile counts:
    # the pool grows by the 0.58 − 0.18 GiB difference less the 0.15 GiB
    v1 = kv_pool(deployment.Deployment("qwen3-8b", "rtx-4090", engine_version="0.21.0",
                                       max_num_batched_tokens=2048))
    v2 = kv_pool(deployment.Deployment("qwen3-8b", "rtx-4090", engine_version="0.27.1",
                                       max_num_batched_tokens=2048))
    assert (v1.model_runner, v2.model_runner) == ("v1", "v2")
    assert v1.activation_sampler_bytes == (2 * 256 + 4 * (3 * 256 + 128)) * 151_936
    assert v2.activation_sampler_bytes == 2 * 256 * 151_936
    assert v2.activation_peak_bytes == v2.activation_forward_bytes == v1.activation_forward_bytes
    assert (v1.sampler_state_bytes, v2.sampler_state_bytes) == (0, 4 * 256 * (151_936 + 4_748))
    assert v2.available_kv_bytes - v1.available_kv_bytes == (
        v1.activation_sampler_bytes - v1.activation_forward_bytes - v2.sampler_state_bytes)
    # the pinned 0.33.0 profiles the fp32 pipeline again, its warm-up pass: the bf16 logits and
    # three fp32 tensors on an NVIDIA GPU, (2 + 12) × 256 × 151,936 B = 0.51 GiB, as the book's
    # default
    book = kv_pool("qwen3-8b", "rtx-4090", max_num_batched_tokens=2048)
    pinned = kv_pool(deployment.Deployment("qwen3-8b", "rtx-4090", engine_version="0.33.0",
                                           gpu_memory_utilization=0.9,
                                           max_num_batched_tokens=2048))
    assert book.model_runner == pinned.model_runner == "v2"
    assert book.activation_sampler_bytes == pinned.activation_sampler_bytes == (
        capacity.sampler_bytes(VLLM, "warmup", 256, 151_936)) == 14 * 256 * 151_936
    assert book.tokens == pinned.tokens
    assert kv_pool("qwen3-8b", "rtx-4090", overheads=capacity.NO_OVERHEADS,
                   engine_version="0.27.1").activation_peak_bytes == 0


def test_one_default_utilization_per_version_and_the_books_own():
    book = kv_pool("llama-3.1-8b", "h100-sxm")  # no version named: the book's 0.9
    v33 = kv_pool(deployment.Deployment("llama-3.1-8b", "h100-sxm", engine_version="0.33.0"))
    v19 = kv_pool(deployment.Deployment("llama-3.1-8b", "h100-sxm", engine_version="0.19.0"))
    assert (book.gpu_memory_utilization, v19.gpu_memory_utilization,
            v33.gpu_memory_utilization) == (0.9, 0.9, 0.92)
    # the same budget at 0.9; 0.19.0 charges the Triton sampling pass, (2 × 1,024 + 4 × (3 ×
    # 1,024 + 132)) × 128,256 B = 1,906,397,184 B, where 0.33.0 charges its warm-up pass,
    # (2 + 12) × 1,024 × 128,256 B = 1,838,678,016 B: 67,719,168 B less, and the V2 runner's
    # penalty state, 541,753,344 B, that 0.19.0's V1 runner does not keep
    assert v19.budget_bytes == book.budget_bytes
    assert v19.activation_sampler_bytes == (2 * 1024 + 4 * (3 * 1024 + 132)) * 128_256
    assert book.available_kv_bytes - v19.available_kv_bytes == (
        1_906_397_184 - 1_838_678_016 - 541_753_344)
    # 0.02 × 79.22 GiB (the H100's CUDA total) = 1.58 GiB more budget at 0.92
    assert v33.budget_bytes - book.budget_bytes == pytest.approx(0.02 * 79.22 * GIB, rel=1e-3)
    given = deployment.Deployment("llama-3.1-8b", "h100-sxm", engine_version="0.33.0",
                                  gpu_memory_utilization=0.9)
    assert kv_pool(given).tokens == book.tokens  # a given utilization wins over the default


def test_the_pinned_wheels_own_defaults_match_its_rules():
    import importlib.util
    import re
    from pathlib import Path

    spec = importlib.util.find_spec("vllm")  # finds the wheel without importing it (19 s)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vLLM is not installed")
    root = Path(list(spec.submodule_search_locations)[0])
    cache = (root / "config" / "cache.py").read_text()
    envs = (root / "envs.py").read_text()
    default = float(re.search(r"gpu_memory_utilization: float = Field\(default=([0-9.]+)",
                              cache).group(1))
    graphs = re.search(r'"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "([01])"', envs).group(1)
    rules = deployment.vllm_memory_rules(deployment.VLLM_VERSION)
    assert (default, graphs == "1") == (rules.default_gpu_memory_utilization,
                                        rules.cuda_graphs_in_profile)
    # V2 for every model (no per-architecture default left), its CUDA-graph estimate real, and
    # the profiled sampler's second pass with the warm-up's parameters (the fp32 pipeline,
    # charged by the "warmup" term)
    config = (root / "config" / "vllm.py").read_text()
    runner = (root / "v1" / "worker" / "gpu" / "model_runner.py").read_text()
    sampler_run = runner[runner.index("def _dummy_sampler_run"):runner.index("def profile_run")]
    assert "_is_default_v2_model_runner_model" not in config
    assert (rules.runner, rules.default_for) == ("v2", "all")
    assert "return _profile_cudagraph_memory(self)" in runner
    assert ("for_sampler_warmup" in sampler_run) == (rules.sampler_term == "warmup")


def test_tp_add_on_depends_on_the_interconnect():
    h100, l40s, nvl = (kvlib.load_gpu(s) for s in ("h100-sxm", "l40s", "h100-nvl"))
    assert capacity.tp_link(h100, 1) is None and capacity.tp_link(h100, 8) == "nvlink"
    assert capacity.tp_link(l40s, 2) == capacity.tp_link(l40s, 8) == "pcie"
    assert capacity.tp_link(nvl, 2) == "nvlink" and capacity.tp_link(nvl, 4) == "pcie"
    # NVLink adds the fitted 2.54 GiB to the 0.94 GiB base; PCIe adds nothing
    assert VLLM.non_torch_for(h100, 2) == round(0.94 * GIB) + round(2.54 * GIB)
    assert VLLM.non_torch_for(l40s, 4) == VLLM.non_torch_for(l40s, 1) == round(0.94 * GIB)


def test_qwen3_next_on_four_l40s_fits_without_the_nvlink_add_on():
    # A public 4 × L40S start-up log of this model started (134 blocks); with the NVLink add-on
    # the pool would be 1.71 − 2.54 = −0.83 GiB, it is 1.71 GiB per GPU
    d = deployment.Deployment("qwen3-next-80b-a3b", "l40s", tp=4)
    pool = kv_pool(d)
    assert pool.tp_link == "pcie" and 1.7 * GIB < pool.available_kv_bytes < 1.75 * GIB
    nvlink_rule = dataclasses.replace(VLLM, non_torch_tp_pcie_bytes=VLLM.non_torch_tp_bytes)
    with pytest.raises(NoKVMemory, match="non-torch 3.48 GiB"):
        kv_pool(d, overheads=nvlink_rule)
    refused = capacity.pool_arithmetic(d, overheads=nvlink_rule)
    assert refused.num_blocks == 0 and round(refused.available_kv_bytes / GIB, 2) == -0.83


def test_the_triton_sampling_pass_of_0_17_is_read_in_the_source():
    # vLLM 0.17–0.20 (V1): the bf16 logits, three fp32 tensors (fp32 logits, probabilities,
    # exponential noise) and the Triton kernel's buffer of min(next_pow2(min(SMs, rows)), SMs)
    # vocabulary rows. Llama-3.1-8B on an H100 (132 SMs) at 1,024 rows:
    # (2 × 1,024 + 4 × (3 × 1,024 + 132)) × 128,256 B = 1,906,397,184 B, 3.63 fp32 copies
    h100, a100 = kvlib.load_gpu("h100-sxm"), kvlib.load_gpu("a100-80gb")
    assert capacity.sampler_bytes(VLLM, "triton", 1024, 128_256, h100) == 1_906_397_184
    # 100 rows on an A100 (108 SMs): 100 programs, a buffer of min(128, 108) = 108 rows
    assert capacity.sampler_bytes(VLLM, "triton", 100, 1000, a100) == (2 * 100 + 4 * (300 + 108)) * 1000
    # 20 rows: 20 programs, a buffer of next_pow2(20) = 32 rows
    assert capacity.sampler_bytes(VLLM, "triton", 20, 1000, a100) == (2 * 20 + 4 * (60 + 32)) * 1000
    # below 8 rows the release sorts: the fitted term
    assert capacity.sampler_bytes(VLLM, "triton", 4, 1000, a100) == int(VLLM.sampler_copies * 4 * 1000 * 4)
    assert capacity.sampler_bytes(capacity.NO_OVERHEADS, "triton", 1024, 128_256, h100) == 0
    with pytest.raises(ValueError, match="compute_units"):
        capacity.sampler_bytes(VLLM, "triton", 1024, 128_256,
                               dataclasses.replace(h100, compute_units=None))
    with pytest.raises(ValueError, match="compute_units"):
        dataclasses.replace(h100, compute_units=0)
    rules = deployment.vllm_memory_rules("0.19.0")
    assert rules.sampler_term == "triton" and deployment.vllm_memory_rules("0.16.0").sampler_term == "fitted"
    # the pool the rule sizes: its sampled rows are min(max_num_seqs 1,024, 8,192 batched tokens)
    pool = kvlib.kv_pool(deployment.Deployment("llama-3.1-8b", "h100-sxm", engine_version="0.19.0"))
    assert pool.sampled_rows == 1024 and pool.activation_sampler_bytes == 1_906_397_184


def test_the_warmup_sampling_pass_of_0_33_is_read_in_the_source():
    # vLLM 0.33's V2 runner samples twice; the warm-up pass (every sampling parameter on) holds
    # the bf16 logits, vLLM's fp32 copy and, where FlashInfer samples (NVIDIA, > 16 SMs), its
    # top-k-masked fp32 logits and their fp32 softmax. Llama-3.1-8B on an H100 at 1,024 rows:
    # (2 + 3 × 4) × 1,024 × 128,256 B = 14 × 131,334,144 = 1,838,678,016 B (1.71 GiB, 3.5 fp32
    # copies), where the fitted sorting term charged 8.5 × 4 × 131,334,144 = 4,465,360,896 B
    h100, mi300x = kvlib.load_gpu("h100-sxm"), kvlib.load_gpu("mi300x")
    assert capacity.flashinfer_sampler(h100) and not capacity.flashinfer_sampler(mi300x)
    assert capacity.sampler_bytes(VLLM, "warmup", 1024, 128_256, h100) == 1_838_678_016
    assert capacity.sampler_bytes(VLLM, "warmup", 1024, 128_256) == 1_838_678_016  # no GPU: NVIDIA
    # an AMD GPU masks the fp32 copy in place with the Triton kernel: the logits, the copy and a
    # buffer of min(next_pow2(min(304, 1,024)), 304) = 304 vocabulary rows (one per CU):
    # (2 × 1,024 + 4 × (1,024 + 304)) × 128,256 B = 7,360 × 128,256 = 943,964,160 B
    assert capacity.sampler_bytes(VLLM, "warmup", 1024, 128_256, mi300x) == 943_964_160
    # an NVIDIA GPU of 16 SMs takes the Triton kernel too, at every row count (no sort below 8):
    # 4 rows, a buffer of 4: (2 × 4 + 4 × (4 + 4)) × 1,000 = 40,000 B
    small = dataclasses.replace(h100, compute_units=16)
    assert capacity.sampler_bytes(VLLM, "warmup", 4, 1000, small) == 40_000
    assert capacity.sampler_bytes(NO_OVERHEADS, "warmup", 1024, 128_256, h100) == 0
    assert capacity.sampler_bytes(NO_OVERHEADS, "warmup", 1024, 128_256, mi300x) == 0
    with pytest.raises(ValueError, match="compute_units"):
        capacity.sampler_bytes(VLLM, "warmup", 64, 1000, dataclasses.replace(mi300x, compute_units=None))
    with pytest.raises(ValueError, match="warmup"):
        capacity.sampler_bytes(VLLM, "sorted", 64, 1000, h100)
    assert deployment.vllm_memory_rules("0.33.0").sampler_term == "warmup"
    pool = kv_pool("llama-3.1-8b", "h100-sxm")  # the book's default release
    assert pool.activation_sampler_bytes == pool.activation_peak_bytes == 1_838_678_016


def _vllm_sampler_peaks(monkeypatch, rows: int, vocab: int, *, sms: int | None) -> list[int]:
    """Peak bytes above the logits that vLLM 0.33's own ``GPUModelRunner._dummy_sampler_run``
    and V2 ``Sampler`` allocate on this CPU, one per sampling pass: every new tensor storage
    counted from the op that makes it until its weakref finalizer runs. What cannot run here
    is stood in for: Triton launches are no-ops (they write in place and allocate nothing);
    FlashInfer (``sms=None``: the NVIDIA path) makes what its 0.7.2.post1 wrapper allocates
    for per-row top-k, ``empty_like`` masked logits and their ``torch.softmax``; otherwise
    vLLM's Triton top-k/top-p path runs with ``sms`` SMs (its kernel launch a no-op)."""
    import gc
    import os
    import sys
    import types
    import weakref

    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pytest.importorskip("vllm")
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from vllm.triton_utils import triton
    from vllm.v1.sample.ops import topk_topp_sampler, topk_topp_triton
    from vllm.v1.worker.gpu import buffer_utils, model_runner
    from vllm.v1.worker.gpu.input_batch import InputBuffers
    from vllm.v1.worker.gpu.sample.sampler import Sampler
    from vllm.v1.worker.gpu.states import RequestState

    class NoKernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith(("vllm.v1.worker.gpu", "vllm.v1.sample")):
            for attr, value in list(vars(module).items()):
                if attr.endswith("_kernel") and callable(value):
                    monkeypatch.setattr(module, attr, NoKernel())
    monkeypatch.setattr(triton, "next_power_of_2", lambda n: 1 << (int(n) - 1).bit_length(),
                        raising=False)
    monkeypatch.setattr(buffer_utils, "is_uva_available", lambda: False)  # no pinned memory
    monkeypatch.setattr(model_runner, "current_platform", types.SimpleNamespace(is_cpu=lambda: False))
    flashinfer = types.ModuleType("flashinfer")

    def top_k_top_p_sampling_from_logits(logits, k, p, **kwargs):
        probs = torch.softmax(torch.empty_like(logits).copy_(logits), dim=-1)  # noqa: F841
        return torch.zeros(logits.shape[0], dtype=torch.int32)

    flashinfer.sampling = types.SimpleNamespace(
        top_k_top_p_sampling_from_logits=top_k_top_p_sampling_from_logits)
    monkeypatch.setitem(sys.modules, "flashinfer", flashinfer)
    if sms is not None:
        monkeypatch.setattr(topk_topp_sampler, "HAS_TRITON", True)
        monkeypatch.setattr(topk_topp_sampler, "apply_top_k_top_p_triton",
                            topk_topp_triton.apply_top_k_top_p_triton, raising=False)
        monkeypatch.setattr(topk_topp_triton, "num_compute_units", lambda index: sms)
        monkeypatch.setattr(topk_topp_triton, "_topk_topp", lambda *args, **kwargs: None)
        monkeypatch.setattr(topk_topp_triton, "_TRITON_BUFFER_CACHE", {})

    class Counted(Sampler):  # one peak per sampling pass, from what is live when it starts
        def __call__(self, logits, batch):
            peaks.append([now[0], now[0]])
            super().__call__(logits, batch)
            gc.collect()

    cpu = torch.device("cpu")
    requests = RequestState(max_num_reqs=rows, max_model_len=64, max_num_batched_tokens=rows,
                            num_speculative_steps=0, vocab_size=vocab, device=cpu)
    sampler = Counted(types.SimpleNamespace(reasoning_config=None), max_num_reqs=rows,
                      vocab_size=vocab, device=cpu, req_states=requests)
    sampler.use_flashinfer = sms is None
    live, now, peaks = set(), [0], []

    def freed(key, n):
        live.discard(key)
        now[0] -= n

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {t.untyped_storage().data_ptr()
                      for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    storage = t.untyped_storage()
                    key, n = storage.data_ptr(), storage.nbytes()
                    if n and key not in live and key not in inputs:  # new, not written in place
                        live.add(key)
                        now[0] += n
                        if peaks:
                            peaks[-1][1] = max(peaks[-1][1], now[0])
                        weakref.finalize(storage, freed, key, n)
            return out

    logits = torch.randn(rows, vocab).to(torch.bfloat16)
    runner = types.SimpleNamespace(model=types.SimpleNamespace(compute_logits=lambda h: logits),
                                   input_buffers=InputBuffers(rows, rows, cpu), sampler=sampler)
    with Track():
        model_runner.GPUModelRunner._dummy_sampler_run(runner, torch.zeros(rows, 8))
    return [peak - base for base, peak in peaks]


def test_vllms_own_warmup_sampling_pass_on_cpu_peaks_at_kvlibs_term(monkeypatch):
    # vLLM 0.33.0's _dummy_sampler_run and V2 Sampler over 64 rows × 32,000 bf16 logits: the
    # default pass holds nothing of rows × vocab above the logits; the warm-up pass, on the
    # FlashInfer path (an H100), 3 fp32 tensors: 3 × 4 × 64 × 32,000 = 24,576,000 B, so with the
    # 2 × 64 × 32,000 B logits kvlib's (2 + 12) × 64 × 32,000 = 28,672,000 B; on the Triton path
    # (an MI300X, 304 CUs) the fp32 copy and a buffer of min(next_pow2(64), 304) = 64 rows:
    # 4 × 32,000 × (64 + 64) = 16,384,000 B. Rows-sized tensors (sampled ids, top-5 logprobs)
    # add under 1 KiB per row
    rows, vocab, logits = 64, 32_000, 2 * 64 * 32_000
    h100, mi300x = kvlib.load_gpu("h100-sxm"), kvlib.load_gpu("mi300x")
    default, warmup = _vllm_sampler_peaks(monkeypatch, rows, vocab, sms=None)
    assert 0 <= default < 1024 * rows
    assert 0 <= warmup + logits - capacity.sampler_bytes(VLLM, "warmup", rows, vocab, h100) < 1024 * rows
    assert capacity.sampler_bytes(VLLM, "warmup", rows, vocab, h100) == 28_672_000
    default, warmup = _vllm_sampler_peaks(monkeypatch, rows, vocab, sms=mi300x.compute_units)
    assert 0 <= default < 1024 * rows
    assert 0 <= warmup + logits - capacity.sampler_bytes(VLLM, "warmup", rows, vocab, mi300x) < 1024 * rows
    assert capacity.sampler_bytes(VLLM, "warmup", rows, vocab, mi300x) == logits + 16_384_000
