"""The jobs under a traces root, one row each (the command: :mod:`jobs.commands.list`).

A row per job folder, newest first: job id, when it started, nodes x tasks (as submitted, for a
job that never reached its first step too), launcher, whether it runs or how it ended
(:func:`jobs.job_state.job_state`: the manifest, the scheduler, its processes), its median step
time, the report's straggler verdict, and its traces and their size. Reads only small files (the
manifest, ``report.json``, ``submitted.json``), never a trace, and asks SLURM about every job at
once.
"""

from __future__ import annotations

import datetime
import statistics
from pathlib import Path
from typing import Any

from jobs.job_state import job_state, launcher_of, read_submitted, size
from profiling.analysis.dumps.oom import oom_verdict_lines
from profiling.folder.layout import JobFolder, job_folders
from profiling.folder.manifest import manifest_or_none, read_running
from profiling.folder.report_json import read_straggler
from profiling.folder.traces import list_traces
from slurm.queue_view import QueueView


def job_row(folder: JobFolder, queue: QueueView) -> dict[str, Any]:
    """What the listing says of one job folder (``queue``: SLURM's view, read once for every job)."""
    # while the job runs, what its rank 0 wrote at the start stands in for the manifest
    manifest = manifest_or_none(folder)
    first = read_running(folder) or read_submitted(folder) or {}
    traces = [t.path for attempt in folder.attempts() for t in list_traces(attempt)]
    started = (
        (manifest.started_at if manifest else None)
        or first.get("started_at")
        or first.get("submitted_at")
        or datetime.datetime.fromtimestamp(folder.path.stat().st_mtime, datetime.timezone.utc).isoformat(
            timespec="seconds"
        )
    )
    state = job_state(folder, queue)
    launcher = launcher_of(folder)
    outcome = state.outcome
    if state.running and launcher is not None and launcher.queued:
        outcome += " (in the queue)"
    nodes, tasks_per_node = size(folder)
    ranks = manifest.ranks if manifest else []
    step_s = [r.step_time.median_s for r in ranks if r.step_time.steps and r.step_time.median_s is not None]
    return {
        "job_id": folder.job_id,
        "path": str(folder.path),
        "started_at": started,
        "nodes": nodes,
        "tasks_per_node": tasks_per_node,
        "launcher": str(launcher) if launcher else None,
        "outcome": outcome,
        "state": state.how,
        "step_ms": round(statistics.median(step_s) * 1e3, 2) if step_s else None,
        "straggler": _straggler(folder),
        "traces": len(traces),
        "trace_bytes": sum(path.stat().st_size for path in traces),
        "out_of_memory": oom_verdict_lines(folder),
    }


def _straggler(folder: JobFolder) -> str | None:
    try:
        verdict = read_straggler(folder.report.json)
    except (OSError, ValueError):
        return None
    if verdict is None:
        return "one rank"
    return f"rank {verdict.rank}" if verdict.rank is not None else verdict.verdict


def list_jobs(root: Path) -> list[dict[str, Any]]:
    folders = job_folders(root)
    queue = QueueView()
    # one squeue for all, and one sacct for all that have left the queue
    queue.watch([f.job_id for f in folders if f.job_id.replace("_", "").isdigit()])
    return sorted((job_row(f, queue) for f in folders), key=lambda job: job["started_at"], reverse=True)


def render_jobs(jobs: list[dict[str, Any]]) -> str:
    header = (
        "job",
        "started (UTC)",
        "nodes x tasks",
        "launcher",
        "outcome",
        "step ms",
        "straggler",
        "traces",
    )
    rows = [header]
    for job in jobs:
        shape = f"{job['nodes']} x {job['tasks_per_node']}" if job["nodes"] else "-"
        rows.append(
            (
                job["job_id"],
                job["started_at"][:19].replace("T", " "),
                shape,
                job["launcher"] or "-",
                job["outcome"],
                f"{job['step_ms']:.1f}" if job["step_ms"] is not None else "-",
                job["straggler"] or "-",
                f"{job['traces']} ({job['trace_bytes'] / 2**20:.1f} MiB)",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    table = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    # why a job failed, where a rank ran out of memory: one line under the table each
    causes = [f"{job['job_id']}: {line}" for job in jobs for line in job.get("out_of_memory", [])[:1]]
    return "\n".join(table + causes)
