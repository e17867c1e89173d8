"""JobSpec -> a configured submitit executor; submission and the sbatch dry run.

Torch-free: submitit pickles :class:`jobs.task.ProfiledTraining` by reference, so the task's
heavy imports happen on the compute node only. Each job's logs and pickles go to its own
folder, ``<traces root>/<job id>/logs/`` (submitit fills in ``%j``).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import submitit

from jobs.spec import JobSpec
from jobs.task import ProfiledTraining
from profiling.folder.layout import submitit_folder
from slurm import scheduler
from slurm.launchers import Executor

# Seconds between the preemption signal and SIGKILL at the time limit: room to write a
# checkpoint on a shared filesystem.
SIGNAL_DELAY_S = 120


class _HeldSlurmExecutor(submitit.SlurmExecutor):
    """Submits the job held (``sbatch --hold``, on sbatch's command line, not in the script).

    Slurm does not create the folder of ``--output``: a job that starts before its folder exists
    fails at once (``0:53``). The job's folder can only be made once sbatch has said its id;
    :func:`submit` releases the job when submitit has made it.
    """

    def _make_submission_command(self, submission_file_path: Path) -> list[str]:
        return ["sbatch", "--hold", str(submission_file_path)]


class _ScriptOnlySlurmExecutor(submitit.SlurmExecutor):
    """A SlurmExecutor that also renders its script where SLURM is not installed (dry runs).

    submitit refuses to build a SlurmExecutor without ``srun`` on PATH; the script itself
    does not depend on it.
    """

    @classmethod
    def affinity(cls) -> int:
        return 2


def make_executor(spec: JobSpec, *, script_only: bool = False) -> submitit.Executor:
    folder = submitit_folder(spec.task.traces_root)
    if spec.cluster is Executor.DEBUG:
        return submitit.DebugExecutor(folder)
    if spec.cluster is Executor.LOCAL:
        executor = submitit.LocalExecutor(folder)
        executor.update_parameters(
            # submitit's controller cannot make a folder with %j in it: ours replaces it
            setup=[f"exec {shlex.quote(sys.executable)} -m jobs.local_controller {shlex.quote(str(folder))}"],
            nodes=1,
            tasks_per_node=spec.tasks_per_node,
            gpus_per_node=spec.gpus_per_node,  # CUDA_VISIBLE_DEVICES=0..G-1 for every task; none for 0
            timeout_min=spec.slurm.time_min,
            signal_delay_s=SIGNAL_DELAY_S,
        )
        return executor
    slurm_executor = _ScriptOnlySlurmExecutor if script_only else _HeldSlurmExecutor
    # submitit counts time-limit requeues itself; it gets the same limit as preemptions.
    executor = slurm_executor(folder, max_num_timeout=spec.task.max_restarts)
    resources = spec.slurm
    executor.update_parameters(
        job_name=resources.job_name,
        nodes=spec.nodes,
        ntasks_per_node=spec.tasks_per_node,
        time=resources.time_min,
        signal_delay_s=SIGNAL_DELAY_S,
        **{
            key: value
            for key, value in (
                ("gpus_per_node", spec.gpus_per_node or None),  # a CPU job asks for no GPU at all
                ("partition", resources.partition),
                ("account", resources.account),
                ("qos", resources.qos),
                ("cpus_per_task", resources.cpus_per_task),
            )
            if value is not None
        },
        additional_parameters=dict(resources.extra),
        # One dead rank ends the step: the others would otherwise block in a collective.
        srun_args=["--kill-on-bad-exit=1"],
    )
    return executor


def submission_script(spec: JobSpec) -> str:
    """The exact sbatch script ``submit`` would hand to sbatch; submits nothing."""
    executor = make_executor(spec, script_only=True)
    if not spec.cluster.supports.script or not isinstance(executor, submitit.SlurmExecutor):
        raise ValueError(
            f"--dry-run shows an sbatch script; --cluster {spec.cluster} has none. HINT: use --cluster slurm"
        )
    return executor._make_submission_file_text(executor._submitit_command_str, "dry-run")


def submit(spec: JobSpec) -> submitit.Job:
    job = make_executor(spec).submit(ProfiledTraining(spec.task))
    if spec.cluster is Executor.SLURM:
        _drop_submission_link(spec.task.traces_root, job)
        try:
            scheduler.release(job.job_id)
        except (OSError, subprocess.SubprocessError):
            scheduler.cancel(job.job_id)  # held forever, else
            raise
    return job


def _drop_submission_link(root: Path, job: submitit.Job) -> None:
    """submitit leaves a hidden link to the job's script in the traces root, one per job: the
    script is in the job's folder already."""
    script = job.paths.submission_file.resolve()
    for link in root.glob(".submission_file_*.sh"):
        if link.is_symlink() and link.resolve() == script:
            link.unlink()
