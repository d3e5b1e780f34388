"""GPUs and prices from data/: known datasheet figures, runtime totals, lookups and errors."""
from __future__ import annotations

import csv
import math
import shutil
from pathlib import Path

import pytest

import kvlib
from kvlib.hardware.gpus import GPU, gpu_table, load_gpu, price_per_gpu_hour
from kvlib.speed import roofline
from kvlib.model.formats import weight_format
from kvlib.core.units import GIB, MIB

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = ["a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "l40s", "l4",
            "a10g", "rtx-4090", "mi300x"]


def test_required_slugs_present_with_a_source_per_row():
    table = gpu_table()
    assert set(REQUIRED) <= set(table.index)
    for slug, row in table.iterrows():
        assert row["source_url"].startswith("http"), slug
        assert row["accessed"], slug
        if row["memory_bytes_runtime"]:
            assert "http" in row["memory_runtime_source"], slug
        if row["memory_bytes_nvml"]:
            assert "http" in row["memory_nvml_source"], slug


def test_h100_sxm_datasheet_and_runtime():
    g = kvlib.load_gpu("h100-sxm")
    assert g.memory_bytes_stated == 80 * GIB
    # vLLM logs total_gpu_memory 79.22 GiB; nvidia-smi 81,559 MiB
    assert math.isclose(g.memory_bytes_runtime / GIB, 79.22, abs_tol=1e-6)
    assert g.memory_bytes_nvml == 81_559 * MIB
    assert g.usable_memory_bytes == g.memory_bytes_runtime
    assert g.usable_memory_source == "cuda runtime"
    assert g.hbm_bytes_per_s == 3.35e12
    # datasheet 1,979 / 3,958 TFLOPS with sparsity, halved
    assert g.dense_flops("bf16") == 989.5e12 and g.dense_flops("fp8") == 1979e12


def test_dense_not_sparse_figures():
    # dense fp8 is twice dense bf16 on Hopper, Blackwell, Ada and CDNA3
    for slug in ("h100-sxm", "h200", "b200", "l40s", "mi300x"):
        g = kvlib.load_gpu(slug)
        assert math.isclose(g.fp8_dense_flops / g.bf16_dense_flops, 2, rel_tol=0.02), slug
    assert kvlib.load_gpu("a100-80gb").bf16_dense_flops == 312e12  # not the 624 sparse figure


def test_usable_memory_falls_back_to_nvidia_smi_then_datasheet():
    a100 = kvlib.load_gpu("a100-80gb")
    assert a100.memory_bytes_runtime is None
    assert a100.usable_memory_bytes == 81_920 * MIB and a100.usable_memory_source == "nvidia-smi"
    mi = kvlib.load_gpu("mi300x")
    assert mi.usable_memory_bytes == mi.memory_bytes_stated == 192 * GIB
    assert mi.usable_memory_source == "datasheet"


def test_unsourced_values_raise_clearly():
    a10g = kvlib.load_gpu("a10g")
    with pytest.raises(ValueError, match="a10g: no sourced dense bf16"):
        a10g.dense_flops("bf16")
    with pytest.raises(ValueError, match="a10g: no sourced memory bandwidth"):
        a10g.bandwidth()
    with pytest.raises(ValueError, match="fp8"):
        kvlib.load_gpu("a100-40gb").dense_flops("fp8")  # Ampere has no FP8
    with pytest.raises(ValueError, match="compute_dtype"):
        kvlib.load_gpu("h100-sxm").dense_flops("int4")


def test_unknown_gpu_names_close_matches():
    with pytest.raises(KeyError, match="h100-sxm"):
        kvlib.load_gpu("h100sxm")


def test_gpu_validation():
    with pytest.raises(ValueError, match="memory_bytes_stated"):
        GPU(slug="x", name="x", memory_bytes_stated=0)
    with pytest.raises(ValueError, match="hbm_bytes_per_s"):
        GPU(slug="x", name="x", memory_bytes_stated=GIB, hbm_bytes_per_s=-1.0)


def test_compute_dtype_for_weight_formats():
    assert weight_format("fp8").compute_dtype == "fp8"
    assert weight_format("bf16").compute_dtype == weight_format("int4").compute_dtype == "bf16"
    assert weight_format({"experts": "mxfp4"}).compute_dtype == "bf16"  # weight-only: bf16 GEMMs


def test_prices_are_dated_sourced_and_name_known_gpus():
    prices = kvlib.load_prices()
    assert (prices["dollars_per_gpu_hour"] > 0).all()
    assert set(prices["gpu"]) <= set(kvlib.gpu_slugs())
    assert {"on-demand", "spot", "committed-capacity-block"} <= set(prices["pricing"])
    assert (prices["source_url"].str.len() > 0).all()  # the article row names the article
    assert price_per_gpu_hour("h100-sxm", "(article assumption)") == 2.90


def test_price_lookup_is_unambiguous():
    with pytest.raises(KeyError, match="price rows match"):
        price_per_gpu_hour("h100-sxm", "AWS")  # several AWS rows: name the offering


def test_a_gpu_built_in_code_is_held_to_the_data_file_bounds():
    with pytest.raises(ValueError, match=r"^x: memory_bytes_runtime 999999999999999 is more than "
                                         r"1% above memory_bytes_stated 85899345920$"):
        GPU(slug="x", name="x", memory_bytes_stated=80 * GIB, memory_bytes_runtime=999999999999999)
    with pytest.raises(ValueError, match="memory_bytes_nvml"):
        GPU(slug="x", name="x", memory_bytes_stated=GIB, memory_bytes_nvml=2 * GIB)
    with pytest.raises(ValueError, match="^x: vendor must be one of NVIDIA, AMD .*'Intel'$"):
        GPU(slug="x", name="x", memory_bytes_stated=GIB, vendor="Intel")
    with pytest.raises(ValueError, match="peer_bytes_per_s 9e\\+11 is above link_bytes_per_s"):
        GPU(slug="x", name="x", memory_bytes_stated=GIB, link_bytes_per_s=4.5e11,
            peer_bytes_per_s=9e11)
    # a total just below the stated size (the data's), and no vendor (a custom part), are fine
    assert GPU(slug="x", name="x", memory_bytes_stated=80 * GIB,
               memory_bytes_runtime=79 * GIB).usable_memory_bytes == 79 * GIB


@pytest.fixture()
def forked(tmp_path, monkeypatch):
    """A copy of data/ that ``KVLIB_DATA`` points at."""
    shutil.copytree(ROOT / "data", tmp_path / "data")
    monkeypatch.setenv("KVLIB_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def test_forked_allreduce_rows_must_name_known_gpus(forked):
    from kvlib.hardware import gpus
    path = forked / "allreduce.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if ",h100-sxm," in line)
    lines[at] = lines[at].replace(",h100-sxm,", ",h100-smx,", 1)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    gpus.allreduce_latency.cache_clear()  # cached per (GPU, group size): read the fork
    try:
        with pytest.raises(ValueError) as err:
            gpus.allreduce_latency("h100-sxm", 2)
    finally:
        gpus.allreduce_latency.cache_clear()
    assert str(err.value) == (f"{path}: line {at + 1}, column gpu_slug names GPUs missing from "
                              "data/gpus.csv: ['h100-smx']")


def test_a_forked_gpu_file_may_leave_out_columns_it_does_not_require(forked):
    # a reader's own gpus.csv with only the required columns (and a bandwidth) still loads
    path = forked / "gpus.csv"
    keep = ["slug", "name", "vendor", "memory_bytes_stated", "memory_stated_as", "source_url",
            "accessed", "hbm_bytes_per_s"]
    with open(path, encoding="utf-8", newline="") as f:
        rows = [{k: row[k] for k in keep} for row in csv.DictReader(f)]
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, keep, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    g = kvlib.load_gpu("h100-sxm")
    assert g.usable_memory_bytes == 80 * GIB and g.bandwidth() == 3.35e12
    assert g.notes == "" and g.link_bytes_per_s is None


def test_fp8_matmuls_reach_a_smaller_share_of_their_peak():
    from kvlib.hardware import gpus
    # data/gemm_rates.csv, median rate of each engine's large GEMMs (TFLOP/s) ÷ datasheet peak:
    # H100 bf16 median(716.2, 770.9, 786.5) = 770.9 ÷ 989.5 = 0.7791; FP8 (both scalings)
    # median(1017.7, 1053.0, 1092.3, 1182.8, 1219.5, 1225.0) = 1137.55 ÷ 1979 = 0.5748 → 0.7378
    # H200 761.3 ÷ 989.5 = 0.7694; (1160.6 + 1192.7) ÷ 2 = 1176.65 ÷ 1979 = 0.5946 → 0.7728
    # B200 1470.5 ÷ 2250 = 0.6536; (2290.6 + 2373.6) ÷ 2 = 2332.1 ÷ 4500 = 0.5182 → 0.7930
    # A100 has no FP8 rows; the median of the three is 0.7728 → 0.77
    assert gpus.fp8_matmul_share() == 0.77 == roofline.CALIBRATED.fp8_matmul_share
    assert roofline.DATASHEET.fp8_matmul_share == 1.0


def test_only_fp8_tensor_core_matmuls_take_the_fp8_share():
    from kvlib.model.formats import weight_format
    h100, a100 = load_gpu("h100-sxm"), load_gpu("a100-80gb")
    fp8, bf16 = weight_format("fp8"), weight_format("bf16")
    cal = roofline.CALIBRATED
    assert roofline.matmul_rate(h100, fp8, cal) == pytest.approx(1979e12 * 0.77)
    assert roofline.matmul_rate(h100, bf16, cal) == 989.5e12
    assert roofline.matmul_rate(a100, fp8, cal) == 312e12  # Marlin: FP8 weights, 16-bit math
    assert roofline.matmul_rate(h100, fp8, roofline.DATASHEET) == 1979e12
    for bad in (0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="fp8_matmul_share"):
            roofline.Efficiency("x", fp8_matmul_share=bad)


def test_a_forked_gemm_table_without_fp8_rows_says_so(forked):
    from kvlib.hardware import gpus
    path = forked / "gemm_rates.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(line for line in lines if ",fp8" not in line) + "\n",
                    encoding="utf-8")
    with pytest.raises(ValueError, match="no GPU is timed in both bf16 and FP8 GEMMs"):
        gpus.fp8_matmul_share()
