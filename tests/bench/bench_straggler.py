"""Benchmark: how often the report's straggler verdict is right, on real jobs on this machine.

    .venv/bin/python tests/bench/bench_straggler.py [--runs 10]

Runs, interleaved, ``--runs`` times each: a 4-rank job on submitit's local executor with
``--inject-slowdown 2:40`` (rank 2 does 40 ms of extra CPU work every step), and the same job
balanced; every rank profiled for 12 steps. Prints how often the first named rank 2 and how
often the second found no significant straggler (the test suite runs each once).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable
from profiling.folder.layout import JobFolder  # noqa: E402
from tests.common import run_submit, submitted_job_id  # noqa: E402
from tests.test_straggler import STRAGGLER_JOB  # noqa: E402


def verdict(root: Path, *args: str) -> dict:
    result = run_submit("--traces-root", str(root), *STRAGGLER_JOB, *args, timeout=900)
    if result.returncode:
        raise RuntimeError(result.stdout + result.stderr)
    folder = JobFolder(root, submitted_job_id(result.stdout))
    return json.loads((folder.meta / "report.json").read_text())["straggler"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-straggler-"))
    named, quiet = 0, 0
    try:
        for run in range(args.runs):
            injected = verdict(work / f"injected{run}", "--inject-slowdown", "2:40")
            balanced = verdict(work / f"balanced{run}")
            named += injected["rank"] == 2 and injected["verdict"] == "straggler"
            quiet += balanced["verdict"] == "none"
            print(f"run {run + 1}: injected -> {injected['text'][:90]}", flush=True)
            print(f"run {run + 1}: balanced -> {balanced['text'][:90]}", flush=True)
        print(f"rank 2 named in {named} of {args.runs} injected jobs (40 ms on rank 2, 4 ranks, 12 steps)")
        print(f"no significant straggler in {quiet} of {args.runs} balanced jobs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
