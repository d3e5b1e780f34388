"""kvlib.core.data: where data lives, every CSV row checked on load, one slug resolver."""
from __future__ import annotations

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
