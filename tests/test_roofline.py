"""Steps on the roofline: known answers for every term of the one step decomposition."""
from __future__ import annotations

import dataclasses

import math

import pytest

import kvlib
from kvlib import deployment
from kvlib.speed import roofline
from kvlib.hardware.gpus import GPU, allreduce_latency, load_gpu
from kvlib.speed.roofline import (CALIBRATED, DATASHEET, Efficiency, allreduce_time_s, blocks,
                            critical_batch, decode_step, expected_experts, moe_padded_rows,
                            prefill_step, serving_steps, step, lockstep_steps)
from kvlib.core.units import GIB

#: Round constants for hand-checked arithmetic: η_w 0.8, η_kv 0.5, η_F 0.5, 1 ms per vLLM step,
#: 10 µs per attention block and 20 µs per dense FFN block.
EFF = Efficiency("test", bandwidth=0.8, kv_bandwidth=0.5, compute=0.5,
                 step_s=(("vllm", 1e-3),), block_s=(("attention", 10e-6), ("dense_ffn", 20e-6)),
                 communication=True)
#: EFF with the same step cost for SGLang
SGL_EFF = dataclasses.replace(EFF, step_s=(("sglang", 1e-3), ("vllm", 1e-3)))


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
    s = decode_step("llama-3.1-8b", "h100-sxm", batch=1, context_tokens=0, efficiency=DATASHEET)
    assert s.weight_bytes == 2 * (8_030_261_248 - 128_256 * 4096)
    assert s.kv_bytes == 0 and s.bound == "memory" and s.overhead_s == 0
    assert s.time_s == pytest.approx(s.weight_bytes / 3.35e12)
    assert s.tokens_per_s == pytest.approx(1 / s.time_s)


def test_kv_reads_grow_with_batch_and_context():
    a = decode_step("llama-3.1-8b", "h100-sxm", batch=8, context_tokens=4096)
    b = decode_step("llama-3.1-8b", "h100-sxm", batch=16, context_tokens=4096)
    # 16 sequences × 4,096 tokens × 128 KiB per token (32 layers × 8 heads × 128 × 2 × 2 B)
    assert b.kv_bytes == 2 * a.kv_bytes == 16 * 4096 * 131_072


def test_windows_cap_kv_reads():
    # the record's config is a GPTQ conversion's: the weight format is given, not read from it
    short = decode_step("mistral-7b-v0.1", "h100-sxm", batch=1, context_tokens=4095,
                        weights="bf16")
    long = decode_step("mistral-7b-v0.1", "h100-sxm", batch=1, context_tokens=100_000,
                       weights="bf16")
    assert short.kv_bytes == long.kv_bytes  # every layer keeps W − 1 = 4,095 tokens


def test_every_engine_has_a_name_for_readers():
    assert set(deployment.ENGINE_NAMES) == set(deployment.ENGINES)
    from kvlib.engines import paging
    assert set(paging.engine_block_sizes()["engine"]) <= set(deployment.ENGINE_NAMES)


def test_fp8_kv_speedup_halves_only_the_kv_reads():
    # datasheet roofline, memory-bound: the step is (weights + KV) ÷ 3.35e12; fp8 halves the KV
    # term only. Llama-3.1-8B at batch 4 and 8,192 tokens: KV = 4 × 8,192 × 131,072 B in bf16
    w = decode_step("llama-3.1-8b", "h100-sxm", batch=4, context_tokens=0,
                    efficiency=DATASHEET).weight_bytes
    kv = 4 * 8192 * 131_072
    gain = roofline.kv_dtype_speedup("llama-3.1-8b", "h100-sxm", batch=4, context_tokens=8192,
                                     efficiency=DATASHEET)
    assert gain == pytest.approx((w + kv) / (w + kv / 2))
    assert roofline.kv_dtype_speedup("llama-3.1-8b", "h100-sxm", batch=4, context_tokens=8192,
                                     kv_dtype="bf16") == 1


def test_weights_and_kv_stream_at_their_own_shares():
    # Llama-3.1-8B, batch 4 at 1,024 tokens on one H100, dense bf16 (no MoE padding):
    # weights 15,009,849,344 B ÷ 0.8 + KV 4 × 1,024 × 131,072 = 536,870,912 B ÷ 0.5, over 3.35 TB/s
    s = decode_step("llama-3.1-8b", "h100-sxm", batch=4, context_tokens=1024, efficiency=EFF)
    assert (s.weight_bytes, s.kv_bytes) == (15_009_849_344, 536_870_912)
    assert s.memory_time_s == pytest.approx((15_009_849_344 / 0.8 + 536_870_912 / 0.5) / 3.35e12)
    # fixed costs: 1 ms per step + 32 attention blocks × 10 µs + 32 dense FFNs × 20 µs = 1.96 ms
    assert s.fixed_s == pytest.approx(1e-3 + 32 * 10e-6 + 32 * 20e-6)
    assert s.allreduce_s == 0  # one GPU
    assert s.time_s == pytest.approx(max(s.memory_time_s, s.compute_time_s) + 1.96e-3)


def test_tensor_parallel_adds_one_all_reduce_per_block():
    # Llama-3.1-70B on 4 H100s, batch 1: 80 attention + 80 FFN blocks, each followed by an
    # all-reduce of 1 token × 8,192 × 2 B = 16,384 B
    s = decode_step("llama-3.1-70b", "h100-sxm", batch=1, context_tokens=1024, n_gpus=4,
                    efficiency=EFF)
    assert s.allreduce_s == pytest.approx(160 * allreduce_time_s("h100-sxm", 4, 16_384))
    assert s.fixed_s == pytest.approx(1e-3 + 80 * 10e-6 + 80 * 20e-6)
    d = decode_step("llama-3.1-70b", "h100-sxm", batch=1, context_tokens=1024, n_gpus=4,
                    efficiency=DATASHEET)
    assert d.overhead_s == 0 and d.time_s < s.time_s


def test_requests_and_tp_stages_add_their_fixed_costs():
    # EFF plus 20 µs per vLLM request and 4 µs per block per doubling of the TP group.
    # Llama-3.1-70B on 4 H100s, batch 16: 1 ms + 80 × 10 µs + 80 × 20 µs (blocks)
    # + 16 × 20 µs (requests) + 160 blocks × log2(4) × 4 µs = 1 + 0.8 + 1.6 + 0.32 + 1.28 ms
    eff = dataclasses.replace(EFF, request_s=(("vllm", 20e-6),), stage_s=4e-6)
    s = decode_step("llama-3.1-70b", "h100-sxm", batch=16, context_tokens=1024, n_gpus=4,
                    efficiency=eff)
    assert s.requests == 16
    assert s.fixed_s == pytest.approx(5.0e-3)
    # one GPU: log2(1) = 0, no stage cost; a prompt of 1,000 tokens in one chunk is 1 request
    one = decode_step("llama-3.1-8b", "h100-sxm", batch=16, context_tokens=1024, efficiency=eff)
    assert one.fixed_s == pytest.approx(1e-3 + 32 * 10e-6 + 32 * 20e-6 + 16 * 20e-6)
    mixed = step("llama-3.1-8b", "h100-sxm", batch=16, context_tokens=1024, prefill_tokens=1000,
                 prompt_tokens=1000, efficiency=eff)
    assert mixed.requests == 17 and mixed.fixed_s == pytest.approx(one.fixed_s + 20e-6)
    # another engine build has no request cost in eff (only vLLM's is set)
    assert eff.request_overhead_s("sglang", load_gpu("h100-sxm")) == 0
    with pytest.raises(ValueError, match="stage_s"):
        Efficiency("x", stage_s=-1e-6)


def test_allreduce_time_is_latency_plus_bytes_over_the_link():
    alpha = allreduce_latency("h100-sxm", 8).seconds
    # 16 KiB on 8 H100s: one-stage α + 7 × 16,384 / 450e9 = α + 0.255 µs beats
    # two-stage 2α + 1.75 × 16,384 / 450e9 = 2α + 0.064 µs
    assert allreduce_time_s("h100-sxm", 8, 16_384) == pytest.approx(alpha + 7 * 16_384 / 450e9)
    # 64 MiB: two-stage 2α + 1.75 × 67,108,864 / 450e9 = 2α + 261 µs beats α + 1,044 µs
    big = 64 * 2**20
    assert allreduce_time_s("h100-sxm", 8, big) == pytest.approx(2 * alpha + 1.75 * big / 450e9)
    assert allreduce_time_s("h100-sxm", 1, big) == 0


def test_full_mesh_groups_use_only_their_links():
    # MI300X: 64e9 B/s per direction to each peer, 448e9 over all seven links
    mi300x = load_gpu("mi300x")
    assert mi300x.group_link_bytes_per_s(2) == 64e9  # one link
    assert mi300x.group_link_bytes_per_s(4) == 192e9  # three links
    assert mi300x.group_link_bytes_per_s(8) == 448e9  # seven
    assert load_gpu("h100-sxm").group_link_bytes_per_s(2) == 450e9  # behind a switch: all of it
    with pytest.raises(ValueError, match="GPU-to-GPU"):
        load_gpu("gh200").group_link_bytes_per_s(2)


def test_allreduce_latency_comes_from_published_rows():
    h100 = allreduce_latency("h100-sxm", 4)
    assert 4e-6 < h100.seconds < 6e-6 and "H100" in h100.basis and len(h100.rows) >= 6
    # a GPU without rows borrows those of a GPU with the same interconnect
    assert allreduce_latency("a100-40gb", 2).seconds == allreduce_latency("a100-80gb", 2).seconds
    assert allreduce_latency("mi325x", 8).rows == allreduce_latency("mi300x", 8).rows
    # no row for PCIe: every row's median, said to be a lower bound
    assert "lower bound" in allreduce_latency("l40s", 2).basis
    with pytest.raises(ValueError, match="n_gpus"):
        allreduce_latency("h100-sxm", 1)


@pytest.mark.parametrize("slug, expected", [
    # a transformer layer is one mixer and one FFN
    ("llama-3.1-8b", dict(attention=32, mla=0, recurrent=0, dense_ffn=32, moe_ffn=0)),
    # DeepSeek-R1: 61 MLA layers, the first 3 with dense MLPs, 58 with MoE
    ("deepseek-r1", dict(attention=0, mla=61, recurrent=0, dense_ffn=3, moe_ffn=58)),
    # Nemotron-3-Nano: 52 single blocks, 23 Mamba-2 + 6 attention mixers + 23 MoE FFNs
    ("nemotron-3-nano-30b-a3b", dict(attention=6, mla=0, recurrent=23, dense_ffn=0, moe_ffn=23)),
    # Qwen3-Next: 48 layers of a mixer (36 Gated DeltaNet, 12 attention) and a MoE FFN
    ("qwen3-next-80b-a3b", dict(attention=12, mla=0, recurrent=36, dense_ffn=0, moe_ffn=48)),
])
def test_blocks_count_the_mixers_a_stack_has(slug, expected):
    b = blocks(slug)
    assert b.by_kind() == expected and b.total == sum(expected.values())


def test_expected_experts():
    assert expected_experts(128, 8, 1) == pytest.approx(8)
    assert expected_experts(128, 8, 10_000) == pytest.approx(128)
    assert expected_experts(8, 2, 2) == pytest.approx(8 * (1 - (6 / 8) ** 2))
    with pytest.raises(ValueError, match="exceed"):
        expected_experts(8, 9, 1)


def test_moe_rows_are_padded_to_whole_tiles():
    # one token, top-4 of 128: 4 experts touched, 1 row each, padded to 16 → 64 rows
    assert moe_padded_rows(128, 4, 1) == pytest.approx(64)
    # 4,096 tokens touch all 128 experts, 4,096 × 4 ÷ 128 = 128 rows each = 8 whole tiles
    assert moe_padded_rows(128, 4, 4096) == pytest.approx(4096 * 4, rel=1e-9)


def test_moe_reads_more_experts_as_batch_grows():
    one = decode_step("qwen3-30b-a3b", "h100-sxm", batch=1, context_tokens=1024)
    many = decode_step("qwen3-30b-a3b", "h100-sxm", batch=256, context_tokens=1024)
    total = kvlib.weight_bytes(kvlib.params_for("qwen3-30b-a3b"), "bf16")
    assert one.weight_bytes < 0.2 * total < many.weight_bytes <= total


def test_prefill_is_compute_bound_and_writes_kv():
    p = prefill_step("llama-3.1-8b", "h100-sxm", batch=1, prompt_tokens=8192)
    assert p.bound == "compute" and p.kind == "prefill" and p.batch == 0
    assert p.kv_bytes == 8192 * 128 * 1024
    assert p.flops > 2 * 7.5e9 * 8192


def test_a_mixed_step_is_the_sum_of_its_work():
    kw = dict(n_gpus=2, efficiency=EFF)
    dec = step("llama-3.1-70b", "h100-sxm", batch=16, context_tokens=2048, **kw)
    pre = step("llama-3.1-70b", "h100-sxm", prefill_tokens=1000, prompt_tokens=1000, **kw)
    mixed = step("llama-3.1-70b", "h100-sxm", batch=16, context_tokens=2048, prefill_tokens=1000,
                 prompt_tokens=1000, **kw)
    # one weight read for all 1,016 tokens, both KV terms, both FLOP terms, one set of fixed costs
    assert mixed.kind == "mixed" and mixed.weight_bytes == dec.weight_bytes
    assert mixed.kv_bytes == dec.kv_bytes + pre.kv_bytes
    assert mixed.flops == pytest.approx(dec.flops + pre.flops)
    assert mixed.fixed_s == dec.fixed_s == pre.fixed_s


def test_serving_steps_spread_other_requests_prompts_over_decode_steps():
    s = serving_steps("llama-3.1-8b", "h100-sxm", batch=8, input_tokens=1000, output_tokens=500,
                      efficiency=EFF)
    # 7 other requests each bring a 1,000-token prompt every 500 steps: 14 tokens per step,
    # i.e. one whole prompt (chunk min(1,000, 8,192 − 8)) in 1.4% of the steps
    assert s.prefill_tokens_per_step == pytest.approx(14)
    assert s.prefill_share == pytest.approx(0.014)
    assert s.decode.context_tokens == 1250 and s.mixed.prefill_tokens == 1000
    assert s.tpot_s == pytest.approx(0.986 * s.decode.time_s + 0.014 * s.mixed.time_s)
    assert s.tokens_per_s == pytest.approx(8 / s.tpot_s)
    assert s.per_user_tokens_per_s == pytest.approx(1 / s.tpot_s)
    assert s.ttft_s == pytest.approx(s.first.time_s + s.tpot_s / 2)
    assert 0 < s.prefill_time_share < s.prefill_share * 100
    alone = serving_steps("llama-3.1-8b", "h100-sxm", batch=1, input_tokens=1000,
                          output_tokens=500, efficiency=EFF)
    assert alone.prefill_share == 0 and alone.tpot_s == alone.decode.time_s
    # a 20,000-token prompt takes 3 chunks of 8,192 − 8
    long = serving_steps("llama-3.1-8b", "h100-sxm", batch=8, input_tokens=20_000,
                         output_tokens=500, efficiency=EFF)
    assert long.prompt_chunks == 3 and long.first.prefill_tokens == 8184


def test_sglang_prefills_its_prompts_between_decode_steps():
    # SGLang runs a waiting prompt as a batch of its own before the next decode step: each
    # output token is one decode step plus, in the share of steps a prompt arrives, a prefill
    # batch of that prompt alone (vLLM's mixed step shares one weight read instead)
    kw = dict(batch=8, input_tokens=1000, output_tokens=500, efficiency=SGL_EFF)
    sg = serving_steps("llama-3.1-8b", "h100-sxm", engine="sglang", **kw)
    assert sg.prefill_apart and sg.mixed.kind == "prefill" and sg.first.kind == "prefill"
    assert sg.mixed.prefill_tokens == 1000 and sg.mixed.batch == 0
    assert sg.prefill_share == pytest.approx(0.014)  # 7 × 1,000 ÷ 500 = 14 tokens a step
    assert sg.tpot_s == pytest.approx(sg.decode.time_s + 0.014 * sg.mixed.time_s)
    assert sg.prefill_time_share == pytest.approx(0.014 * sg.mixed.time_s / sg.tpot_s)
    assert sg.ttft_s == pytest.approx(sg.first.time_s + sg.tpot_s / 2)
    vllm = serving_steps("llama-3.1-8b", "h100-sxm", engine="vllm", **kw)
    assert not vllm.prefill_apart and vllm.mixed.batch == 8
    # the prompt's weight read is paid twice when it runs apart
    assert sg.tpot_s > vllm.tpot_s


def test_lockstep_steps_put_half_the_wave_before_the_first_token():
    # SGLang prefills before it decodes: 16 prompts of 1,024 tokens are 16,384 tokens, two
    # chunks of SGLang's 8,192 on an 80 GB H100; on average a request's first token comes
    # with chunk (2 + 1) / 2 = 1.5 and 0.5 chunks follow it, spread over its 127 other tokens
    w = lockstep_steps("llama-3.1-8b", "h100-sxm", batch=16, input_tokens=1024,
                       output_tokens=128, efficiency=EFF)
    wave = prefill_step("llama-3.1-8b", "h100-sxm", batch=16, prompt_tokens=1024,
                        efficiency=EFF)
    assert w.chunks == 2 and w.wave.time_s == pytest.approx(wave.time_s)
    assert w.decode.batch == 16 and w.decode.context_tokens == 1024 + 64
    assert w.ttft_s == pytest.approx(0.75 * wave.time_s)
    assert w.tpot_s == pytest.approx(w.decode.time_s + 0.25 * wave.time_s / 127)
    # one chunk: every first token waits for the whole wave and decoding follows at once
    one = lockstep_steps("llama-3.1-8b", "h100-sxm", batch=4, input_tokens=1024,
                         output_tokens=128, efficiency=EFF)
    assert one.chunks == 1 and one.tpot_s == pytest.approx(one.decode.time_s)
    # SGLang's chunk grows with the GPU (16,384 on a B200); a deployment's own budget wins
    b200 = lockstep_steps("llama-3.1-8b", "b200", batch=16, input_tokens=1024,
                          output_tokens=128, efficiency=EFF)
    assert b200.chunks == 1
    capped = lockstep_steps("llama-3.1-8b", "h100-sxm", batch=16, input_tokens=1024,
                            output_tokens=128, efficiency=EFF,
                            max_num_batched_tokens=2048)
    assert capped.chunks == 8
    with pytest.raises(ValueError, match="chunk_tokens"):
        lockstep_steps("llama-3.1-8b", "h100-sxm", batch=16, input_tokens=1024,
                       output_tokens=128, chunk_tokens=0)


def test_static_batch_is_prefill_plus_decode_steps():
    kw = dict(n_gpus=1, efficiency=EFF)
    total = roofline.generation_time_s("llama-3.1-8b", "h100-sxm", batch=4, prompt_tokens=128,
                                       output_tokens=16, **kw)
    pre = prefill_step("llama-3.1-8b", "h100-sxm", batch=4, prompt_tokens=128, **kw).time_s
    dec = sum(decode_step("llama-3.1-8b", "h100-sxm", batch=4, context_tokens=128 + i,
                          **kw).time_s for i in range(16))  # 16 samples: every step, context +0.5
    assert total == pytest.approx(pre + dec)


def test_decode_turns_compute_bound_near_the_critical_batch():
    n = roofline.model_critical_batch("llama-3.1-8b", "h100-sxm", context_tokens=0)
    # weights of 2 bytes, embeddings excluded from the reads: close to B_crit = 295
    assert 270 < n < 330
    assert roofline.model_critical_batch("llama-3.1-8b", "h100-sxm", context_tokens=32_768) is None


def test_engines_have_their_own_step_cost():
    assert roofline.engine_key("vllm", load_gpu("mi300x")) == "vllm-rocm"
    assert roofline.engine_key("sglang", load_gpu("h100-sxm")) == "sglang"
    with pytest.raises(ValueError, match="unknown engine"):
        roofline.engine_key("lmdeploy", load_gpu("h100-sxm"))
    with pytest.raises(ValueError, match="TensorRT-LLM runs on NVIDIA GPUs only"):
        decode_step("llama-3.1-8b", "mi300x", batch=1, context_tokens=1, engine="tensorrt-llm")
    assert {k for k, _ in CALIBRATED.step_s} >= {"vllm", "sglang", "tensorrt-llm", "vllm-rocm"}


def test_bad_inputs():
    with pytest.raises(ValueError, match="batch"):
        decode_step("llama-3.1-8b", "h100-sxm", batch=0, context_tokens=10)
    with pytest.raises(ValueError, match="context_tokens"):
        decode_step("llama-3.1-8b", "h100-sxm", batch=1, context_tokens=-1)
    with pytest.raises(ValueError, match="prompt_tokens"):
        prefill_step("llama-3.1-8b", "h100-sxm", batch=1, prompt_tokens=0)
    with pytest.raises(ValueError, match="needs a decoding sequence"):
        step("llama-3.1-8b", "h100-sxm")
    with pytest.raises(ValueError, match="bandwidth"):
        Efficiency("x", bandwidth=0)
    with pytest.raises(ValueError, match="kv_bandwidth"):
        Efficiency("x", kv_bandwidth=1.5)
    with pytest.raises(ValueError, match="step_s"):
        Efficiency("x", step_s=(("vllm", -1.0),))
    with pytest.raises(ValueError, match="unknown block kinds"):
        Efficiency("x", block_s=(("mlp", 1e-6),))
    with pytest.raises(ValueError, match="no sourced"):
        decode_step("llama-3.1-8b", "a10g", batch=1, context_tokens=1)
    with pytest.raises(ValueError, match="max_batched_tokens"):
        serving_steps("llama-3.1-8b", "h100-sxm", batch=64, input_tokens=100, output_tokens=10,
                      max_batched_tokens=64)
    with pytest.raises(KeyError):
        critical_batch("h1000")
    with pytest.raises(TypeError):
        decode_step("llama-3.1-8b", "h100-sxm", batch=1, context_tokens=1, efficiency=0.5)
    assert math.isfinite(allreduce_time_s("b200", 2, 0.0))


def test_numpy_integers_are_integers_and_numpy_floats_numbers():
    import numpy as np

    step = decode_step("llama-3.1-8b", "h100-sxm", batch=np.int64(8), context_tokens=np.int32(1024))
    assert step == decode_step("llama-3.1-8b", "h100-sxm", batch=8, context_tokens=1024)
    with pytest.raises(ValueError, match="batch must be an integer"):
        decode_step("llama-3.1-8b", "h100-sxm", batch=np.float64(8.0), context_tokens=1024)
    assert Efficiency("x", bandwidth=np.float32(0.5)).bandwidth == 0.5
    with pytest.raises(ValueError, match=r"Efficiency.block_s\['mla'\] must be finite"):
        Efficiency("x", block_s=(("mla", float("inf")),))


def test_fp8_matmuls_run_at_their_measured_share_attention_at_the_peak():
    d = deployment.Deployment("llama-3.1-8b", "h100-sxm", weights="fp8")
    p = prefill_step(d, batch=1, prompt_tokens=4096)
    # the matmul FLOPs at 1,979 TFLOP/s × 0.77, the attention FLOPs at the FP8 peak itself
    attention_flops = p.attention_s * 1979e12
    assert p.compute_s == pytest.approx(p.attention_s
                                        + (p.flops - attention_flops) / (1979e12 * 0.77))
    one = prefill_step(d.with_(efficiency=dataclasses.replace(CALIBRATED, fp8_matmul_share=1.0)),
                       batch=1, prompt_tokens=4096)
    assert one.attention_s == p.attention_s and one.compute_s < p.compute_s
    # the simulator's timer splits its FLOPs the same way
    t = roofline.StepTimer(d).step([(4096, 0)])
    assert t.compute_s == pytest.approx(t.attention_s + (t.flops - t.attention_s * 1979e12)
                                        / (1979e12 * 0.77), rel=1e-12)
