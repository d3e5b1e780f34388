"""The model registry: every required model present, sourced, and parseable."""
from __future__ import annotations

import json

import pytest

import kvlib
from kvlib.core.units import KIB

REQUIRED = [
    "llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3.1-8b", "llama-3-70b", "llama-3.1-405b",
    "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3.5-35b-a3b",
    "deepseek-67b", "deepseek-v2", "deepseek-v3", "mistral-7b-v0.1", "mixtral-8x7b",
    "gemma-2-9b", "gemma-3-27b", "gpt-oss-120b", "nemotron-3-nano-30b-a3b", "opt-13b",
    "falcon-7b",
]


def test_required_models_present():
    missing = sorted(set(REQUIRED) - set(kvlib.model_slugs()))
    assert not missing, f"registry lacks {missing}"
    assert len(kvlib.model_slugs()) >= 24


@pytest.mark.parametrize("slug", kvlib.model_slugs())
def test_every_model_is_sourced_and_parses(slug):
    record = kvlib.model_record(slug)
    assert record["slug"] == slug
    source = record["source"]
    assert source["url"].startswith("https://"), f"{slug}: source url"
    assert source.get("accessed"), f"{slug}: access date"
    model = kvlib.load_model(slug)
    # every model keeps something: per-token KV, or (a pure SSM) a constant state
    assert model.kv_bytes_per_token() > 0 or model.state_bytes() > 0
    assert model.kv_bytes(4096) > model.kv_bytes(0) == 0


@pytest.mark.parametrize("slug,kib", [
    # 2 × L × K × H × 2 bytes, from each config:
    ("llama-3.1-8b", 128),     # 2 × 32 × 8 × 128 × 2 = 131,072 B
    ("qwen3-8b", 144),         # 2 × 36 × 8 × 128 × 2 = 147,456 B
    ("qwen3-32b", 256),        # 2 × 64 × 8 × 128 × 2 = 262,144 B
    ("llama-3.1-405b", 504),   # 2 × 126 × 8 × 128 × 2 = 516,096 B
    ("llama-2-7b", 512),       # 2 × 32 × 32 × 128 × 2 = 524,288 B
    ("opt-13b", 800),          # 2 × 40 × 40 × 128 × 2 = 819,200 B
    ("qwen3-30b-a3b", 96),     # 2 × 48 × 4 × 128 × 2 = 98,304 B
    ("qwen3.5-35b-a3b", 20),   # 10 full layers: 2 × 10 × 2 × 256 × 2 = 20,480 B
    ("nemotron-3-nano-30b-a3b", 6),  # 6 attention layers: 2 × 6 × 2 × 128 × 2 = 6,144 B
    ("deepseek-v3", 68.625),   # 61 × (512 + 64) × 2 = 70,272 B
])
def test_known_per_token_sizes(slug, kib):
    assert kvlib.load_model(slug).kv_bytes_per_token("bf16") == kib * KIB


def test_unknown_slug_lists_close_matches():
    with pytest.raises(KeyError, match="llama-3.1-8b"):
        kvlib.load_model("llama-3.1-8")


def test_data_dir_override(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    record = {"slug": "toy", "name": "Toy", "source": {"url": "https://example.org", "accessed": "x"},
              "config": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}}
    (tmp_path / "models" / "toy.json").write_text(json.dumps(record))
    monkeypatch.setenv("KVLIB_DATA", str(tmp_path))
    assert kvlib.model_slugs() == ["toy"]
    # 2 × 2 layers × 4 heads × 16 × 2 bytes = 512 B
    assert kvlib.load_model("toy").kv_bytes_per_token() == 512


def test_registry_table_has_every_model():
    table = kvlib.registry_table()
    assert len(table) == len(kvlib.model_slugs())
    assert ((table["kv_bytes_per_token"] > 0) | (table["state_bytes"] > 0)).all()
