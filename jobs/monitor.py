"""``submit.py --wait``: follow rank 0's output until the job ends, then report how it ended."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

import submitit

from profiling.manifest import MANIFEST_NAME

ERROR_TAIL_LINES = 20


class LogFollower:
    """Prints the lines a growing log file gains, from where it last stopped."""

    def __init__(self, path: Path, out: TextIO, prefix: str) -> None:
        self._path, self._out, self._prefix = path, out, prefix
        self._offset = 0
        self._partial = ""

    def poll(self) -> None:
        try:
            with open(self._path, encoding="utf-8", errors="replace") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
                self._offset = handle.tell()
        except FileNotFoundError:
            return
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line and not line.startswith("submitit "):  # submitit's own chatter
                print(f"{self._prefix}{line}", file=self._out, flush=True)


def wait_for(job: submitit.Job, job_dir: Path, out: TextIO, poll_s: float = 1.0) -> int:
    """Block until ``job`` ends; exit status 0 if every task succeeded, else 1."""
    follower = LogFollower(job.task(0).paths.stdout, out, prefix="[rank 0] ")
    while not job.done():
        follower.poll()
        time.sleep(poll_s)
    follower.poll()
    failures = [(task, job.task(task).exception()) for task in range(job.num_tasks)]
    failures = [(task, error) for task, error in failures if error is not None]
    if failures:
        print(f"job {job.job_id} FAILED on rank(s) {', '.join(str(t) for t, _ in failures)}", file=out)
        task, error = failures[0]
        print(f"--- rank {task}: last lines of its error ---", file=out)
        print(_tail(str(error), ERROR_TAIL_LINES), file=out)
        return 1
    print(f"job {job.job_id} done; traces and {MANIFEST_NAME} in {job_dir}", file=out)
    return 0


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
