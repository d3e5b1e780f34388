"""Speculative decoding: the acceptance arithmetic, the draft's KV and weights in vLLM's pool,
the verify + draft step, the public answer, the CLI, and the check against published data."""
from __future__ import annotations

import json
import math

import pytest

import kvlib
from kvlib.deployment import Speculative, speculative
from kvlib.engines.speculative import (draft_kv_bytes_per_token, draft_layer_count,
                                       draft_params, lookahead_tokens)
from kvlib.fit.speculative import rate_for_length, speculative_check
from kvlib.report.cli import main
from kvlib.speed.speculative import speculative_step

DSV3 = kvlib.Deployment("deepseek-v3", "h200", tp=8, weights="fp8", speculative="mtp:1:0.85")
LLAMA = kvlib.Deployment("llama-3.1-8b", "h100-sxm", speculative="eagle3:3:0.8")


def test_tokens_per_step_is_leviathan_eq1():
    # k = 1, α = 0.85: 1 + 0.85 = 1.85 = (1 − 0.85²) ÷ (1 − 0.85)
    assert math.isclose(speculative("mtp:1:0.85").tokens_per_step, 1.85)
    # k = 4, α = 0.7: (1 − 0.7⁵) ÷ 0.3 = (1 − 0.16807) ÷ 0.3 = 2.7731
    assert math.isclose(Speculative("eagle", 4, 0.7).tokens_per_step, 2.7731)
    # per-position rates are summed as they are: 1 + 0.8 + 0.6 + 0.45 = 2.85
    assert math.isclose(speculative("eagle3:3:0.8/0.6/0.45").tokens_per_step, 2.85)
    # and back: τ = 1.85 at k = 1 is α = 0.85
    assert math.isclose(rate_for_length(1, 1.85), 0.85)


@pytest.mark.parametrize("text, message", [
    ("medusa:2:0.5", "unknown speculative method"), ("mtp:0:0.5", "num_speculative_tokens"),
    ("mtp:1:1.2", "acceptance must be <= 1"), ("eagle:2:0.5/0.6", "cannot rise"),
    ("eagle:3:0.5/0.4", "lists 2 positions"), ("mtp:1", "expected 'method:k:acceptance'")])
def test_bad_speculation_is_one_line_error(text, message):
    with pytest.raises(ValueError, match=message):
        speculative(text)


def test_draft_kv_per_method():
    # DeepSeek-V3's one MTP layer holds an MLA latent of 512 + 64 bf16 values: 1,152 bytes,
    # whole on each of the 8 GPUs (the latent is not split)
    assert draft_layer_count(DSV3) == 1 and draft_kv_bytes_per_token(DSV3) == 1152
    # EAGLE-3 on Llama-3.1-8B: one layer of 8 KV heads × 128 × (K and V) × 2 bytes = 4,096
    assert draft_kv_bytes_per_token(LLAMA) == 4096 and lookahead_tokens(LLAMA) == 3
    ngram = LLAMA.with_(speculative="ngram:3:0.3")
    assert draft_kv_bytes_per_token(ngram) == 0 and lookahead_tokens(ngram) == 0
    # DeepSeek's report: a 14 B MTP module with its embedding and head (2 × 0.93 B) → ≈ 12 B
    assert 11.0e9 < draft_params(DSV3) < 12.5e9
    with pytest.raises(ValueError, match="no multi-token-prediction layers"):
        draft_layer_count(LLAMA.with_(speculative="mtp:1:0.8"))


def test_pool_counts_the_draft_layer_and_weights():
    base = kvlib.kv_pool(DSV3.with_(speculative=None))
    pool = kvlib.kv_pool(DSV3)
    # 61 MLA layers become 62 in the one group: a block costs 62/61 as much
    assert pool.layers_per_group == base.layers_per_group + 1 == 62
    assert pool.block_bytes * 61 == base.block_bytes * 62
    # and the draft's weights come off the budget first: fewer tokens than 61/62 alone
    assert pool.weights_bytes_per_gpu > base.weights_bytes_per_gpu
    assert pool.tokens < base.tokens * 61 / 62
    with pytest.raises(ValueError, match="vLLM's pool only"):
        kvlib.kv_pool(DSV3.with_(engine="sglang"))


def test_speedup_near_tau_at_batch_one_and_shrinking_with_batch():
    one = speculative_step(LLAMA, 1, 512)
    # batch 1: the 4-token verify step reads the same weights as a decode step (±2%)
    assert one.verify_s < 1.02 * one.decode_s
    assert 1.5 < one.speedup < one.tokens_per_step  # the drafts cost something
    big = speculative_step(LLAMA, 256, 512)
    assert big.speedup < one.speedup  # 1,024 verified tokens per step: compute-bound
    ngram = speculative_step(LLAMA.with_(speculative="ngram:3:0.8"), 1, 512)
    assert ngram.draft_s == 0 and math.isclose(ngram.speedup, ngram.decode_s / ngram.verify_s
                                               * ngram.tokens_per_step)


def test_speculative_decode_cost():
    r = kvlib.speculative_decode(DSV3, 32, 2048, dollars_per_hour=8 * 3.5)
    assert r.tokens_per_s == pytest.approx(r.base_tokens_per_s * r.speedup)
    # $ per 1M scales inversely with throughput at a fixed price
    assert r.dollars_per_million == pytest.approx(r.base_dollars_per_million / r.speedup)
    assert r.extra_kv_bytes_per_token == 1152 and r.pool_tokens < r.base_pool_tokens
    with pytest.raises(ValueError, match="no speculative decoding"):
        kvlib.speculative_decode(DSV3.with_(speculative=None), 1, 128)


def test_launch_command_carries_the_speculative_config():
    cmd = kvlib.launch_command(DSV3)
    i = cmd.argv.index("--speculative-config")
    assert json.loads(cmd.argv[i + 1]) == {"method": "mtp", "num_speculative_tokens": 1}
    with pytest.raises(ValueError, match="draft head's checkpoint"):
        kvlib.launch_command(LLAMA)
    eagle = LLAMA.with_(speculative=Speculative("eagle3", 3, 0.8, model="org/head"))
    assert '"model": "org/head"' in kvlib.launch_command(eagle).text


def test_cli_cost_speculative_json(capsys):
    assert main(["cost", "deepseek-v3", "h200", "--tp", "8", "--weight-dtype", "fp8",
                 "--price", "3.5", "--speculative", "mtp:1:0.85", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["speculative"]
    assert out["method"] == "mtp" and out["tokens_per_step"] == pytest.approx(1.85)
    assert out["speedup"] > 1 and out["extra_kv_bytes_per_token"] == 1152
    assert main(["cost", "--price", "2", "--tps", "100", "--speculative", "mtp:1:0.8"]) == 2
    assert "--speculative applies only with a model" in capsys.readouterr().err


def test_check_against_published_speedups():
    c = speculative_check()
    # 14 chain-drafting points at batch 1 (vLLM issue #20780 and PR #16035), no GPU named
    assert len(c) == 14 and c.gpu_assumed.all() and (c.batch == 1).all()
    # the model is optimistic: it leaves out per-pass draft overheads (median 19%)
    assert 0.15 < c.error.abs().median() < 0.25 and (c.error > 0).all()


def test_serving_point_refuses_speculation_it_does_not_time():
    with pytest.raises(ValueError, match="speculative_decode"):
        kvlib.serving_point(LLAMA, input_tokens=100, output_tokens=10)


def test_draft_layers_beyond_the_checkpoints_mtp_layers_are_refused():
    # DeepSeek-V3 ships one MTP layer (num_nextn_predict_layers 1): vLLM's MTP draft runs that
    # layer and no other, so draft_layers=5 is not a draft it can build; the pool is not shrunk
    five = DSV3.with_(speculative=Speculative("mtp", 1, 0.8, draft_layers=5))
    with pytest.raises(ValueError, match=r"draft_layers=5: DeepSeek-V3 ships 1 "
                                         r"multi-token-prediction layer \(num_nextn_predict_layers\)"):
        draft_layer_count(five)
    with pytest.raises(ValueError, match="draft_layers=5"):
        kvlib.kv_pool(five)
    one = DSV3.with_(speculative=Speculative("mtp", 1, 0.8, draft_layers=1))
    assert draft_layer_count(one) == 1 and kvlib.kv_pool(one) == kvlib.kv_pool(DSV3)
    # a checkpoint without MTP layers cannot be given some by draft_layers
    with pytest.raises(ValueError, match="no multi-token-prediction layers"):
        draft_layer_count(LLAMA.with_(speculative=Speculative("mtp", 1, 0.8, draft_layers=1)))


@pytest.mark.parametrize("model", ["", "   ", 5, ["a/b"]])
def test_a_draft_checkpoint_is_named_by_a_repository(model):
    with pytest.raises(ValueError, match="Speculative.model must name the draft checkpoint"):
        Speculative("eagle", 3, 0.7, model=model)
