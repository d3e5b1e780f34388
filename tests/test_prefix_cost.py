"""Tests for kvlib.serve.prefix_cost and kvlib.engines.prompts: relations to chapter 4's models, known answers."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import kvlib
from kvlib.serve import prefix_cost
from kvlib.engines import prompts
from kvlib.core.units import KIB, MIB

ROOT = Path(__file__).resolve().parent.parent


def test_no_hit_is_the_plain_prefill():
    step = kvlib.prefill_step("llama-3.1-8b", "h100-sxm", batch=1, prompt_tokens=4096)
    assert prefix_cost.cached_prefill_time_s("llama-3.1-8b", "h100-sxm", prompt_tokens=4096) == step.time_s
    # $ per 1M input tokens = $/h ÷ (tokens/s × 3,600) × 10⁶ at tokens/s = 4,096 / prefill time
    cost = prefix_cost.input_cost_per_million("llama-3.1-8b", "h100-sxm", dollars_per_gpu_hour=2.9)
    assert math.isclose(cost, 2.9 / (4096 / step.time_s * 3600) * 1e6)


def test_cached_prefill_is_bounded_by_the_suffix_and_the_whole_prompt():
    # The suffix alone (no prefix to attend to, no prefix KV to read) is a lower bound; the whole
    # prompt an upper bound (dense model: KV(T − H) + KV(H) = KV(T), same weights).
    kw = dict(batch=1)
    times = []
    for h in (0, 1024, 2048, 3072, 4000):
        t = prefix_cost.cached_prefill_time_s("qwen3-8b", "h100-sxm", prompt_tokens=4096, cached_tokens=h)
        if h:
            suffix = kvlib.prefill_step("qwen3-8b", "h100-sxm", prompt_tokens=4096 - h, **kw).time_s
            assert suffix <= t
        times.append(t)
    assert all(a > b for a, b in zip(times, times[1:])), "more cached tokens, faster"
    saving = prefix_cost.prefill_saving("qwen3-8b", "h100-sxm", prompt_tokens=4096, cached_tokens=2048)
    assert math.isclose(saving["saving"], 1 - times[2] / times[0])


def test_load_time_and_break_even_known_answers():
    # Llama-3.1-8B: 128 KiB per token × 4,096 tokens = 512 MiB = 536,870,912 B; over 63 GB/s
    # (PCIe 5.0 x16, one direction) that is 8.52 ms.
    t = prefix_cost.kv_load_time_s("llama-3.1-8b", 4096, 63e9)
    assert kvlib.load_model("llama-3.1-8b").kv_bytes(4096) == 512 * MIB == 4096 * 128 * KIB
    assert math.isclose(t, 536_870_912 / 63e9)
    # at the break-even bandwidth, loading takes exactly the prefill time of the prefix
    w = prefix_cost.break_even_bandwidth("llama-3.1-8b", "h100-sxm", cached_tokens=4096)
    recompute = kvlib.prefill_step("llama-3.1-8b", "h100-sxm", batch=1, prompt_tokens=4096).time_s
    assert math.isclose(prefix_cost.kv_load_time_s("llama-3.1-8b", 4096, w), recompute)


def test_cached_input_prices():
    df = prefix_cost.cached_input_prices()
    assert df["source_url"].str.startswith("http").all() and (df["date"] != "").all()
    # OpenAI's launch table: $1.25 cached of $2.50 → a share of 0.5; Anthropic 0.30 of 3.00 → 0.1
    assert prefix_cost.cached_share("OpenAI", "gpt-4o-2024-08-06") == 0.5
    assert math.isclose(prefix_cost.cached_share("Anthropic", "Claude 3.5 Sonnet"), 0.1)
    with pytest.raises(KeyError, match="no cached-input price"):
        prefix_cost.cached_share("OpenAI", "gpt-9")
    links = prefix_cost.offload_links()
    assert links["source_url"].str.startswith("http").all()
    # PCIe 5.0 x16: 32 GT/s × 16 lanes × 128/130 / 8 = 63.0 GB/s per direction
    assert links.set_index("link").loc["PCIe 5.0 x16", "bytes_per_s"] == round(32e9 * 16 * 128 / 130 / 8, -9)


def test_prefix_cost_refuses_bad_input():
    with pytest.raises(ValueError, match="cached_tokens"):
        prefix_cost.cached_prefill_time_s("llama-3.1-8b", "h100-sxm", prompt_tokens=100, cached_tokens=100)
    with pytest.raises(ValueError, match="hit_rate"):
        prefix_cost.input_cost_per_million("llama-3.1-8b", "h100-sxm", dollars_per_gpu_hour=2.9, hit_rate=1.5)
    with pytest.raises(ValueError, match="dollars_per_gpu_hour"):
        prefix_cost.input_cost_per_million("llama-3.1-8b", "h100-sxm", dollars_per_gpu_hour=0)
    with pytest.raises(ValueError, match="link_bytes_per_s"):
        prefix_cost.kv_load_time_s("llama-3.1-8b", 10, 0)


def test_workloads_are_seeded_and_share_what_they_say():
    a, b = prompts.rag(20, seed=4), prompts.rag(20, seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a.prompts, b.prompts))
    chat = prompts.multi_turn_chat(5, turns=3)
    # every later turn of a conversation starts with the previous turn's prompt and answer
    last: dict[int, np.ndarray] = {}
    for p, o, s in zip(chat.prompts, chat.outputs, chat.sessions.tolist()):
        if s in last:
            assert np.array_equal(p[:len(last[s])], last[s])
        last[s] = np.concatenate([p, o])
    header = prompts.system_prompt_chat(10, dynamic_tokens=5, dynamic_first=False)
    assert all(np.array_equal(p[:1000], header.prompts[0][:1000]) for p in header.prompts)
    assert chat.lengths().shape == (len(chat), 2)
    with pytest.raises(ValueError, match="order"):
        prompts.rag(5, order="random")
    with pytest.raises(ValueError, match="pool"):
        prompts.few_shot(5, shots=4, pool=2)


@pytest.fixture()
def forked(tmp_path, monkeypatch):
    """A copy of data/ that ``KVLIB_DATA`` points at."""
    shutil.copytree(ROOT / "data", tmp_path / "data")
    monkeypatch.setenv("KVLIB_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def _set_cached_price(path: Path, model: str, cached: str) -> int:
    """Set ``model``'s cached-input price in ``path``; return the row's line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"OpenAI,{model},"))
    cells = lines[at].split(",", 5)
    lines[at] = ",".join(cells[:4] + [cached] + cells[5:])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return at + 1


def test_a_forked_cached_price_above_the_input_price_is_refused(forked):
    # the user trial: $5 cached against $2.50 uncached made cached_share 2.0 (a −100% discount)
    assert prefix_cost.cached_share("OpenAI", "gpt-4o-2024-08-06") == 0.5  # read once
    path = forked / "cached_input_prices.csv"
    line = _set_cached_price(path, "gpt-4o-2024-08-06", "5")
    with pytest.raises(ValueError) as err:
        prefix_cost.cached_share("OpenAI", "gpt-4o-2024-08-06")
    assert str(err.value) == (
        f"{path}: line {line}, column cached_input_dollars_per_million: 5 is above "
        "input_dollars_per_million 2.50 (a cached read would cost more than an uncached one)")
    # equal prices (no discount) and a free cache read are the bounds, and the fork is read anew
    _set_cached_price(path, "gpt-4o-2024-08-06", "2.50")
    assert prefix_cost.cached_share("OpenAI", "gpt-4o-2024-08-06") == 1.0
    _set_cached_price(path, "gpt-4o-2024-08-06", "0")
    assert prefix_cost.cached_share("OpenAI", "gpt-4o-2024-08-06") == 0.0


def test_a_forked_cached_price_given_twice_is_refused(forked):
    path = forked / "cached_input_prices.csv"
    first = _set_cached_price(path, "gpt-4o-2024-08-06", "1.25")
    text = path.read_text(encoding="utf-8")
    path.write_text(text + "OpenAI,gpt-4o-2024-08-06,2025-06-01,2.50,1.00,,"
                           "https://openai.com/api/pricing/,a later price\n", encoding="utf-8")
    line = len(text.splitlines()) + 1
    with pytest.raises(ValueError) as err:
        prefix_cost.cached_share("OpenAI", "gpt-4o-2024-08-06")
    assert str(err.value) == (f"{path}: line {line}, columns provider and model: OpenAI / "
                              f"gpt-4o-2024-08-06 repeats line {first} (keep one price per "
                              "provider and model)")
