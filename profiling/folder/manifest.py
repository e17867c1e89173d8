"""The manifest (:attr:`JobFolder.manifest`, typed by :mod:`profiling.schema.manifest`): what a
job folder holds and how it was made.

Rank 0 writes it when an attempt ends (completed, preempted or failed), from the ranks' records
(gathered over the process group), each built as its Struct; :func:`~profiling.schema.files.write_file`
holds the whole to its Struct before it is written.
"""

from __future__ import annotations

import json
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from profiling.folder.layout import JobFolder
from profiling.folder.traces import list_traces
from profiling.schema.files import FileRefused, read_file, write_file
from profiling.schema.manifest import (
    AttemptRecord,
    JobFacts,
    Manifest,
    ProfilerRecord,
    RankRecord,
    Schedule,
    StepTimeSummary,
)
from slurm.common.clock import utc_now
from slurm.common.files import SMALL_FILE_BYTES, read_regular


def step_time_summary(
    seconds: Sequence[float], *, first_step: int = 0, windows: Sequence[tuple[int, int]] = ()
) -> StepTimeSummary:
    """Step times of one rank; with recorded ``windows``, split by what the profiler was doing.

    ``seconds[i]`` is step ``first_step + i``, from the end of the previous step to the end of
    this one: the profiler's work between two steps (closing a window, writing its trace)
    lands in the step after it, reported as ``after_window_mean_s``.
    """
    if not seconds:
        return StepTimeSummary(steps=0)
    summary = StepTimeSummary(
        steps=len(seconds),
        mean_s=statistics.fmean(seconds),
        median_s=statistics.median(seconds),
        p90_s=statistics.quantiles(seconds, n=10, method="inclusive")[-1] if len(seconds) > 1 else seconds[0],
        min_s=min(seconds),
        max_s=max(seconds),
        first_s=seconds[0],
    )
    if not windows:
        return summary
    steps = range(first_step, first_step + len(seconds))
    recorded = {s for first, last in windows for s in range(first, last + 1)}
    after = {last + 1 for _, last in windows}
    timed = list(zip(steps, seconds, strict=True))
    recorded_s = [t for s, t in timed if s in recorded]
    after_s = [t for s, t in timed if s in after]
    other_s = [t for s, t in timed if s not in recorded and s not in after and s != first_step]
    return msgspec.structs.replace(
        summary,
        recorded_median_s=statistics.median(recorded_s) if recorded_s else None,
        after_window_mean_s=statistics.fmean(after_s) if after_s else None,
        unrecorded_median_s=statistics.median(other_s) if other_s else None,
    )


def versions() -> dict[str, str]:
    import importlib.metadata  # 20 ms: for a job's manifest, not for each report that reads one

    found = {"python": platform.python_version()}
    for package in ("torch", "torchvision", "submitit"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def attempt_record(
    job: JobFolder,
    *,
    restart_count: int,
    resumed_from_step: int,
    next_step: int,
    outcome: str,
    started_at: str,
    error: str | None = None,
) -> AttemptRecord:
    """One attempt (one run of the job, SLURM_RESTART_COUNT=k): what it ran and what it wrote."""
    return AttemptRecord(
        restart_count=restart_count,
        folder=job.attempt_name(restart_count),
        resumed_from_step=resumed_from_step,
        next_step=next_step,
        outcome=outcome,  # "completed", "preempted" or "failed"
        trace_files=[str(t.path.relative_to(job.path)) for t in list_traces(job.attempt(restart_count))],
        started_at=started_at,
        ended_at=utc_now(),
        error=error or None,
    )


def read_manifest(job: JobFolder) -> Manifest | None:
    """The job's manifest; None before one is written. Raises
    :class:`~profiling.schema.files.FileRefused` (one line) where it does not read."""
    try:
        return read_file(job.manifest, Manifest)
    except FileNotFoundError:
        return None


def manifest_or_none(job: JobFolder) -> Manifest | None:
    """The job's manifest where it has one that reads (a tool that can go on without it: the
    job's state, its run's ends); the report says why one does not (:func:`read_manifest`)."""
    try:
        return read_manifest(job)
    except FileRefused:
        return None


def read_running(job: JobFolder) -> dict[str, Any] | None:
    """What rank 0 wrote of the job at its start (``meta/running.json``); None once it has
    ended (the manifest replaces it), or before it started."""
    try:
        return json.loads(read_regular(job.running, SMALL_FILE_BYTES))
    except (OSError, ValueError):
        return None


def with_attempt(
    job: JobFolder, attempt: AttemptRecord, manifest: Manifest | None = None
) -> list[AttemptRecord]:
    """Earlier attempts, as the manifest on disk (or ``manifest``) lists them, and ``attempt``.

    ``attempt`` replaces an earlier record of the same restart count (a failed attempt's, say).
    """
    earlier = manifest if manifest is not None else read_manifest(job)
    others = [a for a in (earlier.attempts if earlier else []) if a.restart_count != attempt.restart_count]
    return sorted([*others, attempt], key=lambda a: a.restart_count)


def record_attempt(job: JobFolder, facts: JobFacts, attempt: AttemptRecord) -> Path:
    """Rank 0, when an attempt ends early (preempted, failed): keep the manifest up to date."""
    on_disk = read_manifest(job)
    attempts = with_attempt(job, attempt, on_disk)
    trace_files = [name for a in attempts for name in a.trace_files]
    known = {name: value for name, value in msgspec.structs.asdict(facts).items() if value is not None}
    if on_disk is None:
        manifest = Manifest(**known, attempts=attempts, trace_files=trace_files)
    else:
        manifest = msgspec.structs.replace(on_disk, **known, attempts=attempts, trace_files=trace_files)
    return write_manifest(job, manifest)


def build_manifest(
    *,
    facts: JobFacts,
    ranks: Sequence[RankRecord],
    attempts: Sequence[AttemptRecord],
    schedule: Schedule,
    profiler: ProfilerRecord,
    workload: dict[str, Any],
    hooks: dict[str, Any],
    started_at: str,
    ended_at: str,
) -> Manifest:
    """Assemble the manifest from the job's facts and every rank's own record (by rank)."""
    ranks = sorted(ranks, key=lambda record: record.rank)
    hosts: list[str] = []
    for record in sorted(ranks, key=lambda record: record.node_rank):
        if record.node not in hosts:
            hosts.append(record.node)
    return Manifest(
        **msgspec.structs.asdict(facts),
        world_size=len(ranks),
        hostnames=hosts,
        profiled_ranks=[record.rank for record in ranks if record.profiled],
        trace_files=[name for attempt in attempts for name in attempt.trace_files],
        attempts=list(attempts),
        schedule=schedule,
        profiler=profiler,
        workload=workload,
        versions=versions(),
        started_at=started_at,
        ended_at=ended_at,
        ranks=list(ranks),
        slowest=hooks.get("slowest"),
        captures=hooks.get("captures"),
        step_log=hooks.get("step_log"),
    )


def write_manifest(job: JobFolder, manifest: Manifest) -> Path:
    write_file(job.manifest, manifest)
    return job.manifest
