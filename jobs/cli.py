"""The command line: ``python submit.py [options]``, and the task options ``jobs.task`` shares.

The only module that parses arguments. It builds a validated :class:`~jobs.spec.JobSpec`
before anything is submitted; every mistake is one line naming the option and the fix.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from jobs.spec import JobSpec, SlurmResources, SpecError, TaskConfig
from profiling.config import ProfilerConfig
from profiling.ranks import RankSelection
from profiling.schedule import ScheduleConfig
from workload.config import DTYPES, WorkloadConfig

TRACES_ROOT_ENV = "TRACES_ROOT"


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the work each task does; shared by ``submit.py`` and ``python -m jobs.task``."""
    defaults = WorkloadConfig()
    work = parser.add_argument_group("workload (the tutorial's ResNet18 DDP loop)")
    work.add_argument("--steps", type=int, default=defaults.steps, help="training steps (default: %(default)s)")
    work.add_argument("--batch-size", type=int, default=defaults.batch_size, help="(default: %(default)s)")
    work.add_argument("--image-size", type=int, default=defaults.image_size, help="(default: %(default)s)")
    work.add_argument("--num-classes", type=int, default=defaults.num_classes, help="(default: %(default)s)")
    work.add_argument("--dtype", choices=DTYPES, default=defaults.dtype, help="(default: %(default)s)")
    work.add_argument(
        "--threads-per-rank", type=int, default=None, help="CPU threads per rank (default: the rank's share of the node)"
    )
    work.add_argument(
        "--inject-failure",
        metavar="RANK:STEP",
        type=_rank_and_step,
        help="make RANK raise at STEP, to test how a job with a dead rank ends",
    )

    schedule = ScheduleConfig()
    prof = parser.add_argument_group("profiler")
    prof.add_argument(
        "--profile-ranks", default="0", metavar="SPEC", help="ranks that record: 'all', '0,3', '0-3,8' (default: 0)"
    )
    prof.add_argument(
        "--schedule-wait",
        dest="schedule_wait",
        type=int,
        default=schedule.wait,
        metavar="N",
        help="steps skipped before warm-up (default: %(default)s; --wait blocks on the job instead)",
    )
    prof.add_argument("--warmup", type=int, default=schedule.warmup, metavar="N", help="(default: %(default)s)")
    prof.add_argument("--active", type=int, default=schedule.active, metavar="N", help="recorded steps per window (default: %(default)s)")
    prof.add_argument("--repeat", type=int, default=schedule.repeat, metavar="N", help="windows, 0 = until the end (default: %(default)s)")
    prof.add_argument("--gzip-traces", action="store_true", help="write rank<r>_iter<a>_<b>.json.gz")
    prof.add_argument(
        "--no-report", action="store_true", help="skip the cross-rank report rank 0 writes at the end (meta/report.*)"
    )

    task_defaults = TaskConfig()
    out = parser.add_argument_group("output")
    out.add_argument(
        "--traces-root",
        type=Path,
        default=Path(os.environ.get(TRACES_ROOT_ENV, "traces")),
        metavar="PATH",
        help=f"shared folder; traces go to PATH/<job id>/ (default: ${TRACES_ROOT_ENV} or ./traces)",
    )
    out.add_argument(
        "--dist-timeout",
        type=float,
        default=task_defaults.dist_timeout_s,
        metavar="SECONDS",
        help="bound on rendezvous and every collective: a dead or unreachable rank ends the job (default: %(default)s)",
    )
    out.add_argument(
        "--max-restarts",
        type=int,
        default=task_defaults.max_restarts,
        metavar="N",
        help="requeues after preemption or the time limit, resuming from the saved step (default: %(default)s)",
    )


def task_config_from_args(args: argparse.Namespace) -> TaskConfig:
    return TaskConfig(
        workload=WorkloadConfig(
            steps=args.steps,
            batch_size=args.batch_size,
            image_size=args.image_size,
            num_classes=args.num_classes,
            dtype=args.dtype,
            threads=args.threads_per_rank,
            fail_rank=args.inject_failure[0] if args.inject_failure else None,
            fail_step=args.inject_failure[1] if args.inject_failure else 0,
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
    )


def task_config_from_argv(argv: Sequence[str] | None, prog: str) -> TaskConfig:
    """For ``python -m jobs.task``: exits with status 2 and one line on a bad option."""
    parser = argparse.ArgumentParser(prog=prog, description="One task of the profiled ResNet18 DDP job.")
    add_task_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return task_config_from_args(args)
    except ValueError as error:
        parser.exit(2, f"{prog}: error: {error}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="submit.py",
        description="Submit a profiled ResNet18 DDP job; one Chrome trace per profiled rank lands in <traces root>/<job id>/.",
    )
    where = parser.add_argument_group("where")
    where.add_argument(
        "--cluster",
        choices=("auto", "slurm", "local", "debug"),
        default="auto",
        help="auto: slurm if sbatch is on PATH, else local (default: auto)",
    )
    where.add_argument("--nodes", type=int, default=1, help="(default: %(default)s)")
    where.add_argument(
        "--gpus", type=int, default=1, help="GPUs, and so tasks, per node; CPU processes where there is no GPU (default: 1)"
    )
    add_task_arguments(parser)

    slurm = parser.add_argument_group("SLURM resources")
    slurm.add_argument("--partition")
    slurm.add_argument("--account")
    slurm.add_argument("--qos")
    slurm.add_argument("--time", type=int, default=60, metavar="MINUTES", help="time limit (default: %(default)s)")
    slurm.add_argument("--cpus-per-task", type=int)
    slurm.add_argument("--job-name", default=SlurmResources().job_name, help="(default: %(default)s)")
    slurm.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other sbatch option, repeatable: --sbatch constraint=a100 --sbatch mail-type=END",
    )

    run = parser.add_argument_group("run")
    run.add_argument("--wait", action="store_true", help="block until the job ends, show rank 0's progress")
    run.add_argument("--dry-run", action="store_true", help="print the sbatch script; submit nothing")
    return parser


def resolve_cluster(requested: str, dry_run: bool) -> str:
    if requested != "auto":
        return requested
    return "slurm" if dry_run or shutil.which("sbatch") else "local"


def job_spec_from_args(args: argparse.Namespace) -> JobSpec:
    return JobSpec(
        cluster=resolve_cluster(args.cluster, args.dry_run),
        nodes=args.nodes,
        gpus_per_node=args.gpus,
        task=task_config_from_args(args),
        slurm=SlurmResources(
            partition=args.partition,
            account=args.account,
            qos=args.qos,
            time_min=args.time,
            cpus_per_task=args.cpus_per_task,
            job_name=args.job_name,
            extra=tuple(_sbatch_option(item) for item in args.sbatch),
        ),
    )


def check_writable(folder: Path) -> None:
    """Fail on the login node, not hours later on every rank, if traces cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise SpecError(
            f"--traces-root {folder} is not writable ({error.strerror}). HINT: pass a shared folder you can write"
        ) from None


def _rank_and_step(text: str) -> tuple[int, int]:
    rank, colon, step = text.partition(":")
    if not (colon and rank.strip().isdigit() and step.strip().isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not RANK:STEP, e.g. 1:5")
    return int(rank), int(step)


def _sbatch_option(item: str) -> tuple[str, str]:
    key, equals, value = item.partition("=")
    if not equals:
        raise SpecError(f"--sbatch {item!r} is not KEY=VALUE. HINT: --sbatch constraint=a100")
    return key.strip().lstrip("-"), value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        spec = job_spec_from_args(args)
        if not args.dry_run:
            check_writable(spec.task.traces_root)
            if spec.cluster == "slurm" and not shutil.which("sbatch"):
                raise SpecError(
                    "--cluster slurm but sbatch is not on PATH. HINT: submit from a login node, "
                    "or run here with --cluster local"
                )
    except ValueError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2

    from jobs import executors  # submitit is only needed past validation

    if args.dry_run:
        print(executors.submission_script(spec), end="")
        return 0
    try:
        job = executors.submit(spec)
    except Exception as error:  # sbatch's own refusal, say: show it as one line, not a traceback
        print(f"{parser.prog}: error: submission failed: {error}", file=sys.stderr)
        return 1
    job_dir = spec.task.traces_root / str(job.job_id)
    print(f"submitted job {job.job_id} ({spec.cluster}: {spec.nodes} node(s) x {spec.gpus_per_node} task(s))")
    print(f"traces will be written to {job_dir}", flush=True)
    if spec.cluster == "debug":
        return _run_debug(job, job_dir)
    if args.wait:
        from jobs.monitor import wait_for

        return wait_for(job, job_dir, sys.stdout)
    return 0


def _run_debug(job, job_dir: Path) -> int:
    """The debug executor runs the task in this process, when its result is asked for."""
    try:
        job.result()
    except Exception as error:
        print(f"job {job.job_id} FAILED: {error}", file=sys.stderr)
        return 1
    print(f"job {job.job_id} done; traces in {job_dir}")
    return 0
