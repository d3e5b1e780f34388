"""Execute the book's chapters: MyST-markdown sources → papermill → executed notebooks.

``python book/pipeline.py`` executes every ``chapters/*.md`` into ``book/chapters/*.ipynb``
(git-ignored build products) that jupyter-book then renders with execution off.
``python book/pipeline.py 01_per_token_kv -p dtype fp8`` executes one chapter with overrides.
Volatile metadata (timestamps, durations) is stripped so reruns are byte-identical.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "chapters"
OUTPUT = ROOT / "book" / "chapters"
_VOLATILE_NB = ("papermill",)
_VOLATILE_CELL = ("execution", "papermill")


def chapter_sources() -> list[Path]:
    """Every chapter source, in book order (file names start with their number)."""
    return sorted(SOURCES.glob("*.md"))


def strip_volatile(nb: Any) -> Any:
    """Remove run-to-run metadata (times, durations) from an executed notebook, in place."""
    for key in _VOLATILE_NB:
        nb.metadata.pop(key, None)
    for i, cell in enumerate(nb.cells):
        for key in _VOLATILE_CELL:
            cell.metadata.pop(key, None)
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell.id = "injected-parameters"
    return nb


def execute_chapter(source: Path, output: Path | None = None,
                    parameters: dict[str, Any] | None = None, timeout_s: int = 900) -> Path:
    """Convert one MyST chapter to a notebook, execute it with papermill, strip volatile keys."""
    import jupytext
    import nbformat
    import papermill

    output = output or OUTPUT / f"{source.stem}.ipynb"
    output.parent.mkdir(parents=True, exist_ok=True)
    nb = jupytext.read(source)
    for i, cell in enumerate(nb.cells):  # stable ids: jupytext draws random ones
        cell.id = f"cell-{i:03d}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / f"{source.stem}.ipynb"
        nbformat.write(nb, staged)
        papermill.execute_notebook(str(staged), str(output), parameters=parameters or {},
                                   kernel_name="python3", cwd=str(SOURCES),
                                   progress_bar=False, execution_timeout=timeout_s)
    executed = nbformat.read(output, as_version=4)
    nbformat.write(strip_volatile(executed), output)
    return output


def _execute_one(source: str) -> str:
    return str(execute_chapter(Path(source)))


def execute_all(jobs: int = 2) -> list[Path]:
    """Execute every chapter, ``jobs`` at a time."""
    sources = [str(s) for s in chapter_sources()]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return [Path(p) for p in pool.map(_execute_one, sources)]


def _parse_value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapter", nargs="?", help="chapter stem, e.g. 01_per_token_kv")
    parser.add_argument("-p", nargs=2, action="append", metavar=("NAME", "VALUE"), default=[],
                        help="override a parameter (Python literal or string)")
    parser.add_argument("-o", "--output", type=Path, help="where to write the executed notebook")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    if args.chapter is None:
        for path in execute_all(args.jobs):
            print(f"executed {path.relative_to(ROOT)}")
        return 0
    source = SOURCES / f"{args.chapter}.md"
    if not source.is_file():
        print(f"no chapter {args.chapter!r} in {SOURCES}", file=sys.stderr)
        return 2
    params = {name: _parse_value(value) for name, value in args.p}
    path = execute_chapter(source, args.output, params)
    print(json.dumps({"executed": str(path), "parameters": params}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
