"""What to run and where: the job spec the command line builds and the executors consume.

Torch-free on purpose: ``submit.py`` builds and validates it on a login node.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from profiling.recording.config import ProfilerConfig
from slurm.common.errors import SettingError
from slurm.common.settings import at_least, check_fields, section, setting
from slurm.common.traces_root import TRACES_ROOT_ENV, traces_root
from slurm.launchers import Device, Executor
from slurm.resources import SlurmResources
from workload.config import WorkloadConfig

AUTO_CLUSTER = "auto"  # slurm where sbatch is on PATH, else local
_WHERE = "where"


class SpecError(SettingError):
    """A job that must not be submitted; the message names the setting and the fix."""


def _absolute_path(text: str) -> Path:
    return Path(text).expanduser().absolute()


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """Everything one task needs; pickled to the task by submitit, or rebuilt from argv by sbatch."""

    workload: WorkloadConfig = section(WorkloadConfig)
    profiler: ProfilerConfig = section(ProfilerConfig)
    report: bool = setting(
        True,
        flag="--no-report",
        help="skip the cross-rank report rank 0 writes at the end (meta/report.*)",
        group="profiler",
    )
    job_comment: bool = setting(
        True,
        flag="--no-job-comment",
        help="leave the SLURM job's Comment alone (default: the report's verdict in one line, at the end)",
        group="profiler",
    )
    metrics_push: str | None = setting(
        None,
        flag="--metrics-push",
        help="while the job runs, push each node's ranks' step time, step, memory and straggler score to "
        "this Prometheus Pushgateway (http://host:9091)",
        group="output",
        metavar="URL",
        check=lambda value: (
            None if value.startswith(("http://", "https://")) else "must be an http(s):// URL"
        ),
    )
    metrics_textfile: Path | None = setting(
        None,
        flag="--metrics-textfile",
        help="... or write them for node_exporter's textfile collector into DIR on each node (one file a job "
        "and node, removed at the end)",
        group="output",
        metavar="DIR",
        parse=_absolute_path,
    )
    metrics_every_s: float = setting(
        5.0,
        flag="--metrics-every",
        help="how often the metrics are published (each node's publisher reads its ranks' step logs)",
        group="output",
        metavar="SECONDS",
        check=lambda value: None if value >= 1 else "must be at least 1 second",
    )
    traces_root: Path = setting(
        traces_root(env={}),
        flag="--traces-root",
        help=f"shared folder; traces go to PATH/<job id>/ (default: ${TRACES_ROOT_ENV} or ./traces)",
        group="output",
        metavar="PATH",
        parse=_absolute_path,
        env=TRACES_ROOT_ENV,
    )
    dist_timeout_s: float = setting(
        300.0,
        flag="--dist-timeout",
        help="bound on rendezvous and every collective: a dead or unreachable rank ends the job",
        group="output",
        metavar="SECONDS",
        check=lambda value: None if value > 0 else "must be a positive number of seconds",
    )
    device: Device = setting(
        Device.AUTO,
        flag="--device",
        help="auto: CUDA where the task was given a GPU, else the CPU",
        group="output",
        choices=tuple(map(str, Device)),
        parse=Device,
    )
    max_restarts: int = setting(
        3,
        flag="--max-restarts",
        help="requeues after preemption or the time limit, resuming from the saved step",
        group="output",
        metavar="N",
        check=lambda value: None if value >= 0 else "must be 0 or more",
    )

    def __post_init__(self) -> None:
        check_fields(self, SpecError)
        if self.device not in tuple(map(str, Device)):
            raise SpecError(f"{{device}} {self.device!r} is not one of {', '.join(map(str, Device))}")
        object.__setattr__(self, "device", Device(self.device))
        if not self.traces_root.is_absolute():
            raise SpecError(
                f"{{traces_root}} {self.traces_root} must be absolute: tasks may start in another folder"
            )
        if not self.profiler.ranks.nobody:  # no schedule to fit: no rank records on it
            self.profiler.schedule.check_fits(self.workload.steps)

    def can_requeue(self, restart_count: int) -> bool:
        """Whether attempt ``restart_count`` may be requeued after a preemption or the time limit."""
        return restart_count < self.max_restarts


def resolve_cluster(requested: str, dry_run: bool = False) -> Executor:
    """``--cluster auto``: slurm where sbatch is on PATH (or for a dry run's script), else local."""
    if requested != AUTO_CLUSTER:
        return Executor(requested)
    return Executor.SLURM if dry_run or shutil.which("sbatch") else Executor.LOCAL


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobSpec:
    cluster: Executor = setting(
        AUTO_CLUSTER,
        flag="--cluster",
        help="submitit's executor; auto: slurm if sbatch is on PATH, else local",
        group=_WHERE,
        choices=(AUTO_CLUSTER, *map(str, Executor)),
    )
    nodes: int = setting(
        1, flag="--nodes", help="nodes (local and debug run one)", group=_WHERE, check=at_least(1)
    )
    gpus_per_node: int = setting(
        1,
        flag="--gpus",
        help="GPUs per node, one task each; 0 asks for none: CPU tasks on gloo",
        group=_WHERE,
        check=lambda value: None if value >= 0 else "must be 0 (a CPU job) or more",
    )
    tasks_per_node: int = setting(  # None: one per GPU, made so in __post_init__
        None,
        flag="--tasks-per-node",
        help="tasks per node (default: --gpus, or 1 with --gpus 0); with GPUs, one per GPU",
        group=_WHERE,
        metavar="N",
        parse=int,
        check=at_least(1),
    )
    task: TaskConfig = section(TaskConfig)
    slurm: SlurmResources = section(SlurmResources)

    def __post_init__(self) -> None:
        # Defaults that depend on other fields, filled in once so that every reader sees them.
        if not isinstance(self.cluster, Executor):
            if self.cluster not in (AUTO_CLUSTER, *map(str, Executor)):
                raise SpecError(f"{{cluster}} {self.cluster!r} is not one of {', '.join(map(str, Executor))}")
            object.__setattr__(self, "cluster", resolve_cluster(self.cluster))
        if self.tasks_per_node is None:
            object.__setattr__(self, "tasks_per_node", max(self.gpus_per_node, 1))
        if self.gpus_per_node == 0 and self.task.device == Device.AUTO:  # no GPU asked for: none used
            object.__setattr__(self, "task", dataclasses.replace(self.task, device=Device.CPU))
        check_fields(self, SpecError)
        supports = self.cluster.supports
        if self.gpus_per_node and self.tasks_per_node != self.gpus_per_node:
            raise SpecError(
                f"{{tasks_per_node}} {self.tasks_per_node} with {{gpus_per_node}} {self.gpus_per_node}: "
                "every task drives one GPU. HINT: use {tasks_per_node} "
                f"{self.gpus_per_node}, or {{gpus_per_node}} 0 for CPU tasks"
            )
        if self.gpus_per_node == 0 and self.task.device == Device.CUDA:
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
