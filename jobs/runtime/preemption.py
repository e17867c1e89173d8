"""Preemption and time limits: turn the scheduler's warning signal into a clean stop and a requeue.

submitit (and our batch script, ``--signal=USR2@120``) have SLURM send USR2 to every task some
time before a preemption or the time limit. A signal can land anywhere, in the middle of an
optimizer update or of a collective, so the handler here only sets a flag; the training loop
reads it between steps, the task saves its state there, and only then is the job requeued:
by submitit's own handler (which calls :meth:`jobs.task.ProfiledTraining.checkpoint` and runs
``scontrol requeue``) or, under plain sbatch, by ``scontrol requeue`` from rank 0.

The signal reaches the ranks a little apart, so no rank reads its own flag alone: the ranks
agree on the step to stop at (:class:`AgreedStop`).
"""

from __future__ import annotations

import datetime
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

import torch
import torch.distributed as dist
from submitit import JobEnvironment

from jobs.spec import TaskConfig
from slurm import scheduler
from slurm.env import DistributedIdentity

# How long a rank that is not rank 0 waits, after saving its state, for the requeue to end it.
REQUEUE_GRACE_S = 120.0


class PreemptedWithoutRequeue(RuntimeError):
    """The job was told to stop but nobody requeued it (restarts exhausted, or rank 0 died)."""


class Preemption:
    """The preemption signal as a flag (``requested``), read by the training loop between steps."""

    def __init__(self) -> None:
        self.requested = False
        self.signum = getattr(signal, "SIG" + JobEnvironment.USR_SIG)
        self._chained: Callable[[int, FrameType | None], Any] | int | None = None

    def install(self) -> Preemption:
        """Take over the signal; whatever handled it before (submitit) runs at :meth:`hand_over`."""
        self._chained = signal.signal(self.signum, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def hand_over(self, identity: DistributedIdentity, config: TaskConfig) -> None:
        """Requeue the job (rank 0) or wait to be ended by the requeue (other ranks).

        Called once this rank's state is saved. Returns only if no requeue came.
        """
        if callable(self._chained):
            # submitit: on rank 0 it checkpoints, requeues and exits; elsewhere it returns.
            self._chained(self.signum, None)
        elif identity.is_main and identity.launcher.queued:
            if not config.can_requeue(identity.restart_count):
                raise PreemptedWithoutRequeue(
                    f"preempted after {identity.restart_count} restarts, the most --max-restarts "
                    f"{config.max_restarts} allows"
                )
            scheduler.requeue(identity.job_id)
            sys.exit(f"job {identity.job_id} requeued after preemption")
        if not identity.is_main:
            time.sleep(REQUEUE_GRACE_S)
        raise PreemptedWithoutRequeue(f"rank {identity.rank} was preempted and the job was not requeued")


class AgreedStop:
    """Every rank stops before the same step: the one after the first step that began, on any
    rank, with that rank's ``flag`` up.

    Were each rank to stop on its own flag, one that saw the signal before step N would leave
    while another, signalled a moment later, had begun step N and waits in its all-reduce for
    the rank that left (gloo: "Connection closed by peer"): the job fails instead of being
    requeued. So at the start of every step each rank adds its flag to an all-reduce (MAX), and
    reads the result at the start of the next step, when it is long done. The all-reduce has a gloo
    group and a thread of its own: the profiler records the training thread's operators only,
    and on a GPU the flag never touches the device, so the loop gains no host synchronisation.
    ``should_stop`` gives every rank the same answers, in the same order, by construction.
    """

    def __init__(self, flag: Preemption, *, timeout_s: float) -> None:
        self._flag, self._timeout_s = flag, timeout_s
        self._group: dist.ProcessGroup | None = None
        if dist.get_world_size() > 1:  # a collective: every rank makes the group
            self._group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
        self._flags: queue.SimpleQueue[bool | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[bool | BaseException] = queue.SimpleQueue()
        self._asked = False  # an all-reduce is in flight, its answer not read yet
        # a daemon: a rank that fails mid-step must not wait at exit for a collective nobody ends
        self._thread = threading.Thread(target=self._reduce_flags, name="agreed-stop", daemon=True)

    def __enter__(self) -> AgreedStop:
        if self._group is not None:
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._group is None:
            return
        self._flags.put(None)
        if kind is None:  # every rank queued the last step's all-reduce: it ends at once
            self._thread.join(timeout=self._timeout_s)

    def should_stop(self, step: int) -> bool:
        """Asked by every rank at the start of every step: stop before ``step``?"""
        if self._group is None:
            return self._flag.requested
        if self._asked:
            try:
                answer = self._answers.get(timeout=self._timeout_s)
            except queue.Empty:
                raise TimeoutError(
                    f"the ranks did not agree within {self._timeout_s:g}s (--dist-timeout) whether to "
                    f"stop before step {step}"
                ) from None
            if isinstance(answer, BaseException):
                raise answer
            if answer:
                return True
        self._flags.put(self._flag.requested)
        self._asked = True
        return False

    def _reduce_flags(self) -> None:
        while (flagged := self._flags.get()) is not None:
            try:
                value = torch.tensor([int(flagged)], dtype=torch.int32)
                dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self._group)
                self._answers.put(bool(value.item()))
            except Exception as error:  # the training thread raises it
                self._answers.put(error)
                return
