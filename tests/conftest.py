"""Shared fixtures: the book executed and built once per test session, a second execution for
the determinism test, and a scratch copy of the repository for the documented commands.

Every chapter executes once for the whole session (``executed_book``); the chapter-level tests
read that execution. The determinism test needs each chapter executed a second time, in fresh
kernels with another hash seed: that run starts in the background (one chapter at a time) as
soon as the first one is done, and so does the HTML build, so both overlap the tests that
follow instead of adding their time to them.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))

from doc_commands import make_clone  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests draw the same examples on every run (a red CI must be reproducible, and one
# that passed stays passed); HYPOTHESIS_PROFILE=explore draws fresh ones, to look for new bugs.
settings.register_profile("fixed", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


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


class _Background:
    """A command running in the background, its output in ``log`` (a file)."""

    def __init__(self, what: str, argv: list[str], log: Path, env: dict[str, str] | None = None,
                 output: Path | None = None) -> None:
        self.what, self.output = what, output
        self.log = open(log, "w+")  # noqa: SIM115
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                        env=env)

    def wait(self) -> None:
        status = self.process.wait(timeout=1800)
        self.log.seek(0)
        assert status == 0, f"{self.what} failed:\n{self.log.read()[-4000:]}"

    def result(self) -> Path:
        """``output``, once the command has succeeded."""
        self.wait()
        assert self.output is not None, f"{self.what} names no output"
        return self.output

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that read the built book or wait for the fork page's background reruns
    (tests/test_fork.py) run after the others, and those that wait for the background second
    execution last, so that the build and that run overlap every other test
    instead of holding the session up."""
    def order(item: pytest.Item) -> int:
        names = getattr(item, "fixturenames", ())
        if "second_execution" in names:
            return 2
        return 1 if {"built_book", "reruns", "golden_sample"} & set(names) else 0

    items.sort(key=order)


@pytest.fixture(scope="session")
def _background() -> Iterator[dict[str, _Background]]:
    runs: dict[str, _Background] = {}
    yield runs
    for run in runs.values():
        run.close()


def _start_background(runs: dict[str, _Background], tmp_path_factory) -> None:
    """After the first execution: the second one (another hash seed, one chapter at a time,
    into a scratch folder), the HTML build of the first (``make html``) and the golden sample
    (``tests/golden_results.py --sample``): work the tests wait for only at the end, run on
    the core the one-at-a-time tests leave free."""
    if runs:
        return
    scratch = tmp_path_factory.mktemp("second")
    runs["golden"] = _Background(
        "golden sample", [sys.executable, str(ROOT / "tests" / "golden_results.py"), "--sample",
                          str(scratch / "golden.json")],
        scratch / "golden.log", output=scratch / "golden.json")
    env = {**os.environ, "PYTHONHASHSEED": "2026"}  # another str hash order than the first
    runs["second"] = _Background(
        "second execution", [sys.executable, str(ROOT / "book" / "pipeline.py"), "-o",
                             str(scratch / "chapters"), "-j", "1"],
        scratch / "second_execution.log", env, output=scratch / "chapters")
    if not os.environ.get("KVLIB_BUILT_BOOK"):
        jb = Path(sys.executable).parent / "jupyter-book"
        runs["build"] = _Background(
            "jupyter-book build", [str(jb), "build", "-W", "-n", "--keep-going",
                                   str(ROOT / "book")], scratch / "build.log")


@pytest.fixture(scope="session")
def executed_book(_background, tmp_path_factory) -> Path:
    """Every chapter executed by papermill into ``book/chapters`` (``make execute``): once per
    session. Fails with each failing chapter's own error. With ``KVLIB_BUILT_BOOK`` set, the
    notebooks already in ``book/chapters`` are used and nothing is executed."""
    if not os.environ.get("KVLIB_BUILT_BOOK"):
        import pipeline

        pipeline.execute_all(jobs=2)
    _start_background(_background, tmp_path_factory)
    return ROOT / "book" / "chapters"


@pytest.fixture(scope="session")
def second_execution(executed_book, _background) -> Path:
    """The folder holding every chapter executed a second time (waits for the background run)."""
    return _background["second"].result()


@pytest.fixture(scope="session")
def golden_sample(executed_book, _background) -> Path:
    """The JSON file of the golden sample (waits for the background run)."""
    return _background["golden"].result()


@pytest.fixture(scope="session")
def built_book(executed_book, _background) -> Path:
    """The HTML built from the session's executed chapters (``make html``), built in the
    background as soon as they are executed.

    With ``KVLIB_BUILT_BOOK=<path to an html folder>`` the tests read that build instead (e.g.
    one made with ``jupyter-book build --path-output``), and nothing is built.
    """
    prebuilt = os.environ.get("KVLIB_BUILT_BOOK")
    if prebuilt:
        path = Path(prebuilt)
        assert (path / "index.html").is_file(), f"KVLIB_BUILT_BOOK={prebuilt} holds no built book"
        return path
    _background["build"].wait()
    return ROOT / "book" / "_build" / "html"


@pytest.fixture(scope="session")
def clone(tmp_path_factory) -> Path:
    """A scratch repository for the documented commands (``doc_commands.make_clone``)."""
    return make_clone(tmp_path_factory.mktemp("fork") / "repo")
