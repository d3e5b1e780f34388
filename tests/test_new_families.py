"""New layer kinds and spellings: Jamba, Falcon-H1, Granite-4.0-H, Falcon-Mamba, Llama-4's chunked
attention, DeepSeek-V3.2's indexer keys and BLOOM's ``n_embed``.

Each family's per-token bytes, state bytes and hybrid page size are written out by hand from its
config (arithmetic in the comments), then checked against vLLM 0.33's own spec classes
(``vllm/v1/kv_cache_interface.py``) and state-shape calculator
(``vllm/model_executor/layers/mamba/mamba_utils.py``), fed the config fields as vLLM's model
files read them (skipped where vllm is not installed).
"""
from __future__ import annotations

import math

import pytest

import kvlib
from kvlib import Model
from kvlib.engines.capacity import _group_layout, cache_groups, kv_pool

#: Falcon-H1-7B-Instruct (tiiuae): attention and Mamba-2 in parallel in every layer. Not in the
#: registry: no complete copy of its config.json was found. These are the fields kvlib reads, as
#: two public copies of the published config give them (GitHub code index ids 65865534003 and
#: 70958236989, the latter quoting mlx-community/Falcon-H1-7B-Instruct-4bit's config.json).
FALCON_H1_7B = {
    "model_type": "falcon_h1", "hidden_size": 3072, "num_hidden_layers": 44,
    "num_attention_heads": 12, "num_key_value_heads": 2, "head_dim": 128,
    "intermediate_size": 12288, "vocab_size": 130048, "tie_word_embeddings": False,
    "mamba_d_state": 256, "mamba_n_groups": 1, "mamba_n_heads": 24, "mamba_d_head": 128,
    "mamba_d_ssm": 3072, "mamba_expand": 2, "mamba_d_conv": 4, "mamba_chunk_size": 128,
    "max_position_embeddings": 262144, "torch_dtype": "bfloat16",
}
#: A config shaped like IBM Granite-4.0-H-Small (granitemoehybrid), not in the registry: only
#: trimmed copies of its config.json were found. The geometry (40 layers, 4 of them attention
#: with 8 KV heads of 128; Mamba-2 with 128 heads of 64, one group, state 128, conv 4,
#: expand 2, hidden 4096) is the one vLLM sizes to "Setting attention block size to 528
#: tokens" in vLLM PR #37467 (see /work/brief/research-10.md §3); the positions of the four
#: attention layers are illustrative (only their count sets the cache).
GRANITE_H_SMALL = {
    "model_type": "granitemoehybrid", "hidden_size": 4096, "num_hidden_layers": 40,
    "num_attention_heads": 32, "num_key_value_heads": 8,
    "layer_types": (["mamba"] * 9 + ["attention"]) * 4,
    "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 128,
    "mamba_d_conv": 4, "mamba_expand": 2, "torch_dtype": "bfloat16",
}


def _hybrid_block(state_page: int, attn_page_1: int, align: int = 16) -> int:
    """vLLM's hybrid rule (platforms/interface.py ``_align_hybrid_block_size``): the smallest
    multiple of the kernel alignment (16) whose attention page holds one state page."""
    return align * math.ceil(state_page / (align * attn_page_1))


# --- by hand, from each config ----------------------------------------------------------------

def test_jamba_periodic_attention_and_mamba1():
    # Jamba-v0.1: attention where i % 8 == 4 → layers 4, 12, 20, 28; Mamba-1 elsewhere (28)
    m = kvlib.load_model("jamba-v0.1")
    assert m.layer_counts() == {"full": 4, "mamba1": 28} and m.attention == "GQA+hybrid"
    assert [i for i, lay in enumerate(m.layers) if lay.kind == "full"] == [4, 12, 20, 28]
    # per token: 4 layers × 2 × 8 KV heads × 128 × 2 B = 16,384 (not 32 layers' 131,072)
    assert m.kv_bytes_per_token() == 16_384
    # Mamba-1 state, d_inner = mamba_expand 2 × hidden 4,096 = 8,192, bf16:
    # conv (4 − 1) × 8,192 × 2 = 49,152 + SSM 8,192 × 16 × 2 = 262,144 → 311,296 per layer
    assert m.layers[0].state_bytes(1, "bf16") == 311_296
    assert m.state_bytes() == 28 * 311_296 == 8_716_288
    # block: 16 × ceil(311,296 / (16 × 4,096)) = 16 × 5 = 80 tokens; page 80 × 4,096 = 327,680
    groups = cache_groups(m)
    assert {g.kind: (g.block_size, g.page_bytes) for g in groups} == {
        "full": (80, 327_680), "state": (None, 327_680)}
    # 4 attention + 28 state layers: groups of 4 → 1 + 7 = 8 groups
    assert _group_layout(groups)[:2] == (4, 8)
    # experts on the odd layers (expert_layer_period 2, offset 1): 16 MoE layers of 16 experts
    p = kvlib.params_for("jamba-v0.1")
    assert (p.n_moe_layers, p.n_experts, p.experts_per_token) == (16, 16, 2)


def test_falcon_mamba_is_sized_as_state_only():
    # 64 Mamba-1 layers, d_inner = intermediate_size 8,192, state 16, conv 4, bf16:
    # 311,296 B per layer (as Jamba's) × 64 = 19,922,944 B per sequence, at any length
    m = kvlib.load_model("falcon-mamba-7b")
    assert m.attention == "SSM" and m.layer_counts() == {"mamba1": 64}
    assert m.kv_bytes_per_token() == 0
    assert m.kv_bytes(1) == m.kv_bytes(1_000_000) == 64 * 311_296 == 19_922_944
    # one page holds one sequence's state in one layer; a request needs one block
    pool = kv_pool("falcon-mamba-7b", "h100-sxm")
    assert pool.n_groups == 1 and pool.block_bytes == 64 * 311_296
    assert pool.tokens == 0 and pool.max_concurrency(131_072) == pool.num_blocks


def test_falcon_h1_parallel_hybrid():
    m = Model.from_hf_config(FALCON_H1_7B, name="Falcon-H1-7B")
    assert m.n_layers == 44 and m.layer_counts() == {"full": 44, "mamba2": 44}
    # per token: 44 × 2 × 2 KV heads × 128 × 2 B = 45,056
    assert m.kv_bytes_per_token() == 45_056
    # Mamba-2 per layer: conv 3 × (3,072 + 2 × 1 × 256) × 2 = 21,504;
    # SSM 24 heads × 128 × 256 × 2 = 1,572,864 → 1,594,368 B; × 44 = 70,152,192
    assert m.state_bytes() == 44 * 1_594_368 == 70_152_192
    # block 16 × ceil(1,594,368 / (16 × 1,024)) = 16 × 98 = 1,568; page 1,568 × 1,024
    groups = cache_groups(m)
    assert {g.kind: (g.block_size, g.page_bytes) for g in groups} == {
        "full": (1568, 1_605_632), "state": (None, 1_605_632)}
    assert _group_layout(groups)[:2] == (44, 2)


def test_granite_4_h_spelling():
    m = Model.from_hf_config(GRANITE_H_SMALL, name="Granite-4.0-H-Small shape")
    assert m.layer_counts() == {"mamba2": 36, "full": 4}
    assert m.kv_bytes_per_token() == 4 * 2 * 8 * 128 * 2 == 16_384
    # conv 3 × (8,192 + 2 × 1 × 128) × 2 = 50,688; SSM 128 × 64 × 128 × 2 = 2,097,152
    assert m.layers[0].state_bytes(1, "bf16") == 2_147_840
    # block 16 × ceil(2,147,840 / (16 × 4,096)) = 16 × 33 = 528 (vLLM PR #37467 logs 528)
    full = next(g for g in cache_groups(m) if g.kind == "full")
    assert (full.block_size, full.page_bytes) == (528, 528 * 4_096)


def test_llama4_chunked_attention():
    # 48 layers, 8 KV heads × 128: 4,096 B per token per layer; every 4th layer NoPE (full),
    # the other 36 chunked at 8,192 tokens
    m = kvlib.load_model("llama-4-scout-17b-16e-instruct")
    assert m.layer_counts() == {"chunked": 36, "full": 12} and m.attention == "GQA+chunked"
    assert [i for i, lay in enumerate(m.layers) if lay.kind == "full"][:3] == [3, 7, 11]
    assert m.kv_bytes_per_token() == 48 * 4_096 == 196_608
    # at 131,072 tokens: 12 × 4,096 × 131,072 + 36 × 4,096 × 8,191 = 7,650,263,040 B (7.65 GB),
    # not 48 × 4,096 × 131,072 = 24 GiB
    assert m.kv_bytes(131_072) == 12 * 4096 * 131_072 + 36 * 4096 * 8191 == 7_650_263_040
    # vLLM ChunkedLocalAttentionSpec: ceil(min(8,192 + 8,192, L) / 16) = 1,024 pages per layer
    pool = kv_pool("llama-4-scout-17b-16e-instruct", "h200", n_gpus=8)
    chunked = next(g for g in pool.groups if g.kind == "chunked")
    assert chunked.pages_per_request(131_072, 8192) == 1_024
    # 12 full + 36 chunked → groups of 12: 1 full + 3 chunked; a 128K request needs
    # 8,192 + 3 × 1,024 = 11,264 blocks
    assert (pool.layers_per_group, pool.n_groups) == (12, 4)
    assert pool.blocks_per_request(131_072) == 11_264


def test_deepseek_v32_indexer_keys():
    # per layer: MLA latent 576 × 2 = 1,152 B + indexer keys 128 fp8 + 4 B scale = 132 B
    m = kvlib.load_model("deepseek-v3.2")
    assert m.n_layers == 61 and m.layer_counts() == {"mla": 61, "indexer": 61}
    assert m.kv_bytes_per_token("bf16") == 61 * (1_152 + 132) == 78_324
    # FlashMLA fp8 (656 B) + indexer: 61 × 788 = 48,068
    assert m.kv_bytes_per_token("fp8 FlashMLA (DeepSeek-V3.2)") == 61 * (656 + 132) == 48_068
    # one vLLM group (UniformTypeKVCacheSpecs): a block of 16 tokens costs the sum of the pages,
    # 61 × 16 × (1,152 + 132) = 1,253,184 B; a request needs ceil(L / 16) blocks
    pool = kv_pool("deepseek-v3.2", "h200", n_gpus=8, weight_dtype="fp8")
    assert (pool.n_groups, pool.block_bytes) == (1, 1_253_184)
    assert pool.blocks_per_request(32_768) == 2_048


def test_bloom_n_embed_spelling():
    # BLOOM: hidden in n_embed (14,336), 112 heads → head dim 128, MHA, 70 layers:
    # 2 × 70 × 112 × 128 × 2 = 4,014,080 B per token
    m = kvlib.load_model("bloomz-mt")
    assert m.attention == "MHA" and m.kv_bytes_per_token() == 4_014_080
    # LayerNorms with biases, an embedding norm, a 4 × hidden GELU MLP with biases:
    # 12·h² per layer ≈ 2.47e9 × 70 + 250,880 × 14,336 embeddings ≈ 176.2e9
    assert round(kvlib.params_for("bloomz-mt").total / 1e9, 1) == 176.2


# --- against vLLM's own spec classes ----------------------------------------------------------

@pytest.fixture(scope="module")
def vllm_specs():
    """vLLM 0.33's spec classes and Mamba state-shape calculator (CPU, no model built)."""
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator
    from vllm.v1.kv_cache_interface import (ChunkedLocalAttentionSpec, FullAttentionSpec,
                                            MambaSpec, MLAAttentionSpec,
                                            UniformTypeKVCacheSpecs)
    return {"torch": torch, "shapes": MambaStateShapeCalculator, "full": FullAttentionSpec,
            "mamba": MambaSpec, "mla": MLAAttentionSpec, "chunked": ChunkedLocalAttentionSpec,
            "uniform": UniformTypeKVCacheSpecs}


def _vllm_attention_page_1(v, kv_heads: int, head_dim: int, tp: int) -> int:
    # ModelConfig.get_num_kv_heads: max(1, K // tp)
    return v["full"](block_size=1, num_kv_heads=max(1, kv_heads // tp), head_size=head_dim,
                     dtype=v["torch"].bfloat16).page_size_bytes


def _vllm_state_page(v, shapes) -> int:
    bf16 = v["torch"].bfloat16
    return v["mamba"](block_size=1, shapes=shapes, dtypes=(bf16, bf16)).page_size_bytes


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_jamba_against_vllm(vllm_specs, tp):
    v, cfg = vllm_specs, kvlib.model_record("jamba-v0.1")["config"]
    # vllm/model_executor/models/jamba.py: mamba1_state_shape(intermediate_size =
    # mamba_expand × hidden_size, state_size = mamba_d_state, conv_kernel = mamba_d_conv)
    shapes = v["shapes"].mamba1_state_shape(
        tp_world_size=tp, intermediate_size=cfg["mamba_expand"] * cfg["hidden_size"],
        state_size=cfg["mamba_d_state"], conv_kernel=cfg["mamba_d_conv"])
    state, attn = _vllm_state_page(v, shapes), _vllm_attention_page_1(v, 8, 128, tp)
    m = kvlib.load_model("jamba-v0.1")
    assert m.layers[0].state_bytes(tp, "bf16") == state
    assert m.layers[4].bytes_per_token("bf16", tp) == attn
    full = next(g for g in cache_groups(m, tp=tp) if g.kind == "full")
    assert full.block_size == _hybrid_block(state, attn)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_falcon_h1_against_vllm(vllm_specs, tp):
    v, cfg = vllm_specs, FALCON_H1_7B
    # vllm/model_executor/models/falcon_h1.py: mamba2_state_shape(intermediate_size =
    # mamba_d_ssm, n_groups = mamba_n_groups, num_heads = mamba_n_heads, head_dim = mamba_d_head,
    # state_size = mamba_d_state, conv_kernel = mamba_d_conv)
    shapes = v["shapes"].mamba2_state_shape(
        tp_world_size=tp, intermediate_size=cfg["mamba_d_ssm"], n_groups=cfg["mamba_n_groups"],
        num_heads=cfg["mamba_n_heads"], head_dim=cfg["mamba_d_head"],
        state_size=cfg["mamba_d_state"], conv_kernel=cfg["mamba_d_conv"])
    state, attn = _vllm_state_page(v, shapes), _vllm_attention_page_1(v, 2, 128, tp)
    m = Model.from_hf_config(cfg)
    mamba = next(lay for lay in m.layers if lay.kind == "mamba2")
    assert mamba.state_bytes(tp, "bf16") == state
    full = next(g for g in cache_groups(m, tp=tp) if g.kind == "full")
    assert (full.block_size, full.page_bytes) == (_hybrid_block(state, attn),
                                                  _hybrid_block(state, attn) * attn)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_granite_and_falcon_mamba_against_vllm(vllm_specs, tp):
    v = vllm_specs
    # granitemoehybrid.py: intermediate_size = mamba_expand × hidden_size
    g = GRANITE_H_SMALL
    shapes = v["shapes"].mamba2_state_shape(
        tp_world_size=tp, intermediate_size=g["mamba_expand"] * g["hidden_size"],
        n_groups=g["mamba_n_groups"], num_heads=g["mamba_n_heads"], head_dim=g["mamba_d_head"],
        state_size=g["mamba_d_state"], conv_kernel=g["mamba_d_conv"])
    granite = Model.from_hf_config(g)
    assert granite.layers[0].state_bytes(tp, "bf16") == _vllm_state_page(v, shapes)
    # models/mamba.py (FalconMambaForCausalLM): intermediate_size, state_size, conv_kernel
    cfg = kvlib.model_record("falcon-mamba-7b")["config"]
    shapes = v["shapes"].mamba1_state_shape(
        tp_world_size=tp, intermediate_size=cfg["intermediate_size"],
        state_size=cfg["state_size"], conv_kernel=cfg["conv_kernel"])
    falcon = kvlib.load_model("falcon-mamba-7b")
    assert falcon.state_bytes(tp=tp) == 64 * _vllm_state_page(v, shapes)


def test_chunked_and_indexer_against_vllm(vllm_specs):
    v = vllm_specs
    torch = v["torch"]
    # Llama-4 chunked layers: ChunkedLocalAttentionSpec pages and blocks per request
    spec = v["chunked"](block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16,
                        attention_chunk_size=8192)
    llama4 = kvlib.load_model("llama-4-scout-17b-16e-instruct")
    chunked = next(g for g in cache_groups(llama4) if g.kind == "chunked")
    assert chunked.page_bytes == spec.page_size_bytes
    for max_len in (4096, 20_000, 131_072):
        assert chunked.pages_per_request(max_len, 8192) == (
            spec.max_admission_blocks_per_request(max_in_flight_tokens=8192,
                                                  max_model_len=max_len))
    # DeepSeek-V3.2: MLAAttentionSpec for the latent (576 bf16) and for the indexer keys
    # (DeepseekV32IndexerCache: head 128 + 128 // 128 × 4 = 132 uint8): one uniform-type
    # group whose block is the sum of every layer's page
    latent = v["mla"](block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16)
    keys = v["mla"](block_size=16, num_kv_heads=1, head_size=132, dtype=torch.uint8)
    specs = {**{f"attn.{i}": latent for i in range(61)}, **{f"idx.{i}": keys for i in range(61)}}
    uniform = v["uniform"].from_specs(specs)
    assert uniform is not None
    pool = kv_pool("deepseek-v3.2", "h200", n_gpus=8, weight_dtype="fp8")
    assert pool.block_bytes == uniform.page_size_bytes


# --- MiniMax-M1: lightning (linear) attention beside softmax attention --------------------------

def _minimax_m1() -> dict:
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "data" / "config_corpus" / "minimax-m1.json"
    return json.loads(path.read_text())["config"]


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_minimax_m1_lightning_state_against_vllm(vllm_specs, tp):
    v, cfg = vllm_specs, _minimax_m1()
    torch = v["torch"]
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator
    # vllm/model_executor/layers/mamba/linear/base.py (LinearAttention, MiniMax's lightning
    # attention): state (num_attention_heads // tp, head_dim, head_dim) in the model dtype
    # ("auto" mamba_cache_dtype): 64/tp × 128 × 128 × 2 B = 2,097,152 / tp per layer
    shapes = v["shapes"].linear_attention_state_shape(
        num_heads=cfg["num_attention_heads"], tp_size=tp, head_dim=cfg["head_dim"])
    dtypes = MambaStateDtypeCalculator.linear_attention_state_dtype(torch.bfloat16, "auto")
    state = v["mamba"](block_size=1, shapes=shapes, dtypes=dtypes).page_size_bytes
    assert state == 2_097_152 // tp
    m = Model.from_hf_config({**cfg, "torch_dtype": "bfloat16"}, "minimax-m1")
    lightning = next(lay for lay in m.layers if lay.kind == "lightning")
    assert lightning.state_bytes(tp, "bf16") == state
    assert m.state_bytes(tp=tp) == 70 * state
    # the 10 softmax layers: 8 KV heads of 128 (FullAttentionSpec), 4,096 / tp B per token each
    attn = _vllm_attention_page_1(v, 8, 128, tp)
    assert m.kv_bytes_per_token("bf16", tp) == 10 * attn
    # hybrid block: 16 × ceil(2,097,152 / (16 × 4,096)) = 512 tokens at every tp (both halve)
    full = next(g for g in cache_groups(m, tp=tp) if g.kind == "full")
    assert full.block_size == _hybrid_block(state, attn) == 512


def test_minimax_m1_lightning_state_against_transformers_meta():
    """transformers 5.24's MiniMax (models/minimax, the hub-converted MiniMax-Text-01/M1 layout:
    ``layer_types`` linear_attention / full_attention) built on the meta device with MiniMax-M1's
    geometry, cut to its first 8 layers (7 lightning, then 1 softmax): its ``MiniMaxCache`` keeps
    one (batch, 64, 128, 128) bf16 ``linear_cache`` tensor per lightning layer and K/V of T tokens
    on the softmax layer — kvlib's bytes exactly."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg, n, tokens = _minimax_m1(), 8, 300
    hf = transformers.MiniMaxConfig(
        hidden_size=cfg["hidden_size"], intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=n, num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"],
        vocab_size=cfg["vocab_size"], num_local_experts=cfg["num_local_experts"],
        num_experts_per_tok=cfg["num_experts_per_tok"], tie_word_embeddings=False,
        max_position_embeddings=cfg["max_position_embeddings"],
        layer_types=["full_attention" if k == 1 else "linear_attention"
                     for k in cfg["attn_type_list"][:n]])
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)
        cache = model(input_ids=torch.zeros((1, tokens), dtype=torch.long),
                      use_cache=True).past_key_values
    states = [t for t in cache.linear_cache if isinstance(t, torch.Tensor)]
    kv = [t for layer in cache.layers for t in (getattr(layer, "keys", None),
                                                getattr(layer, "values", None))
          if isinstance(t, torch.Tensor) and t.numel()]
    cut = Model.from_hf_config({**cfg, "torch_dtype": "bfloat16", "num_hidden_layers": n,
                                "attn_type_list": cfg["attn_type_list"][:n]})
    assert len(states) == 7 and all(tuple(t.shape) == (1, 64, 128, 128) for t in states)
    # 7 × 64 × 128 × 128 × 2 B = 14,680,064 B of state
    assert sum(t.numel() * t.element_size() for t in states) == cut.state_bytes() == 14_680_064
    # 300 tokens × 2 × 8 × 128 × 2 B = 1,228,800 B of K/V on the one softmax layer
    assert (sum(t.numel() * t.element_size() for t in kv)
            == tokens * cut.kv_bytes_per_token("bf16") == 1_228_800)


# --- per-layer geometry: Gemma-4's global layers, Nemotron-NAS blocks ---------------------------

def _corpus(slug: str) -> dict:
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "data" / "config_corpus" / f"{slug}.json"
    return json.loads(path.read_text())["config"]


def test_gemma4_global_layers_have_their_own_geometry():
    from kvlib.model.params import count_architecture
    m = Model.from_hf_config(_corpus("gemma-4-31b-it-nvfp4"), "Gemma-4-31B")
    assert m.layer_counts() == {"sliding": 50, "full": 10}
    # sliding: 50 × 2 × 16 KV heads × 256 × 2 B = 819,200; global (global_head_dim 512,
    # num_global_key_value_heads 4, attention_k_eq_v): 10 × 2 × 4 × 512 × 2 B = 81,920
    assert m.kv_bytes_per_token("bf16") == 819_200 + 81_920 == 901_120
    # past the 1,024-token window (131,072 tokens): 50 × 16,384 × 1,023 + 10 × 8,192 × 131,072
    assert m.kv_bytes(131_072) == 50 * 16_384 * 1_023 + 10 * 8_192 * 131_072 == 11_575_459_840
    # attention weights: sliding q and o 2 × 5,376 × 8,192 + k and v 2 × 5,376 × 4,096 =
    # 132,120,576 × 50; global q and o 2 × 5,376 × 16,384 + k 5,376 × 2,048 (no v: the keys are
    # reused as values) = 187,170,816 × 10
    arch = count_architecture(m.architecture)
    assert arch.components["attention"] == 50 * 132_120_576 + 10 * 187_170_816 == 8_477_736_960
    m26 = Model.from_hf_config(_corpus("gemma-4-26b-a4b-nvfp4"), "Gemma-4-26B-A4B")
    # 25 × 2 × 8 × 256 × 2 = 204,800 + 5 × 2 × 2 × 512 × 2 = 20,480
    assert m26.kv_bytes_per_token("bf16") == 225_280
    # every layer: a dense MLP (2,112) beside 128 experts (704, top 8): 3 × 2,816 × 2,112 per layer
    counts = count_architecture(m26.architecture)
    assert counts.components["mlp"] == 30 * 3 * 2_816 * 2_112
    assert (counts.n_experts, counts.experts_per_token) == (128, 8)
    # a Gemma-4 that shares KV across layers (E2B/E4B) is still refused, naming the field
    text = _corpus("gemma-4-31b-it-nvfp4")["text_config"]
    with pytest.raises(ValueError, match="'num_kv_shared_layers' \\(layers that reuse"):
        Model.from_hf_config({**text, "num_kv_shared_layers": 20})
    # the same keys outside Gemma-4 are still refused
    with pytest.raises(ValueError, match="'global_head_dim' \\("):
        Model.from_hf_config({**_corpus("qwen3-0.6b"), "global_head_dim": 512})


def test_gemma4_against_transformers_meta():
    """transformers 5.24's Gemma-4 (its per_layer_config) built on the meta device from the
    31B's text config cut to 6 layers (5 sliding, 1 global), prefilled with 2,000 tokens (past
    the 1,024-token window): its DynamicCache holds kvlib's bytes exactly, the sliding layers
    1,023 tokens of 8 × 256, the global layer all 2,000 of 2 × 512 (one meta forward, ~0.2 s)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kvlib.model.crosscheck import cross_check_config
    text = _corpus("gemma-4-31b-it-nvfp4")["text_config"]
    (row,) = cross_check_config(text, "Gemma-4-31B", (2000,), n_layers=6)
    # 5 × 16,384 × 1,023 + 8,192 × 2,000 = 100,188,160 B
    assert row.transformers_bytes == row.kvlib_bytes == 100_188_160
    assert row.explained
    # the parameters of the same 6 layers, dense (31B) and MoE beside a dense MLP (26B-A4B),
    # equal those of transformers' meta-device model exactly
    from kvlib.model.crosscheck import transformers_model
    from kvlib.model.hf_config import transformers_config
    from kvlib.model.params import count_architecture
    for slug in ("gemma-4-31b-it-nvfp4", "gemma-4-26b-a4b"):
        cut = transformers_config(_corpus(slug)["text_config"], 6)
        hf = transformers_model(cut)
        assert (sum(p.numel() for p in hf.parameters())
                == count_architecture(Model.from_hf_config(cut).architecture).total)



def test_gemma3n_shared_layers_cache_nothing():
    """Gemma-3n-E4B (transformers 5.24's Gemma3nTextConfig defaults): 35 layers, 4 sliding
    (window 512) then 1 full, repeating; the last 15 (num_kv_shared_layers) read the K/V of
    layer 18 (sliding) or 19 (full) and cache nothing, as vLLM 0.33 allocates them none."""
    from kvlib.model.params import count_architecture
    from kvlib.speed.roofline import attention_flops_per_token
    config = _corpus("gemma-3n-e4b")
    m = Model.from_hf_config(config, "Gemma-3n-E4B")
    assert m.layer_counts() == {"sliding": 16, "full": 4, "shared": 15}
    assert [lay.kind for lay in m.layers[18:21]] == ["sliding", "full", "shared"]
    # each caching layer: 2 (K, V) × 2 KV heads × 256 × 2 B = 2,048 B per token; 20 of them
    # (layers 0-19) → 40,960 B, not the 35 × 2,048 = 71,680 B of a stack without sharing
    assert m.kv_bytes_per_token("bf16") == 20 * 2 * 2 * 256 * 2 == 40_960
    unshared = Model.from_hf_config({**config, "num_kv_shared_layers": 0})
    assert unshared.kv_bytes_per_token("bf16") == 35 * 2_048 == 71_680
    # 1,000 tokens: 16 sliding layers keep 511 tokens, 4 full layers all 1,000:
    # 16 × 511 × 2,048 + 4 × 1,000 × 2,048 = 16,744,448 + 8,192,000 = 24,936,448 B
    assert m.kv_bytes(1000, "bf16") == 24_936_448
    # vLLM's pool: groups of the 16 sliding and 4 full layers only, pages of 16 tokens × 2,048 B
    groups = cache_groups(m)
    assert sorted((g.kind, g.layers, g.page_bytes) for g in groups) == [
        ("full", 4, 32_768), ("sliding", 16, 32_768)]
    # the compute stays: 35 layers attend, 2 · 8 query heads · (256 + 256) per token held
    # (≤ 511 in the 28 sliding ones, all 1,000 in the 7 full ones)
    assert attention_flops_per_token(m, 1000) == 2 * 8 * 512 * (28 * 511 + 7 * 1000)
    # and the step model's linear terms (a deployment needs the weights, refused below) agree
    from types import SimpleNamespace
    from kvlib.model.formats import kv_format
    from kvlib.speed.roofline import _context_costs
    kv, flops, _ = _context_costs.__wrapped__(SimpleNamespace(model=m, tp=1, kv=kv_format("bf16")))
    assert (kv.at(1000), flops.at(1000)) == (24_936_448, attention_flops_per_token(m, 1000))
    # no layer_types: transformers' default pattern (every 5th full), the same cache
    plain = {k: v for k, v in config.items() if k not in ("layer_types", "num_kv_shared_layers")}
    assert Model.from_hf_config(plain).layers == m.layers  # absent count: transformers' 15
    # in a multimodal wrapper, with keys transformers reads but that shape nothing (the sliding
    # layers' RoPE base, AltUp's training multiplier): the same cache
    older = {**config, "rope_local_base_freq": 10_000.0, "altup_lr_multiplier": 1.0}
    wrapped = {"model_type": "gemma3n", "text_config": older, "audio_soft_tokens_per_image": 188}
    assert Model.from_hf_config(wrapped).kv_bytes_per_token("bf16") == 40_960
    # AltUp, LAuReL and per-layer embeddings add weights kvlib does not count: refused by name
    with pytest.raises(ValueError, match="'altup_num_inputs' .* the parameter count is not"):
        count_architecture(m.architecture)
    with pytest.raises(ValueError, match="must be below num_hidden_layers"):
        Model.from_hf_config({**config, "num_kv_shared_layers": 35})
    # 13 shared: layer 21 (sliding) is the one vLLM 0.33 would read for the full layers
    with pytest.raises(ValueError, match="'num_kv_shared_layers' .*layer 21's cache in vLLM"):
        Model.from_hf_config({**config, "num_kv_shared_layers": 13})


def test_gemma3n_against_transformers_meta():
    """transformers 5.24's Gemma-3n on the meta device, cut to 10 layers with the last 5 shared
    (layers 5-9 read layer 3's sliding and layer 4's full K/V), prefilled with 600 tokens (past
    the 512-token window): its DynamicCache (a DummyLayer per shared layer) holds kvlib's bytes."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kvlib.model.crosscheck import cross_check_config
    config = {**_corpus("gemma-3n-e4b"), "num_kv_shared_layers": 5}
    (row,) = cross_check_config(config, "Gemma-3n-E4B", (600,), n_layers=10)
    # 4 sliding layers × 511 × 2,048 + 1 full × 600 × 2,048 = 4,186,112 + 1,228,800 B
    assert row.transformers_bytes == row.kvlib_bytes == 5_414_912
    assert row.explained

def test_nemotron_nas_blocks():
    from kvlib.model.params import count_architecture
    config = _corpus("llama-3.3-nemotron-super-49b-v1")
    m = Model.from_hf_config(config, "Llama-3.3-Nemotron-Super-49B")
    # 49 blocks with attention (n_heads_in_group 8: 64 / 8 = 8 KV heads of 8,192 / 64 = 128),
    # 31 with attention.no_op (no cache): 49 × 2 × 8 × 128 × 2 B = 200,704 (not 80 layers' 327,680)
    assert m.layer_counts() == {"full": 49, "none": 31} and m.attention == "GQA"
    assert m.kv_bytes_per_token("bf16") == 49 * 2 * 8 * 128 * 2 == 200_704
    # MLP widths, vLLM's rule: int(2 · ffn_mult · 8,192 / 3) rounded up to 256:
    # 5.25 → 28,672 (49), 1.3125 → 7,168 (10), 1.0 → 5,461 → 5,632 (8), 2.625 → 14,336 (6),
    # 0.5 → 2,730 → 2,816 (6), 3.28125 → 17,920 (1); 3 matrices of 8,192 × width each
    widths = 49 * 28_672 + 10 * 7_168 + 8 * 5_632 + 6 * 14_336 + 6 * 2_816 + 17_920
    arch = m.architecture
    assert sorted({s.intermediate_size for s in arch.layers}) == [
        2_816, 5_632, 7_168, 14_336, 17_920, 28_672]
    assert count_architecture(arch).components["mlp"] == 3 * 8_192 * widths
    # a norm per part a block has: 49 with attention + 80 with an MLP = 129 norms of 8,192, plus
    # the final norm
    assert count_architecture(arch).components["norms"] == (49 + 80 + 1) * 8_192
    # fields vLLM does not read are refused, naming the block
    blocks = [dict(b) for b in config["block_configs"]]
    blocks[0] = {**blocks[0], "attention": {**blocks[0]["attention"], "replace_with_linear": True}}
    with pytest.raises(ValueError, match="'block_configs' \\(layer 0: replace_with_linear"):
        Model.from_hf_config({**config, "block_configs": blocks})
    with pytest.raises(ValueError, match="block_configs describes 79 layers"):
        Model.from_hf_config({**config, "block_configs": config["block_configs"][:79]})
    # outside Nemotron-NAS, block_configs is still refused
    with pytest.raises(ValueError, match="'block_configs' \\("):
        Model.from_hf_config({**_corpus("qwen3-0.6b"), "block_configs": config["block_configs"]})


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_nemotron_nas_against_vllm(vllm_specs, tp):
    """vLLM 0.33: DeciLMDecoderLayer builds attention (with its KV cache, FullAttentionSpec)
    only where attention.no_op is false, with num_attention_heads // n_heads_in_group KV heads;
    the model-wide count comes from NemotronNasModelArchConfigConvertor."""
    from types import SimpleNamespace

    import vllm.config  # noqa: F401  (loads the convertor module without a circular import)
    from vllm.transformers_utils.model_arch_config_convertor import (
        NemotronNasModelArchConfigConvertor)

    def ns(value):  # the config as attributes, the way vLLM reads it
        if isinstance(value, dict):
            return SimpleNamespace(**{k: ns(v) for k, v in value.items()})
        return [ns(v) for v in value] if isinstance(value, list) else value

    v, config = vllm_specs, _corpus("llama-3.3-nemotron-super-49b-v1")
    hf = ns(config)
    kv_heads = NemotronNasModelArchConfigConvertor(hf, hf).get_total_num_kv_heads()
    assert kv_heads == 8
    with_cache = [b for b in hf.block_configs if not b.attention.no_op]
    per_token = sum(_vllm_attention_page_1(v, hf.num_attention_heads // b.attention.n_heads_in_group,
                                           128, tp) for b in with_cache)
    assert len(with_cache) == 49
    assert Model.from_hf_config(config).kv_bytes_per_token("bf16", tp) == per_token


def test_glm52_indexer_on_some_layers(vllm_specs):
    """GLM-5.2's IndexCache: vLLM 0.33 (deepseek_v2.py) builds the indexer, and so its key cache,
    only where max(i − 3 + 1, 0) % 4 == 0; the config's own indexer_types says the same."""
    config = _corpus("glm-5.2")
    m = Model.from_hf_config(config, "GLM-5.2")
    assert m.layer_counts() == {"mla": 78, "indexer": 21}
    full = [i for i, t in enumerate(config["indexer_types"]) if t == "full"]
    assert full == [0, 1, 2, *range(6, 78, 4)]
    # one uniform-type vLLM group: a 16-token block holds every layer's page,
    # 78 × 16 × 1,152 + 21 × 16 × 132 = 1,437,696 + 44,352 = 1,482,048 B
    v, torch = vllm_specs, vllm_specs["torch"]
    latent = v["mla"](block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16)
    keys = v["mla"](block_size=16, num_kv_heads=1, head_size=132, dtype=torch.uint8)
    specs = {**{f"attn.{i}": latent for i in range(78)}, **{f"idx.{i}": keys for i in full}}
    assert 16 * m.kv_bytes_per_token("bf16") == v["uniform"].from_specs(specs).page_size_bytes
    assert 16 * m.kv_bytes_per_token("bf16") == 1_482_048
    # an indexer_types list that disagrees with vLLM's rule is refused, naming it
    shifted = config["indexer_types"][1:] + config["indexer_types"][:1]
    with pytest.raises(ValueError, match="'indexer_types' \\(indexer layers that disagree"):
        Model.from_hf_config({**config, "indexer_types": shifted})
    # index_topk_pattern (one letter per layer) wins over the frequency
    pattern = "".join("F" if t == "full" else "S" for t in config["indexer_types"])
    assert Model.from_hf_config({**config, "index_topk_pattern": pattern}).layers == m.layers


def test_mimo_v2_per_layer_geometry():
    from kvlib.model.params import count_architecture
    config = _corpus("mimo-v2-flash")
    m = Model.from_hf_config(config, "MiMo-V2-Flash")
    # hybrid_layer_pattern: 0 full (layers 0, 5, 11, …, 47: 9), 1 sliding (39)
    assert m.layer_counts() == {"full": 9, "sliding": 39}
    # full: 4 KV heads × (K 192 + V 128) × 2 B = 2,560; sliding (swa_*): 8 × 320 × 2 = 5,120
    assert m.kv_bytes_per_token("bf16") == 9 * 2_560 + 39 * 5_120 == 222_720
    # 131,072 tokens: the sliding layers keep W − 1 = 127 tokens (vLLM's window of 128)
    assert m.kv_bytes(131_072) == 9 * 2_560 * 131_072 + 39 * 5_120 * 127 == 3_045_258_240
    # 308.8 B parameters, 15.4 B active (Xiaomi's model card: 309 B total, 15 B active)
    counts = count_architecture(m.architecture)
    assert (round(counts.total / 1e9), round(counts.active / 1e9)) == (309, 15)
    with pytest.raises(ValueError, match="'add_full_attention_sink_bias' \\(sinks"):
        Model.from_hf_config({**config, "add_full_attention_sink_bias": True})
    with pytest.raises(ValueError, match="'hybrid_layer_pattern' \\("):
        Model.from_hf_config({**_corpus("qwen3-0.6b"), "hybrid_layer_pattern": [0] * 28})


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_mimo_v2_against_vllm(vllm_specs, tp):
    """vLLM 0.33 mimo_v2.py: full layers FullAttentionSpec(num_key_value_heads, head_dim,
    head_size_v = v_head_dim); sliding layers SlidingWindowSpec(swa_num_key_value_heads,
    swa_head_dim, swa_v_head_dim, sliding_window_size)."""
    from vllm.v1.kv_cache_interface import SlidingWindowSpec
    v, cfg = vllm_specs, _corpus("mimo-v2-flash")
    bf16 = v["torch"].bfloat16
    full = v["full"](block_size=16, num_kv_heads=max(1, cfg["num_key_value_heads"] // tp),
                     head_size=cfg["head_dim"], head_size_v=cfg["v_head_dim"], dtype=bf16)
    swa = SlidingWindowSpec(block_size=16, num_kv_heads=cfg["swa_num_key_value_heads"] // tp,
                            head_size=cfg["swa_head_dim"], head_size_v=cfg["swa_v_head_dim"],
                            dtype=bf16, sliding_window=cfg["sliding_window_size"])
    m = Model.from_hf_config(cfg)
    assert m.kv_bytes_per_token("bf16", tp) == (9 * full.page_size_bytes
                                                + 39 * swa.page_size_bytes) // 16
    sliding = next(lay for lay in m.layers if lay.kind == "sliding")
    assert 16 * sliding.bytes_per_token("bf16", tp) == swa.page_size_bytes
    assert sliding.pages_per_request(131_072, 8192, 16) == swa.max_admission_blocks_per_request(
        max_in_flight_tokens=8192, max_model_len=131_072)


def test_mimo_v2_against_transformers_meta():
    """transformers 5.24's MiMo-V2-Flash on the meta device, the first 2 layers (full, sliding):
    exact below the window; past it transformers keeps one token more on the sliding layer (its
    window is sliding_window_size + 1 = 129, vLLM's 128)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kvlib.model.crosscheck import cross_check_config
    rows = cross_check_config(_corpus("mimo-v2-flash"), "MiMo-V2-Flash", (100, 300), n_layers=2)
    # 100 tokens: 100 × (2,560 + 5,120) = 768,000 B, both
    assert rows[0].transformers_bytes == rows[0].kvlib_bytes == 768_000
    # 300 tokens: kvlib 300 × 2,560 + 127 × 5,120 = 1,418,240; transformers one token (5,120) more
    assert rows[1].kvlib_bytes == 1_418_240
    assert rows[1].transformers_bytes - rows[1].kvlib_bytes == 5_120
    # parameters of the two layers (dense, then MoE): transformers' parameters plus the router's
    # score-correction bias, a buffer there and a loaded parameter in vLLM (256 values)
    from kvlib.model.crosscheck import transformers_model
    from kvlib.model.hf_config import transformers_config
    from kvlib.model.params import count_architecture
    cut = transformers_config(_corpus("mimo-v2-flash"), 2)
    hf = transformers_model(cut)
    bias = sum(b.numel() for name, b in hf.named_buffers() if "e_score_correction_bias" in name)
    assert bias == 256
    assert (sum(p.numel() for p in hf.parameters()) + bias
            == count_architecture(Model.from_hf_config(cut).architecture).total)


def test_nemotron_nas_block_fields_are_checked():
    config = _corpus("llama-3.3-nemotron-super-49b-v1")

    def with_block(**attention):
        blocks = [dict(b) for b in config["block_configs"]]
        blocks[3] = {**blocks[3], "attention": {**blocks[3]["attention"], **attention}}
        return {**config, "block_configs": blocks}

    with pytest.raises(ValueError, match="layer 3: attention fields kv_sharing unknown"):
        Model.from_hf_config(with_block(kv_sharing=2))
    with pytest.raises(ValueError, match="layer 3: window_length set"):
        Model.from_hf_config(with_block(window_length=4096))
    with pytest.raises(ValueError, match="no_op must be true or false"):
        Model.from_hf_config(with_block(no_op="yes"))
    with pytest.raises(ValueError, match="n_heads_in_group \\(7\\) does not divide"):
        Model.from_hf_config(with_block(n_heads_in_group=7))


def test_laguna_per_layer_query_heads_against_transformers_meta():
    """Laguna (transformers 5.24 LagunaAttention): per-layer query heads over 8 KV heads and a
    per-head output gate. The first two layers (one dense, one MoE) built on the meta device
    have exactly kvlib's parameter count, and after 600 tokens (past the 512-token window) its
    cache holds kvlib's bytes."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kvlib.model.crosscheck import measure_cache, transformers_model
    from kvlib.model.hf_config import transformers_config
    from kvlib.model.params import count_architecture
    config = _corpus("laguna-xs.2-fp8")
    m = Model.from_hf_config(config, "Laguna-XS.2")
    heads = config["num_attention_heads_per_layer"]
    assert sorted({s.attention.n_heads for s in m.architecture.layers}) == sorted(set(heads))
    # the cache depends on the 8 KV heads of 128 only: 40 × 2 × 8 × 128 × 2 = 163,840 B/token
    assert m.kv_bytes_per_token("bf16") == 163_840
    # tp must divide every layer's query heads (48 and 64): 16 does, 3 divides only 48
    assert m.supports_tp(16) and not m.supports_tp(3)
    cut = transformers_config(config, 2)
    hf = transformers_model(cut)
    ours = Model.from_hf_config(cut)
    assert sum(p.numel() for p in hf.parameters()) == count_architecture(ours.architecture).total
    # layer 0 full (600 tokens), layer 1 sliding (511): (600 + 511) × 4,096 = 4,550,656 B
    assert measure_cache(hf, 600)[0] == ours.kv_bytes(600) == 4_550_656
