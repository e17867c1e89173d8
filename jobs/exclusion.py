"""``submit.py --exclude-slow-from JOB``: resubmit without the nodes an earlier job found slow.

The verdict is the run map's (:mod:`profiling.analysis.run.slow_nodes`), read again from the job's
step logs, so a job that ended without its report still has one; the nodes become sbatch's
``--exclude``, merged with any the user set (``--sbatch exclude=...``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from jobs.spec import JobSpec, SpecError


def slow_nodes_of(job: str, traces_root: Path) -> tuple[list[str], str]:
    """The nodes ``job`` (an id under ``traces_root``, or a job folder) found slow, and the line
    that says so."""
    from profiling.analysis.run.run_logs import read_run  # numpy: only when this option is given
    from profiling.analysis.run.slow_nodes import slow_nodes

    folder = Path(job) if Path(job).is_dir() else traces_root / job
    run = read_run(folder) if folder.is_dir() else None
    if run is None:
        raise SpecError(
            f"--exclude-slow-from {job}: {folder} holds no step log (meta/steps/). "
            "HINT: pass a job id under --traces-root, or a job folder"
        )
    found = slow_nodes(run[0])
    names = list(dict.fromkeys(node.node for node in found))
    if not names:
        return [], f"--exclude-slow-from {job}: no node was persistently slow in it; nothing excluded"
    said = "; ".join(
        f"{n.node} (steps {n.first}-{n.last}, rank(s) {', '.join(map(str, n.slow_ranks))} at ×{n.ratio:.2f})"
        for n in found
    )
    return names, f"excluding {', '.join(names)}, slow in job {folder.name}: {said}"


def with_excluded(spec: JobSpec, nodes: list[str]) -> JobSpec:
    """``spec`` with ``nodes`` added to sbatch's ``--exclude`` (one --exclude, as sbatch takes one)."""
    if not nodes:
        return spec
    if not spec.cluster.queued:
        raise SpecError(
            f"--exclude-slow-from excludes SLURM nodes, but {{cluster}} is {spec.cluster}. "
            "HINT: use {cluster} slurm"
        )
    given = [value for key, value in spec.slurm.extra if key == "exclude"]
    merged = list(
        dict.fromkeys(name for value in given for name in value.split(",") if name) | dict.fromkeys(nodes)
    )
    extra = (*((k, v) for k, v in spec.slurm.extra if k != "exclude"), ("exclude", ",".join(merged)))
    return dataclasses.replace(spec, slurm=dataclasses.replace(spec.slurm, extra=extra))
