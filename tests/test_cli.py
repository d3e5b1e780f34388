"""The ``kvlib`` command line, driven as a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlib", *args], capture_output=True, text=True)


def test_kv_table_and_json():
    out = run("kv", "llama-3.1-8b", "--tokens", "131072", "--dtype", "fp8")
    assert out.returncode == 0, out.stderr
    # 2 × 32 × 8 × 128 × 1 byte = 65,536 B = 64 KiB; × 131,072 tokens = 8 GiB
    assert "65,536 bytes = 64.00 KiB" in out.stdout
    assert "8.000 GiB" in out.stdout
    data = json.loads(run("kv", "llama-3.1-8b", "--tokens", "10", "--json").stdout)
    assert data["kv_bytes_per_token"] == 131_072 and data["kv_bytes"] == 1_310_720


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


@pytest.mark.parametrize("args,needle", [
    (("kv", "no-such-model"), "unknown model 'no-such-model'"),
    (("kv", "llama-3.1-8b", "--tokens", "-5"), "n_tokens"),
    (("kv", "llama-3.1-8b", "--dtype", "bf8"), "unknown dtype"),
    (("kv", "llama-3.1-8b", "--tokens", "x"), "invalid int value"),
    (("kv", "/nonexistent/config.json"), "no such config file"),
    (("recheck", "zz99"), "unknown claim"),
    (("frobnicate",), "invalid choice"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    out = run(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_help_has_examples():
    out = run("--help")
    assert out.returncode == 0 and "kvlib fit llama-3.1-8b h100-sxm" in out.stdout
