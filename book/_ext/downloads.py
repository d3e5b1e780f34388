"""Sphinx extension: publish the CSV files the chapters offer for download.

A chapter's ``kvlib.report.calculator.downloads`` output links to ``_static/downloads/<name>`` and
carries each file (gzip + base64) in its metadata under ``kvlib.report.calculator.DOWNLOADS_KEY``;
this extension writes them there after the HTML is built, so every link works offline. Two
chapters offering the same file name is an error.
"""
from __future__ import annotations

import json
from pathlib import Path

from sphinx.errors import ExtensionError

from kvlib.report.calculator import DOWNLOADS_KEY, unpack


def offered_files(notebooks: list[Path]) -> dict[str, tuple[str, str]]:
    """File name → (notebook, CSV text) for every download the executed ``notebooks`` carry."""
    found: dict[str, tuple[str, str]] = {}
    for path in notebooks:
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb.get("cells", []):
            for out in cell.get("outputs", []):
                for name, packed in out.get("metadata", {}).get(DOWNLOADS_KEY, {}).items():
                    if name in found and found[name][0] != path.name:
                        raise ExtensionError(f"download {name} is offered by {found[name][0]} "
                                             f"and {path.name}")
                    found[name] = (path.name, unpack(packed))
    return found


def _write(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "downloads"
    target.mkdir(parents=True, exist_ok=True)
    notebooks = sorted(Path(app.srcdir).glob("chapters/*.ipynb"))
    for name, (_, text) in offered_files(notebooks).items():
        (target / name).write_text(text, encoding="utf-8")


def setup(app):
    app.connect("build-finished", _write)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
