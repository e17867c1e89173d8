"""The commands: each a thin module that parses its command line, calls a library function and
prints. Only this room (and ``jobs/task.py``, the task's entry point) parses a command line.

| command | module | console script |
|---|---|---|
| submit a job | :mod:`.submit` (``python submit.py``) | ``slurm-profile`` |
| the report of a job folder | :mod:`.report` | ``slurm-profile-report`` |
| two jobs side by side | :mod:`.compare` | ``slurm-profile-compare`` |
| the ranks that matter as one Perfetto timeline | :mod:`.archive` | ``slurm-profile-archive`` |
| the jobs under a traces root, or one job's ranks | :mod:`.list` | ``slurm-profile-list`` |
| the jobs by config, regressions, slow nodes | :mod:`.history` | ``slurm-profile-history`` |
| record chosen ranks of a running job now | :mod:`.capture` | ``slurm-profile-capture`` |
| why a job hung | :mod:`.hang` | ``slurm-profile-hang`` |
| one node's live metrics for Prometheus (started by the job) | :mod:`.metrics` | |

``slurm-profile <command>`` runs any of them (:mod:`.console`).
"""
