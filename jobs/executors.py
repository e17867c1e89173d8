"""JobSpec -> a configured submitit executor; submission and the sbatch dry run.

Torch-free: submitit pickles :class:`jobs.task.ProfiledTraining` by reference, so the task's
heavy imports happen on the compute node only.
"""

from __future__ import annotations

import submitit

from jobs.spec import JobSpec
from jobs.task import ProfiledTraining
from profiling.folder.layout import logs_folder

# Seconds between the preemption signal and SIGKILL at the time limit: room to write a
# checkpoint on a shared filesystem.
SIGNAL_DELAY_S = 120


class _ScriptOnlySlurmExecutor(submitit.SlurmExecutor):
    """A SlurmExecutor that also renders its script where SLURM is not installed (dry runs).

    submitit refuses to build a SlurmExecutor without ``srun`` on PATH; the script itself
    does not depend on it.
    """

    @classmethod
    def affinity(cls) -> int:
        return 2


def make_executor(spec: JobSpec, *, script_only: bool = False) -> submitit.Executor:
    folder = logs_folder(spec.task.traces_root)
    if spec.cluster == "debug":
        return submitit.DebugExecutor(folder)
    if spec.cluster == "local":
        executor = submitit.LocalExecutor(folder)
        executor.update_parameters(
            nodes=1,
            tasks_per_node=spec.tasks_per_node,
            gpus_per_node=spec.gpus_per_node,  # CUDA_VISIBLE_DEVICES=0..G-1 for every task; none for 0
            timeout_min=spec.slurm.time_min,
            signal_delay_s=SIGNAL_DELAY_S,
        )
        return executor
    slurm_executor = _ScriptOnlySlurmExecutor if script_only else submitit.SlurmExecutor
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
    if not isinstance(executor, submitit.SlurmExecutor):
        raise ValueError(
            f"--dry-run shows an sbatch script; --cluster {spec.cluster} has none. HINT: use --cluster slurm"
        )
    return executor._make_submission_file_text(executor._submitit_command_str, "dry-run")


def submit(spec: JobSpec) -> submitit.Job:
    return make_executor(spec).submit(ProfiledTraining(spec.task))
