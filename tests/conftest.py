"""Shared fixtures: the book executed and built once per test session, in the background, while
the tests that need neither run; and a scratch copy of the repository for the documented commands.

Every chapter executes once for the whole session (``executed_book``, started in the background
as the session's first test starts); the tests that read an executed chapter or the built book
run after all others, so that the execution and the HTML build overlap them instead of adding
their time to them. The determinism test executes ``TWICE`` a second time with another hash
seed, and the golden sample (every public result the book's figures come from) runs under
that other seed too.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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


#: What runs in the background, by the fixture that waits for it, with the order in which the
#: runs end (the golden sample first, the reading of the built pages last): a test runs after
#: the others, once the last run it waits for should have ended (``reruns``: the fork page's).
_READY = {"golden_sample": 1, "executed_book": 2, "reruns": 2, "second_execution": 3,
          "built_book": 3, "page_readings": 4}
_BACKGROUND = tuple(name for name in _READY if name != "reruns")
#: Chapters executed a second time, in fresh kernels with another string-hash seed, for the
#: determinism test: the two quickest, which between them go through every step of the
#: pipeline (parameters, glue, charts, tables, stream output). The numbers every chapter
#: shows come from kvlib, whose public results are checked under that other seed too
#: (``golden_sample``) against the stored golden file.
TWICE = ("01_per_token_kv", "02_architecture_savings")
#: Another str hash order than the first execution's.
SECOND_HASH_SEED = "2026"
_NEEDED = pytest.StashKey[set]()


@pytest.hookimpl(trylast=True)  # after -k and -m deselect: only the tests that will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that read the executed or built book, or wait for a background run, run after the
    others, in the order their runs end (``_READY``), so that the runs overlap every other test
    instead of holding the session up. Records which background runs the selected tests need:
    a session that needs none starts none."""
    def order(item: pytest.Item) -> int:
        return max((_READY.get(name, 0) for name in getattr(item, "fixturenames", ())), default=0)

    items.sort(key=order)
    config.stash[_NEEDED] = {name for item in items
                             for name in getattr(item, "fixturenames", ()) if name in _BACKGROUND}


class _Runs:
    """The session's background runs (``tests/background_runs.py``) in ``folder``: each fixture
    waits for the ones its tests need."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def result(self, name: str, what: str) -> None:
        """Wait for run ``name`` to end; it must have succeeded."""
        status = self.folder / f"{name}.rc"
        deadline = time.monotonic() + 1800
        while not status.exists():
            assert time.monotonic() < deadline, f"{what} still running after 30 minutes"
            time.sleep(0.2)
        log = self.folder / f"{name}.log"
        assert status.read_text() == "0", f"{what} failed:\n{log.read_text()[-4000:]}"


@pytest.fixture(scope="session", autouse=True)
def _background(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> _Runs:
    """Started with the session's first test: the execution of every chapter (``make
    execute``, two at a time), then the HTML build and the second execution of ``TWICE``, then
    every page read in Chromium; the golden sample (``tests/golden_results.py --sample``) from
    the start; each only if a selected test needs it. The second execution and the golden
    sample run under ``SECOND_HASH_SEED``."""
    needed = request.config.stash.get(_NEEDED, set())
    folder = tmp_path_factory.mktemp("background")
    prebuilt = os.environ.get("KVLIB_BUILT_BOOK")
    html = Path(prebuilt) if prebuilt else ROOT / "book" / "_build" / "html"
    flags = ([] if prebuilt or not needed - {"golden_sample"} else ["--execute"]) + \
        (["--build"] if needed & {"built_book", "page_readings"} and not prebuilt else []) + \
        (["--second", *TWICE] if "second_execution" in needed else []) + \
        (["--pages", str(html)] if "page_readings" in needed else []) + \
        (["--golden"] if "golden_sample" in needed else [])
    if flags:
        with open(folder / "runs.log", "w") as errors:
            subprocess.Popen([sys.executable, str(ROOT / "tests" / "background_runs.py"),
                              str(folder), "--watch", str(os.getpid()), "--hash-seed",
                              SECOND_HASH_SEED, *flags], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=errors)
    return _Runs(folder)


@pytest.fixture(scope="session")
def executed_book(_background: _Runs) -> Path:
    """Every chapter executed by papermill into ``book/chapters`` (``make execute``): once per
    session, in the background. Fails with each failing chapter's own error. With
    ``KVLIB_BUILT_BOOK`` set, the notebooks already in ``book/chapters`` are used and nothing
    is executed."""
    if not os.environ.get("KVLIB_BUILT_BOOK"):
        _background.result("execute", "chapter execution")
    return ROOT / "book" / "chapters"


@pytest.fixture(scope="session")
def second_execution(executed_book, _background: _Runs) -> Path:
    """The folder holding ``TWICE`` executed a second time (waits for the background run)."""
    _background.result("second", "second execution")
    return _background.folder / "second"


@pytest.fixture(scope="session")
def page_readings(built_book: Path, _background: _Runs) -> list[dict]:
    """Every page of the built book read in Chromium at each width (``page_readings.py``,
    run in the background as soon as the book is built)."""
    _background.result("pages", "reading the built book in Chromium")
    return json.loads((_background.folder / "pages.json").read_text())


@pytest.fixture(scope="session")
def golden_sample(_background: _Runs) -> Path:
    """The JSON file of the golden sample (waits for the background run)."""
    _background.result("golden", "golden sample")
    return _background.folder / "golden.json"


@pytest.fixture(scope="session")
def built_book(executed_book, _background: _Runs) -> Path:
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
    _background.result("build", "jupyter-book build")
    return ROOT / "book" / "_build" / "html"


@pytest.fixture(scope="session")
def clone(tmp_path_factory) -> Path:
    """A scratch repository for the documented commands (``doc_commands.make_clone``)."""
    return make_clone(tmp_path_factory.mktemp("fork") / "repo")
