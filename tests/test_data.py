"""kvlib.core.data: where data lives, every CSV row checked on load, one slug resolver."""
from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

import kvlib
from kvlib.core import data

ROOT = Path(__file__).resolve().parent.parent


def _data_csvs(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.csv"))


@pytest.mark.parametrize("name", _data_csvs(ROOT / "data"))
def test_every_csv_in_data_has_a_schema_and_passes_it(name, monkeypatch):
    monkeypatch.delenv("KVLIB_DATA", raising=False)
    assert data.csv_path(name) == ROOT / "data" / name


@pytest.fixture()
def my_data(tmp_path, monkeypatch) -> Path:
    """A copy of data/ that ``KVLIB_DATA`` points at (tables and models)."""
    shutil.copytree(ROOT / "data", tmp_path / "data")
    monkeypatch.setenv("KVLIB_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def _append(path: Path, line: str) -> int:
    """Append one row; return its line number in the file."""
    text = path.read_text(encoding="utf-8")
    path.write_text(text + ("" if text.endswith("\n") else "\n") + line + "\n", encoding="utf-8")
    return len(path.read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize("price,reason", [
    ("-3", "column dollars_per_gpu_hour: -3 is not positive"),
    ("cheap", "column dollars_per_gpu_hour: 'cheap' is not a number"),
    ("nan", "column dollars_per_gpu_hour: 'nan' is not finite"),
])
def test_a_bad_price_row_is_refused_on_load_naming_file_and_line(my_data, price, reason):
    line = _append(my_data / "prices.csv", f"h100-sxm,Me,x,on-demand,{price},2026-11,,my quote")
    with pytest.raises(ValueError) as err:
        kvlib.load_prices()
    assert str(err.value) == f"{my_data / 'prices.csv'}: line {line}, {reason}"


@pytest.mark.parametrize("row,reason", [
    ("h100-sxm,Me,x,on-demand,1.5,2026-13,,my quote", "column date: '2026-13' is not a real date"),
    ("h100-sxm,Me,x,on-demand,1.5,Nov 2026,,my quote", "column date: 'Nov 2026' is not a date"),
    ("h100-sxm,Me,x,on-demand,1.5,2026-11,,", "no source (fill source_url or notes)"),
    ("h100-sxm,Me,x,on-demand,1.5,2026-11,,a,b", "9 cells for 8 columns"),
    (",Me,x,on-demand,1.5,2026-11,,my quote", "column gpu: is empty"),
    ("h100-sxm,Me,x,rented,1.5,2026-11,,my quote",
     "column pricing: 'rented' is not one of on-demand, spot, marketplace, committed-1y, "
     "committed-3y, reserved"),
])
def test_price_rows_need_dates_sources_and_their_columns(my_data, row, reason):
    line = _append(my_data / "prices.csv", row)
    with pytest.raises(ValueError, match=f"line {line}(, |: ){re.escape(reason)}"):
        kvlib.load_prices()


def test_every_kind_of_offer_loads_and_prices_on_file_are_real(my_data):
    # a 3-year commitment is a kind the file accepts though none is sourced yet
    _append(my_data / "prices.csv", "b200,Me,x,committed-3y,3.1,2026-11-30,,my quote")
    prices = kvlib.load_prices()
    assert set(prices["pricing"]) <= set(data.PRICINGS) and "committed-3y" in set(prices["pricing"])
    dated = prices[prices["date"] != ""]
    assert (prices["dollars_per_gpu_hour"] > 0).all() and len(dated) >= 80
    assert not dated.duplicated(["gpu", "provider", "pricing", "date"]).any()


def test_a_bad_gpu_row_is_refused_before_any_gpu_is_read(my_data):
    path = my_data / "gpus.csv"
    text = path.read_text(encoding="utf-8").replace("1555000000000", "fast", 1)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"gpus\.csv: line 2, column hbm_bytes_per_s: 'fast'"):
        kvlib.load_gpu("h100-sxm")


def test_extra_columns_are_allowed_and_the_known_ones_still_checked(my_data):
    path = my_data / "gpus.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines = [lines[0] + ",interconnect"] + [line + ",NVLink" for line in lines[1:]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert kvlib.load_gpu("h100-sxm").hbm_bytes_per_s == 3.35e12
    path.write_text(path.read_text(encoding="utf-8").replace(",400,", ",-400,", 1))
    with pytest.raises(ValueError, match="column tdp_w: -400 is not positive"):
        kvlib.gpu_slugs()


def test_a_csv_no_schema_covers_is_named():
    with pytest.raises(KeyError, match="no schema for data/mystery.csv"):
        data.schema_for("mystery.csv")


@pytest.mark.parametrize("content,reason", [
    ("[1, 2]", "holds a JSON list, not a registry record"),
    (json.dumps({"slug": "x", "config": {}}), "has no 'source' object"),
    (json.dumps({"slug": "x", "source": {"url": "https://x"}}), "has no 'config' object"),
    (json.dumps({"slug": "x", "source": {}, "config": {}}), "source has no 'url'"),
    ("{oops", "is not valid JSON"),
])
def test_a_bad_registry_record_names_its_file(my_data, content, reason):
    path = my_data / "models" / "broken.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        kvlib.load_model("broken")
    assert str(path) in str(err.value) and reason in str(err.value)


@pytest.mark.parametrize("slug", ["../../x", "a" * 300, "", "x/y", ".hidden", 42, None])
def test_a_slug_that_is_not_a_plain_name_is_refused(slug):
    with pytest.raises(ValueError, match="must be a plain name"):
        kvlib.load_model(slug)
    with pytest.raises(ValueError, match="must be a plain name"):
        kvlib.load_gpu(slug)


def test_close_matches_are_suggested():
    with pytest.raises(KeyError, match="close matches: h100-sxm"):
        data.resolve_slug("GPU", "h100-smx", kvlib.gpu_slugs(), "data/gpus.csv")


def test_a_relative_kvlib_data_is_read_from_where_the_command_started(tmp_path, monkeypatch):
    """``KVLIB_DATA=my-data`` means <start directory>/my-data even after a change of directory,
    as in papermill's kernels, which run in chapters/ but inherit ``$PWD``."""
    monkeypatch.setenv("KVLIB_DATA", "my-data")
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.chdir(ROOT / "chapters")
    assert data.data_dir() == tmp_path / "my-data"
    monkeypatch.delenv("PWD")
    assert data.data_dir() == ROOT / "chapters" / "my-data"  # no $PWD: the current directory


def test_a_file_that_is_not_csv_text_is_one_value_error(my_data):
    (my_data / "prices.csv").write_bytes(b"gpu,provider\n\xff\xfe,x\n")
    with pytest.raises(ValueError, match="prices.csv is not a readable CSV"):
        kvlib.load_prices()
    (my_data / "prices.csv").unlink()
    with pytest.raises(ValueError, match="prices.csv is missing"):
        kvlib.load_prices()


# --- forked data that holds a wrong number: refused on load, naming file, line and column ---

def _edit(path: Path, key: str, value: str, **cells: str) -> int:
    """Set ``cells`` in the first row of ``path`` whose ``key`` is ``value``; return its line."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        rows, line = [], None
        for row in reader:
            if line is None and row[key] == value:
                row.update(cells)
                line = reader.line_num
            rows.append(row)
        header = list(reader.fieldnames or [])
    assert line is not None, f"no row {key}={value} in {path}"
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return line


@pytest.mark.parametrize("cells,reason", [
    # the user trial: a runtime total ~11,600 times the 80 GiB card (a pool of 6.9 billion tokens)
    ({"memory_bytes_runtime": "999999999999999"},
     "column memory_bytes_runtime: 999999999999999 bytes is more than 1% above "
     "memory_bytes_stated 85899345920"),
    ({"memory_bytes_nvml": "87000000000"},
     "column memory_bytes_nvml: 87000000000 bytes is more than 1% above memory_bytes_stated "
     "85899345920"),
    ({"memory_bytes_nvml": "81559"},  # nvidia-smi's MiB, not bytes
     "column memory_bytes_nvml: 81559 bytes is below 50% of memory_bytes_stated 85899345920 "
     "(is it in bytes?)"),
    ({"memory_bytes_runtime": "0"}, "column memory_bytes_runtime: 0 is below 1"),
    ({"memory_bytes_runtime": "-5"}, "column memory_bytes_runtime: -5 is below 1"),
    ({"memory_bytes_stated": "80000000000"},  # the "80GB" read as 10⁹ bytes
     "column memory_bytes_stated: 80000000000 is not the 80 GB of memory_stated_as read as "
     "80 × 2^30 = 85899345920 bytes"),
    ({"vendor": "Nvidia"}, "column vendor: 'Nvidia' is not one of NVIDIA, AMD"),
    ({"vendor": "Intel"}, "column vendor: 'Intel' is not one of NVIDIA, AMD"),
    ({"hbm_bytes_per_s": "0"}, "column hbm_bytes_per_s: 0 is not positive"),
    ({"bf16_dense_flops": "-1e15"}, "column bf16_dense_flops: -1e15 is not positive"),
    ({"interconnect_bytes_per_s_per_direction": "fast"},
     "column interconnect_bytes_per_s_per_direction: 'fast' is not a number"),
    ({"interconnect_peer_bytes_per_s_per_direction": "900000000000"},
     "column interconnect_peer_bytes_per_s_per_direction: 900000000000 is above "
     "interconnect_bytes_per_s_per_direction 450000000000"),
    ({"interconnect_peer_bytes_per_s_per_direction": ""},
     "column interconnect_peer_bytes_per_s_per_direction: is empty while "
     "interconnect_bytes_per_s_per_direction is filled (give both or neither)"),
    ({"interconnect_source_url": ""},
     "interconnect_bytes_per_s_per_direction is filled but interconnect_source_url is empty"),
])
def test_a_forked_gpu_row_with_an_impossible_figure_is_refused(my_data, cells, reason):
    path = my_data / "gpus.csv"
    line = _edit(path, "slug", "h100-sxm", **cells)
    with pytest.raises(ValueError) as err:
        kvlib.load_gpu("h100-sxm")
    message = str(err.value)
    assert message in (f"{path}: line {line}, {reason}", f"{path}: line {line}: {reason}")
    assert "\n" not in message


def test_forked_gpu_totals_just_below_or_at_the_stated_size_load(my_data):
    # GDDR with ECC reports ~93.7% of the stated size; HBM totals lie just below it; a total at
    # the stated size (A100 80GB's nvidia-smi) or a hair above it (±5 MiB rounding) is fine too
    path = my_data / "gpus.csv"
    stated = 85899345920
    _edit(path, "slug", "h100-sxm", memory_bytes_runtime=str(stated + 5 * 2**20),
          memory_bytes_nvml=str(round(stated * 0.937)), vendor="AMD")
    g = kvlib.load_gpu("h100-sxm")
    assert g.usable_memory_bytes == stated + 5 * 2**20 and g.vendor == "AMD"


@pytest.mark.parametrize("row,reason", [
    ("h100-sxm,Me,x,on-demand,,2026-11,https://example.com/quote,",
     "column dollars_per_gpu_hour: is empty"),
    ("h100-sxm,Me,x,on-demand,0,2026-11,https://example.com/quote,",
     "column dollars_per_gpu_hour: 0 is not positive"),
    ("h100-sxm,Me,x,on-demand,-2.5,2026-11,https://example.com/quote,",
     "column dollars_per_gpu_hour: -2.5 is not positive"),
    ("h100-sxm,Me,x,on-demand,1.5,2026-11,,", "no source (fill source_url or notes)"),
    ("h100-sxm,Me,x,on-demand,1.5,2026-11,  ,  ", "no source (fill source_url or notes)"),
    ("h100-sxm,Me,x,on-demand,1.5,2026-11,my blog,", "column source_url: 'my blog' is not an "
     "http(s) URL"),
])
def test_a_forked_price_row_needs_a_positive_price_and_a_source(my_data, row, reason):
    line = _append(my_data / "prices.csv", row)
    with pytest.raises(ValueError) as err:
        kvlib.load_prices()
    assert str(err.value) in (f"{my_data / 'prices.csv'}: line {line}, {reason}",
                              f"{my_data / 'prices.csv'}: line {line}: {reason}")


def test_a_price_row_sourced_by_its_notes_loads_as_the_fork_page_shows(my_data):
    # book/fork.md step 1: a reader's own quote has no page to link; its notes name the source
    _append(my_data / "prices.csv", 'h100-sxm,My cloud,"8x H100 SXM, 1-year reservation",'
                                    "committed-1y,1.85,2026-11,,our negotiated rate")
    prices = kvlib.load_prices()
    assert (prices["provider"] == "My cloud").sum() == 1


def test_a_forked_price_for_an_unknown_gpu_names_its_line(my_data):
    line = _append(my_data / "prices.csv", "h900,X,Y,on-demand,1.0,2026-11,,a quote")
    with pytest.raises(ValueError) as err:
        kvlib.load_prices()
    assert str(err.value) == (f"{my_data / 'prices.csv'}: line {line}, column gpu names GPUs "
                              "missing from data/gpus.csv: ['h900']")


@pytest.mark.parametrize("name,key,value,cells,reason", [
    ("cached_input_prices.csv", "model", "gpt-4o-2024-08-06",
     {"cached_input_dollars_per_million": "5"},
     "column cached_input_dollars_per_million: 5 is above input_dollars_per_million 2.50 (a "
     "cached read would cost more than an uncached one)"),
    ("allreduce.csv", "id", None, {"cuda_graph": "maybe"},
     "column cuda_graph: 'maybe' is not one of yes, no, not stated"),
    ("vllm_runner_fallbacks.csv", "feature", None, {"gpu_vendor": "amd"},
     "column gpu_vendor: 'amd' is not one of NVIDIA, AMD"),
    ("speed_case_bands.csv", "vendor", "AMD", {"vendor": "Nvidia"},
     "column vendor: 'Nvidia' is not one of NVIDIA, AMD"),
    ("speed_ttft_bands.csv", "batch_range", "1", {"median": "0.5", "low": "-0.2", "high": "0.3"},
     "column median: 0.5 is outside low -0.2 to high 0.3"),
    ("speed_ttft_bands.csv", "batch_range", "1", {"high": ""},
     "column high: is empty while low is filled (give both or neither)"),
    ("speed_ttft_bands.csv", "batch_range", "1", {"low": "-1.5"},
     "low -1.5 must be above -1: the speed r·(1 + low) would be 0 or negative and the price "
     "infinite or negative"),
    ("serving_latency_summary.csv", "ttft_n", None, {"tpot_error": "-1"},
     "column tpot_error: -1 is not above -1 (a ratio of positive times, less 1)"),
    ("throughput.csv", "id", "tp001", {"tp": "8"},
     "column tp: 8 is above n_gpus 1 (a tensor-parallel group spans at most the GPUs used)"),
    ("serving_benchmarks.csv", "id", "sb001", {"median_ttft_ms": "30"},
     "column median_ttft_ms: 30 is above p99_ttft_ms 27.43 (a median is at most the 99th "
     "percentile)"),
    ("speculative.csv", "id", "sp01", {"acceptance_rate": "0.95"},
     "column acceptance_rate: 0.95 is above acceptance_rate_high 0.90 (the low end of a range)"),
])
def test_other_forked_numbers_out_of_range_are_refused(my_data, name, key, value, cells, reason):
    path = my_data / name
    if value is None:  # the first row
        with open(path, encoding="utf-8", newline="") as f:
            value = next(csv.DictReader(f))[key]
    line = _edit(path, key, value, **cells)
    with pytest.raises(ValueError) as err:
        data.csv_path(name)
    assert str(err.value) in (f"{path}: line {line}, {reason}", f"{path}: line {line}: {reason}")
