"""The command line: ``python submit.py [options]``.

It builds a validated :class:`~jobs.spec.JobSpec` before anything is submitted; every mistake
is one line naming the option and the fix. The task options it shares with
``python -m jobs.task`` are in :mod:`jobs.options`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from jobs.options import add_task_arguments, describe, task_config_from_args
from jobs.spec import JobSpec, SlurmResources, SpecError
from profiling.folder.layout import JobFolder
from slurm.basics import OneLineParser, utc_now, write_json_atomically
from slurm.launchers import Executor

AUTO_CLUSTER = "auto"  # slurm where sbatch is on PATH, else local


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="submit.py",
        description=(
            "Submit a profiled ResNet18 DDP job; one Chrome trace per profiled rank lands in "
            "<traces root>/<job id>/."
        ),
    )
    where = parser.add_argument_group("where")
    where.add_argument(
        "--cluster",
        choices=(AUTO_CLUSTER, *map(str, Executor)),
        default="auto",
        help="auto: slurm if sbatch is on PATH, else local (default: auto)",
    )
    where.add_argument("--nodes", type=int, default=1, help="(default: %(default)s)")
    where.add_argument(
        "--gpus",
        type=int,
        default=1,
        help="GPUs per node, one task each; 0 asks for none: CPU tasks on gloo (default: 1)",
    )
    where.add_argument(
        "--tasks-per-node",
        type=int,
        metavar="N",
        help="tasks per node (default: --gpus, or 1 with --gpus 0); with GPUs, one per GPU",
    )
    add_task_arguments(parser)

    slurm = parser.add_argument_group("SLURM resources")
    slurm.add_argument("--partition")
    slurm.add_argument("--account")
    slurm.add_argument("--qos")
    slurm.add_argument(
        "--time", type=int, default=60, metavar="MINUTES", help="time limit (default: %(default)s)"
    )
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


def resolve_cluster(requested: str, dry_run: bool) -> Executor:
    if requested != AUTO_CLUSTER:
        return Executor(requested)
    return Executor.SLURM if dry_run or shutil.which("sbatch") else Executor.LOCAL


def job_spec_from_args(args: argparse.Namespace) -> JobSpec:
    task = task_config_from_args(args)
    if args.gpus == 0 and task.device == "auto":  # no GPU asked for: none used, even where one is visible
        task = dataclasses.replace(task, device="cpu")
    return JobSpec(
        cluster=resolve_cluster(args.cluster, args.dry_run),
        nodes=args.nodes,
        gpus_per_node=args.gpus,
        tasks_per_node=args.tasks_per_node if args.tasks_per_node is not None else max(args.gpus, 1),
        task=task,
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
            f"--traces-root {folder} is not writable ({error.strerror}). "
            "HINT: pass a shared folder you can write"
        ) from None


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
            if spec.cluster is Executor.SLURM and not shutil.which("sbatch"):
                raise SpecError(
                    "--cluster slurm but sbatch is not on PATH. HINT: submit from a login node, "
                    "or run here with --cluster local"
                )
    except ValueError as error:
        print(f"{parser.prog}: error: {describe(error)}", file=sys.stderr)
        return 2

    from jobs import executors  # submitit is only needed past validation

    if args.dry_run:
        try:
            print(executors.submission_script(spec), end="")
        except ValueError as error:  # --cluster local or debug: no script to show
            print(f"{parser.prog}: error: {describe(error)}", file=sys.stderr)
            return 2
        return 0
    try:
        with _stderr_of_children() as child_stderr:  # sbatch writes its refusal there itself
            job = executors.submit(spec)
    except Exception as error:  # sbatch's own refusal, say: show it as one line, not a traceback
        reason = " ".join(str(error).split()) or " ".join(child_stderr.read().split())
        print(f"{parser.prog}: error: submission failed: {reason}", file=sys.stderr)
        return 1
    job_dir = JobFolder(spec.task.traces_root, str(job.job_id))
    _write_submitted(job_dir, spec)
    shape = f"{spec.nodes} node(s) x {spec.tasks_per_node} task(s)"
    gpus = f", {spec.gpus_per_node} GPU(s) per node" if spec.gpus_per_node else ", no GPU"
    print(f"submitted job {job.job_id} ({spec.cluster}: {shape}{gpus})")
    print(f"traces will be written to {job_dir.path}", flush=True)
    if spec.cluster.supports.in_process:
        return _run_debug(job, job_dir)
    if args.wait:
        from jobs.monitor import wait_for

        return wait_for(job, job_dir, sys.stdout)
    return 0


def _write_submitted(job_dir: JobFolder, spec: JobSpec) -> None:
    """What the job was submitted with: its size for the tools, even if it never starts."""
    job_dir.meta.mkdir(parents=True, exist_ok=True)
    write_json_atomically(
        job_dir.submitted,
        {
            "job_id": job_dir.job_id,
            "cluster": str(spec.cluster),
            "launcher": str(spec.cluster.supports.launcher),
            "nodes": spec.nodes,
            "tasks": spec.world_size,
            "gpus_per_node": spec.gpus_per_node,
            "submitted_at": utc_now(),
            "submitted_by": "submit.py",
        },
    )


@contextlib.contextmanager
def _stderr_of_children() -> Iterator[IO[str]]:
    """Catch what child processes (sbatch) write to stderr, instead of letting it through."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile("w+") as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield caught
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)


def _run_debug(job, job_dir: JobFolder) -> int:
    """The debug executor runs the task in this process, when its result is asked for."""
    try:
        job.result()
    except Exception as error:
        print(f"job {job.job_id} FAILED: {error}", file=sys.stderr)
        return 1
    print(f"job {job.job_id} done; traces in {job_dir.path}")
    return 0
