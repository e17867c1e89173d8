"""Who starts a job's tasks, and on what: one vocabulary for ``--cluster``, ``--device``, the
identity and the manifest.

``submit.py --cluster`` picks an :class:`Executor` (one of submitit's); the tasks it starts find
that they were started by its :class:`Launcher`, which the distributed identity carries and
the manifest's ``launcher`` field names. A job can also start without submitit: under
``sbatch`` and the batch script (SLURM), under torchrun, or as one plain process.
"""

from __future__ import annotations

import dataclasses
import enum


class Launcher(str, enum.Enum):
    """What started this process's job, as the manifest's ``launcher`` says it."""

    SLURM = "slurm"  # srun in a batch job: submitit's SlurmExecutor, or the batch script
    LOCAL = "submitit-local"  # submitit's LocalExecutor: processes on the submitting machine
    TORCHRUN = "torchrun"  # or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR...
    SINGLE = "single"  # one plain process: python, submitit's DebugExecutor

    def __str__(self) -> str:
        return self.value

    @property
    def queued(self) -> bool:
        """Whether a scheduler holds the job, and can say if it still runs."""
        return self is Launcher.SLURM


class Device(str, enum.Enum):
    """``--device``: what a task computes on."""

    AUTO = "auto"  # CUDA where the task was given a GPU (see jobs.runtime.distributed), else the CPU
    CPU = "cpu"
    CUDA = "cuda"

    def __str__(self) -> str:
        return self.value


class Executor(str, enum.Enum):
    """``submit.py --cluster``: which of submitit's executors runs the job."""

    SLURM = "slurm"
    LOCAL = "local"
    DEBUG = "debug"

    def __str__(self) -> str:
        return self.value

    @property
    def supports(self) -> Supports:
        return SUPPORTS[self]

    @property
    def queued(self) -> bool:
        """Whether a scheduler holds the jobs it submits (:attr:`Launcher.queued`)."""
        return self.supports.launcher.queued


@dataclasses.dataclass(frozen=True)
class Supports:
    """What an executor can run."""

    launcher: Launcher  # what its tasks find they were started by
    nodes: bool  # several nodes
    tasks: bool  # several tasks (processes) per node
    script: bool  # an sbatch script, shown by --dry-run
    in_process: bool  # runs the task in submit.py's own process


SUPPORTS = {
    Executor.SLURM: Supports(Launcher.SLURM, nodes=True, tasks=True, script=True, in_process=False),
    Executor.LOCAL: Supports(Launcher.LOCAL, nodes=False, tasks=True, script=False, in_process=False),
    Executor.DEBUG: Supports(Launcher.SINGLE, nodes=False, tasks=False, script=False, in_process=True),
}
