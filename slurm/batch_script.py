"""The batch script a user submits with plain ``sbatch`` from a login node
(``slurm/profile_resnet18.sbatch``), made by one pure function from the code's own defaults
(submitit's way): its resources are :class:`~slurm.resources.SlurmResources`' defaults, its
warning before the time limit :data:`~slurm.resources.SIGNAL_DELAY_S`, its traces root
:mod:`slurm.common.traces_root`'s. ``tests/test_slurm_script.py`` holds the file to it; after
changing a default: ``python -m jobs.commands.batch_script --write``.
"""

from __future__ import annotations

from slurm.common.traces_root import DEFAULT_TRACES_ROOT, TRACES_ROOT_ENV
from slurm.resources import SIGNAL_DELAY_S, SlurmResources

PLAIN_SCRIPT = "slurm/profile_resnet18.sbatch"  # relative to the repository
TASK_MODULE = "jobs.task"  # what srun runs in each task
TUTORIAL_TASKS_PER_NODE = 8  # the tutorial's node: 8 GPUs, one task each

_TEMPLATE = r"""#!/bin/bash
# Profile the ResNet18 DDP loop from a login node with plain sbatch (no submitit involved):
#
#   sbatch slurm/profile_resnet18.sbatch --steps 100 --profile-ranks 0,3
#   sbatch --nodes=2 --ntasks-per-node=2 --gpus-per-node=2 slurm/profile_resnet18.sbatch --profile-ranks all
#
# Options after the script name are those of `python -m @task@ --help` (the workload and
# profiler options of submit.py). Resources: edit the #SBATCH defaults below, or override them
# on the sbatch command line, which wins. The defaults ask for no GPU (a CPU partition: the
# tasks run on gloo); on a GPU partition add --gpus-per-node equal to --ntasks-per-node (one
# task per GPU, each on cuda:<SLURM_LOCALID>), here or on the command line. Run sbatch from the
# repository (or with the package installed) and with the Python environment that has it
# active; set PYTHON otherwise.
#
#SBATCH --job-name=@job_name@
#SBATCH --nodes=@nodes@
#SBATCH --ntasks-per-node=@tasks_per_node@
#SBATCH --time=@time@
#SBATCH --signal=USR2@@signal_delay_s@
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out
# Site-specific, uncomment as needed:
##SBATCH --gpus-per-node=@tasks_per_node@
##SBATCH --partition=gpu
##SBATCH --account=my-account
##SBATCH --qos=normal
##SBATCH --cpus-per-task=8

set -euo pipefail
PYTHON=${PYTHON:-python3}

# Each task's output goes to the job's own folder, <traces root>/<job id>/logs/, as under
# submit.py; this script's own output (srun's messages) stays where --output says: Slurm opens
# it before the job starts, when the job's folder does not exist yet.
root=${@traces_root_env@:-@default_traces_root@}
for ((i = 1; i <= $#; i++)); do
    case "${!i}" in
        --traces-root=*) root=${!i#*=} ;;
        --traces-root) next=$((i + 1)); root=${!next} ;;
    esac
done
logs="$root/$SLURM_JOB_ID/logs" meta="$root/$SLURM_JOB_ID/meta"
mkdir -p "$logs" "$meta"
# What the job was submitted with, for the tools (jobs.commands.list), even if no task ever starts.
printf '{"job_id": "%s", "launcher": "slurm", "nodes": %s, "tasks": %s, "submitted_at": "%s", "submitted_by": "%s"}\n' \
    "$SLURM_JOB_ID" "$SLURM_JOB_NUM_NODES" "${SLURM_NTASKS:-$SLURM_JOB_NUM_NODES}" \
    "$(date -u +%Y-%m-%dT%H:%M:%S.000+00:00)" "the batch script" >"$meta/.submitted.json.tmp"
mv "$meta/.submitted.json.tmp" "$meta/submitted.json"

# One task per GPU; every task derives RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR from SLURM_*.
# --kill-on-bad-exit: one dead rank ends the step instead of leaving the others blocked.
# Preemption or the time limit (USR2, see --signal): the tasks save their state and rank 0
# runs `scontrol requeue`; the next run of this script (SLURM_RESTART_COUNT=1) resumes.
# --open-mode=append: a requeued attempt adds to the first one's logs.
exec srun --kill-on-bad-exit=1 --unbuffered --open-mode=append \
    --output "$logs/%j_%t_log.out" --error "$logs/%j_%t_log.err" "$PYTHON" -u -m @task@ "$@"
"""


def plain_batch_script(
    resources: SlurmResources | None = None, *, nodes: int = 1, tasks_per_node: int = TUTORIAL_TASKS_PER_NODE
) -> str:
    """The script, for ``resources`` (default: SlurmResources' defaults) and that shape."""
    resources = resources or SlurmResources()
    hours, minutes = divmod(resources.time_min, 60)
    values = {
        "job_name": resources.job_name,
        "nodes": str(nodes),
        "tasks_per_node": str(tasks_per_node),
        "time": f"{hours:02d}:{minutes:02d}:00",
        "signal_delay_s": str(SIGNAL_DELAY_S),
        "traces_root_env": TRACES_ROOT_ENV,
        "default_traces_root": DEFAULT_TRACES_ROOT,
        "task": TASK_MODULE,
    }
    script = _TEMPLATE
    for name, value in values.items():
        script = script.replace(f"@{name}@", value)
    return script
