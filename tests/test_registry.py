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


@pytest.fixture()
def forked_data(tmp_path, monkeypatch):
    """A copy of data/ that KVLIB_DATA points at."""
    import shutil
    from pathlib import Path
    shutil.copytree(Path(__file__).resolve().parent.parent / "data", tmp_path / "data")
    monkeypatch.setenv("KVLIB_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def _write_record(data, slug, config=None, **changes):
    """A record like Llama-3.1-8B's under a new slug (a new file each time: the registry reads a
    file once per modification time), its config updated with ``config``."""
    record = json.loads((data / "models" / "llama-3.1-8b.json").read_text())
    record.update(slug=slug, **changes)
    record["config"].update(config or {})
    path = data / "models" / f"{slug}.json"
    path.write_text(json.dumps(record))
    return path


def test_a_bad_checkpoint_entry_names_its_file(forked_data):
    path = _write_record(forked_data, "bad-ckpt",
                         checkpoint={"total_size_bytes": -5, "format": "bf16"})
    with pytest.raises(ValueError) as err:
        kvlib.load_model("bad-ckpt")
    assert str(err.value) == f"{path}: checkpoint total_size_bytes must be >= 1, got -5"
    assert "\n" not in str(err.value) and "data/models/bad-ckpt.json" in str(err.value)
    _write_record(forked_data, "no-format", checkpoint={"total_size_bytes": 10})
    with pytest.raises(ValueError, match=r"no-format\.json: 'checkpoint' needs total_size_bytes"):
        kvlib.load_model("no-format")


def test_an_unknown_torch_dtype_is_refused_naming_the_file_and_the_field(forked_data):
    path = _write_record(forked_data, "bad-dtype", config={"torch_dtype": "xx"})
    with pytest.raises(ValueError) as err:
        kvlib.load_model("bad-dtype")
    assert str(err.value).startswith(f"{path}: ")
    assert "config field 'torch_dtype' must be one of float32, float16, bfloat16" in str(err.value)
    # a config the reader refuses for another reason names the file too
    _write_record(forked_data, "with-cla", config={"use_cla": True})
    with pytest.raises(ValueError, match=r"with-cla\.json: .*'use_cla'"):
        kvlib.load_model("with-cla")


@pytest.mark.parametrize("layers,match", [
    ([1, 2], r"layers\[0\] is 1 \(int\), not a kvlib layer"),
    ([kvlib.AttentionLayer(8, 128), "full"], r"layers\[1\] is 'full' \(str\)"),
    (5, "layers must be a sequence of kvlib layers, got int"),
    ("full", "layers must be a sequence of kvlib layers, got str"),
])
def test_model_from_layers_refuses_what_is_not_a_layer(layers, match):
    with pytest.raises(TypeError, match=match):
        kvlib.model_from_layers("x", layers)
    # a list of layers is kept as a tuple (the model stays hashable)
    m = kvlib.Model("x", [kvlib.AttentionLayer(8, 128)])
    assert m.layers == (kvlib.AttentionLayer(8, 128),) and hash(m)
