"""Benchmark: ``--auto-capture``'s false alarms on balanced jobs of this machine.

    .venv/bin/python tests/bench/bench_trigger.py [--jobs 3] [--ranks 4] [--steps 300]
    .venv/bin/python tests/bench/bench_trigger.py --folders JOB_FOLDER...

Runs ``--jobs`` balanced jobs on submitit's local executor (``--ranks`` processes, one thread each:
4 ranks on this machine's 2 cores is its noisiest shape, the ranks taking turns on the cores) with
``--auto-capture`` and no rank profiled, and counts:

- the captures the live trigger took while they ran (from each manifest): the false alarms as a
  job meets them;
- the findings the trigger makes when its rule is replayed on each job's step logs at every step
  (the map as it stood after that step): a look at every step, where the live trigger looks
  once a second, so an upper bound of the live count.

A finding is a rank found persistently slow that the trigger had not found before (a capture
asked for, or one its bounds held back). Prints findings per job and per 1000 rank-steps.
``--folders`` replays the rule on job folders already run (balanced ones: any finding is false).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable
from jobs.runtime.auto_capture import AutoCapture  # noqa: E402
from profiling.analysis.run.run_logs import read_run  # noqa: E402
from profiling.analysis.run.run_map import RunMap  # noqa: E402
from profiling.folder.layout import JobFolder  # noqa: E402
from profiling.recording.config import AutoCaptureConfig  # noqa: E402
from tests.common import REPO, SMALL_WORKLOAD, load_manifest, submitted_job_id  # noqa: E402

# every finding said: no bound holds one back from being counted
COUNT_ALL = AutoCaptureConfig(enabled=True, max_captures=10**6, cooldown_s=0.0, max_bytes=2**62)


def balanced_job(root: Path, ranks: int, steps: int) -> Path:
    command = [
        sys.executable, str(REPO / "submit.py"), "--cluster", "local", "--gpus", str(ranks),
        "--steps", str(steps), "--profile-ranks", "none", "--auto-capture", "--no-report",
        *SMALL_WORKLOAD, "--traces-root", str(root), "--wait",
    ]  # fmt: skip
    out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise RuntimeError(out.stdout + out.stderr)
    return JobFolder(root, submitted_job_id(out.stdout)).path


def until(run: RunMap, step: int) -> RunMap:
    """The map as the trigger saw it once every rank had logged ``step``."""
    keep = run.first <= step
    return dataclasses.replace(
        run,
        first=run.first[keep],
        width=run.width[keep],
        values=run.values[:, keep],
        last_step=run.last_step.clip(max=step),
        memory=None,
    )


def replayed_findings(folder: Path, scratch: Path) -> tuple[list[str], int]:
    """The trigger's findings at every step of ``folder``'s logs, and its rank-steps."""
    found = read_run(folder)
    if found is None:
        raise SystemExit(f"{folder}: no step logs")
    run = found[0]
    trigger = AutoCapture(JobFolder(scratch, folder.name), COUNT_ALL, None)
    lines = []
    for step in range(int(run.first[0]), int(run.last_step.min()) + 1):
        line = trigger.look(until(run, step))
        if line:
            lines.append(f"step {step}: {line}")
    return lines, int(run.width.sum()) * len(run.ranks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--folders", type=Path, nargs="*", help="replay these balanced jobs' logs instead")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-trigger-"))
    try:
        folders = args.folders or [
            balanced_job(work / "jobs", args.ranks, args.steps) for _ in range(args.jobs)
        ]
        live = None if args.folders else sum(len(load_manifest(f).get("captures") or []) for f in folders)
        findings, rank_steps = 0, 0
        for folder in folders:
            lines, steps = replayed_findings(folder, work / "scratch")
            findings, rank_steps = findings + len(lines), rank_steps + steps
            print(f"{folder.name}: {len(lines)} finding(s) in {steps} rank-steps", *lines, sep="\n  ")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if live is not None:
        print(f"captures the live trigger took: {live} in {len(folders)} balanced job(s)")
    print(
        f"replayed at every step: {findings} finding(s) in {len(folders)} job(s), "
        f"{findings / len(folders):.2f} a job, {1000 * findings / max(rank_steps, 1):.3f} per 1000 rank-steps"
    )


if __name__ == "__main__":
    main()
