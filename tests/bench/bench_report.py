"""Benchmark: our cross-rank report against HTA on the same job folder, and its scaling.

    .venv/bin/python tests/bench/bench_report.py [--ranks 8] [--active 5] [--repeats 3]

1. Runs a real job on this machine (submitit's local executor, ``--ranks`` processes, every
   rank profiled, ``--active`` recorded steps), giving a folder of real traces.
2. Times, each in a fresh process, interleaved, ``--repeats`` times: our report (analysis,
   merged trace, report.json/md/png) and HTA's ``TraceAnalysis`` load plus
   ``get_temporal_breakdown``; prints medians, the ratio and each side's peak memory.
3. Copies one trace into synthetic folders of 16, 64 and 256 ranks (gzipped, as with
   ``--gzip-traces``) and times our report on each, to show that its cost grows linearly
   with the bytes of trace.

Not a test: it prints a table and asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable
from profiling.job_folder import JobFolder  # noqa: E402
from tests.common import REPO, SMALL_WORKLOAD, submitted_job_id  # noqa: E402

OURS = (
    "import sys\nfrom pathlib import Path\nfrom profiling.report import build_report\n"
    "build_report(Path(sys.argv[1]), Path(sys.argv[2]))"
)
HTA = (
    "import sys, logging; logging.disable(logging.WARNING);"
    "from hta.trace_analysis import TraceAnalysis;"
    "analyzer = TraceAnalysis(trace_dir=sys.argv[1]);"
    "\ntry:\n    analyzer.get_temporal_breakdown(visualize=False)\n"
    "except Exception as error:\n"
    "    print('temporal breakdown failed:', type(error).__name__, error, file=sys.stderr)"
)


# Appended to each measured program: its own peak RSS, or its largest worker's (HTA uses a pool).
_PEAK = (
    "\nimport resource as _r, sys as _s\n"
    "_peak = max(_r.getrusage(_r.RUSAGE_SELF).ru_maxrss, _r.getrusage(_r.RUSAGE_CHILDREN).ru_maxrss)\n"
    "print('PEAK_KIB', _peak, file=_s.stderr)"
)


def timed(code: str, *args: str) -> tuple[float, float]:
    """(seconds, peak RSS in MiB of the largest process) of ``python -c code args``."""
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", code + _PEAK, *args], cwd=REPO, capture_output=True, text=True, timeout=3600
    )
    seconds = time.perf_counter() - started
    if result.returncode:
        raise RuntimeError(result.stderr)
    notes = [line for line in result.stderr.splitlines() if "failed" in line]
    if notes:
        print("   ", notes[-1])
    peak_kib = int(re.search(r"PEAK_KIB (\d+)", result.stderr).group(1))
    return seconds, peak_kib / 1024


def make_job(root: Path, ranks: int, active: int) -> Path:
    command = [
        sys.executable,
        str(REPO / "submit.py"),
        "--cluster",
        "local",
        "--gpus",
        str(ranks),
        "--profile-ranks",
        "all",
        "--steps",
        str(10 + 5 + active),
        "--active",
        str(active),
        *SMALL_WORKLOAD,
        "--no-report",
        "--wait",
        "--traces-root",
        str(root),
    ]
    out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise RuntimeError(out.stdout + out.stderr)
    return JobFolder(root, submitted_job_id(out.stdout)).path


def synthetic_folder(source: Path, folder: Path, ranks: int) -> int:
    """``ranks`` gzipped copies of one trace, each claiming its own rank; returns raw bytes."""
    trace = orjson.loads(source.read_bytes())
    info = trace["distributedInfo"]
    folder.mkdir(parents=True)
    for rank in range(ranks):
        info["rank"], info["world_size"] = rank, ranks
        with gzip.open(folder / f"rank{rank}_iter15_17.json.gz", "wb", compresslevel=1) as handle:
            handle.write(orjson.dumps(trace))
    return ranks * len(orjson.dumps(trace))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--active", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", type=int, nargs="*", default=[16, 64, 256])
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        print(f"machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}")
        job = make_job(work / "traces", args.ranks, args.active)
        traces = sorted(job.glob("rank*.json"))
        size = sum(p.stat().st_size for p in traces)
        print(f"job folder: {len(traces)} real traces, {size / 2**20:.0f} MiB, {args.active} steps each")

        ours, hta = [], []
        for attempt in range(args.repeats):  # interleaved, so both see the same machine
            ours.append(timed(OURS, str(job), str(work / f"out{attempt}")))
            hta.append(timed(HTA, str(job)))
        ours_s, hta_s = statistics.median(s for s, _ in ours), statistics.median(s for s, _ in hta)
        print(f"{'':24}{'seconds':>10}{'peak MiB':>10}")
        print(f"{'ours (full report)':24}{ours_s:10.2f}{max(m for _, m in ours):10.0f}")
        print(f"{'HTA load + temporal':24}{hta_s:10.2f}{max(m for _, m in hta):10.0f}")
        print(f"HTA / ours: {hta_s / ours_s:.1f}x")

        print("\nscaling (synthetic copies of one trace, gzipped):")
        print(f"{'ranks':>6}{'raw MiB':>10}{'seconds':>10}{'s per GiB':>11}{'peak MiB':>10}")
        for ranks in args.scale:
            folder = work / f"synthetic{ranks}"
            raw = synthetic_folder(traces[0], folder, ranks)
            seconds, peak = timed(OURS, str(folder), str(work / f"synthetic-out{ranks}"))
            print(f"{ranks:6}{raw / 2**20:10.0f}{seconds:10.2f}{seconds / (raw / 2**30):11.1f}{peak:10.0f}")
            shutil.rmtree(folder)
            shutil.rmtree(work / f"synthetic-out{ranks}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
