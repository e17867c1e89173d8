"""``--wait``'s reading of a failed job: srun's report and which rank failed first."""

from __future__ import annotations

import math

from jobs.monitor import TaskFailure, first_failed_rank, srun_task_errors

SRUN_LOG = """\
submitit WARNING (2026-11-30 10:00:00,000) - something unrelated
srun: error: node2: task 2: Killed
srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
srun: error: node1: tasks 0-1: Exited with exit code 1
srun: error: node2: task 3: Exited with exit code 1
"""


def test_srun_task_errors_in_srun_order() -> None:
    assert srun_task_errors(SRUN_LOG) == [
        (2, "srun: error: node2: task 2: Killed"),
        (0, "srun: error: node1: tasks 0-1: Exited with exit code 1"),
        (3, "srun: error: node2: task 3: Exited with exit code 1"),
    ]
    assert srun_task_errors("srun: error: node1: tasks 4,6: Killed\n") == [
        (4, "srun: error: node1: tasks 4,6: Killed")
    ]
    assert srun_task_errors("no srun here\nerror: task 1 somewhere\n") == []


def failure(rank: int, raised: bool, ended_at: float = math.inf) -> TaskFailure:
    return TaskFailure(rank=rank, error=f"rank {rank}'s error", raised=raised, ended_at=ended_at)


def test_first_failure_is_what_srun_saw_first() -> None:
    failures = [failure(0, True, 10.0), failure(1, True, 11.0), failure(2, False), failure(3, True, 9.0)]
    assert first_failed_rank(failures, srun_task_errors(SRUN_LOG)).rank == 2


def test_srun_report_of_a_rank_that_did_not_fail_is_skipped() -> None:
    failures = [failure(1, True, 5.0)]
    assert first_failed_rank(failures, [(0, "srun: error: node1: task 0: Killed")]).rank == 1


def test_without_srun_a_killed_rank_comes_before_those_that_raised() -> None:
    failures = [failure(0, True, 10.0), failure(3, False), failure(1, True, 9.0)]
    assert first_failed_rank(failures, []).rank == 3


def test_without_srun_the_earliest_to_raise() -> None:
    failures = [failure(0, True, 10.0), failure(1, True, 9.5), failure(2, True, 12.0)]
    assert first_failed_rank(failures, []).rank == 1
