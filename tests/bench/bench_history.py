"""Benchmark: ``slurm-profile history`` over a traces root of many jobs, each its
``meta/summary.json`` (written as reports write them): 10 configs, 20 nodes, one job in 20 with
a slow node. Each run is a fresh process (``python -m jobs.commands.history ROOT``, its output thrown
away); *cold* is the first, after the files were written (in the page cache: a fresh NFS client
would read them from the server), *warm* the best of the next ``--rounds``. Not a test: it asserts
nothing. Asked (#48): ≤ 2 s warm at 10 000 jobs.

    .venv/bin/python tests/bench/bench_history.py [--jobs 10000] [--rounds 3] [--root DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from profiling.history.summary import config_fingerprint, write_summary  # noqa: E402
from profiling.schema.summary import JobSummary  # noqa: E402


def write_jobs(root: Path, count: int) -> None:
    """``count`` jobs' summaries under ``root``: job i of config i % 10, on 2 of 20 nodes."""
    configs = [{"name": "workload.resnet18:build", "batch_size": 8 * (c + 1), "ranks": 16} for c in range(10)]
    for i in range(count):
        config = configs[i % len(configs)]
        nodes = [f"node{(i + k) % 20 + 1}" for k in range(2)]
        slow = [nodes[1]] if i % 20 == 0 else []
        write_summary(
            root / str(100_000 + i) / "meta",
            JobSummary(
                job_id=str(100_000 + i),
                name="bench",
                user="bench",
                ended_at=f"2026-{1 + i // 100_000 % 12:02d}-01T00:00:00.{i:06d}+00:00",
                nodes=nodes,
                workload=config["name"],
                config=config,
                fingerprint=config_fingerprint(config),
                ranks=16,
                step_median_ms=100.0 + (30.0 if slow else i % 7),
                step_p90_ms=110.0,
                noise_ms=3.0,
                verdict="none",
                slow_nodes=slow,
            ),
        )


def timed(root: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "jobs.commands.history", str(root)],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--root", type=Path, help="where to write the jobs (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        root = args.root or Path(temporary)
        started = time.perf_counter()
        write_jobs(root, args.jobs)
        print(f"{args.jobs} summaries written in {time.perf_counter() - started:.1f} s")
        cold = timed(root)
        warm = min(timed(root) for _ in range(args.rounds))
        print(f"history of {args.jobs} jobs: cold {cold:.2f} s, warm {warm:.2f} s (best of {args.rounds})")


if __name__ == "__main__":
    main()
