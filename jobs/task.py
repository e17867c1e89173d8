"""The per-task entry point, torch-free: what submitit pickles, and ``python -m jobs.task``.

submitit pickles a :class:`ProfiledTraining` on the login node and calls it in every task; the
batch script runs ``python -m jobs.task [options]`` under ``srun`` instead. Both end in
:func:`jobs.run_task.run_task`, imported only there, so that pickling the task (and
``submit.py --help``) never loads torch.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from submitit.helpers import Checkpointable, DelayedSubmission

from jobs.options import TASK_PROG, parse_task_argv, task_parser
from jobs.runtime.output import show_task_output
from jobs.runtime.preemption import Preemption
from jobs.spec import TaskConfig
from profiling.schema.manifest import RankRecord
from slurm.common.errors import SettingError
from slurm.identity import DistributedEnvError, from_environment


class ProfiledTraining(Checkpointable):
    """The callable submitit runs in each task (and requeues after a preemption)."""

    def __init__(self, config: TaskConfig) -> None:
        self.config = config

    def __call__(self) -> RankRecord:
        from jobs.run_task import run_task

        show_task_output()
        try:
            return run_task(self.config, from_environment(), Preemption().install())
        except SettingError as error:  # submitit shows str(error): name the options, as submit.py does
            raise type(error)(task_parser().describe(error)) from None

    # None: submitit requeues nothing (its job_environment checks for it); its stub says a submission
    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission | None:  # type: ignore[override]
        # submitit calls this on rank 0 when the job is preempted, after run_task has saved the
        # training state to the job folder: the requeued job is this same callable, which
        # resumes from that state. None (no requeue) once --max-restarts is used up.
        if not self.config.can_requeue(from_environment().restart_count):
            return None
        return DelayedSubmission(self, *args, **kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jobs.task [workload and profiler options]``, one per task under ``srun``."""
    config = parse_task_argv(argv)
    try:
        identity = from_environment()
    except DistributedEnvError as error:
        print(f"{TASK_PROG}: error: {error}", file=sys.stderr)
        return 2
    from jobs.run_task import run_task
    from jobs.runtime.distributed import RendezvousError

    show_task_output()
    try:
        run_task(config, identity, Preemption().install())
    except SettingError as error:  # checked against the job's world size before joining it
        print(f"{TASK_PROG}: error: {task_parser().describe(error)}", file=sys.stderr)
        return 2
    except RendezvousError as error:
        print(f"{TASK_PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


def leave(status: int) -> NoReturn:
    """End the task's process with ``status``, its output flushed, without the interpreter's
    finalization. A DDP model keeps its gloo group alive past ``destroy_process_group`` (its
    ``pt_gloo_runloop`` threads and rank 0's store thread still run after the model is gone),
    and at finalization those threads race the teardown: SIGABRT, "terminate called without an
    active exception" (pytorch#179291), which srun would report instead of the status. CI saw it
    once, after the one-line error of a traces root the nodes do not share."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


if __name__ == "__main__":
    leave(main())
