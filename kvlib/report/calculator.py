"""The landing page's calculator and the book's CSV downloads, as notebook outputs.

``calculator(data, summary)`` emits a ``<div>`` holding ``summary`` (the starting case as
plain HTML, what a reader without JavaScript sees) and the data of
``kvlib.report.answer.calculator_data``, gzip-compressed and base64-encoded in a JSON ``<script>``;
``book/_static/kvlib-calculator.js`` unpacks it in the browser and draws the controls and the
figures. Ids are hashes of the content, so executing a chapter twice gives identical outputs.

``downloads(files)`` emits links to CSV files and carries the files themselves in the output's
metadata (key ``DOWNLOADS_KEY``, gzip + base64 per file); ``book/_ext/downloads.py`` writes them
into the built book's ``_static/downloads/`` folder, so the links work offline.
"""
from __future__ import annotations

import base64
import csv
import gzip
import hashlib
import html
import io
import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

#: Output-metadata key of the files a ``downloads`` output carries (book/_ext/downloads.py).
DOWNLOADS_KEY = "kvlib_downloads"
#: Where the built book keeps the downloads, relative to a chapter's page.
DOWNLOADS_URL = "../_static/downloads/"


def pack(text: str) -> str:
    """``text`` gzip-compressed (no timestamp: the same bytes every run) and base64-encoded."""
    return base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=6,
                                          mtime=0)).decode("ascii")


def unpack(packed: str) -> str:
    """The inverse of ``pack``."""
    return gzip.decompress(base64.b64decode(packed)).decode("utf-8")


class Html:
    """An output shown as HTML, carrying ``metadata`` beside it (not shown)."""

    def __init__(self, markup: str, metadata: Mapping[str, Any] | None = None) -> None:
        self.markup, self.metadata = markup, dict(metadata or {})

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None
                          ) -> tuple[dict[str, str], dict[str, Any]]:
        return {"text/html": self.markup, "text/plain": "<kvlib output>"}, self.metadata


def calculator(data: Mapping[str, Any], summary: str) -> Html:
    """The calculator's output: ``summary`` (HTML) shown until the script draws the calculator
    from ``data`` (``kvlib.report.answer.calculator_data``)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    packed = pack(text)
    ident = "kvlib-calculator-" + hashlib.sha1(packed.encode()).hexdigest()[:12]
    payload = json.dumps({"encoding": "gzip+base64", "data": packed})
    return Html(f'<div class="kvlib-calculator" id="{ident}">{summary}</div>\n'
                f'<script type="application/json" class="kvlib-calculator-data" '
                f'data-target="{ident}">{payload}</script>')


def csv_text(frame: pd.DataFrame) -> str:
    """A table as CSV text: no index, floats to six significant digits, newline line ends."""
    return frame.to_csv(index=False, float_format="%.6g", lineterminator="\n")


def _check_name(name: str) -> str:
    if not name.endswith(".csv") or not name[:-4].replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"download names are plain .csv file names, got {name!r}")
    return name


def downloads(files: Mapping[str, tuple[str, str]], also: Mapping[str, str] | None = None
              ) -> Html:
    """Links to CSV files published with the book: ``files`` maps a file name (letters,
    digits, '-', '_', ending in .csv) to (link text, CSV text); the output carries the files
    and the book's build writes them next to its pages. ``also`` maps the names of files
    another chapter publishes to their link text."""
    links, carried = [], {}
    for name, (label, text) in files.items():
        _check_name(name)
        rows = sum(1 for _ in csv.reader(io.StringIO(text))) - 1  # records: a field may hold
        # a newline (a launch command that writes a file first)
        links.append(f'<li><a class="kvlib-download" href="{DOWNLOADS_URL}{name}" '
                     f'download="{name}">{html.escape(label)}</a> '
                     f"<span class=\"kvlib-download-size\">(CSV, {rows:,} "
                     f"row{'s' * (rows != 1)}, "
                     f"{len(text.encode()) / 1e6:,.1f} MB)</span></li>")
        carried[name] = pack(text)
    for name, label in (also or {}).items():
        links.append(f'<li><a class="kvlib-download" href="{DOWNLOADS_URL}{_check_name(name)}" '
                     f'download="{name}">{html.escape(label)}</a> (CSV)</li>')
    return Html('<ul class="kvlib-downloads">' + "".join(links) + "</ul>",
                {DOWNLOADS_KEY: carried})
