"""book/pipeline.py and the build's guard: a failed chapter is never published.

The chapter runs here are the cheapest that show each rule (one short execution of chapter 1
that fails in its first computing cell); every chapter's successful execution is the session's
book build (``built_book``).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import executed_notebooks  # noqa: E402
import pipeline  # noqa: E402
from test_fork import CH4_PARAMETERS  # noqa: E402  (the list book/fork.md documents)


def test_every_chapter_names_its_parameters():
    for source in pipeline.chapter_sources():
        assert pipeline.chapter_parameters(source), source.name
    assert tuple(pipeline.chapter_parameters(ROOT / "chapters" / "04_cost.md")) == CH4_PARAMETERS


def test_a_misspelled_parameter_is_a_one_line_usage_error(capfd, tmp_path):
    out = tmp_path / "04.ipynb"
    assert pipeline.main(["04_cost", "-p", "dollar_per_hour", "2.5", "-o", str(out)]) == 2
    captured = capfd.readouterr()
    assert captured.out == "" and not out.exists()  # refused before anything ran
    assert captured.err == ("pipeline.py: error: 04_cost has no parameter 'dollar_per_hour'; its "
                            f"parameters: {', '.join(CH4_PARAMETERS)}\n")


def test_an_unknown_chapter_is_a_usage_error(capfd):
    assert pipeline.main(["04_costs"]) == 2
    assert capfd.readouterr().err.startswith("pipeline.py: error: no chapter '04_costs'")


def test_a_failed_chapter_prints_its_own_error_and_leaves_no_notebook(capfd, tmp_path):
    out = tmp_path / "01.ipynb"
    out.write_text("an executed notebook from an earlier run")
    assert pipeline.main(["01_per_token_kv", "-p", "dtype", "fp7", "-o", str(out)]) == 1
    captured = capfd.readouterr()
    assert captured.out == ""
    # the chapter's own error (kvlib's ValueError for the dtype cell), on one line
    assert captured.err.startswith("01_per_token_kv: ValueError: unknown dtype 'fp7'")
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n")
    assert not out.exists(), "the stale notebook is removed: it would be published"
    assert list(tmp_path.iterdir()) == [], "no partial file is left either"


def _errored_notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "assert False, 'boom'", outputs=[nbformat.v4.new_output(
            "error", ename="AssertionError", evalue="boom", traceback=[])])])
    nbformat.write(nb, path)


def test_notebook_errors_lists_each_error_output(tmp_path):
    _errored_notebook(tmp_path / "x.ipynb")
    assert executed_notebooks.notebook_errors(tmp_path / "x.ipynb") == [
        "cell 1: AssertionError: boom"]


def test_the_build_refuses_a_notebook_holding_an_error(tmp_path):
    """jupyter-book build -W stops before reading any page when an executed notebook holds
    an error output (a chapter papermill ran by hand, or one left by an older pipeline)."""
    book = tmp_path / "book"
    shutil.copytree(ROOT / "book", book, ignore=shutil.ignore_patterns("_build", "chapters"))
    (book / "chapters").mkdir()
    _errored_notebook(book / "chapters" / "04_cost.ipynb")
    jb = Path(sys.executable).parent / "jupyter-book"
    result = subprocess.run([str(jb), "build", "-W", "-n", "--keep-going", str(book)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    log = result.stdout + result.stderr
    assert ("executed notebooks hold errors, so the book is not built: chapters/04_cost.ipynb "
            "(cell 1: AssertionError: boom)") in log, log[-3000:]
    assert not (book / "_build" / "html" / "chapters" / "04_cost.html").exists()



def test_printed_text_is_one_output_however_the_kernel_flushed_it():
    """A run of stdout messages becomes one output (the split falls where the kernel happened
    to flush: the cause of one chapter 4 execution differing from the next); stderr between
    them, and a display, stay where they are."""
    out = nbformat.v4.new_output
    cell = nbformat.v4.new_code_cell(outputs=[
        out("stream", name="stdout", text="6.63 ms → 151 tokens/s"), out("stream", name="stdout",
                                                                          text="\n"),
        out("stream", name="stderr", text="warning\n"), out("stream", name="stdout", text="a"),
        out("display_data", data={"text/plain": "x"}), out("stream", name="stdout", text="b")])
    nb = pipeline.strip_volatile(nbformat.v4.new_notebook(cells=[cell]))
    assert [(o.output_type, o.get("name"), o.get("text")) for o in nb.cells[0].outputs] == [
        ("stream", "stdout", "6.63 ms → 151 tokens/s\n"), ("stream", "stderr", "warning\n"),
        ("stream", "stdout", "a"), ("display_data", None, None), ("stream", "stdout", "b")]
