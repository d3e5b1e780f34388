"""The test session's long runs, started once per test session
(``tests/conftest.py`` starts this script): every chapter executed (``make execute``), then
the HTML build (``make html``) and the second execution of the determinism test's chapters,
then every page of the built book read in Chromium (``page_readings.py``); from the start,
the golden sample. Each run writes ``FOLDER/<name>.log`` and, when it ends, ``FOLDER/<name>.rc``
(its exit status); a run whose prerequisite failed is not started (its status is 1 and its
log says why). Everything stops when the process ``--watch`` names ends (the test session,
interrupted or failed).

    python tests/background_runs.py FOLDER --watch PID [--execute] [--build]
        [--second CHAPTER ...] [--pages HTML] [--golden] [--hash-seed SEED]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
#: The second execution: each chapter named, into FOLDER/second/<chapter>.ipynb.
_SECOND = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
           "import pipeline; [pipeline.execute_chapter(pipeline.SOURCES / f'{c}.md', "
           "Path(sys.argv[2]) / f'{c}.ipynb') for c in sys.argv[3:]]")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class _Runs:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.running: dict[str, tuple[subprocess.Popen, IO[str]]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.folder / f"{name}.log", "w")  # noqa: SIM115 (closed in ended)
        self.running[name] = (subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log,
                                               stderr=subprocess.STDOUT,
                                               start_new_session=True), log)

    def status(self, name: str, rc: int, note: str = "") -> None:
        if note:
            (self.folder / f"{name}.log").write_text(note + "\n")
        partial = self.folder / f".{name}.rc"
        partial.write_text(str(rc))
        partial.replace(self.folder / f"{name}.rc")

    def ended(self) -> dict[str, int]:
        """The runs that have ended since the last call, with their exit status (recorded)."""
        done = {name: p.returncode for name, (p, _) in self.running.items()
                if p.poll() is not None}
        for name, rc in done.items():
            self.running.pop(name)[1].close()
            self.status(name, rc)
        return done

    def stop(self) -> None:
        for process, log in self.running.values():  # each run with what it started
            with contextlib.suppress(ProcessLookupError):  # (pipeline.py's workers, kernels)
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--watch", type=int, required=True, help="stop when this process ends")
    parser.add_argument("--execute", action="store_true", help="every chapter (make execute)")
    parser.add_argument("--build", action="store_true", help="the HTML (make html), after it")
    parser.add_argument("--second", nargs="*", default=[], metavar="CHAPTER",
                        help="chapters executed a second time, after the first execution")
    parser.add_argument("--pages", type=Path, metavar="HTML",
                        help="every page of this built book read in Chromium, after the build")
    parser.add_argument("--golden", action="store_true", help="the golden sample")
    parser.add_argument("--hash-seed", default="2026",
                        help="PYTHONHASHSEED of the second execution and the golden sample")
    args = parser.parse_args(argv)
    other_seed = {**os.environ, "PYTHONHASHSEED": args.hash_seed}
    # each run: its command, its environment, and the run it waits for
    plan: dict[str, tuple[list[str], dict[str, str] | None, str | None]] = {}
    if args.golden:
        plan["golden"] = ([sys.executable, str(ROOT / "tests" / "golden_results.py"), "--sample",
                           str(args.folder / "golden.json")], other_seed, None)
    if args.execute:
        plan["execute"] = ([sys.executable, str(BOOK / "pipeline.py"), "-j", "2"], None, None)
    if args.build:
        plan["build"] = ([str(Path(sys.executable).parent / "jupyter-book"), "build", "-W", "-n",
                          "--keep-going", str(BOOK)], None, "execute")
    if args.second:
        plan["second"] = ([sys.executable, "-c", _SECOND, str(BOOK), str(args.folder / "second"),
                           *args.second], other_seed, "execute")
    if args.pages:
        plan["pages"] = ([sys.executable, str(ROOT / "tests" / "page_readings.py"),
                          str(args.pages), str(args.folder / "pages.json")], None, "build")
    waiting = {name: step for name, step in plan.items() if step[2] in plan}
    runs = _Runs(args.folder)
    for name, (command, env, _) in plan.items():
        if name not in waiting:
            runs.start(name, command, env)
    try:
        while runs.running:
            if not _alive(args.watch):
                return 1
            for ended, rc in runs.ended().items():
                for name, (command, env, after) in list(waiting.items()):
                    if after == ended:
                        del waiting[name]
                        if rc == 0:
                            runs.start(name, command, env)
                        else:
                            runs.status(name, 1, f"not run: {ended} failed")
            time.sleep(0.2)
    finally:
        runs.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
