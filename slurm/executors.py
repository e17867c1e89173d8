"""The submitit executors, made in this one place: SLURM's (held until its folder exists, or
rendering its script where SLURM is not installed), the local executor's (several processes on
this machine) and the debug executor's (one, in-process). Torch-free: submitit pickles the task
by reference, so its heavy imports happen where it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm.resources import SIGNAL_DELAY_S, SUBMITIT_PARAMETERS, SlurmResources


def debug_executor(folder: Path) -> Any:
    """submitit's debug executor: the task runs in this process."""
    import submitit

    return submitit.DebugExecutor(folder)


def local_executor(
    folder: Path, *, tasks_per_node: int, gpus_per_node: int, time_min: int, setup: list[str]
) -> Any:
    """submitit's local executor: ``tasks_per_node`` processes on this machine, as one node of
    a SLURM job (CUDA_VISIBLE_DEVICES=0..G-1 for every task; none for 0 GPUs); ``setup``: the
    shell lines before the controller starts."""
    import submitit

    executor = submitit.LocalExecutor(folder)
    executor.update_parameters(
        setup=setup,
        nodes=1,
        tasks_per_node=tasks_per_node,
        gpus_per_node=gpus_per_node,
        timeout_min=time_min,
        signal_delay_s=SIGNAL_DELAY_S,
    )
    return executor


def submitit_parameters(
    resources: SlurmResources, *, nodes: int, tasks_per_node: int, gpus_per_node: int = 0
) -> dict[str, Any]:
    """submitit's ``update_parameters`` of a job of that shape; a CPU job asks for no GPU at all."""
    parameters = {
        ours: getattr(resources, field)
        for field, ours in SUBMITIT_PARAMETERS.items()
        if getattr(resources, field) is not None
    }
    if gpus_per_node:
        parameters["gpus_per_node"] = gpus_per_node
    return {
        **{name: value for name, value in sorted(parameters.items())},
        "nodes": nodes,
        "ntasks_per_node": tasks_per_node,
        "signal_delay_s": SIGNAL_DELAY_S,
        "additional_parameters": dict(resources.extra),
        # One dead rank ends the step: the others would otherwise block in a collective.
        "srun_args": ["--kill-on-bad-exit=1"],
    }


def slurm_executor(
    folder: Path,
    resources: SlurmResources,
    *,
    nodes: int = 1,
    tasks_per_node: int = 1,
    gpus_per_node: int = 0,
    max_restarts: int = 0,
    held: bool = True,
    script_only: bool = False,
) -> Any:
    """A submitit SlurmExecutor of that shape: the one place the toolkit makes one.

    ``held``: the job is submitted held (``sbatch --hold``), for the caller to make what the job
    needs (its folder) and :func:`slurm.scheduler.release` it. ``script_only``: it can render its
    script where SLURM is not installed (dry runs).
    """
    import submitit

    class Executor(submitit.SlurmExecutor):
        @classmethod
        def affinity(cls) -> int:  # submitit refuses a SlurmExecutor without srun on PATH otherwise
            return 2 if script_only else super().affinity()

        def _make_submission_command(self, submission_file_path: Path) -> list[str]:
            command = super()._make_submission_command(submission_file_path)
            return [command[0], "--hold", *command[1:]] if held else command

    # submitit counts time-limit requeues itself; it gets the same limit as preemptions.
    executor = Executor(folder, max_num_timeout=max_restarts)
    executor.update_parameters(
        **submitit_parameters(
            resources, nodes=nodes, tasks_per_node=tasks_per_node, gpus_per_node=gpus_per_node
        )
    )
    return executor


def drop_submission_links(folder: Path) -> None:
    """submitit leaves a hidden link to each job's script (``.submission_file_<id>.sh``) in the
    folder it was given, besides the script in the job's own folder: remove the links."""
    for link in folder.glob(".submission_file_*.sh"):
        if link.is_symlink():
            link.unlink()
