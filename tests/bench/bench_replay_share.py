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
from profiling.analysis.across_ranks.critical_path.ahead import GraphsAhead  # noqa: E402
from profiling.report.build import build_report  # noqa: E402
from tests import trace_variants  # noqa: E402
from tests.bench.bench_report import DENSE_EVERY, gpu_folder, load  # noqa: E402
from tests.bench.bench_scale import simulated  # noqa: E402
from tests.trace_variants import repeated_steps  # noqa: E402


def _timed(function: Callable[..., Any], spent: list[float], cpu: list[float]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started, started_cpu = time.perf_counter(), time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - started_cpu)

    return wrapper


def _said(what: str, total: float, total_cpu: float, spent: list[float], cpu: list[float]) -> str:
    """The line: wall times, and the CPU times of this process's thread (on a shared machine the
    wall time moves with the neighbours, the CPU time less)."""
    share = sum(spent) / total
    return (
        f"{what}cold report {total:.2f} s; its graphs and replay {sum(spent):.2f} s = {share:.1%} "
        f"(CPU of this thread: {sum(cpu):.2f} of {total_cpu:.2f} s = {sum(cpu) / total_cpu:.0%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, help="bench_scale.py's simulated job of this many ranks")
    parser.add_argument("--layout", help="its layout: pp=8,dp=64,tp=8 (their product is --ranks)")
    parser.add_argument("--steps", type=int, default=100_000, help="its step logs' steps")
    parser.add_argument("--root", type=Path, default=Path("/tmp/simulated-jobs"))
    args = parser.parse_args()
    spent: list[float] = []
    cpu: list[float] = []
    job_path.step_graphs = _timed(job_path.step_graphs, spent, cpu)
    GraphsAhead.graphs = _timed(GraphsAhead.graphs, spent, cpu)  # the report's share of graphs begun ahead
    job_path.replayed = _timed(job_path.replayed, spent, cpu)
    if args.ranks:
        folder = simulated(args.root, args.ranks, args.steps, args.layout)
        for made in (
            "report.json",
            "report.png",
            "run.png",
            "critical_path.msgpack",
        ):  # as bench_scale.py: drawn anew
            (folder / "meta" / made).unlink(missing_ok=True)
        started, started_cpu = time.perf_counter(), time.thread_time()
        report.main([str(folder)])
        total, total_cpu = time.perf_counter() - started, time.thread_time() - started_cpu
        print(_said(f"{args.ranks} ranks: ", total, total_cpu, spent, cpu))
        return
    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    try:
        dense = trace_variants.dense_allreduces(
            repeated_steps(load("trace_diff_test.json.gz"), 2), DENSE_EVERY
        )
        gpu_folder(work / "dense", 8, dense, clock_us=1700.0)
        started, started_cpu = time.perf_counter(), time.thread_time()
        build_report(work / "dense")
        total, total_cpu = time.perf_counter() - started, time.thread_time() - started_cpu
    finally:
        shutil.rmtree(work)
    print(_said("", total, total_cpu, spent, cpu))


if __name__ == "__main__":
    main()
