"""``manifest.json``: what a job folder holds and how it was made, written once by rank 0."""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import platform
import statistics
from pathlib import Path
from typing import Any, Sequence

from profiling.config import ProfilerConfig
from profiling.traces import write_json_atomically

MANIFEST_NAME = "manifest.json"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def step_time_summary(seconds: Sequence[float]) -> dict[str, float | int]:
    if not seconds:
        return {"steps": 0}
    return {
        "steps": len(seconds),
        "mean_s": statistics.fmean(seconds),
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "first_s": seconds[0],
    }


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("torch", "torchvision", "submitit"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def build_manifest(
    *,
    job: dict[str, Any],
    ranks: Sequence[dict[str, Any]],
    profiler: ProfilerConfig,
    workload: Any,
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
        **job,
        "world_size": len(ranks),
        "hostnames": hosts,
        "profiled_ranks": [record["rank"] for record in ranks if record["profiled"]],
        "trace_files": [name for record in ranks for name in record["trace_files"]],
        "schedule": dataclasses.asdict(profiler.schedule),
        "profiler": {
            "ranks": str(profiler.ranks),
            "record_shapes": profiler.record_shapes,
            "with_stack": profiler.with_stack,
            "gzip": profiler.gzip,
        },
        "workload": dataclasses.asdict(workload),
        "versions": versions(),
        "started_at": started_at,
        "ended_at": ended_at,
        "ranks": list(ranks),
    }


def write_manifest(job_dir: Path, manifest: dict[str, Any]) -> Path:
    path = job_dir / MANIFEST_NAME
    write_json_atomically(path, manifest)
    return path
