"""What to run and where: the job spec the command line builds and the executors consume.

Torch-free on purpose: ``submit.py`` builds and validates it on a login node.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from profiling.recording.config import ProfilerConfig
from slurm.basics import SettingError
from slurm.launchers import Executor
from workload.config import WorkloadConfig

DEVICES = ("auto", "cpu", "cuda")
_SBATCH_KEY = re.compile(r"^[a-z][a-z0-9-]*$")

# sbatch options the toolkit sets itself -> the setting to use instead. One set through
# --sbatch too would win in the script while the tasks are planned from ours (nodes=5 next to
# --nodes 2), or move the logs that --wait follows and submitit reads its results from.
_LOGS = (
    "the job's logs, which --wait follows and submitit reads results from, go to <job id>/logs/ under "
    "{traces_root}"
)
_PREEMPTION = "the warning before preemption or the time limit, for the checkpoint"
OWNED_SBATCH_OPTIONS: dict[str, tuple[str, str]] = {  # option -> (what it is to us, the fix)
    "nodes": ("", "use {nodes}"),
    "ntasks": ("", "use {gpus_per_node}, or {tasks_per_node} for CPU tasks"),
    "ntasks-per-node": ("", "use {gpus_per_node}, or {tasks_per_node} for CPU tasks"),
    "ntasks-per-gpu": ("", "use {gpus_per_node}: one task per GPU"),
    "ntasks-per-core": ("", "use {tasks_per_node}"),
    "ntasks-per-socket": ("", "use {tasks_per_node}"),
    "gpus": ("", "use {gpus_per_node} (GPUs per node)"),
    "gpus-per-node": ("", "use {gpus_per_node}"),
    "gpus-per-task": ("", "use {gpus_per_node}: one task per GPU"),
    "gpus-per-socket": ("", "use {gpus_per_node}"),
    "gres": ("GPUs, as --gpus-per-node", "use {gpus_per_node}"),  # only when it asks for GPUs
    "output": (_LOGS, "use {traces_root}"),
    "error": (_LOGS, "use {traces_root}"),
    "open-mode": (_LOGS, "remove it"),
    "signal": (_PREEMPTION, "remove it"),
    "requeue": ("requeue after preemption", "use {max_restarts}"),
    "no-requeue": ("requeue after preemption", "use {max_restarts} 0"),
    "job-name": ("", "use {job_name}"),
    "time": ("", "use {time_min} (minutes)"),
    "partition": ("", "use {partition}"),
    "account": ("", "use {account}"),
    "qos": ("", "use {qos}"),
    "cpus-per-task": ("", "use {cpus_per_task}"),
}
# sbatch's one-letter forms of those
SBATCH_SHORT_OPTIONS = {
    "N": "nodes",
    "n": "ntasks",
    "G": "gpus",
    "o": "output",
    "e": "error",
    "J": "job-name",
    "t": "time",
    "p": "partition",
    "A": "account",
    "q": "qos",
    "c": "cpus-per-task",
}


def owned_sbatch_option(key: str, value: str) -> str | None:
    """The option of ours that ``--sbatch KEY=VALUE`` would fight, if any.

    sbatch also takes a long option by any unambiguous prefix (``--part``): a prefix of one of
    ours is either that option or ambiguous, and is refused too.
    """
    name = SBATCH_SHORT_OPTIONS.get(key, key)
    if name == "gres" and "gpu" not in value.lower():
        return None  # other generic resources (a local disk, say) are the user's to ask for
    if name in OWNED_SBATCH_OPTIONS:
        return name
    return next((owned for owned in OWNED_SBATCH_OPTIONS if len(name) > 1 and owned.startswith(name)), None)


class SpecError(SettingError):
    """A job that must not be submitted; the message names the setting and the fix."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """Everything one task needs; pickled to the task by submitit, or rebuilt from argv by sbatch."""

    workload: WorkloadConfig = dataclasses.field(default_factory=WorkloadConfig)
    profiler: ProfilerConfig = dataclasses.field(default_factory=ProfilerConfig)
    traces_root: Path = Path("traces").absolute()
    dist_timeout_s: float = 300.0
    max_restarts: int = 3  # requeues after preemption or the time limit
    report: bool = True  # rank 0 writes the cross-rank report at the end of the job
    # "auto": CUDA where the task was given a GPU (see jobs.runtime.distributed), "cpu", "cuda"
    device: str = "auto"

    def __post_init__(self) -> None:
        if not self.traces_root.is_absolute():
            raise SpecError(
                f"{{traces_root}} {self.traces_root} must be absolute: tasks may start in another folder"
            )
        if not self.dist_timeout_s > 0:
            raise SpecError(f"{{dist_timeout_s}} {self.dist_timeout_s} must be a positive number of seconds")
        if self.max_restarts < 0:
            raise SpecError(f"{{max_restarts}} {self.max_restarts} must be 0 or more")
        if self.device not in DEVICES:
            raise SpecError(f"{{device}} {self.device!r} is not one of {', '.join(DEVICES)}")
        if not self.profiler.ranks.nobody:  # no schedule to fit: no rank records on it
            self.profiler.schedule.check_fits(self.workload.steps)

    def can_requeue(self, restart_count: int) -> bool:
        """Whether attempt ``restart_count`` may be requeued after a preemption or the time limit."""
        return restart_count < self.max_restarts


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlurmResources:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int = 60
    cpus_per_task: int | None = None
    job_name: str = "profile-resnet18"
    extra: tuple[tuple[str, str], ...] = ()  # any other sbatch option, as (name, value)

    def __post_init__(self) -> None:
        if self.time_min < 1:
            raise SpecError(f"{{time_min}} {self.time_min} must be at least 1 minute")
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            raise SpecError(f"{{cpus_per_task}} {self.cpus_per_task} must be at least 1")
        if not self.job_name.strip():
            raise SpecError("{job_name} is empty")
        for setting, value in (
            ("{partition}", self.partition),
            ("{account}", self.account),
            ("{qos}", self.qos),
            ("{job_name}", self.job_name),
            *((f"{{extra}} {key}", value) for key, value in self.extra),
        ):
            # sbatch reads '#SBATCH' lines one by one: a newline in a value would end the
            # comment and run the rest as shell, whatever the quoting.
            if value is not None and any(ord(char) < 32 or ord(char) == 127 for char in value):
                raise SpecError(
                    f"{setting} {value!r} contains a control character (newline, tab...); remove it"
                )
        for key, value in self.extra:
            owned = owned_sbatch_option(key, value)
            if owned is not None:
                what, fix = OWNED_SBATCH_OPTIONS[owned]
                raise SpecError(
                    f"{{extra}} {key}={value}: the toolkit sets --{owned} itself"
                    + (f" ({what})" if what else "")
                    + f". HINT: {fix}"
                )
            if not _SBATCH_KEY.match(key):
                raise SpecError(
                    f"{{extra}} {key!r} is not an sbatch option name. HINT: write it as in "
                    "`sbatch --help` without the dashes, e.g. {extra} constraint=a100"
                )


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobSpec:
    cluster: Executor
    nodes: int = 1
    gpus_per_node: int = 1  # 0: a CPU job, no GPU asked for
    tasks_per_node: int = 1  # one per GPU; CPU processes per node where there is no GPU
    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
    slurm: SlurmResources = dataclasses.field(default_factory=SlurmResources)

    def __post_init__(self) -> None:
        if not isinstance(self.cluster, Executor):
            raise SpecError(f"{{cluster}} {self.cluster!r} is not one of {', '.join(map(str, Executor))}")
        supports = self.cluster.supports
        if self.nodes < 1:
            raise SpecError(f"{{nodes}} {self.nodes} must be at least 1")
        if self.gpus_per_node < 0:
            raise SpecError(f"{{gpus_per_node}} {self.gpus_per_node} must be 0 (a CPU job) or more")
        if self.tasks_per_node < 1:
            raise SpecError(f"{{tasks_per_node}} {self.tasks_per_node} must be at least 1")
        if self.gpus_per_node and self.tasks_per_node != self.gpus_per_node:
            raise SpecError(
                f"{{tasks_per_node}} {self.tasks_per_node} with {{gpus_per_node}} {self.gpus_per_node}: "
                "every task drives one GPU. HINT: use {tasks_per_node} "
                f"{self.gpus_per_node}, or {{gpus_per_node}} 0 for CPU tasks"
            )
        if self.gpus_per_node == 0 and self.task.device == "cuda":
            raise SpecError("{device} cuda with {gpus_per_node} 0 asks for no GPU. HINT: set {gpus_per_node}")
        if not supports.nodes and self.nodes > 1:
            raise SpecError(
                f"{{cluster}} {self.cluster} runs on this machine only, but {{nodes}} is {self.nodes}. "
                "HINT: use {nodes} 1, or {cluster} slurm"
            )
        if not supports.tasks and self.tasks_per_node > 1:
            raise SpecError(
                f"{{cluster}} {self.cluster} runs one task in this process, "
                f"but {{tasks_per_node}} is {self.tasks_per_node}. "
                "HINT: use one task, or {cluster} local for several processes"
            )
        self.task.profiler.ranks.resolve(self.world_size)
        self.task.workload.check_ranks(self.world_size)

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node
