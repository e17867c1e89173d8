"""``submit.py --wait``: follow rank 0's output until the job ends, then report how it ended."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import TextIO

import submitit
from submitit.core.utils import FailedJobError

from profiling.job_folder import JobFolder

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
    job: submitit.Job, job_dir: JobFolder, out: TextIO, poll_s: float = 1.0, scheduler_poll_s: float = 15.0
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
    failures = [_task_failure(job, task) for task in range(job.num_tasks)]
    failures = [failure for failure in failures if failure is not None]
    if failures:
        srun_report = _read_srun_report(job)
        first = first_failed_rank(failures, srun_report)
        ranks = ", ".join(str(failure.rank) for failure in failures)
        print(f"job {job.job_id} FAILED on rank(s) {ranks}; rank {first.rank} failed first", file=out)
        if srun_report:
            print("--- what srun saw ---", file=out)
            print("\n".join(line for _, line in srun_report[:ERROR_TAIL_LINES]), file=out)
        print(f"--- rank {first.rank}: last lines of its error ---", file=out)
        print(_tail(first.error, ERROR_TAIL_LINES), file=out)
        return 1
    print(f"job {job.job_id} done; traces in {job_dir.path}, manifest and report in {job_dir.meta}", file=out)
    return 0


@dataclasses.dataclass(frozen=True)
class TaskFailure:
    rank: int
    error: str
    raised: bool  # the task raised (and left a result); False: it was killed, or ended without one
    ended_at: float  # when its result was written; inf where there is none


def _task_failure(job: submitit.Job, task: int) -> TaskFailure | None:
    error = job.task(task).exception()
    if error is None:
        return None
    result = job.task(task).paths.result_pickle
    return TaskFailure(
        rank=task,
        error=str(error),
        raised=not isinstance(error, FailedJobError),
        ended_at=result.stat().st_mtime if result.exists() else float("inf"),
    )


# srun's own report of a task's end, in the order it saw them: "srun: error: node2: task 1: Killed"
_SRUN_TASK_ERROR = re.compile(r"^srun: error: \S+: tasks? (?P<tasks>[\d,-]+): .*$", re.MULTILINE)


def srun_task_errors(log: str) -> list[tuple[int, str]]:
    """(first task, line) for each task failure srun reported in a batch log, in srun's order."""
    return [(int(re.split(r"[,-]", m["tasks"])[0]), m.group(0)) for m in _SRUN_TASK_ERROR.finditer(log)]


def _read_srun_report(job: submitit.Job) -> list[tuple[int, str]]:
    try:
        return srun_task_errors(
            job.paths.stderr.read_text(errors="replace")
        )  # the batch script's stderr: srun's
    except OSError:
        return []


def first_failed_rank(failures: list[TaskFailure], srun_report: list[tuple[int, str]]) -> TaskFailure:
    """The rank that died first: as srun saw it; else one killed without a result; else the earliest to raise.

    A killed rank makes the others fail in their next collective, so the raised errors come
    after it and say little about the cause.
    """
    by_rank = {failure.rank: failure for failure in failures}
    for rank, _ in srun_report:
        if rank in by_rank:
            return by_rank[rank]
    return min(failures, key=lambda failure: (failure.raised, failure.ended_at))


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
