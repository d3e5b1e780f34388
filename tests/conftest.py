"""Shared fixtures: the whole book executed and built once per test session."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))


@pytest.fixture(scope="session")
def built_book() -> Path:
    """Execute every chapter with papermill and build the HTML (``make book``'s two steps).

    Fails with the chapter's own error if any cell or assertion fails. With
    ``KVLIB_BUILT_BOOK=<path to an html folder>`` the tests read that build instead (e.g. one
    made with ``jupyter-book build --path-output``), and nothing is executed or built.
    """
    prebuilt = os.environ.get("KVLIB_BUILT_BOOK")
    if prebuilt:
        path = Path(prebuilt)
        assert (path / "index.html").is_file(), f"KVLIB_BUILT_BOOK={prebuilt} holds no built book"
        return path
    import pipeline

    pipeline.execute_all(jobs=2)
    jb = Path(sys.executable).parent / "jupyter-book"
    result = subprocess.run([str(jb), "build", "-W", "-n", "--keep-going", str(ROOT / "book")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return ROOT / "book" / "_build" / "html"
