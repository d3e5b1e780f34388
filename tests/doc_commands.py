"""The commands a page of documentation gives its reader, read from the page itself.

A command is each line of a fenced shell block (backslash continuations and here-documents
kept whole; named or not), each fenced Python block, and each inline code span in the prose
that starts like a command (``.venv/bin/…``, ``kvlib …``, ``python …``, ``make …``,
``unset …``, ``apt-get …``). The tests of README.md and book/fork.md run every one of them,
and fail when the page gains a command no test runs.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
_FENCE = re.compile(r"^```(?:\{code-block\} )?(\w+)[ \t]*\n(?::name: (\S+)\n\n)?(.*?)^```",
                    flags=re.M | re.S)
_INLINE = re.compile(r"`((?:\.venv/bin/|kvlib |python |make |unset |apt-get )[^`]*)`")
SHELL = ("bash", "sh", "shell")


def fenced_blocks(path: Path) -> list[tuple[str, str | None, str]]:
    """Every fenced block of ``path``: (language, name or None, text)."""
    return _FENCE.findall(path.read_text(encoding="utf-8"))


def named_blocks(path: Path) -> dict[str, str]:
    """Named shell blocks (``:name:`` option): name → text."""
    return {name: text for lang, name, text in fenced_blocks(path) if name and lang in SHELL}


def commands(block: str) -> list[str]:
    """The shell commands of a block, backslash continuations and here-documents kept whole."""
    out: list[str] = []
    lines = block.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        cmd = lines[i]
        while cmd.endswith("\\"):
            i += 1
            cmd = cmd[:-1] + lines[i].lstrip()
        heredoc = re.search(r"<<'(\w+)'", cmd)
        if heredoc:
            while lines[i] != heredoc.group(1):
                i += 1
                cmd += "\n" + lines[i]
        if cmd.strip():
            out.append(cmd)
        i += 1
    return out


def inline_commands(path: Path) -> list[str]:
    """Commands quoted inline in the prose (outside fenced blocks), in page order."""
    prose = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return list(dict.fromkeys(m.group(1) for m in _INLINE.finditer(prose)))


def all_commands(path: Path) -> list[str]:
    """Every command of the page: shell lines of every shell block, every Python block whole,
    then the inline ones."""
    found: list[str] = []
    for lang, _name, text in fenced_blocks(path):
        if lang in SHELL:
            found += commands(text)
        elif lang == "python":
            found.append(text)
    return found + inline_commands(path)


def make_recipe(target: str) -> tuple[list[str], list[str]]:
    """(prerequisites, recipe lines) of a Makefile target, variables expanded."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    variables = dict(re.findall(r"^(\w+) := (.*)$", text, flags=re.M))

    def expand(line: str) -> str:  # nested variables too: PY := $(VENV)/bin/python
        while (m := re.search(r"\$\((\w+)\)", line)) and m.group(1) in variables:
            line = line[:m.start()] + variables[m.group(1)] + line[m.end():]
        return line

    match = re.search(rf"^{re.escape(target)}:([^\n]*)\n((?:\t[^\n]*\n)*)", text, flags=re.M)
    if not match:
        raise KeyError(f"no target {target!r} in the Makefile")
    return match.group(1).split(), [expand(line.strip()) for line in match.group(2).splitlines()]


def _env(clone: Path, data: bool | str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KVLIB_DATA"}
    if data:
        env["KVLIB_DATA"] = data if isinstance(data, str) else str(clone / "my-data")
    return env


def sh(clone: Path, command: str, data: bool | str = True) -> subprocess.CompletedProcess:
    """Run one documented command in the scratch repository ``clone`` with bash, with
    ``KVLIB_DATA`` exported as the fork page's step 0 does (``data=False``: unset; a string:
    that value, e.g. a relative path); the command must succeed."""
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=clone,
                            env=_env(clone, data), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


#: How much lower a ``Started`` run's CPU priority is than the session's (``os.nice``).
BACKGROUND_NICENESS = 10


class Started:
    """``sh`` started in the background: ``finish()`` waits for it and returns what ``sh``
    would have (the command must succeed); its output goes to files beside ``clone``. It runs
    at a lower CPU priority (``BACKGROUND_NICENESS``) than the test session that started it,
    which its results wait for at the session's end while every test before then waits on the
    session's one process."""

    def __init__(self, clone: Path, command: str, data: bool | str = True) -> None:
        self.command = command
        self.out = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by finish)
        self.err = tempfile.TemporaryFile("w+")  # noqa: SIM115
        self.process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", command], cwd=clone,
                                        env=_env(clone, data), stdout=self.out, stderr=self.err,
                                        text=True,
                                        preexec_fn=lambda: os.nice(BACKGROUND_NICENESS))

    def finish(self) -> subprocess.CompletedProcess:
        self.process.wait(timeout=900)
        self.out.seek(0)
        self.err.seek(0)
        result = subprocess.CompletedProcess(self.process.args, self.process.returncode,
                                             self.out.read(), self.err.read())
        self.out.close()
        self.err.close()
        assert result.returncode == 0, \
            f"{self.command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        return result


def make_clone(repo: Path) -> Path:
    """A scratch repository at ``repo`` for the documented commands: data/ and book/ copied
    (build products left out), the virtual environment, chapters and node_modules linked, so
    nothing in the checkout changes."""
    repo.mkdir()
    shutil.copytree(ROOT / "data", repo / "data")
    shutil.copytree(ROOT / "book", repo / "book",
                    ignore=shutil.ignore_patterns("_build", "chapters", "vendor"))
    for name in (".venv", "chapters", "node_modules"):
        (repo / name).symlink_to(ROOT / name)
    (repo / "book" / "chapters").mkdir()  # where the executed chapters go, as after `make book`
    return repo

