"""Shared fixtures: the book executed and built once per test session, a second execution for
the determinism test, and a scratch copy of the repository for the documented commands.

Every chapter executes once for the whole session (``executed_book``); the chapter-level tests
read that execution. The determinism test needs each chapter executed a second time, in fresh
kernels with another hash seed: that run starts in the background (one chapter at a time) as
soon as the first one is done, so it overlaps the single-threaded Sphinx build and the tests
that follow instead of adding its time to theirs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Under ``make test`` (``KVLIB_NO_SKIPS=1``) a skipped test fails: everything a test needs
    (torch, transformers, vLLM, Chromium) is installed there, so a skip means a check that
    silently did not run."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("KVLIB_NO_SKIPS") == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under make test, where nothing may be: {reason}"


class _SecondExecution:
    """``book/pipeline.py -o <folder> -j 1`` running in the background."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.log = open(folder.parent / "second_execution.log", "w+")  # noqa: SIM115
        env = {**os.environ, "PYTHONHASHSEED": "2026"}  # another str hash order than the first
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "book" / "pipeline.py"), "-o", str(folder), "-j", "1"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait(self) -> Path:
        status = self.process.wait(timeout=1800)
        self.log.seek(0)
        assert status == 0, f"second execution failed:\n{self.log.read()[-4000:]}"
        return self.folder

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that wait for the background second execution run last, so that it overlaps
    every other test instead of holding the session up."""
    items.sort(key=lambda item: "second_execution" in getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session")
def _second() -> Iterator[list[_SecondExecution]]:
    holder: list[_SecondExecution] = []
    yield holder
    for run in holder:
        run.close()


def _start_second(holder: list[_SecondExecution], tmp_path_factory) -> None:
    if not holder:
        holder.append(_SecondExecution(tmp_path_factory.mktemp("second") / "chapters"))


@pytest.fixture(scope="session")
def executed_book(_second, tmp_path_factory) -> Path:
    """Every chapter executed by papermill into ``book/chapters`` (``make execute``): once per
    session. Fails with each failing chapter's own error. With ``KVLIB_BUILT_BOOK`` set, the
    notebooks already in ``book/chapters`` are used and nothing is executed."""
    if not os.environ.get("KVLIB_BUILT_BOOK"):
        import pipeline

        pipeline.execute_all(jobs=2)
    _start_second(_second, tmp_path_factory)
    return ROOT / "book" / "chapters"


@pytest.fixture(scope="session")
def second_execution(executed_book, _second) -> Path:
    """The folder holding every chapter executed a second time (waits for the background run)."""
    return _second[0].wait()


@pytest.fixture(scope="session")
def built_book(executed_book) -> Path:
    """The HTML built from the session's executed chapters (``make html``).

    With ``KVLIB_BUILT_BOOK=<path to an html folder>`` the tests read that build instead (e.g.
    one made with ``jupyter-book build --path-output``), and nothing is built.
    """
    prebuilt = os.environ.get("KVLIB_BUILT_BOOK")
    if prebuilt:
        path = Path(prebuilt)
        assert (path / "index.html").is_file(), f"KVLIB_BUILT_BOOK={prebuilt} holds no built book"
        return path
    jb = Path(sys.executable).parent / "jupyter-book"
    result = subprocess.run([str(jb), "build", "-W", "-n", "--keep-going", str(ROOT / "book")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return ROOT / "book" / "_build" / "html"


@pytest.fixture(scope="session")
def clone(tmp_path_factory) -> Path:
    """A scratch repository for the documented commands: data/ and book/ copied (build
    products left out), the virtual environment, chapters and node_modules linked, so nothing
    in the checkout changes."""
    repo = tmp_path_factory.mktemp("fork") / "repo"
    repo.mkdir()
    shutil.copytree(ROOT / "data", repo / "data")
    shutil.copytree(ROOT / "book", repo / "book",
                    ignore=shutil.ignore_patterns("_build", "chapters", "vendor"))
    for name in (".venv", "chapters", "node_modules"):
        (repo / name).symlink_to(ROOT / name)
    return repo

