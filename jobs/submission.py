"""A JobSpec submitted: its executor (made by :mod:`slurm.executors`), the submission, and the
sbatch dry run.

Torch-free: submitit pickles :class:`jobs.task.ProfiledTraining` by reference, so the task's
heavy imports happen on the compute node only. Each job's logs and pickles go to its own
folder, ``<traces root>/<job id>/logs/`` (submitit fills in ``%j``).
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import submitit

from jobs.options import task_argv
from jobs.spec import JobSpec
from jobs.task import ProfiledTraining
from profiling.folder.layout import submitit_folder
from slurm import scheduler
from slurm.executors import debug_executor, drop_submission_links, local_executor, slurm_executor
from slurm.launchers import Executor


def make_executor(spec: JobSpec, *, script_only: bool = False) -> submitit.Executor:
    """The executor ``spec`` runs on (:mod:`slurm.executors` makes each)."""
    folder = submitit_folder(spec.task.traces_root)
    if spec.cluster is Executor.DEBUG:
        return debug_executor(folder)
    if spec.cluster is Executor.LOCAL:
        return local_executor(
            folder,
            tasks_per_node=spec.tasks_per_node,
            gpus_per_node=spec.gpus_per_node,
            time_min=spec.slurm.time_min,
            # submitit's controller cannot make a folder with %j in it: ours replaces it
            setup=[f"exec {shlex.quote(sys.executable)} -m jobs.local_controller {shlex.quote(str(folder))}"],
        )
    # Slurm does not create the folder of --output: a job that starts before its folder exists
    # fails at once (0:53). The folder can only be made once sbatch has said the job's id, so
    # the job is submitted held and released by submit().
    return slurm_executor(
        folder,
        spec.slurm,
        nodes=spec.nodes,
        tasks_per_node=spec.tasks_per_node,
        gpus_per_node=spec.gpus_per_node,
        max_restarts=spec.task.max_restarts,
        held=not script_only,
        script_only=script_only,
    )


def submission_script(spec: JobSpec) -> str:
    """The exact sbatch script ``submit`` would hand to sbatch; submits nothing."""
    if not spec.cluster.supports.script:
        raise ValueError(
            f"--dry-run shows an sbatch script; --cluster {spec.cluster} has none. HINT: use --cluster slurm"
        )
    executor = make_executor(spec, script_only=True)
    # submitit's own rendering of the script it would hand to sbatch (private: no public API)
    script = executor._make_submission_file_text(executor._submitit_command_str, "dry-run")  # type: ignore[attr-defined]
    return script + _task_comment(spec)


def _task_comment(spec: JobSpec) -> str:
    """What each task runs, which travels pickled in the job's folder: said as the options of
    ``python -m jobs.task`` that make it (the task the plain sbatch script runs under srun)."""
    argv = task_argv(spec.task)
    return (
        "\n# the task, pickled beside the script (the same as under srun: python -m jobs.task "
        "[options]):\n"
        f"#   python -m jobs.task {shlex.join(argv)}\n"
        if argv
        else "\n# the task, pickled beside the script: python -m jobs.task, every option at its default\n"
    )


def submit(spec: JobSpec) -> submitit.Job:
    job = make_executor(spec).submit(ProfiledTraining(spec.task))
    if spec.cluster.queued:  # submitted held: see make_executor
        drop_submission_links(spec.task.traces_root)
        try:
            scheduler.release(job.job_id)
        except (OSError, subprocess.SubprocessError):
            scheduler.cancel(job.job_id)  # held forever, else
            raise
    return job
