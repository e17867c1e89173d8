"""Benchmark: how much of a cold report each step's graph and the replay take, in one process.
Not a test: it prints one line.

    .venv/bin/python tests/bench/bench_replay_share.py [--ranks 4096 [--layout pp=8,dp=64,tp=8]]

Without ``--ranks``: bench_report.py's dense folder (8 ranks of a real GPU trace, every 10th
compute kernel an all-reduce), the report built as the job's end builds it. With it:
bench_scale.py's simulated job of that many ranks (made once under ``--root``), the report as
``python -m jobs.commands.report`` makes it (report.json, the pictures, the archive).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable
import profiling.analysis.across_ranks.critical_path.path as job_path  # noqa: E402
from jobs.commands import report  # noqa: E402
from profiling.report.build import build_report  # noqa: E402
from tests import trace_variants  # noqa: E402
from tests.bench.bench_report import DENSE_EVERY, gpu_folder, load  # noqa: E402
from tests.bench.bench_scale import simulated  # noqa: E402
from tests.trace_variants import repeated_steps  # noqa: E402


def _timed(function: Callable[..., Any], spent: list[float]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, help="bench_scale.py's simulated job of this many ranks")
    parser.add_argument("--layout", help="its layout: pp=8,dp=64,tp=8 (their product is --ranks)")
    parser.add_argument("--steps", type=int, default=100_000, help="its step logs' steps")
    parser.add_argument("--root", type=Path, default=Path("/tmp/simulated-jobs"))
    args = parser.parse_args()
    spent: list[float] = []
    job_path.step_graph = _timed(job_path.step_graph, spent)
    job_path.replayed = _timed(job_path.replayed, spent)
    if args.ranks:
        folder = simulated(args.root, args.ranks, args.steps, args.layout)
        for made in (
            "report.json",
            "report.png",
            "run.png",
            "critical_path.msgpack",
        ):  # as bench_scale.py: drawn anew
            (folder / "meta" / made).unlink(missing_ok=True)
        started = time.perf_counter()
        report.main([str(folder)])
        total = time.perf_counter() - started
        print(
            f"{args.ranks} ranks: cold report {total:.2f} s; its graphs and replay {sum(spent):.2f} s = "
            f"{sum(spent) / total:.0%}"
        )
        return
    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    try:
        dense = trace_variants.dense_allreduces(
            repeated_steps(load("trace_diff_test.json.gz"), 2), DENSE_EVERY
        )
        gpu_folder(work / "dense", 8, dense, clock_us=1700.0)
        started = time.perf_counter()
        build_report(work / "dense")
        total = time.perf_counter() - started
    finally:
        shutil.rmtree(work)
    print(f"cold report {total:.2f} s; its graphs and replay {sum(spent):.2f} s = {sum(spent) / total:.0%}")


if __name__ == "__main__":
    main()
