"""Preemption and time limits: turn the scheduler's warning signal into a clean stop and a requeue.

submitit (and our batch script, ``--signal=USR2@120``) have SLURM send USR2 to every task some
time before a preemption or the time limit. A signal can land anywhere, in the middle of an
optimizer update or of a collective, so the handler here only sets a flag; the training loop
reads it between steps, the task saves its state there, and only then is the job requeued:
by submitit's own handler (which calls :meth:`jobs.task.ProfiledTraining.checkpoint` and runs
``scontrol requeue``) or, under plain sbatch, by ``scontrol requeue`` from rank 0.

The signal reaches the ranks a little apart, so no rank reads its own flag alone: the ranks
agree on the step to stop at (:mod:`jobs.runtime.agreed_stop`). This module stays torch-free:
:mod:`jobs.task` imports it on the login node.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from submitit import JobEnvironment

from slurm import scheduler
from slurm.identity import DistributedIdentity

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

    def hand_over(self, identity: DistributedIdentity, max_restarts: int) -> None:
        """Requeue the job (rank 0) or wait to be ended by the requeue (other ranks).

        Called once this rank's state is saved. Returns only if no requeue came.
        """
        if callable(self._chained):
            # submitit: on rank 0 it checkpoints, requeues and exits; elsewhere it returns.
            self._chained(self.signum, None)
        elif identity.is_main and identity.launcher.queued:
            if identity.restart_count >= max_restarts:
                raise PreemptedWithoutRequeue(
                    f"preempted after {identity.restart_count} restarts, the most --max-restarts "
                    f"{max_restarts} allows"
                )
            scheduler.requeue(identity.job_id)
            sys.exit(f"job {identity.job_id} requeued after preemption")
        if not identity.is_main:
            time.sleep(REQUEUE_GRACE_S)
        raise PreemptedWithoutRequeue(f"rank {identity.rank} was preempted and the job was not requeued")
