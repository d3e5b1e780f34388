"""The "Fork this book" page (book/fork.md): every command block on it, run as written.

The blocks run in a scratch copy of the repository (the data and the book folder copied, the
virtual environment, chapters and node_modules linked), so nothing in the checkout changes.
The rebuild step needs every other chapter executed: it takes them from the session's book
build (``built_book``; ``KVLIB_BUILT_BOOK=<html folder>`` reuses an existing build).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
FORK = ROOT / "book" / "fork.md"
CH4_PARAMETERS = ("model", "gpu", "dollars_per_hour", "context_tokens", "output_tokens",
                  "gpu_memory_utilization", "weight_dtype", "kv_dtype")


def blocks() -> dict[str, str]:
    """Every named bash block of fork.md: name → text."""
    text = FORK.read_text(encoding="utf-8")
    found = re.findall(r"```\{code-block\} bash\n:name: (\S+)\n\n(.*?)```", text, flags=re.S)
    return dict(found)


def commands(block: str) -> list[str]:
    """The shell commands of a block, backslash continuations and here-documents kept whole."""
    out: list[str] = []
    lines = block.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        cmd = lines[i]
        while cmd.endswith("\\"):
            i += 1
            cmd = cmd[:-1] + lines[i].lstrip()
        heredoc = re.search(r"<<'(\w+)'", cmd)
        if heredoc:
            while lines[i] != heredoc.group(1):
                i += 1
                cmd += "\n" + lines[i]
        out.append(cmd)
        i += 1
    return out


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A scratch repository: data/ and book/ copied (build products left out), the rest linked."""
    repo = tmp_path_factory.mktemp("fork") / "repo"
    repo.mkdir()
    shutil.copytree(ROOT / "data", repo / "data")
    shutil.copytree(ROOT / "book", repo / "book",
                    ignore=shutil.ignore_patterns("_build", "chapters", "vendor"))
    for name in (".venv", "chapters", "node_modules"):
        (repo / name).symlink_to(ROOT / name)
    return repo


def sh(clone: Path, command: str, data: bool = True) -> subprocess.CompletedProcess:
    """Run one command of the page in the clone, with ``KVLIB_DATA`` exported as step 0 does."""
    env = {k: v for k, v in os.environ.items() if k != "KVLIB_DATA"}
    if data:
        env["KVLIB_DATA"] = str(clone / "my-data")
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=clone, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def glued(notebook: Path, name: str) -> str:
    """The text/plain value a chapter glued under ``name``."""
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                return out["data"]["application/papermill.record/text/plain"]
    raise KeyError(f"{notebook.name} glues no {name!r}")


def test_the_page_is_in_the_book_and_names_chapter_fours_parameters():
    assert "- file: fork" in (ROOT / "book" / "_toc.yml").read_text()
    assert set(blocks()) == {"fork-copy", "fork-prices", "fork-model", "fork-rerun",
                             "fork-papermill", "fork-rebuild"}
    source = (ROOT / "chapters" / "04_cost.md").read_text(encoding="utf-8")
    cell = re.search(r":tags: \[parameters\]\n(.*?)```", source, flags=re.S).group(1)
    assigned = re.findall(r"^(\w+) = ", cell, flags=re.M)
    assert tuple(assigned) == CH4_PARAMETERS, "book/fork.md lists chapter 4's parameters"
    page = FORK.read_text(encoding="utf-8")
    assert all(f"`{name}`" in page for name in CH4_PARAMETERS)
    assert ".venv/bin/python book/pipeline.py 04_cost -p dollars_per_hour 2.5" in page


def test_step0_copy_of_the_data(clone):
    for command in commands(blocks()["fork-copy"]):
        sh(clone, command, data=False)
    assert (clone / "my-data" / "prices.csv").read_bytes() == (ROOT / "data" / "prices.csv").read_bytes()
    assert sorted(p.name for p in (clone / "my-data" / "models").iterdir()) == \
        sorted(p.name for p in (ROOT / "data" / "models").iterdir())


def _ensure_data(clone: Path) -> None:
    if not (clone / "my-data").is_dir():
        test_step0_copy_of_the_data(clone)


def test_step1_prices(clone):
    _ensure_data(clone)
    before = (ROOT / "data" / "prices.csv").read_bytes()
    add, show, cost = commands(blocks()["fork-prices"])
    sh(clone, add)
    shown = sh(clone, show).stdout
    assert "My cloud" in shown and "1.85" in shown
    # 1.85 / (1,714 × 3,600) × 10⁶ = $0.2998
    assert "$0.30 per 1M tokens" in sh(clone, cost).stdout
    check = ("from kvlib import answer; print(answer.price_range('h100-sxm'))")
    low, _, high = eval(sh(clone, f'.venv/bin/python -c "{check}"').stdout)  # noqa: S307
    assert (low, high) == (1.49, 12.29)  # 1.85 lies inside the listed range
    assert (ROOT / "data" / "prices.csv").read_bytes() == before, "the checkout is untouched"
    # a row naming an unknown GPU is refused, with the reason
    (clone / "my-data" / "prices.csv").open("a").write("h900,X,Y,on-demand,1.0,2026-11,,\n")
    refused = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", "import kvlib; kvlib.load_prices()"],
                             cwd=clone, env={**os.environ, "KVLIB_DATA": str(clone / "my-data")},
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "missing from data/gpus.csv: ['h900']" in refused.stderr
    lines = (clone / "my-data" / "prices.csv").read_text().splitlines()
    (clone / "my-data" / "prices.csv").write_text("\n".join(lines[:-1]) + "\n")


def _write_config(clone: Path) -> None:
    """A config.json as a reader would download it: Llama-3.1-8B's, cut to 16 layers."""
    config = json.loads((ROOT / "data" / "models" / "llama-3.1-8b.json").read_text())["config"]
    (clone / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 16}))


def test_step2_model_from_config(clone):
    _ensure_data(clone)
    _write_config(clone)
    kv, register, listed, fit = commands(blocks()["fork-model"])
    # straight from the file: 2 × 16 layers × 8 KV heads × 128 × 2 bytes = 65,536 B per token
    assert "65,536 bytes = 64.00 KiB" in sh(clone, kv).stdout
    sh(clone, register)
    record = json.loads((clone / "my-data" / "models" / "my-model.json").read_text())
    assert record["slug"] == "my-model" and record["config"]["num_hidden_layers"] == 16
    assert not (ROOT / "data" / "models" / "my-model.json").exists()
    assert re.search(r"my-model\s+GQA.*16 layers\s+64\.00 KiB/token", sh(clone, listed).stdout)
    out = sh(clone, fit).stdout
    assert "My-Model on 1 × h100-sxm" in out and "does not fit" not in out


def _ensure_model(clone: Path) -> None:
    _ensure_data(clone)
    if not (clone / "my-data" / "models" / "my-model.json").is_file():
        test_step2_model_from_config(clone)


def test_step3_rerun_one_chapter(clone):
    _ensure_model(clone)
    executed = clone / "book" / "chapters" / "04_cost.ipynb"
    cheaper, mine = commands(blocks()["fork-rerun"])
    assert json.loads(sh(clone, cheaper).stdout)["parameters"] == {"dollars_per_hour": 2.5}
    assert glued(executed, "c4_price") == "2.5"
    first = executed.read_bytes()
    sh(clone, mine)
    assert glued(executed, "c4_my_model") == "'My-Model'"
    assert glued(executed, "c4_price") == "2.9"  # back to the published price
    sh(clone, cheaper)
    assert executed.read_bytes() == first, "pipeline.py reruns are byte-identical"


def test_step3_with_papermill_itself(clone):
    _ensure_data(clone)
    convert, execute = commands(blocks()["fork-papermill"])
    sh(clone, convert)
    sh(clone, execute)
    executed = clone / "book" / "chapters" / "04_cost.ipynb"
    assert glued(executed, "c4_price") == "2.5"
    injected = [c for c in nbformat.read(executed, as_version=4).cells
                if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "dollars_per_hour = 2.5" in injected[0].source


def test_step4_rebuild(clone, built_book):
    """The rebuild command, verbatim, on the clone: chapter 4 rerun at $2.50 (step 3), every
    other chapter as the session's build executed it."""
    executed = clone / "book" / "chapters" / "04_cost.ipynb"
    if not executed.is_file() or glued(executed, "c4_price") != "2.5":
        test_step3_with_papermill_itself(clone)
    # the notebooks that build rendered (Sphinx keeps a copy of each source beside the HTML)
    sources = built_book / "_sources" / "chapters"
    for nb in (sources if sources.is_dir() else ROOT / "book" / "chapters").glob("*.ipynb"):
        if nb.name != "04_cost.ipynb":
            shutil.copy(nb, clone / "book" / "chapters" / nb.name)
    (rebuild,) = commands(blocks()["fork-rebuild"])
    sh(clone, rebuild)
    page = (clone / "book" / "_build" / "html" / "chapters" / "04_cost.html").read_text()
    assert "dollars_per_hour</span> <span class=\"o\">=</span> <span class=\"mf\">2.5" in page
    assert (clone / "book" / "_build" / "html" / "index.html").is_file()
