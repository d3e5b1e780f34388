"""Sphinx extension: refuse to build the book from a notebook whose execution failed.

The book renders the notebooks ``book/pipeline.py`` executed (execution is off in the build).
A notebook holding an error output — left by papermill run by hand, or by an older pipeline —
would publish a failed chapter whose failing cell may even be hidden (``remove-cell``), so the
build stops with an error naming the notebook, the cell and the exception, with or without
``-W``.
"""
from __future__ import annotations

import json
from pathlib import Path

from sphinx.errors import ExtensionError


def notebook_errors(path: Path) -> list[str]:
    """One line per error output in the notebook at ``path``: cell number and exception."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = []
    for number, cell in enumerate(nb.get("cells", []), start=1):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                value = " ".join(str(out.get("evalue", "")).split())
                found.append(f"cell {number}: {out.get('ename', 'error')}: {value}")
    return found


def _check(app) -> None:
    failed = []
    for path in sorted(Path(app.srcdir).glob("chapters/*.ipynb")):
        errors = notebook_errors(path)
        if errors:
            failed.append(f"{path.relative_to(app.srcdir)} ({errors[0]})")
    if failed:
        raise ExtensionError("executed notebooks hold errors, so the book is not built: "
                             + "; ".join(failed)
                             + " — rerun the chapter with book/pipeline.py and fix it")


def setup(app):
    app.connect("builder-inited", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
