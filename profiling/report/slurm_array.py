"""``python -m profiling.report FOLDER --slurm``: the traces without a fresh record are read on
the cluster, by a submitit job array, not on the login node.

Each task takes a chunk of the traces, sized by their bytes, and saves their records beside
them (:mod:`profiling.analysis.record`); the login node waits (``--no-wait``: it says how to
combine later) and then only combines, so its memory is the combine step's, not the traces'.
submitit's files for the array go to ``meta/analysis/slurm/`` of the folder, which exists
before the array is submitted (Slurm does not create the folder of ``--output``).
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from profiling.analysis.record import load_fresh
from profiling.folder.layout import analysis_record
from profiling.folder.traces import TraceFile, parse_trace_name
from profiling.report.progress import Progress
from slurm import scheduler

POLL_S = 2.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArrayResources:
    tasks: int = 8  # at most: fewer where there are fewer traces
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int = 30

    def __post_init__(self) -> None:
        if self.tasks < 1:
            raise ValueError(f"--tasks {self.tasks} must be at least 1")
        if self.time_min < 1:
            raise ValueError(f"--time {self.time_min} must be at least 1 minute")


def chunks(traces: Sequence[TraceFile], tasks: int) -> list[list[TraceFile]]:
    """At most ``tasks`` chunks of about equal bytes: the biggest trace first, to the lightest chunk."""
    loads: list[tuple[int, list[TraceFile]]] = [(0, []) for _ in range(min(tasks, len(traces)))]
    for trace in sorted(traces, key=lambda t: t.path.stat().st_size, reverse=True):
        size, chunk = min(loads, key=lambda load: load[0])
        loads.remove((size, chunk))
        loads.append((size + trace.path.stat().st_size, [*chunk, trace]))
    return [sorted(chunk) for _, chunk in loads if chunk]


def analyse_chunk(paths: list[str]) -> list[str]:
    """One task of the array: read its traces into their records; returns their names."""
    import os

    from profiling.report.read import analyse_and_save

    reader = (
        f"slurm task {os.environ.get('SLURM_ARRAY_TASK_ID', '?')} of job "
        f"{os.environ.get('SLURM_ARRAY_JOB_ID', '?')} on {socket.gethostname()} (pid {os.getpid()})"
    )
    done = []
    for path in paths:
        trace = parse_trace_name(Path(path))
        if trace is not None:
            analyse_and_save(trace, reader)
            done.append(trace.path.name)
    return done


def submit(folder: Path, stale: Sequence[TraceFile], resources: ArrayResources) -> str:
    """Submit the array; returns its job id."""
    import submitit

    logs = analysis_record(folder / "x").parent / "slurm"
    logs.mkdir(parents=True, exist_ok=True)
    executor = submitit.SlurmExecutor(folder=logs, max_num_timeout=0)
    executor.update_parameters(
        job_name="profile-report",
        nodes=1,
        ntasks_per_node=1,
        time=resources.time_min,
        **{
            key: value
            for key, value in (
                ("partition", resources.partition),
                ("account", resources.account),
                ("qos", resources.qos),
            )
            if value is not None
        },
    )
    parts = chunks(stale, resources.tasks)
    jobs = executor.map_array(analyse_chunk, [[str(t.path) for t in chunk] for chunk in parts])
    return str(jobs[0].job_id).split("_")[0]


def wait(job_id: str, stale: Sequence[TraceFile], stream: TextIO | None = None) -> list[TraceFile]:
    """Block until every trace has a fresh record or the array has left the queue; returns the
    traces still without one (a task failed: the combine step reads them)."""
    left = list(stale)
    shown = Progress("traces analysed on the cluster", len(stale), stream=stream)
    while left:
        still = [trace for trace in left if load_fresh(trace) is None]
        shown.advance(len(left) - len(still))
        left = still
        if left and scheduler.queue_state(job_id) == "":  # the array has ended
            left = [trace for trace in left if load_fresh(trace) is None]
            break
        time.sleep(POLL_S if left else 0)
    shown.close()
    return left
