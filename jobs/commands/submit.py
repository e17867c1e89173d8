"""The command line: ``python submit.py [options]``.

It builds a validated :class:`~jobs.spec.JobSpec` before anything is submitted; every mistake
is one line naming the option and the fix. Its options are the job spec's fields
(:mod:`slurm.common.settings`); the task's among them are ``python -m jobs.task``'s too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from jobs.exclusion import slow_nodes_of, with_excluded
from jobs.spec import AUTO_CLUSTER, JobSpec, SpecError
from profiling.folder.layout import JobFolder
from slurm.common.clock import utc_now
from slurm.common.command_line import OneLineParser
from slurm.common.files import write_json_atomically
from slurm.common.settings import from_namespace
from workload.contract import check_factory

PROG = "submit.py"


def build_parser() -> OneLineParser:
    """Every option of :class:`~jobs.spec.JobSpec`: where the job runs, the task's, SLURM's."""
    parser = OneLineParser(
        prog=PROG,
        description="Submit a profiled ResNet18 DDP job; one Chrome trace per profiled rank lands in "
        "<traces root>/<job id>/.",
    )
    parser.add_settings(JobSpec)
    run = parser.add_argument_group("run")
    run.add_argument("--wait", action="store_true", help="block until the job ends, show rank 0's progress")
    run.add_argument("--dry-run", action="store_true", help="print the sbatch script; submit nothing")
    run.add_argument(
        "--exclude-slow-from",
        metavar="JOB",
        help="leave out the nodes this earlier job (id under --traces-root, or folder) found slow",
    )
    return parser


def job_spec_from_args(args: argparse.Namespace) -> JobSpec:
    """Raises SettingError (see :meth:`OneLineParser.describe`) on a job that must not be submitted."""
    cluster = "slurm" if args.dry_run and args.cluster == AUTO_CLUSTER else args.cluster
    return from_namespace(JobSpec, args, cluster=cluster)


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        spec = job_spec_from_args(args)
        check_factory(spec.task.workload.workload)  # importable where the tasks start, not imported here
        if args.exclude_slow_from:
            nodes, said = slow_nodes_of(args.exclude_slow_from, spec.task.traces_root)
            spec = with_excluded(spec, nodes)
            print(said, file=sys.stderr if args.dry_run else sys.stdout)
        if not args.dry_run:
            check_writable(spec.task.traces_root)
            if spec.cluster.queued and not shutil.which("sbatch"):
                raise SpecError(
                    "--cluster slurm but sbatch is not on PATH. HINT: submit from a login node, "
                    "or run here with --cluster local"
                )
    except ValueError as error:
        print(f"{parser.prog}: error: {parser.describe(error)}", file=sys.stderr)
        return 2

    from jobs import submission  # submitit is only needed past validation

    if args.dry_run:
        try:
            print(submission.submission_script(spec), end="")
        except ValueError as error:  # --cluster local or debug: no script to show
            print(f"{parser.prog}: error: {parser.describe(error)}", file=sys.stderr)
            return 2
        return 0
    try:
        with _stderr_of_children() as child_stderr:  # sbatch writes its refusal there itself
            job = submission.submit(spec)
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

        return wait_for(job, job_dir, sys.stdout, queued=spec.cluster.queued)
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


if __name__ == "__main__":
    sys.exit(main())
