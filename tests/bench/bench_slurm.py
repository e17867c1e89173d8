"""Benchmark: login-node latency, submit-to-running, and scale on the local SLURM cluster.

    .venv/bin/python tests/bench/bench_slurm.py [--repeats 5] [--skip-scale]

Needs the test cluster of ``slurm/cluster.sh start full`` (root) for everything but the first part.

1. ``submit.py --help`` and ``submit.py --dry-run --nodes 4 --gpus 8``: median wall time
   (target <= 0.5 s; the submit path must not import torch).
2. From invoking ``submit.py`` to the job's code running (rank 0's ``started_at`` in the
   manifest, after Python and torch are imported on the node), against a bare
   ``sbatch --wrap`` of a one-line job writing its start time; interleaved.
3. Scale: 4 nodes x 8 tasks = 32 ranks against 2 x 2, small images, 20 steps: wall time of
   ``submit.py --wait``, every selected rank's trace present, peak memory per rank.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable
from profiling.folder.layout import JobFolder  # noqa: E402
from tests.common import REPO, SMALL_JOB, load_manifest, submitted_job_id  # noqa: E402

SUBMIT = [sys.executable, str(REPO / "submit.py")]


def wall(command: list[str], **kwargs) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, timeout=600, **kwargs)
    return time.perf_counter() - started


def wait_for(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.05)


def toolkit_start_latency(root: Path) -> float:
    started = time.time()
    out = subprocess.run(
        [*SUBMIT, "--cluster", "slurm", "--no-report", "--traces-root", str(root), *SMALL_JOB],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    manifest = JobFolder(root, submitted_job_id(out.stdout)).manifest
    wait_for(manifest.exists, 300)
    task_started = datetime.datetime.fromisoformat(json.loads(manifest.read_text())["started_at"]).timestamp()
    return task_started - started


def sbatch_start_latency(folder: Path) -> float:
    stamp = folder / f"started-{time.monotonic_ns()}"
    started = time.time()
    subprocess.run(
        ["sbatch", f"--output={folder}/sbatch-%j.out", "--wrap", f"date +%s.%N > {stamp}"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    wait_for(lambda: stamp.exists() and stamp.read_text().strip(), 300)
    return float(stamp.read_text()) - started


def scale_run(root: Path, nodes: int, gpus: int) -> tuple[float, dict, int]:
    last = nodes * gpus - 1
    started = time.perf_counter()
    out = subprocess.run(
        [
            *SUBMIT,
            "--cluster",
            "slurm",
            "--nodes",
            str(nodes),
            "--gpus",
            str(gpus),
            "--profile-ranks",
            f"0,{last}",
            "--wait",
            "--no-report",
            "--time",
            "30",
            "--traces-root",
            str(root),
            *SMALL_JOB,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    seconds = time.perf_counter() - started
    if out.returncode:
        raise RuntimeError(out.stdout + out.stderr)
    job_dir = JobFolder(root, submitted_job_id(out.stdout)).path
    manifest = load_manifest(job_dir)
    traces = len(list(job_dir.glob("rank*.json")))
    return seconds, manifest, traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-scale", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    try:
        help_s = statistics.median(wall([*SUBMIT, "--help"]) for _ in range(args.repeats))
        dry_s = statistics.median(
            wall([*SUBMIT, "--dry-run", "--nodes", "4", "--gpus", "8", "--traces-root", str(work / "dry")])
            for _ in range(args.repeats)
        )
        print(f"{'submit.py --help':44}{help_s:8.3f} s   (target <= 0.5)")
        print(f"{'submit.py --dry-run --nodes 4 --gpus 8':44}{dry_s:8.3f} s   (target <= 0.5)")

        ours, bare = [], []
        for _ in range(args.repeats):
            ours.append(toolkit_start_latency(work / "latency"))
            bare.append(sbatch_start_latency(work))
        print(f"{'submit.py -> job code running (1 task)':44}{statistics.median(ours):8.2f} s")
        print(f"{'bare sbatch --wrap -> job running':44}{statistics.median(bare):8.2f} s")
        difference = statistics.median(ours) - statistics.median(bare)
        print(f"{'difference (Python, torch import, submitit)':44}{difference:8.2f} s")

        if not args.skip_scale:
            for nodes, gpus in ((2, 2), (4, 8)):
                seconds, manifest, traces = scale_run(work / "scale", nodes, gpus)
                rss = [r["peak_rss_mib"] for r in manifest["ranks"]]
                step = statistics.median(r["step_time"]["median_s"] for r in manifest["ranks"])
                print(
                    f"{nodes} nodes x {gpus} tasks = {nodes * gpus:2} ranks: {seconds:6.1f} s wall, "
                    f"median step {step * 1e3:6.0f} ms, {traces} traces (2 selected), "
                    f"peak RSS per rank median {statistics.median(rss):.0f} MiB, max {max(rss):.0f} MiB"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
