"""README.md: every command it gives, run as written (in-process where that is the same program,
in the scratch repository where a command writes files).

``test_every_command_in_the_readme_is_run`` fails when the README gains a command no test runs.
"""
from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import nbformat

from doc_commands import all_commands, make_recipe, sh
from kvlib.report.cli import main as kvlib_main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COMMANDS = all_commands(README)
#: Run by the CI that runs this file: `make test` is this run (it starts with `make install`
#: and `make browser`, whose recipe is the apt-get line); `make book` is `make execute` then
#: `make html`, the session's ``executed_book`` and ``built_book`` (tests/test_fork.py checks
#: those recipes); `make html` and `make bench` are checked to be the commands run here (the
#: benchmark at small sizes).
BY_MAKE = {"make book", "make test", "make html", "make bench", "apt-get install chromium"}


def _kvlib(command: str) -> str:
    """Run a `kvlib …` line in-process; its output (it must succeed)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = kvlib_main(shlex.split(command, comments=True)[1:])
    assert status == 0 and not err.getvalue(), (command, err.getvalue())
    return out.getvalue()


def test_every_command_in_the_readme_is_run():
    """Shell lines without their comments; the Python block is run whole (test below)."""
    bare = {c if "\n" in c else " ".join(shlex.split(c, comments=True)) for c in COMMANDS}
    run_here = {c for c in bare if c.startswith(("kvlib ", "python -m ", ".venv/bin/python ",
                                                 "import kvlib\n", "unset "))}
    unhandled = bare - run_here - BY_MAKE
    assert not unhandled, f"commands in README.md that no test runs: {sorted(unhandled)}"


def test_the_command_line_examples():
    lines = [c for c in COMMANDS if c.startswith("kvlib ")]
    assert len(lines) >= 5
    outputs = {line.split("#")[0].strip(): _kvlib(line) for line in lines}
    # 2 × 32 × 8 × 128 × 1 byte = 65,536 B per token in fp8; × 131,072 tokens = 8 GiB
    assert "65,536 bytes = 64.00 KiB" in outputs["kvlib kv llama-3.1-8b --tokens 131072 --dtype fp8"]
    # 2 × H100 with FP8 weights: 208,176 tokens of pool ÷ 8,192 = 25.41 requests, 25 whole
    seventy = outputs["kvlib fit llama-3.1-70b h100-sxm --tp 2 --weight-dtype fp8 --context 8192"]
    assert "does not fit" not in seventy and "25.41 (25 whole requests)" in seventy
    assert "(vLLM 0.19.0, memory fraction 0.9)" in outputs[
        "kvlib fit llama-3.1-8b a100-80gb --engine-version 0.19.0"]
    # $2.90 ÷ (1,000 tok/s × 3,600 s) × 10⁶ = $0.81
    assert "$0.81 per 1M tokens" in outputs["kvlib cost --price 2.90 --tps 1000"]
    assert "unit slip" in outputs["kvlib recheck a12"]
    assert "examples:" in outputs["kvlib --help"]


def test_python_dash_m_kvlib(clone):
    (line,) = [c for c in COMMANDS if c.startswith("python -m kvlib ")]
    out = sh(clone, line.replace("python", f"{sys.executable}", 1), data=False).stdout
    assert "Llama-3.1-8B" in out


def test_the_python_example():
    """The README's Python block, line by line: a trailing ``# N bytes`` comment is checked."""
    (block,) = [c for c in COMMANDS if c.startswith("import kvlib")]
    namespace: dict = {}
    for line in block.splitlines():
        code, _, comment = line.partition("#")
        tree = ast.parse(code)
        if tree.body and isinstance(tree.body[0], ast.Expr):
            value = eval(compile(ast.Expression(tree.body[0].value), "README", "eval"), namespace)  # noqa: S307
            stated = re.match(r"\s*([\d,]+) bytes", comment)
            if stated:
                assert value == int(stated.group(1).replace(",", "")), line
            assert isinstance(value, int) and value > 0, line
        else:
            exec(compile(tree, "README", "exec"), namespace)  # noqa: S102
    # bf16: 2 × 32 layers × 8 KV heads × 128 × 2 bytes = 131,072; 131,072 fp8 tokens = 8 GiB
    assert namespace["m"].kv_bytes(131072, "fp8") == 131_072 * 65_536


def test_rerun_one_chapter_with_an_override(clone):
    """`pipeline.py 01_per_token_kv -p dtype fp8`, in the scratch repository: the chapter's
    tables and charts switch to fp8."""
    (line,) = [c for c in COMMANDS if c.startswith(".venv/bin/python book/pipeline.py")]
    sh(clone, line, data=False)
    text = (clone / "book" / "chapters" / "01_per_token_kv.ipynb").read_text()
    assert "KV cache per token, fp8 (KiB)" in text
    assert "KV cache per token, bf16 (KiB)" not in text
    nbformat.validate(nbformat.reads(text, as_version=4))


def test_the_benchmark(clone):
    """`make bench` is `python -m kvlib.report.bench`; run here at small sizes (its full-size numbers
    go in the closing note, not in a timed test: DEVELOPERS.md). Its kvlib-vs-vLLM replay is
    left out here (importing vLLM is most of its cost): tests/test_prefix.py checks the same
    replay hit for hit."""
    assert make_recipe("bench")[1] == [".venv/bin/python -m kvlib.report.bench"]
    assert make_recipe("html")[1] == [".venv/bin/jupyter-book build -W -n --keep-going book"]
    (line,) = [c for c in COMMANDS if c.startswith("python -m kvlib.report.bench")]
    small = f"{line} 2000 --chat-sessions 0 --trace-requests 2000 --serving-requests 200 --vllm-requests 0"
    out = sh(clone, small.replace("python", f"{sys.executable}", 1), data=False).stdout
    assert re.search(r"2,000 requests: .* requests/s", out)
    assert re.search(r"trace form: 2,000 requests", out)
    assert re.search(r"simulate_serving, knee \(8/s\), 200 requests: ", out)
    assert re.search(r"max_rate_at_slo, .*requests/s within the target", out)


def test_unset_kvlib_data_brings_the_published_data_back(clone):
    (line,) = [c for c in COMMANDS if c.startswith("unset ")]
    # with KVLIB_DATA naming an empty folder no model is found; after the unset, data/ is read
    (clone / "empty").mkdir(exist_ok=True)
    out = sh(clone, f"{line}; .venv/bin/kvlib kv llama-3.1-8b --tokens 1", data="empty").stdout
    assert "131,072 bytes" in out
