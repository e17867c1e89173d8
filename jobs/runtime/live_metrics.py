"""Live metrics for Prometheus while a job runs, in the OpenMetrics text format of the official
client library (``prometheus_client``), from the ranks' step logs: never from the step loop.

Each node's publisher (:mod:`jobs.commands.metrics`, a process of its own beside the ranks) reads its
node's ranks' step logs every few seconds, as ``jobs.list --ranks`` does, and publishes:

- ``slurm_profile_step``: each rank's last step in its log;
- ``slurm_profile_step_seconds``: each rank's median CPU time per step over its last
  :data:`RECENT_STEPS` steps (the training thread's: waiting in a collective takes none, so a
  straggler's is the longest);
- ``slurm_profile_memory_bytes``: each rank's memory in its latest steps (CUDA: the allocator's
  peak; CPU: resident), where its log records it.

The publisher of the node of rank 0 reads every rank's log and adds the job's view:

- ``slurm_profile_straggler_score``: each rank's recent step over the other ranks' median (1:
  typical; 1.5: half as long again);
- ``slurm_profile_job_step_seconds``: the median rank's recent step;
- ``slurm_profile_captures``: the captures asked for so far, ``by`` ``auto`` (``--auto-capture``)
  or ``request`` (``jobs.commands.capture``).

Labels: ``slurm_job_id``, ``rank``, ``node`` and the rank's mesh coordinates (``dp``, ``pp``,
``tp``... where the job has a layout). Two ways out, as clusters run them: a push to a
Pushgateway (grouped by ``slurm_job_id`` and ``instance``, the publisher's node), and a file
for node_exporter's textfile collector (``<dir>/slurm_profile_<job>_<node>.prom``, written
atomically, removed at the end).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from profiling.analysis.run import run_map
from profiling.analysis.run.run_map import RunMap
from profiling.analysis.run.step_ratios import others_median

RECENT_STEPS = 50
CAPTURERS = ("auto", "request")  # --auto-capture, and a person (jobs.commands.capture)
PUSH_JOB = "slurm-profile"  # the Pushgateway's job label: one group per SLURM job and node
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclasses.dataclass(frozen=True)
class Sinks:
    """Where the metrics go: a Pushgateway's URL, a textfile collector's folder, or both; and
    how often."""

    push_url: str | None = None
    textfile_dir: Path | None = None
    every_s: float = 5.0

    @property
    def any(self) -> bool:
        return self.push_url is not None or self.textfile_dir is not None

    def textfile(self, job_id: str, node: str) -> Path | None:
        """This node's file in the collector's folder: one a job and node."""
        if self.textfile_dir is None:
            return None
        return self.textfile_dir / f"slurm_profile_{_UNSAFE.sub('_', job_id)}_{_UNSAFE.sub('_', node)}.prom"


def registry_of(
    job_id: str,
    run: RunMap,
    mesh: Mapping[int, Mapping[str, int]],
    own: Collection[int],
    *,
    whole_job: bool,
    captures: Mapping[str, int] | None = None,
) -> CollectorRegistry:
    """The metrics of the node's ranks (``own``) in ``run``; ``whole_job``: ``run`` holds every
    rank, and the job's view of every rank is added, with ``captures``: how many were asked for,
    by whom (``auto``, ``request``)."""
    dims = sorted({dim for coordinates in mesh.values() for dim in coordinates})
    names = ["slurm_job_id", "rank", "node", *dims]
    registry = CollectorRegistry()

    def gauge(name: str, about: str, labels: list[str] = names) -> Gauge:
        return Gauge(f"slurm_profile_{name}", about, labels, registry=registry)

    step = gauge("step", "the rank's last step in its step log")
    seconds = gauge("step_seconds", f"the rank's median CPU time per step over its last {RECENT_STEPS} steps")
    memory = gauge(
        "memory_bytes", "the rank's memory in its latest steps (CUDA: peak allocated; CPU: resident)"
    )
    recent = run_map.tail(run, RECENT_STEPS)
    ms = {s.rank: s.median_ms for s in run_map.scores(recent, intervals=1)}
    latest = run.memory.peak[:, -1] if run.memory is not None and run.memory.peak.size else None
    ranks = run.ranks.tolist()
    labels_of = [
        [job_id, str(rank), run.nodes[row], *(str(mesh.get(rank, {}).get(dim, "")) for dim in dims)]
        for row, rank in enumerate(ranks)
    ]
    for row, rank in enumerate(ranks):
        if rank not in own:
            continue
        labels = labels_of[row]
        step.labels(*labels).set(int(run.last_step[row]))
        if np.isfinite(ms.get(rank, np.nan)):
            seconds.labels(*labels).set(ms[rank] / 1e3)
        if latest is not None and np.isfinite(latest[row]):
            memory.labels(*labels).set(float(latest[row]) * 2**20)
    if whole_job:
        values = np.array([ms.get(rank, np.nan) for rank in ranks], dtype=np.float64)
        others = others_median(values[:, None])[:, 0]  # each rank's: the median of the others'
        score = gauge("straggler_score", "the rank's recent CPU time per step over the other ranks' median")
        job_step = gauge("job_step_seconds", "the median rank's recent CPU time per step", ["slurm_job_id"])
        if np.isfinite(values).any():
            job_step.labels(job_id).set(float(np.nanmedian(values)) / 1e3)
        for row, labels in enumerate(labels_of):
            if np.isfinite(values[row]) and np.isfinite(others[row]) and others[row] > 0:
                score.labels(*labels).set(float(values[row] / others[row]))
        asked = gauge("captures", "captures asked for so far, by whom", ["slurm_job_id", "by"])
        for by in CAPTURERS:
            asked.labels(job_id, by).set((captures or {}).get(by, 0))
    return registry


def publish(
    registry: CollectorRegistry, sinks: Sinks, job_id: str, node: str, *, timeout_s: float
) -> list[str]:
    """``registry`` to each sink; a line for each that failed (a server down, a folder not
    writable), which the publisher says once and goes on."""
    failed = []
    if sinks.push_url is not None:
        try:
            push_to_gateway(
                sinks.push_url,
                job=PUSH_JOB,
                registry=registry,
                # instance, not node: the series' own node label is the rank's
                grouping_key={"slurm_job_id": job_id, "instance": node},
                timeout=timeout_s,
            )
        except OSError as error:  # urllib's URLError, a refused or timed-out connection
            failed.append(f"--metrics-push {sinks.push_url}: {error}")
    path = sinks.textfile(job_id, node)
    if path is not None:
        try:
            write_to_textfile(str(path), registry)  # a temporary file renamed: atomic
        except OSError as error:
            failed.append(f"--metrics-textfile {sinks.textfile_dir}: {error}")
    return failed


def remove_textfile(sinks: Sinks, job_id: str, node: str) -> None:
    """The node's file gone at the job's end: node_exporter then stops exporting its series."""
    path = sinks.textfile(job_id, node)
    if path is not None:
        path.unlink(missing_ok=True)
