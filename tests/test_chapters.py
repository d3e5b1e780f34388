"""Chapter hygiene, and every chapter executed by papermill (through the book build)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
sys.path.insert(0, str(ROOT / "book"))


def _bib_keys() -> set[str]:
    text = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    return set(re.findall(r"@\w+\{([^,\s]+),", text))


def test_chapters_exist_and_are_in_the_toc():
    assert CHAPTERS, "no chapters"
    toc = (ROOT / "book" / "_toc.yml").read_text()
    for path in CHAPTERS:
        assert f"chapters/{path.stem}" in toc, f"{path.name} is not in book/_toc.yml"


def test_no_committed_notebooks_with_outputs():
    for nb_path in (ROOT / "chapters").glob("*.ipynb"):
        nb = nbformat.read(nb_path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, nb_path.name


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
def test_chapter_executed_without_errors(built_book, path):
    executed = ROOT / "book" / "chapters" / f"{path.stem}.ipynb"
    nb = nbformat.read(executed, as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", f"{path.name}: {out.get('ename')}"
    assert (built_book / "chapters" / f"{path.stem}.html").is_file()


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_execution_is_deterministic(built_book, tmp_path, path):
    """A second execution gives a byte-identical notebook: seeded, no timings, stable ids."""
    import pipeline

    first = ROOT / "book" / "chapters" / f"{path.stem}.ipynb"
    again = pipeline.execute_chapter(path, tmp_path / "again.ipynb")
    assert first.read_bytes() == again.read_bytes(), f"{path.name} differs between runs"


def test_papermill_override_changes_the_chapter(tmp_path):
    import pipeline

    out = pipeline.execute_chapter(ROOT / "chapters" / "01_per_token_kv.md",
                                   tmp_path / "fp8.ipynb", {"dtype": "fp8"})
    text = out.read_text()
    assert "KV cache per token, fp8 (KiB)" in text
    assert "KV cache per token, bf16 (KiB)" not in text
