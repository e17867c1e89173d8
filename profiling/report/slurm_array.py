"""``python -m jobs.commands.report FOLDER --slurm``: the traces without a fresh record are read on
the cluster, by a submitit job array, not on the login node.

Each task takes a chunk of the traces, sized by their bytes, and saves their records beside
them (:mod:`profiling.analysis.per_trace.record`); the login node waits (``--no-wait``: it says how to
combine later) and then only combines, so its memory is the combine step's, not the traces'.
submitit's files for the array go to ``meta/analysis/slurm/`` of the folder, which exists
before the array is submitted (Slurm does not create the folder of ``--output``).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from profiling.folder.layout import analysis_record
from profiling.folder.traces import TraceSource
from profiling.report.progress import Progress
from slurm.executors import drop_submission_links, slurm_executor
from slurm.queue_view import QueueView
from slurm.resources import SlurmResources

POLL_S = 2.0


JOB_NAME = "profile-report"
TIME_MIN = 30  # the array's default time limit: reading traces takes minutes, not a training's hour
TASKS = 8  # the array's tasks, at most: fewer where there are fewer traces


def chunks(traces: Sequence[TraceSource], tasks: int) -> list[list[TraceSource]]:
    """At most ``tasks`` chunks of about equal bytes: the biggest trace first, to the lightest chunk."""
    loads: list[tuple[int, list[TraceSource]]] = [(0, []) for _ in range(min(tasks, len(traces)))]
    for trace in sorted(traces, key=lambda t: t.path.stat().st_size, reverse=True):
        size, chunk = min(loads, key=lambda load: load[0])
        loads.remove((size, chunk))
        loads.append((size + trace.path.stat().st_size, [*chunk, trace]))
    return [sorted(chunk) for _, chunk in loads if chunk]


def analyse_chunk(folder: str, names: list[str]) -> list[str]:
    """One task of the array: read its traces of ``folder`` into their records; returns what
    each became (its name, or why it was skipped)."""
    import os

    from profiling.report.read import analyse_or_skip

    reader = (
        f"slurm task {os.environ.get('SLURM_ARRAY_TASK_ID', '?')} of job "
        f"{os.environ.get('SLURM_ARRAY_JOB_ID', '?')} on {socket.gethostname()} (pid {os.getpid()})"
    )
    done = []
    for name in names:
        outcome = analyse_or_skip(TraceSource(Path(folder), name), reader)
        done.append(outcome if isinstance(outcome, str) else name)
    return done


def submit_array(
    folder: Path, stale: Sequence[TraceSource], resources: SlurmResources, tasks: int = TASKS
) -> str:
    """Submit the array, at most ``tasks`` tasks; returns its job id."""
    logs = analysis_record(folder / "x").parent / "slurm"
    logs.mkdir(parents=True, exist_ok=True)
    executor = slurm_executor(logs, resources, held=False)
    parts = chunks(stale, tasks)
    jobs = executor.map_array(
        analyse_chunk, [str(folder)] * len(parts), [[source.name for source in chunk] for chunk in parts]
    )
    drop_submission_links(logs)
    return str(jobs[0].job_id).split("_")[0]


def wait(job_id: str, stale: Sequence[TraceSource], stream: TextIO | None = None) -> list[TraceSource]:
    """Block until every trace has a fresh record or the array has left the queue; returns the
    traces still without one (a task failed: the combine step reads them)."""
    # the record's reader (numpy) when there is an array to wait for: not for --help, nor each report
    from profiling.analysis.per_trace import load_fresh

    left = list(stale)
    shown = Progress("traces analysed on the cluster", len(stale), stream=stream)
    queue = QueueView()
    while left:
        still = [trace for trace in left if load_fresh(trace) is None]
        shown.advance(len(left) - len(still))
        left = still
        if left and queue.state(job_id) == "":  # the array has left the queue
            left = [trace for trace in left if load_fresh(trace) is None]
            break
        if left:
            queue.pause(at_most_s=POLL_S)  # the records as they come, the queue when due
    shown.close()
    return left
