"""What-if models: cache geometries nobody published, built from ones that were.

The chapters compare designs on one fixed shape, and rebuild models whose configs are not in
the registry from the geometry their authors documented:

* :func:`as_mha` — a full-attention model with one KV head per query head (chapter 1's
  Llama-2-70B as multi-head attention, the 8× GQA pair the article was looking for);
* :func:`attention_ladder` — one model shape written with every attention design (chapter 2);
* :func:`kexaone` — K-EXAONE from its model card: 12 groups of three sliding-window layers and
  one global layer, 8 KV heads of dimension 128 on every layer;
* :func:`falcon_h1_7b` — Falcon-H1-7B from the transformers documentation's geometry table.

:func:`cache_table` tabulates any of them: bytes per token, constant state and one sequence's
cache at a list of context lengths. Bytes as everywhere in kvlib; KiB, MiB and GiB (binary)
only in the table's column names.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from .layers import AttentionLayer, GatedDeltaNetLayer, Mamba2Layer, MLALayer
from .model import Model, model_from_layers
from ..core.units import GIB, KIB, MIB

#: The rungs of :func:`attention_ladder`, in order (names as the chapter's table shows them).
LADDER = ("MHA (64 KV heads)", "GQA-8", "MQA", "MLA 512 + 64", "GQA-8, all windowed 4,096",
          "GQA-8, 1:1 local:global, W 4,096", "GQA-8, 5:1 local:global, W 1,024",
          "GQA-8, 3:1 local:global, W 128", "GQA-8, 1:1 local:global, W 128",
          "Gated DeltaNet 3:1 + GQA-8", "Mamba-2 9:1 + GQA-8")


def _full_attention(model: Model) -> tuple[int, int]:
    """(query heads, head dim) of a model whose layers are all full attention of one geometry."""
    kinds = {(type(layer), getattr(layer, "window", None), getattr(layer, "chunk", None),
              getattr(layer, "head_dim", None)) for layer in model.layers}
    if len(kinds) != 1 or next(iter(kinds))[:3] != (AttentionLayer, None, None):
        raise ValueError(f"{model.name}: a what-if needs layers that are all full attention "
                         f"of one head dimension")
    if not model.n_heads:
        raise ValueError(f"{model.name}: the number of query heads is not known")
    return model.n_heads, model.layers[0].head_dim


def as_mha(model: Model) -> Model:
    """``model`` with one KV head per query head on every layer: the multi-head attention
    counterpart of a GQA or MQA model, same layers and head dimension. ValueError for a model
    whose layers are not all full attention of one geometry."""
    n_heads, head_dim = _full_attention(model)
    layer = AttentionLayer(n_kv_heads=n_heads, head_dim=head_dim)
    return model_from_layers(f"{model.name} as MHA (what-if)", [layer] * model.n_layers,
                             n_heads=n_heads)


def _interleaved(n_layers: int, local: int, every: int, window: int, kv_heads: int,
                 head_dim: int) -> list[AttentionLayer]:
    """``local`` windowed layers then ``every − local`` global ones, repeated over n_layers."""
    return [AttentionLayer(kv_heads, head_dim, window=window) if i % every < local
            else AttentionLayer(kv_heads, head_dim) for i in range(n_layers)]


def attention_ladder(base: Model) -> dict[str, Model]:
    """``base``'s shape (L layers, Q query heads of dimension H, all full attention) written
    with each attention design of :data:`LADDER`: MHA with Q KV heads; GQA with 8; MQA; an
    MLA latent of 512 + 64 (DeepSeek-V2/V3's); sliding windows on every layer or interleaved
    with global layers; Gated DeltaNet (Q/2 key and Q value heads of dimension H, 4-tap
    convolution) three layers in four; Mamba-2 (2Q heads of H/2, state 128, 8 groups) nine in
    ten. The hybrids need L divisible by 4 and by 10. ValueError otherwise, or for a base that
    is not all full attention."""
    n_heads, head_dim = _full_attention(base)
    n_layers = base.n_layers
    if n_layers % 4 or n_layers % 10:
        raise ValueError(f"{base.name}: the ladder's hybrids need a layer count divisible by 4 "
                         f"and 10, got {n_layers}")

    def gqa(k: int, window: int | None = None) -> AttentionLayer:
        return AttentionLayer(n_kv_heads=k, head_dim=head_dim, window=window)

    gdn = GatedDeltaNetLayer(n_k_heads=n_heads // 2, n_v_heads=n_heads, k_head_dim=head_dim,
                             v_head_dim=head_dim, conv_kernel=4)
    mamba = Mamba2Layer(n_heads=2 * n_heads, head_dim=head_dim // 2, state_size=128, n_groups=8,
                        conv_kernel=4)
    layers = [
        [gqa(n_heads)] * n_layers,
        [gqa(8)] * n_layers,
        [gqa(1)] * n_layers,
        [MLALayer(kv_lora_rank=512, rope_dim=64)] * n_layers,
        [gqa(8, 4096)] * n_layers,
        _interleaved(n_layers, 1, 2, 4096, 8, head_dim),
        _interleaved(n_layers, 5, 6, 1024, 8, head_dim),
        _interleaved(n_layers, 3, 4, 128, 8, head_dim),
        _interleaved(n_layers, 1, 2, 128, 8, head_dim),
        [gdn, gdn, gdn, gqa(8)] * (n_layers // 4),
        ([mamba] * 9 + [gqa(8)]) * (n_layers // 10),
    ]
    names = list(LADDER)
    names[0] = f"MHA ({n_heads} KV heads)"
    return {name: model_from_layers(name, rung, n_heads=n_heads)
            for name, rung in zip(names, layers, strict=True)}


def kexaone(window: int | None = 128) -> Model:
    """K-EXAONE's cache geometry from its model card: 48 layers in 12 groups of three
    sliding-window layers of ``window`` tokens and one global layer, 8 KV heads of dimension
    128 on every layer, 64 query heads. ``window=None``: every layer global."""
    glob = AttentionLayer(8, 128)
    local = glob if window is None else AttentionLayer(8, 128, window=window)
    name = ("K-EXAONE geometry, all global" if window is None
            else f"K-EXAONE geometry, window {window:,}")
    return model_from_layers(name, [local, local, local, glob] * 12, n_heads=64)


def falcon_h1_7b() -> Model:
    """Falcon-H1-7B from the geometry in the transformers documentation's Falcon-H1 table:
    44 layers, each with attention (12 query and 2 KV heads of 128) beside a Mamba-2 mixer
    (24 heads of 128, state 256) with ``FalconH1Config``'s defaults of one group and a 4-tap
    convolution; state and cache in bf16."""
    return model_from_layers(
        "Falcon-H1-7B (documented geometry)",
        [AttentionLayer(n_kv_heads=2, head_dim=128),
         Mamba2Layer(n_heads=24, head_dim=128, state_size=256, n_groups=1, conv_kernel=4)] * 44,
        n_heads=12, dtype="bf16")


def cache_table(models: Mapping[str, Model] | Sequence[Model], contexts: Sequence[int],
                dtype: str = "bf16", baseline: Model | None = None) -> pd.DataFrame:
    """One row per model: ``model``, ``attention``, ``kv_kib_per_token`` (KV per token),
    ``state_mib`` (constant recurrent state, in the model's own state dtypes), and for each
    context T (tokens) ``gib_at_{T//1024}k``, one sequence's cache; with ``baseline``, also
    ``saving_at_{T//1024}k``, the baseline's cache over the model's. ``models`` maps a row
    label to a Model, or is a list of Models labelled by name."""
    if not contexts:
        raise ValueError("cache_table needs at least one context length")
    if any(int(t) <= 0 for t in contexts):
        raise ValueError(f"context lengths must be positive, got {list(contexts)}")
    items = models.items() if isinstance(models, Mapping) else [(m.name, m) for m in models]
    rows = []
    for label, m in items:
        row = {"model": label, "attention": m.attention,
               "kv_kib_per_token": m.kv_bytes_per_token(dtype) / KIB,
               "state_mib": m.state_bytes() / MIB}
        for t in contexts:
            row[f"gib_at_{t // 1024}k"] = m.kv_bytes(t, dtype) / GIB
            if baseline is not None:
                row[f"saving_at_{t // 1024}k"] = baseline.kv_bytes(t, dtype) / m.kv_bytes(t, dtype)
        rows.append(row)
    return pd.DataFrame(rows)
