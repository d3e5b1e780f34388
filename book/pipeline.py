"""Execute the book's chapters: MyST-markdown sources → papermill → executed notebooks.

``python book/pipeline.py`` executes every ``chapters/*.md`` into ``book/chapters/*.ipynb``
(git-ignored build products) that jupyter-book then renders with execution off.
``python book/pipeline.py 01_per_token_kv -p dtype fp8`` executes one chapter with overrides.

An executed notebook is written only when every cell ran: papermill works in a scratch folder
and the result is moved into place in one step, and a chapter that fails removes the notebook
an earlier run left, so a failed chapter can never be published. Exit status: 0 when every
chapter ran, 1 when a chapter failed (its own error, one line per chapter, on stderr), 2 for
a usage error (an unknown chapter or parameter). Volatile metadata (timestamps, durations) is
stripped so reruns are byte-identical.
"""
from __future__ import annotations

import argparse
import ast
import json
import numbers
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "chapters"
OUTPUT = ROOT / "book" / "chapters"
_VOLATILE_NB = ("papermill",)
_VOLATILE_CELL = ("execution", "papermill")


class ChapterError(Exception):
    """A chapter failed: ``str(error)`` is one line, the chapter and its own error."""

    def __init__(self, chapter: str, message: str) -> None:
        super().__init__(chapter, message)
        self.chapter, self.message = chapter, message

    def __str__(self) -> str:
        return f"{self.chapter}: {self.message}"


class UnknownParameterError(ValueError):
    """An override names no variable of the chapter's parameters cell, or gives one a value of
    another kind than its default."""


def chapter_sources() -> list[Path]:
    """Every chapter source, in book order (file names start with their number)."""
    return sorted(SOURCES.glob("*.md"))


def chapter_defaults(source: Path) -> dict[str, Any]:
    """Each name the chapter's ``parameters`` cell assigns, in order, with its default (the
    literal it is assigned; ``...`` where the value is not a literal)."""
    import jupytext

    cells = [c for c in jupytext.read(source).cells
             if "parameters" in c.metadata.get("tags", [])]
    defaults: dict[str, Any] = {}
    for cell in cells:
        for node in ast.parse(cell.source).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            value = getattr(node, "value", None)
            try:
                default = ast.literal_eval(value) if value is not None else ...
            except ValueError:
                default = ...
            defaults.update({t.id: default for t in targets if isinstance(t, ast.Name)})
    return defaults


def chapter_parameters(source: Path) -> list[str]:
    """The names the chapter's ``parameters`` cell assigns, in order."""
    return list(chapter_defaults(source))


def _kind(value: Any) -> str | None:
    """The kind of a parameter value an override must share with the default: ``number``
    (int or float, numpy's too; not bool), ``integer`` for an int default, ``bool``, ``text``,
    ``list`` (list or tuple), ``dict``; None for anything else (not checked)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, numbers.Integral):
        return "integer"
    if isinstance(value, numbers.Real):
        return "number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "dict"
    return None


def _fits(default: Any, value: Any) -> bool:
    want, got = _kind(default), _kind(value)
    if want is None or default is None:
        return True
    if want == "number":  # a float parameter takes an int: 3 for 3.0
        return got in ("number", "integer")
    if want == "list" and got == "list" and default and value:
        return all(_fits(default[0], v) for v in value)  # elements like the default's first
    return want == got


def check_parameters(source: Path, parameters: dict[str, Any]) -> None:
    """UnknownParameterError (one line, naming the chapter's parameters) for a misspelled name
    or a value of another kind than the parameter's default (a text for a number, a number for
    a list, ...), naming the parameter, its default and the value."""
    defaults = chapter_defaults(source)
    unknown = [name for name in parameters if name not in defaults]
    if unknown:
        raise UnknownParameterError(
            f"{source.stem} has no parameter {', '.join(map(repr, unknown))}; "
            f"its parameters: {', '.join(defaults)}")
    for name, value in parameters.items():
        if not _fits(defaults[name], value):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise UnknownParameterError(
                f"{source.stem}: parameter {name!r} takes {_phrase(defaults[name])} like its "
                f"default {defaults[name]!r}, got {type(value).__name__} {shown}")


def _phrase(default: Any) -> str:
    kind = _kind(default)
    if kind == "list" and default and _kind(default[0]) in ("integer", "number", "text"):
        return f"a list of {_phrase(default[0]).split(' ', 1)[1]}s"
    return {"integer": "an integer", "number": "a number", "bool": "True or False",
            "text": "a text", "list": "a list", "dict": "a dict"}.get(kind or "", "a value")


def strip_volatile(nb: Any) -> Any:
    """Remove run-to-run metadata (times, durations) from an executed notebook, in place, and
    join each run of outputs of one stream (stdout, stderr) into one: the kernel sends printed
    text in as many messages as its flushes happened to make, which differs between runs."""
    for key in _VOLATILE_NB:
        nb.metadata.pop(key, None)
    for cell in nb.cells:
        for key in _VOLATILE_CELL:
            cell.metadata.pop(key, None)
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell.id = "injected-parameters"
        if cell.get("outputs"):
            cell.outputs = _joined_streams(cell.outputs)
    return nb


def _joined_streams(outputs: list[Any]) -> list[Any]:
    joined: list[Any] = []
    for out in outputs:
        last = joined[-1] if joined else None
        if (out.get("output_type") == "stream" and last is not None
                and last.get("output_type") == "stream" and last.get("name") == out.get("name")):
            last["text"] = "".join(last["text"]) + "".join(out["text"])
        else:
            joined.append(out)
    return joined


def _kernel_manager(log: IO[str]) -> type:
    """nbclient's kernel manager, with the kernel's own stderr sent to ``log``: its start-up
    warnings and the messages C libraries print at shutdown (libzmq) stay off the reader's
    terminal, where a failing chapter prints one line. A cell's output and errors still come
    back through papermill."""
    from jupyter_client.manager import AsyncKernelManager

    class QuietKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw: Any) -> None:
            await super().start_kernel(stderr=log, **kw)

    return QuietKernelManager


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def execute_chapter(source: Path, output: Path | None = None,
                    parameters: dict[str, Any] | None = None, timeout_s: int = 900) -> Path:
    """Convert one MyST chapter to a notebook, execute it with papermill, strip volatile keys,
    and move the result to ``output`` (default ``book/chapters/<stem>.ipynb``).

    Raises UnknownParameterError before running for a parameter the chapter lacks, and
    ChapterError (the failing cell's own exception, one line) when a cell fails; then no
    notebook is left at ``output``, not even one from an earlier run.
    """
    import jupytext
    import nbformat
    import papermill

    parameters = parameters or {}
    check_parameters(source, parameters)
    output = output or OUTPUT / f"{source.stem}.ipynb"
    output.parent.mkdir(parents=True, exist_ok=True)
    nb = jupytext.read(source)
    for i, cell in enumerate(nb.cells):  # stable ids: jupytext draws random ones
        cell.id = f"cell-{i:03d}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "kernel.log", "w+") as log:
        staged = Path(tmp) / f"{source.stem}.ipynb"
        nbformat.write(nb, staged)
        try:  # no output path: papermill would rewrite the whole notebook at every cell
            executed = papermill.execute_notebook(
                str(staged), None, parameters=parameters, kernel_name="python3",
                cwd=str(SOURCES), progress_bar=False, execution_timeout=timeout_s,
                request_save_on_cell_execute=False, kernel_manager_class=_kernel_manager(log))
        except papermill.PapermillExecutionError as exc:
            output.unlink(missing_ok=True)
            raise ChapterError(source.stem, _one_line(f"{exc.ename}: {exc.evalue}")) from None
        except BaseException as exc:  # the kernel died or timed out: its own log says why
            output.unlink(missing_ok=True)
            log.seek(0)
            exc.add_note(f"{source.stem}: the kernel's stderr:\n{log.read()[-3000:]}")
            raise
        result = strip_volatile(executed)
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    nbformat.write(result, partial)
    os.replace(partial, output)
    return output


def _execute_one(source: str, output_dir: str) -> str:
    return str(execute_chapter(Path(source), Path(output_dir) / f"{Path(source).stem}.ipynb"))


#: Chapters that take longest to execute (the landing page's grid, the latency simulations,
#: the validation): started first, so that the workers finish about together.
LONGEST_FIRST = ("00_answer", "05_latency", "appendix_a_validation", "04_cost")


def execute_all(jobs: int = 2, output_dir: Path = OUTPUT) -> list[Path]:
    """Execute every chapter into ``output_dir``, ``jobs`` at a time; ChapterError (one line
    per failed chapter) after all have run if any failed."""
    sources = sorted((str(s) for s in chapter_sources()),
                     key=lambda s: Path(s).stem not in LONGEST_FIRST)  # stable: else in order
    done, failed = [], []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_execute_one, s, str(output_dir)) for s in sources]
        for future in futures:
            try:
                done.append(Path(future.result()))
            except ChapterError as exc:
                failed.append(exc)
    if failed:
        raise ChapterError(", ".join(e.chapter for e in failed),
                           "\n".join(str(e) for e in failed))
    stems = {Path(s).stem for s in sources}
    for stale in Path(output_dir).glob("*.ipynb"):  # a renamed or removed chapter's last run
        if stale.stem not in stems:
            stale.unlink()
    return done


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
    parser.add_argument("-o", "--output", type=Path,
                        help="where to write the executed notebook (every chapter: a folder)")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        if args.chapter is None:
            if args.p:
                parser.error("-p needs a chapter")
            for path in execute_all(args.jobs, args.output or OUTPUT):
                print(f"executed {path}")
            return 0
        source = SOURCES / f"{args.chapter}.md"
        if not source.is_file():
            print(f"pipeline.py: error: no chapter {args.chapter!r} in {SOURCES}", file=sys.stderr)
            return 2
        params = {name: _parse_value(value) for name, value in args.p}
        path = execute_chapter(source, args.output, params)
    except UnknownParameterError as exc:
        print(f"pipeline.py: error: {exc}", file=sys.stderr)
        return 2
    except ChapterError as exc:
        print(exc.message if args.chapter is None else exc, file=sys.stderr)
        return 1
    print(json.dumps({"executed": str(path), "parameters": params}, default=repr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
