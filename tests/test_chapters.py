"""Chapter hygiene, and every chapter executed by papermill (once per session, shared by every
test that reads an executed chapter) and executed deterministically."""
from __future__ import annotations

import re
from pathlib import Path

import jupytext
import nbformat
import pytest
from conftest import TWICE

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))


def _bib_keys() -> set[str]:
    text = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    return set(re.findall(r"@\w+\{([^,\s]+),", text))


def test_chapters_exist_and_are_in_the_toc():
    assert CHAPTERS, "no chapters"
    toc = (ROOT / "book" / "_toc.yml").read_text()
    for path in CHAPTERS:
        assert f"chapters/{path.stem}" in toc, f"{path.name} is not in book/_toc.yml"


def test_chapter_sources_are_myst_markdown_without_outputs():
    """Sources are MyST markdown, which cannot carry outputs; a notebook committed beside them
    would (and would be a second source of the chapter)."""
    others = sorted(p.name for p in (ROOT / "chapters").iterdir()
                    if p.is_file() and p.suffix != ".md")
    assert not others, f"chapters/ holds files that are not chapter sources: {others}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_exactly_one_parameters_cell(path):
    nb = jupytext.read(path)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} parameters cells"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_network_in_chapters(path):
    code = "\n".join(c.source for c in jupytext.read(path).cells if c.cell_type == "code")
    for pattern in (r"https?://", r"import requests", r"\brequests\.(get|post|Session)",
                    r"\burllib\b", r"\bsocket\b", r"from_pretrained", r"hf_hub", r"snapshot_download"):
        assert not re.search(pattern, code), f"{path.name}: code mentions {pattern!r}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_citation_is_in_the_bibliography(path):
    keys = set()
    for group in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", path.read_text(encoding="utf-8")):
        keys.update(k.strip() for k in group.split(","))
    missing = keys - _bib_keys()
    assert not missing, f"{path.name} cites keys missing from references.bib: {sorted(missing)}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_executed_without_errors(executed_book, built_book, path):
    nb = nbformat.read(executed_book / f"{path.stem}.ipynb", as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", f"{path.name}: {out.get('ename')}"
    assert (built_book / "chapters" / f"{path.stem}.html").is_file()


@pytest.mark.parametrize("stem", TWICE)
def test_execution_is_deterministic(executed_book, second_execution, stem):
    """A second execution, in fresh kernels with another string-hash seed, gives a
    byte-identical notebook: seeded randomness, no times, stable cell and chart ids, no
    dependence on set order, one output per printed stream."""
    first = (executed_book / f"{stem}.ipynb").read_bytes()
    again = (second_execution / f"{stem}.ipynb").read_bytes()
    assert first == again, f"{stem} differs between two executions"
