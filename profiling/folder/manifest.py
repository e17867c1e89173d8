"""The manifest (:attr:`JobFolder.manifest`): what a job folder holds and how it was made.

Rank 0 writes it when an attempt ends (completed, preempted or failed).
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profiling.folder.layout import JobFolder
from profiling.folder.traces import list_traces
from slurm.basics import utc_now, write_json_atomically


def step_time_summary(
    seconds: Sequence[float], *, first_step: int = 0, windows: Sequence[tuple[int, int]] = ()
) -> dict[str, float | int]:
    """Step times of one rank; with recorded ``windows``, split by what the profiler was doing.

    ``seconds[i]`` is step ``first_step + i``, from the end of the previous step to the end of
    this one: the profiler's work between two steps (closing a window, writing its trace)
    lands in the step after it, reported as ``after_window_mean_s``.
    """
    if not seconds:
        return {"steps": 0}
    summary: dict[str, float | int] = {
        "steps": len(seconds),
        "mean_s": statistics.fmean(seconds),
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "first_s": seconds[0],
    }
    if windows:
        steps = range(first_step, first_step + len(seconds))
        recorded = {s for first, last in windows for s in range(first, last + 1)}
        after = {last + 1 for _, last in windows}
        by_kind = {
            "recorded_median_s": [t for s, t in zip(steps, seconds, strict=True) if s in recorded],
            "after_window_mean_s": [t for s, t in zip(steps, seconds, strict=True) if s in after],
            "unrecorded_median_s": [
                t
                for s, t in zip(steps, seconds, strict=True)
                if s not in recorded and s not in after and s != first_step
            ],
        }
        for key, values in by_kind.items():
            if values:
                summary[key] = (
                    statistics.fmean(values) if key.endswith("mean_s") else statistics.median(values)
                )
    return summary


def versions() -> dict[str, str]:
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
) -> dict[str, Any]:
    """One attempt (one run of the job, SLURM_RESTART_COUNT=k): what it ran and what it wrote."""
    record = {
        "restart_count": restart_count,
        "folder": job.attempt_name(restart_count),
        "resumed_from_step": resumed_from_step,
        "next_step": next_step,
        "outcome": outcome,  # "completed", "preempted" or "failed"
        "trace_files": [str(t.path.relative_to(job.path)) for t in list_traces(job.attempt(restart_count))],
        "started_at": started_at,
        "ended_at": utc_now(),
    }
    if error:
        record["error"] = error
    return record


def read_manifest(job: JobFolder) -> dict[str, Any] | None:
    try:
        return json.loads(job.manifest.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read_running(job: JobFolder) -> dict[str, Any] | None:
    """What rank 0 wrote of the job at its start (``meta/running.json``); None once it has
    ended (the manifest replaces it), or before it started."""
    try:
        return json.loads(job.running.read_text())
    except (OSError, ValueError):
        return None


def with_attempt(
    job: JobFolder, attempt: dict[str, Any], manifest: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Earlier attempts, as the manifest on disk (or ``manifest``) lists them, and ``attempt``.

    ``attempt`` replaces an earlier record of the same restart count (a failed attempt's, say).
    """
    earlier = (manifest if manifest is not None else read_manifest(job) or {}).get("attempts", [])
    others = [a for a in earlier if a["restart_count"] != attempt["restart_count"]]
    return sorted(others + [attempt], key=lambda a: a["restart_count"])


def record_attempt(job: JobFolder, facts: dict[str, Any], attempt: dict[str, Any]) -> Path:
    """Rank 0, when an attempt ends early (preempted, failed): keep the manifest up to date."""
    on_disk = read_manifest(job) or {}
    manifest = {**on_disk, **facts}
    manifest["attempts"] = with_attempt(job, attempt, on_disk)
    manifest["trace_files"] = [name for a in manifest["attempts"] for name in a["trace_files"]]
    return write_manifest(job, manifest)


def build_manifest(
    *,
    facts: dict[str, Any],
    ranks: Sequence[dict[str, Any]],
    attempts: Sequence[dict[str, Any]],
    profiler: dict[str, Any],
    workload: dict[str, Any],
    started_at: str,
    ended_at: str,
) -> dict[str, Any]:
    """Assemble the manifest from the job's facts and every rank's own record (by rank)."""
    ranks = sorted(ranks, key=lambda record: record["rank"])
    hosts: list[str] = []
    for record in sorted(ranks, key=lambda record: record["node_rank"]):
        if record["node"] not in hosts:
            hosts.append(record["node"])
    return {
        **facts,
        "world_size": len(ranks),
        "hostnames": hosts,
        "profiled_ranks": [record["rank"] for record in ranks if record["profiled"]],
        "trace_files": [name for attempt in attempts for name in attempt["trace_files"]],
        "attempts": list(attempts),
        "schedule": profiler["schedule"],
        "profiler": {key: value for key, value in profiler.items() if key != "schedule"},
        "workload": workload,
        "versions": versions(),
        "started_at": started_at,
        "ended_at": ended_at,
        "ranks": list(ranks),
    }


def write_manifest(job: JobFolder, manifest: dict[str, Any]) -> Path:
    job.meta.mkdir(parents=True, exist_ok=True)
    write_json_atomically(job.manifest, manifest)
    return job.manifest
