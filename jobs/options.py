"""The options of the work each task does, shared by ``submit.py`` and ``python -m jobs.task``.

Also the one table from config fields to option names: configs raise
:class:`~slurm.basics.SettingError` naming fields, and :func:`describe` turns that
into the line a user reads (``--steps 15 is too short ...``), whichever command they ran.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jobs.spec import DEVICES, TaskConfig
from profiling.recording.config import ProfilerConfig
from profiling.recording.ranks import RankSelection
from profiling.recording.schedule import ScheduleConfig
from slurm.basics import OneLineParser, SettingError
from workload.config import DTYPE_CHOICES, RankAndMs, RankAndStep, WorkloadConfig

TRACES_ROOT_ENV = "TRACES_ROOT"

# Config field -> the option that sets it. Fields without an option (lr, seed, log_every)
# keep their own names in messages.
OPTIONS = {
    # WorkloadConfig
    "steps": "--steps",
    "batch_size": "--batch-size",
    "image_size": "--image-size",
    "num_classes": "--num-classes",
    "dtype": "--dtype",
    "threads": "--threads-per-rank",
    "inject_failure": "--inject-failure",
    "inject_slowdown": "--inject-slowdown",
    "inject_hang": "--inject-hang",
    # ProfilerConfig, ScheduleConfig
    "ranks": "--profile-ranks",
    "wait": "--schedule-wait",
    "warmup": "--warmup",
    "active": "--active",
    "repeat": "--repeat",
    # TaskConfig
    "traces_root": "--traces-root",
    "dist_timeout_s": "--dist-timeout",
    "max_restarts": "--max-restarts",
    "device": "--device",
    # JobSpec, SlurmResources (submit.py only)
    "cluster": "--cluster",
    "nodes": "--nodes",
    "gpus_per_node": "--gpus",
    "tasks_per_node": "--tasks-per-node",
    "time_min": "--time",
    "cpus_per_task": "--cpus-per-task",
    "job_name": "--job-name",
    "partition": "--partition",
    "account": "--account",
    "qos": "--qos",
    "extra": "--sbatch",
}


def describe(error: ValueError) -> str:
    """An invalid setting as the user should read it: with the options they typed."""
    return error.naming(OPTIONS) if isinstance(error, SettingError) else str(error)


def default_traces_root() -> Path:
    return Path(os.environ.get(TRACES_ROOT_ENV, "traces"))


def add_traces_root(parser: argparse.ArgumentParser | argparse._ArgumentGroup, meaning: str) -> None:
    """``--traces-root``, as every tool of the toolkit takes it."""
    parser.add_argument(
        "--traces-root",
        type=Path,
        default=default_traces_root(),
        metavar="PATH",
        help=f"{meaning} (default: ${TRACES_ROOT_ENV} or ./traces)",
    )


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the work each task does."""
    defaults = TaskConfig()
    _add_workload_arguments(parser, defaults.workload)
    _add_profiler_arguments(parser, defaults.profiler.schedule)
    _add_output_arguments(parser, defaults)


def _add_workload_arguments(parser: argparse.ArgumentParser, workload: WorkloadConfig) -> None:
    work = parser.add_argument_group("workload (the tutorial's ResNet18 DDP loop)")
    work.add_argument(
        "--steps", type=int, default=workload.steps, help="training steps (default: %(default)s)"
    )
    work.add_argument("--batch-size", type=int, default=workload.batch_size, help="(default: %(default)s)")
    work.add_argument("--image-size", type=int, default=workload.image_size, help="(default: %(default)s)")
    work.add_argument("--num-classes", type=int, default=workload.num_classes, help="(default: %(default)s)")
    work.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default=workload.dtype,
        help="auto: bf16 where the device computes it natively (CUDA with bf16, CPUs with AVX-512 BF16 "
        "or AMX), else fp32 (default: %(default)s)",
    )
    work.add_argument(
        "--threads-per-rank",
        type=int,
        default=None,
        help="CPU threads per rank (default: the rank's share of the node)",
    )
    work.add_argument(
        "--inject-failure",
        metavar="RANK:STEP",
        type=_rank_and(RankAndStep, "STEP"),
        help="make RANK raise at STEP, to test how a job with a dead rank ends",
    )
    work.add_argument(
        "--inject-hang",
        metavar="RANK:STEP",
        type=_rank_and(RankAndStep, "STEP"),
        help="make RANK stop making progress at STEP, to see what a hang leaves behind (meta/hang/)",
    )
    work.add_argument(
        "--inject-slowdown",
        metavar="RANK:MS[@FIRST-LAST]",
        type=_slowdown,
        help="make RANK do MS ms of extra CPU work every step (or in steps FIRST to LAST), to see a "
        "straggler in the report",
    )


def _add_profiler_arguments(parser: argparse.ArgumentParser, schedule: ScheduleConfig) -> None:
    prof = parser.add_argument_group("profiler")
    prof.add_argument(
        "--profile-ranks",
        default="0",
        metavar="SPEC",
        help="ranks that record: 'all', 'none', '0,3', '0-3,8', '0,slowest' (default: 0); every rank "
        "keeps its step times anyway (meta/steps/)",
    )
    prof.add_argument(
        "--schedule-wait",
        dest="schedule_wait",
        type=int,
        default=schedule.wait,
        metavar="N",
        help="steps skipped before warm-up (default: %(default)s; --wait blocks on the job instead)",
    )
    prof.add_argument(
        "--warmup", type=int, default=schedule.warmup, metavar="N", help="(default: %(default)s)"
    )
    prof.add_argument(
        "--active",
        type=int,
        default=schedule.active,
        metavar="N",
        help="recorded steps per window (default: %(default)s)",
    )
    prof.add_argument(
        "--repeat",
        type=int,
        default=schedule.repeat,
        metavar="N",
        help="windows, 0 = until the end (default: %(default)s)",
    )
    prof.add_argument("--gzip-traces", action="store_true", help="write rank<r>_iter<a>_<b>.json.gz")
    prof.add_argument(
        "--no-report",
        action="store_true",
        help="skip the cross-rank report rank 0 writes at the end (meta/report.*)",
    )


def _add_output_arguments(parser: argparse.ArgumentParser, defaults: TaskConfig) -> None:
    out = parser.add_argument_group("output")
    add_traces_root(out, "shared folder; traces go to PATH/<job id>/")
    out.add_argument(
        "--dist-timeout",
        type=float,
        default=defaults.dist_timeout_s,
        metavar="SECONDS",
        help=(
            "bound on rendezvous and every collective: a dead or unreachable rank ends the job "
            "(default: %(default)s)"
        ),
    )
    out.add_argument(
        "--device",
        choices=DEVICES,
        default=defaults.device,
        help="auto: CUDA where the task was given a GPU, else the CPU (default: %(default)s)",
    )
    out.add_argument(
        "--max-restarts",
        type=int,
        default=defaults.max_restarts,
        metavar="N",
        help="requeues after preemption or the time limit, resuming from the saved step "
        "(default: %(default)s)",
    )


def task_config_from_args(args: argparse.Namespace) -> TaskConfig:
    """Raises SettingError (see :func:`describe`) on a setting that cannot run."""
    return TaskConfig(
        workload=WorkloadConfig(
            steps=args.steps,
            batch_size=args.batch_size,
            image_size=args.image_size,
            num_classes=args.num_classes,
            dtype=args.dtype,
            threads=args.threads_per_rank,
            inject_failure=args.inject_failure,
            inject_slowdown=args.inject_slowdown,
            inject_hang=args.inject_hang,
        ),
        profiler=ProfilerConfig(
            ranks=RankSelection.parse(args.profile_ranks),
            schedule=ScheduleConfig(
                wait=args.schedule_wait, warmup=args.warmup, active=args.active, repeat=args.repeat
            ),
            gzip=args.gzip_traces,
        ),
        traces_root=args.traces_root.expanduser().absolute(),
        dist_timeout_s=args.dist_timeout,
        max_restarts=args.max_restarts,
        report=not args.no_report,
        device=args.device,
    )


def parse_task_argv(argv: Sequence[str] | None, prog: str) -> TaskConfig:
    """For ``python -m jobs.task``: exits with status 2 and one line on a bad option."""
    parser = OneLineParser(prog=prog, description="One task of the profiled ResNet18 DDP job.")
    add_task_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return task_config_from_args(args)
    except ValueError as error:
        parser.exit(2, f"{prog}: error: {describe(error)}\n")


def _slowdown(text: str) -> RankAndMs:
    """``RANK:MS`` or ``RANK:MS@FIRST-LAST`` (``FIRST-`` alone: to the end)."""
    rank_ms, at, steps = text.partition("@")
    slowdown = _rank_and(RankAndMs, "MS")(rank_ms)
    if not at:
        return slowdown
    first, dash, last = steps.partition("-")
    if not (dash and first.strip().isdigit() and (not last.strip() or last.strip().isdigit())):
        raise argparse.ArgumentTypeError(f"{text!r} is not RANK:MS@FIRST-LAST, e.g. 2:40@30-60")
    return RankAndMs(slowdown.rank, slowdown.ms, int(first), int(last) if last.strip() else None)


def _rank_and(kind: type, what: str) -> Callable[[str], Any]:
    """A parser of ``RANK:<what>`` (two integers) into ``kind(rank, value)``."""

    def parse(text: str) -> Any:
        rank, colon, value = text.partition(":")
        if not (colon and rank.strip().isdigit() and value.strip().isdigit()):
            raise argparse.ArgumentTypeError(f"{text!r} is not RANK:{what}, e.g. 1:5")
        return kind(int(rank), int(value))

    return parse
