"""``submit.py --wait``: follow rank 0's output until the job ends, then report how it ended.

A SLURM job is followed through the scheduler itself (:class:`SlurmJobState`): submitit would
ask sacct, which answers nothing on a cluster without accounting, and a task that was killed
leaves no result for submitit to find, so ``--wait`` would never return. How each task ended
is read from the result file submitit writes in it; which rank failed first, from srun's log.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from pathlib import Path
from typing import TextIO

import submitit
from submitit.core.utils import pickle_load

from profiling.analysis.dumps.oom import oom_verdict_lines
from profiling.folder.layout import JobFolder
from profiling.report.hang import verdict_lines
from slurm import scheduler
from slurm.queue_view import QueueView

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


def wait_for(job: submitit.Job, job_dir: JobFolder, out: TextIO, queued: bool, poll_s: float = 1.0) -> int:
    """Block until ``job`` ends; exit status 0 if every task succeeded, else 1. ``queued``: a
    scheduler holds the job (:attr:`slurm.launchers.Launcher.queued`) and says when it ends."""
    follower = LogFollower(job.task(0).paths.stdout, out, prefix="[rank 0] ")
    slurm_state = SlurmJobState(job.job_id, out) if queued else None
    while not (slurm_state.ended() if slurm_state is not None else job.done()):
        follower.poll()
        if slurm_state is not None:
            slurm_state.queue.pause(at_most_s=poll_s)  # rank 0's lines every poll_s at least
        else:
            time.sleep(poll_s)
    follower.poll()
    failures = [failure for task in range(job.num_tasks) if (failure := task_failure(job, task))]
    if failures:
        srun_report = _read_srun_report(job)
        first = first_failed_rank(failures, srun_report)
        ranks = ", ".join(str(failure.rank) for failure in failures)
        print(f"job {job.job_id} FAILED on rank(s) {ranks}; rank {first.rank} failed first", file=out)
        for line in oom_verdict_lines(job_dir):  # the cause, before the tails that follow from it
            print(line, file=out)
        if srun_report:
            print("--- what srun saw ---", file=out)
            print("\n".join(line for _, line in srun_report[:ERROR_TAIL_LINES]), file=out)
        print(f"--- rank {first.rank}: last lines of its error ---", file=out)
        print(_tail(first.error, ERROR_TAIL_LINES), file=out)
        verdict = verdict_lines(job_dir)
        if verdict:
            print("--- why it hung (meta/hang/hang.md) ---", file=out)
            print("\n".join(verdict), file=out)
        return 1
    if slurm_state is not None and slurm_state.state not in (scheduler.SUCCEEDED, scheduler.UNKNOWN_END):
        print(f"job {job.job_id} ended {slurm_state.state}", file=out)
        return 1
    print(f"job {job.job_id} done; traces in {job_dir.path}, manifest and report in {job_dir.meta}", file=out)
    return 0


class SlurmJobState:
    """Whether a SLURM job has ended: from the queue while the job is in it, then how it ended,
    both through one :class:`~slurm.queue_view.QueueView`."""

    def __init__(self, job_id: str, out: TextIO) -> None:
        self.job_id, self.out = job_id, out
        self.state: str | None = None  # set once the job has ended
        self.queue = QueueView()

    def _say(self, line: str) -> None:
        print(line, file=self.out)

    def ended(self) -> bool:
        if self.state is not None:
            return True
        state = self.queue.state(self.job_id)
        if state is None or not scheduler.has_ended(state):
            return False  # no answer (ask again), or still queued or running
        self.state = state or self.queue.ending(self.job_id, self._say)[0]
        return True


@dataclasses.dataclass(frozen=True)
class TaskFailure:
    rank: int
    error: str
    raised: bool  # the task raised (and left a result); False: it was killed, or ended without one
    ended_at: float  # when its result was written; inf where there is none


def task_failure(job: submitit.Job, task: int) -> TaskFailure | None:
    """How task ``task`` failed (None if it succeeded), from the result file submitit writes."""
    result = job.task(task).paths.result_pickle
    try:
        outcome, value = pickle_load(result)
    except (FileNotFoundError, EOFError):
        error = f"task {task} left no result: it was killed, or its node died (see what srun saw)"
        return TaskFailure(rank=task, error=error, raised=False, ended_at=math.inf)
    if outcome == "success":
        return None
    return TaskFailure(rank=task, error=str(value), raised=True, ended_at=result.stat().st_mtime)


# srun's own report of a task's end, in the order it saw them: "srun: error: node2: task 1: Killed"
_SRUN_TASK_ERROR = re.compile(r"^srun: error: \S+: tasks? (?P<tasks>[\d,-]+): .*$", re.MULTILINE)


def srun_task_errors(log: str) -> list[tuple[int, str]]:
    """(first task, line) for each task failure srun reported in a batch log, in srun's order."""
    return [(int(re.split(r"[,-]", m["tasks"])[0]), m.group(0)) for m in _SRUN_TASK_ERROR.finditer(log)]


def _read_srun_report(job: submitit.Job) -> list[tuple[int, str]]:
    try:  # the batch script's stderr, where srun writes
        return srun_task_errors(job.paths.stderr.read_text(errors="replace"))
    except OSError:
        return []


def first_failed_rank(failures: list[TaskFailure], srun_report: list[tuple[int, str]]) -> TaskFailure:
    """The rank that died first: as srun saw it; else one killed without a result; else the
    earliest to raise. A killed rank makes the others fail in their next collective, so the
    errors they raise come after it and say little about the cause."""
    by_rank = {failure.rank: failure for failure in failures}
    for rank, _ in srun_report:
        if rank in by_rank:
            return by_rank[rank]
    return min(failures, key=lambda failure: (failure.raised, failure.ended_at))


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
