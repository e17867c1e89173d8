"""``submit.py --wait``: follow rank 0's output until the job ends, then report how it ended."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TextIO

import submitit
from submitit.core.utils import FailedJobError

from profiling.manifest import META_DIR

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


def wait_for(
    job: submitit.Job, job_dir: Path, out: TextIO, poll_s: float = 1.0, scheduler_poll_s: float = 15.0
) -> int:
    """Block until ``job`` ends; exit status 0 if every task succeeded, else 1."""
    follower = LogFollower(job.task(0).paths.stdout, out, prefix="[rank 0] ")
    last_scheduler_poll = time.monotonic()
    while not job.done():
        follower.poll()
        time.sleep(poll_s)
        if time.monotonic() - last_scheduler_poll > scheduler_poll_s:
            # submitit asks the scheduler less and less often as a job ages; a killed task
            # leaves no result file, so only the scheduler can say the job is over.
            job.get_info(mode="force")
            last_scheduler_poll = time.monotonic()
    follower.poll()
    failures = [(task, job.task(task).exception()) for task in range(job.num_tasks)]
    failures = [(task, error) for task, error in failures if error is not None]
    if failures:
        ranks = ", ".join(str(task) for task, _ in failures)
        srun_report = _srun_task_errors(job)
        first = _first_failure(job, failures, srun_report)
        print(f"job {job.job_id} FAILED on rank(s) {ranks}; rank {first} failed first", file=out)
        if srun_report:
            print("--- what srun saw ---", file=out)
            print("\n".join(line for _, line in srun_report[:ERROR_TAIL_LINES]), file=out)
        print(f"--- rank {first}: last lines of its error ---", file=out)
        print(_tail(str(dict(failures)[first]), ERROR_TAIL_LINES), file=out)
        return 1
    print(f"job {job.job_id} done; traces in {job_dir}, manifest and report in {job_dir / META_DIR}", file=out)
    return 0


# srun's own report of a task's end, in the order it saw them: "srun: error: node2: task 1: Killed"
_SRUN_TASK_ERROR = re.compile(r"^srun: error: \S+: tasks? (?P<tasks>[\d,-]+): .*$", re.MULTILINE)


def _srun_task_errors(job: submitit.Job) -> list[tuple[int, str]]:
    """(first task, line) for each task failure srun reported in the job's batch log."""
    try:
        text = job.paths.stderr.read_text(errors="replace")  # the batch script's stderr: srun's
    except OSError:
        return []
    return [(int(re.split(r"[,-]", m["tasks"])[0]), m.group(0)) for m in _SRUN_TASK_ERROR.finditer(text)]


def _first_failure(
    job: submitit.Job, failures: list[tuple[int, Exception]], srun_report: list[tuple[int, str]]
) -> int:
    """The rank that died first: as srun saw it; else a rank that raised, the earliest one."""
    if srun_report:
        return srun_report[0][0]

    def order(failure: tuple[int, Exception]) -> tuple[int, float]:
        task, error = failure
        result = job.task(task).paths.result_pickle
        return (0 if isinstance(error, FailedJobError) else 1, result.stat().st_mtime if result.exists() else float("inf"))

    return min(failures, key=order)[0]


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
