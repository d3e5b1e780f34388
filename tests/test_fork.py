"""The "Fork this book" page (book/fork.md): every command on it, run as written.

The commands run in a scratch copy of the repository (``clone``: data and the book folder
copied, the virtual environment and chapters linked), so nothing in the checkout changes. The
rebuild command is the session's own build of the book, run once for all tests.
``test_every_command_on_the_page_is_run`` fails when the page gains a command no test runs.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import kvlib
from doc_commands import (Started, all_commands, commands, inline_commands, make_clone,
                          make_recipe, named_blocks, sh)

ROOT = Path(__file__).resolve().parent.parent
FORK = ROOT / "book" / "fork.md"
CH4_PARAMETERS = ("model", "gpu", "dollars_per_hour", "context_tokens", "output_tokens",
                  "gpu_memory_utilization", "weight_dtype", "kv_dtype")
ANSWER_RERUN = ".venv/bin/python book/pipeline.py 00_answer -p model my-model -p models"
#: Inline commands the page names whose run is a Makefile target: each is checked to be the
#: same command as one run here, or (make install / make book) is what `make test` runs.
MAKE_TARGETS = {"make install", "make book", "make html"}


def blocks() -> dict[str, str]:
    return named_blocks(FORK)


def glued(notebook: Path, name: str) -> str:
    """The text/plain value a chapter glued under ``name``."""
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                return out["data"]["application/papermill.record/text/plain"]
    raise KeyError(f"{notebook.name} glues no {name!r}")


def test_every_command_on_the_page_is_run():
    named = [c for block in blocks().values() for c in commands(block)]
    inline = inline_commands(FORK)
    assert set(all_commands(FORK)) == set(named) | set(inline), "a command in an unnamed block"
    handled = MAKE_TARGETS | {"unset KVLIB_DATA"}
    unhandled = [c for c in inline if c not in handled and not c.startswith(ANSWER_RERUN)]
    assert not unhandled, f"commands on book/fork.md that no test runs: {unhandled}"


def test_the_page_is_in_the_book_and_names_chapter_fours_parameters():
    assert "- file: fork" in (ROOT / "book" / "_toc.yml").read_text()
    assert set(blocks()) == {"fork-copy", "fork-prices", "fork-model", "fork-rerun",
                             "fork-papermill", "fork-rebuild"}
    source = (ROOT / "chapters" / "04_cost.md").read_text(encoding="utf-8")
    cell = re.search(r":tags: \[parameters[^\]\n]*\]\n(.*?)```", source, flags=re.S).group(1)
    assigned = re.findall(r"^(\w+) = ", cell, flags=re.M)
    assert tuple(assigned) == CH4_PARAMETERS, "book/fork.md lists chapter 4's parameters"
    page = FORK.read_text(encoding="utf-8")
    assert all(f"`{name}`" in page for name in CH4_PARAMETERS)


def test_the_make_targets_it_names_are_its_commands():
    """`make html` is the rebuild command; `make book` is `make execute` (pipeline.py, every
    chapter) then `make html` — the two steps the session's ``executed_book`` and
    ``built_book`` run; `make install` is what `make test` (this run) starts with."""
    (rebuild,) = commands(blocks()["fork-rebuild"])
    assert make_recipe("html") == (["install"], [rebuild])
    assert make_recipe("book") == (["execute", "html"], [])
    assert make_recipe("execute") == (["install"], [".venv/bin/python book/pipeline.py"])
    assert make_recipe("test")[1][0] == "$(MAKE) -j2 install browser"


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
    check = ("from kvlib.report import answer; print(answer.price_range('h100-sxm'))")
    low, _, high = eval(sh(clone, f'.venv/bin/python -c "{check}"').stdout)  # noqa: S307
    # 1.85 lies inside the listed range (Nebius's $0.79 spot to Azure's $12.29), so it is unchanged
    assert (low, high) == (0.79, 12.29)
    assert (ROOT / "data" / "prices.csv").read_bytes() == before, "the checkout is untouched"
    # a row naming an unknown GPU is refused, with the reason
    prices = clone / "my-data" / "prices.csv"
    kept = prices.read_text()
    prices.write_text(kept + "h900,X,Y,on-demand,1.0,2026-11,,a quote\n")
    try:
        refused = subprocess.run([sys.executable, "-c", "import kvlib; kvlib.load_prices()"],
                                 cwd=clone, env={"KVLIB_DATA": str(clone / "my-data")},
                                 capture_output=True, text=True)
    finally:
        prices.write_text(kept)
    assert refused.returncode != 0 and "missing from data/gpus.csv: ['h900']" in refused.stderr


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


def test_unset_brings_the_published_data_back(clone):
    _ensure_model(clone)
    (unset,) = [c for c in inline_commands(FORK) if c.startswith("unset")]
    listed = sh(clone, f"{unset}; .venv/bin/kvlib models").stdout
    assert "my-model" not in listed and "llama-3.1-8b" in listed


@pytest.fixture(scope="session", autouse=True)
def _started_reruns(tmp_path_factory) -> dict[str, Started | Path]:
    """The page's long runs, started in the background when this module's first test runs, in
    two scratch repositories of their own: chapter 4 and the landing page rerun for the
    reader's model ("repo": step 0 and step 2's registration run there first), and chapter 1
    rerun with papermill ("book": step 0 first). The tests that read them (``reruns``) run at
    the end of the session, so the runs overlap the tests between. Step 4's rebuild command is
    the session's own build (``built_book``; ``test_the_make_targets_it_names_are_its_commands``),
    so it is not run a second time here."""
    repo = make_clone(tmp_path_factory.mktemp("fork-reruns") / "repo")
    for command in commands(blocks()["fork-copy"]):  # step 0, and step 2's registration:
        sh(repo, command, data=False)                # their checks are the tests above
    _write_config(repo)
    sh(repo, commands(blocks()["fork-model"])[1])
    (mine,) = commands(blocks()["fork-rerun"])
    (landing,) = [c for c in inline_commands(FORK) if c.startswith(ANSWER_RERUN)]
    book = make_clone(tmp_path_factory.mktemp("fork-papermill") / "repo")
    for command in commands(blocks()["fork-copy"]):
        sh(book, command, data=False)
    convert, execute = commands(blocks()["fork-papermill"])
    return {"repo": repo, "chapter 4": Started(repo, mine),
            "landing": Started(repo, landing, data="my-data"),
            "book": book, "papermill": Started(book, f"{convert} && {execute}")}


@pytest.fixture(scope="session")
def reruns(_started_reruns) -> dict[str, subprocess.CompletedProcess | Path]:
    """The background runs, finished (each must succeed), and their repositories."""
    return {name: run if isinstance(run, Path) else run.finish()
            for name, run in _started_reruns.items()}


def test_step3_rerun_one_chapter(reruns, monkeypatch):
    """Chapter 4 for the reader's model on another GPU and context: every figure follows its
    parameters, and the article's own figures do not move."""
    clone = reruns["repo"]
    executed = clone / "book" / "chapters" / "04_cost.ipynb"
    assert json.loads(reruns["chapter 4"].stdout)["parameters"] == {
        "model": "my-model", "gpu": "h200", "context_tokens": 32768, "dollars_per_hour": 2.5}
    glue = {name: glued(executed, name) for name in (
        "c4_my_model", "c4_gpu", "c4_price", "c4_my_context", "c4_my_tokens", "c4_my_conc",
        "c4_a_tokens")}
    assert glue["c4_my_model"] == "'My-Model'"
    assert glue["c4_gpu"] == repr(kvlib.load_gpu("h200").name)  # the GPU by name, not its slug
    assert float(glue["c4_price"]) == 2.5 and int(glue["c4_my_context"]) == 32768
    tps = float(glued(executed, "c4_best_tps"))
    assert math.isclose(float(glued(executed, "c4_best_cost")),
                        kvlib.cost_per_million_tokens(2.5, tps), rel_tol=1e-12)
    assert '\\"value\\":2.5' in executed.read_text(), "the price slider opens at $2.50"
    # the pool follows the GPU: an H200 holds more of the reader's model than an H100
    monkeypatch.setenv("KVLIB_DATA", str(clone / "my-data"))
    h200, h100 = kvlib.kv_pool("my-model", "h200"), kvlib.kv_pool("my-model", "h100-sxm")
    assert int(glue["c4_my_tokens"]) == h200.tokens > h100.tokens
    assert math.isclose(float(glue["c4_my_conc"]), h200.max_concurrency(32768))
    # the article's own figures (Llama-3.1-8B on an H100) do not move with the parameters
    assert int(glue["c4_a_tokens"]) == kvlib.kv_pool("llama-3.1-8b", "h100-sxm").tokens


def test_step3_with_papermill_itself(reruns):
    """Chapter 1 rerun in fp8 with papermill itself (the two commands, run in the background
    by ``_started_reruns``)."""
    executed = reruns["book"] / "book" / "chapters" / "01_per_token_kv.ipynb"
    injected = [c for c in nbformat.read(executed, as_version=4).cells
                if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and 'dtype = "fp8"' in injected[0].source
    # the chapter's figures follow the parameter: Llama-4-Scout's cache at 131,072 tokens in fp8
    scout = kvlib.load_model("llama-4-scout-17b-16e-instruct").kv_bytes(131_072, "fp8")
    assert math.isclose(float(glued(executed, "scout_long_gib")), scout / 2**30, rel_tol=1e-12)


def test_your_model_in_the_landing_pages_chart(reruns):
    """The page's one-line rerun of the landing page with the reader's model: both chosen
    models, with their checkpoints, are in the calculator. Run with a *relative*
    ``KVLIB_DATA=my-data``: the chapter's kernel works in chapters/ yet reads the clone's
    my-data, the only place my-model exists."""
    executed = reruns["repo"] / "book" / "chapters" / "00_answer.ipynb"
    assert glued(executed, "a_model") == "'My-Model'" and glued(executed, "a_n_models") == "2"
    assert glued(executed, "a_n_checkpoints") == "4"  # my-model's own, Llama-3.1-8B's three



