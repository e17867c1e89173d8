"""Benchmark: the report command's start, what it costs before the work begins (issue 60 asks
at most 0.15 s before it reads a byte). Times ``--help`` and, on a folder of traces, how long
after the interpreter began the command opens the first file of the folder (a trace or its
analysis record), best of ``--repeats`` cold runs; and the interpreter alone, with numpy and
msgspec imported: the floor the start stands on. Not a test.

    .venv/bin/python tests/bench/bench_startup.py FOLDER [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable
from tests.common import REPO  # noqa: E402

# run in the command's process: the first open of a path under the folder, timed from the
# interpreter's own start (the process's start time, read from /proc, in clock ticks)
_FIRST_OPEN = """
import builtins, io, os, runpy, sys, time
ticks = os.sysconf("SC_CLK_TCK")
started = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]) / ticks
up_at = time.monotonic() - float(open("/proc/uptime").read().split()[0])
folder, seen = sys.argv[1], []
def mark(path):
    if not seen and str(path).startswith(folder):
        seen.append(time.monotonic() - up_at - started)
        print(f"FIRST {seen[0]:.3f}", file=sys.stderr, flush=True)
def wrapped(opener):
    def open_(file, *args, **kwargs):
        mark(file)
        return opener(file, *args, **kwargs)
    return open_
builtins.open = io.open = wrapped(builtins.open)
os.open = wrapped(os.open)
sys.argv = ["report", folder]
runpy.run_module("jobs.commands.report", run_name="__main__")
"""


def wall(*command: str) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - started


def first_open(folder: Path) -> float:
    shutil.rmtree(folder / "meta", ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_OPEN, str(folder)], cwd=REPO, check=True, capture_output=True, text=True
    )
    return float(next(line for line in done.stderr.splitlines() if line.startswith("FIRST")).split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a folder of traces (its meta/ is removed: cold runs)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rounds = range(args.repeats)
    python = min(wall(sys.executable, "-c", "pass") for _ in rounds)
    floor = min(wall(sys.executable, "-c", "import numpy, msgspec") for _ in rounds)
    helped = min(wall(sys.executable, "-m", "jobs.commands.report", "--help") for _ in rounds)
    opened = min(first_open(args.folder.resolve()) for _ in rounds)
    print(f"python -c pass: {python:.3f} s; with numpy and msgspec imported: {floor:.3f} s (the floor)")
    print(f"report --help: {helped:.3f} s; the folder's first file opened {opened:.3f} s after the start")


if __name__ == "__main__":
    main()
