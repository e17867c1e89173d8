"""The report's view of the whole run, from every rank's step log: ``report.json``'s ``run``.

What is measured is :mod:`profiling.analysis.run.run_map`'s; here it is put in words and tied to
the job: which traces cover each slow segment, and where none does, the command that would
have caught it; where each rank's log ends, if before the run's end.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import numpy as np

from profiling.analysis.run import run_map
from profiling.analysis.run.memory_growth import Growth
from profiling.analysis.run.run_map import RunMap, Segment
from profiling.analysis.run.slow_nodes import SlowNode, slow_nodes
from profiling.folder.layout import JobFolder
from profiling.folder.traces import TraceFile, list_traces
from profiling.ranks import RankSelection, format_ranks
from profiling.recording.config import ProfilerConfig
from profiling.recording.schedule import ScheduleConfig
from profiling.schema import model
from profiling.schema.manifest import Manifest
from slurm.common.settings import argv_of


def run_section(
    trace_folder: Path, run: RunMap, unreadable: list[str], manifest: Manifest | None
) -> model.Run:
    """``report.json``'s ``run``: scores, slow segments, where the logs end (against the steps
    the ``manifest`` asked for, where the job has one)."""
    job = JobFolder.of_traces(trace_folder)
    traces = [trace for folder in job.attempts() for trace in list_traces(folder)]
    limit, noise = run_map.threshold(run)
    scores = run_map.scores(run)
    nodes = dict(zip(run.ranks.tolist(), run.nodes, strict=True))
    return model.Run(
        metric=run_map.METRIC,
        measures="the training thread's CPU time per step (ms): waiting in a collective takes none",
        steps=[int(run.first[0]), run.last_of(len(run.first) - 1)],
        columns=len(run.first),
        gpu=run.gpu,
        slow_above=1.0 + limit,
        min_steps=run_map.MIN_STEPS,
        noise=noise,
        ranks=[
            model.RunRank(
                rank=s.rank,
                node=nodes[s.rank],
                median_ms=_finite(s.median_ms),
                wall_median_ms=_finite(run.row_medians["wall"][row]),
                gpu_median_ms=_finite(run.row_medians["gpu"][row]) if run.gpu else None,
                relative=_finite(s.relative),
                individual=_finite(s.individual),
                last_step=int(run.last_step[row]),
                memory_median_mib=_finite(run.row_medians["mem"][row]),
                memory_max_mib=_finite(float(np.nanmax(run.memory.peak[row])))
                if run.memory and np.isfinite(run.memory.peak[row]).any()
                else None,
                intervals=[  # an interval without a known time is none
                    model.Interval(first=a, last=b, median_ms=m, relative=rel, individual=ind)
                    for a, b, m, rel, ind in s.intervals
                    if np.isfinite([m, rel, ind]).all()
                ],
            )
            for row, s in enumerate(scores)
        ],
        segments=[_segment(segment, traces, job, manifest) for segment in run_map.segments(run)],
        captures=captured(manifest, traces),
        slow_nodes=[_slow_node(node, job) for node in slow_nodes(run)],
        ends=_ends(run, manifest),
        unreadable=unreadable,
        memory=run.memory.kind if run.memory else None,
        memory_growth=[
            memory_growth_part(int(rank), nodes[int(rank)], growth)
            for rank, growth in zip(run.ranks, run.memory.growth if run.memory else [], strict=False)
            if growth is not None
        ],
    )


def captured(manifest: Manifest | None, traces: list[TraceFile]) -> list[model.Captured]:
    """The manifest's captures, each with the traces it wrote, and why where ``--auto-capture``
    asked for it."""
    found = []
    for capture in manifest.captures or [] if manifest else []:
        ranks, steps = set(capture.ranks), (capture.first, capture.last)
        trigger = capture.trigger
        found.append(
            model.Captured(
                id=capture.id,
                first=capture.first,
                last=capture.last,
                ranks=capture.ranks,
                automatic=trigger is not None,
                rank=trigger.rank if trigger else None,
                why=trigger.why if trigger else None,
                traces=[t.name for t in traces if t.rank in ranks and (t.first_step, t.last_step) == steps],
            )
        )
    return found


def memory_growth_part(rank: int, node: str, growth: Growth) -> model.MemoryGrowth:
    """A rank's leak as report.json says it (the run's, or an out-of-memory dump's)."""
    return model.MemoryGrowth(rank=rank, node=node, **dataclasses.asdict(growth), line=growth.line(rank))


def _segment(
    segment: Segment, traces: list[TraceFile], job: JobFolder, manifest: Manifest | None
) -> model.Segment:
    covering = [
        t.name
        for t in traces
        if t.rank == segment.rank and t.first_step <= segment.last and t.last_step >= segment.first
    ]
    return model.Segment(
        **dataclasses.asdict(segment),
        traces=covering,
        hint=None if covering else _hint(segment, job, manifest),
    )


def _slow_node(node: SlowNode, job: JobFolder) -> model.SlowNode:
    """A slow node, with the command that resubmits without it."""
    return model.SlowNode(
        **dataclasses.asdict(node),
        hint=(
            f"resubmit without {node.node}: `python submit.py <your options> --sbatch exclude={node.node}`, "
            f"or `python submit.py <your options> --exclude-slow-from {job.path}`"
        ),
    )


def _hint(segment: Segment, job: JobFolder, manifest: Manifest | None) -> str:
    """The commands that would have recorded the segment: live, or on the next run."""
    schedule = manifest.schedule if manifest else None
    warmup = schedule.warmup if schedule else ScheduleConfig().warmup
    warmup = min(warmup, segment.first)
    active = min(3, segment.last - segment.first + 1)
    next_run = ProfilerConfig(
        ranks=RankSelection.parse(format_ranks({0, segment.rank})),
        schedule=ScheduleConfig(wait=segment.first - warmup, warmup=warmup, active=active),
    )
    return (
        f"no trace of rank {segment.rank} covers steps {segment.first}-{segment.last}: while it is slow, "
        f"`python -m jobs.commands.capture {job.job_id} --ranks {segment.rank}`; in the next run, "
        f"`{shlex.join(argv_of(next_run))}` records steps {segment.first}-{segment.first + active - 1}"
    )


def _ends(run: RunMap, manifest: Manifest | None) -> model.Ends:
    """Where the logs end, against the run's steps: a killed job's end at its last flush."""
    steps = manifest.workload_steps if manifest else None
    expected = steps - 1 if steps is not None else None
    last = int(run.last_step.max())
    short = [
        model.ShortLog(rank=int(rank), last_step=int(end))
        for rank, end in zip(run.ranks, run.last_step, strict=True)
        if end < (expected if expected is not None else last)
    ]
    if expected is None:
        note = (
            f"no manifest: the job did not end by itself (killed?); the logs end at step {last}, "
            "their last flush"
        )
    elif short:
        ends = ", ".join(f"rank {s.rank} at step {s.last_step}" for s in short[:8])
        more = f" and {len(short) - 8} more" if len(short) > 8 else ""
        note = f"the run has steps 0-{expected}; logs end early ({ends}{more}): their last flush"
    else:
        note = None
    return model.Ends(expected_last_step=expected, last_step=last, short=short, note=note)


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None
