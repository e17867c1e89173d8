"""A job's line in its history (``meta/summary.json``): made from its report and its manifest,
written beside report.json by every report of a job folder."""

from __future__ import annotations

import datetime
import hashlib
import statistics
from pathlib import Path
from typing import Any

import msgspec

from profiling.schema import model
from profiling.schema.files import read_file, write_file
from profiling.schema.manifest import Manifest
from profiling.schema.summary import MAX_MEMORY_MIB, MAX_MS, MAX_RANK, MAX_RATIO, MIN_STEP_MS, JobSummary

SUMMARY = "summary.json"
# what a job's settings hold that does not change its step: how long it runs, how often it
# logs, and the faults a test injects (a slowed rank is the same config, run worse)
_NOT_CONFIG = frozenset({"steps", "log_every", "seed", "inject_failure", "inject_slowdown", "inject_hang"})


def config_of(manifest: Manifest) -> dict[str, Any]:
    """What decides the job's step: its workload's settings, its ranks, nodes and backend."""
    workload = {key: value for key, value in manifest.workload.items() if key not in _NOT_CONFIG}
    return {
        **workload,
        "ranks": manifest.world_size or len(manifest.ranks),
        "nodes": manifest.nodes,
        "backend": manifest.backend,
    }


def config_fingerprint(config: dict[str, Any]) -> str:
    """The config's hash: the same settings in any order give the same 16 hex digits."""
    encoded = msgspec.json.encode(msgspec.to_builtins(config, str_keys=True), order="deterministic")
    return hashlib.blake2b(encoded, digest_size=8).hexdigest()


def job_summary(report: model.Report, manifest: Manifest) -> JobSummary:
    """The job's line: who ran what, where and when; its step; what the report found. Every
    number is one its schema takes (an impossible one, a negative or endless step of a damaged
    manifest, is left out): the report never writes a summary that reading it back refuses.
    Raises ValueError where the job itself cannot be named (its id)."""
    config = config_of(manifest)
    times = [record.step_time for record in manifest.ranks if record.step_time.steps]
    medians = _steps([t.median_s * 1e3 for t in times if t.median_s is not None])
    p90s = _steps([t.p90_s * 1e3 for t in times if t.p90_s is not None])
    median = statistics.median(medians) if medians else None
    straggler = report.straggler
    ranks = int(config["ranks"]) if 0 <= int(config["ranks"]) <= MAX_RANK else 0
    named = straggler.rank if straggler and straggler.verdict == "straggler" else None
    named = named if named is not None and named < max(ranks, 1) else None
    node_of = manifest.nodes_by_rank
    slow = [node.node for node in report.run.slow_nodes] if report.run else []
    # a straggler's node is named where there were others to compare it with
    if (
        named is not None
        and len(manifest.hostnames) > 1
        and node_of.get(named)
        and node_of[named] not in slow
    ):
        slow.append(node_of[named])
    replay = report.critical_path.replay if report.critical_path else None
    mfus = [r.flops.mfu for r in report.ranks if r.flops and r.flops.mfu is not None]
    made = JobSummary(
        job_id=manifest.job_id,
        name=manifest.job_name,
        user=manifest.user,
        ended_at=_when(manifest.ended_at) or report.generated_at,
        nodes=list(manifest.hostnames),
        workload=str(manifest.workload.get("name", "unknown")),
        config=config,
        fingerprint=config_fingerprint(config),
        ranks=ranks,
        mesh={name: int(size) for name, size in report.layout.dims.items()} if report.layout else {},
        step_median_ms=median,
        step_p90_ms=statistics.median(p90s) if p90s else None,
        noise_ms=_bounded(_noise_ms(report, median), MAX_MS),
        verdict=straggler.verdict if straggler else None,
        straggler=named,
        slow_nodes=slow,
        slowdown=_bounded(replay.slowdown, MAX_RATIO) if replay else None,
        mfu=_bounded(statistics.median(mfus), MAX_RATIO) if mfus else None,
        peak_memory_mib=_bounded(_peak_memory_mib(report, manifest), MAX_MEMORY_MIB),
        oom=bool(report.oom),
    )
    # what reading it back will check (a Struct's constraints hold when it is decoded, not made)
    return msgspec.convert(msgspec.to_builtins(made), JobSummary)


def _bounded(value: float | None, most: float) -> float | None:
    """A plain float (the report before it is encoded holds numpy's) from 0 to ``most``; None
    for any other (negative, endless, not a number)."""
    return float(value) if value is not None and 0.0 <= float(value) <= most else None


def _steps(values: list[float]) -> list[float]:
    return [value for value in values if MIN_STEP_MS <= value <= MAX_MS]


def _when(text: str | None) -> str | None:
    """An ISO 8601 time, else None (a damaged manifest's 'yesterday')."""
    try:
        return text if text is not None and datetime.datetime.fromisoformat(text) else None
    except ValueError:
        return None


def _noise_ms(report: model.Report, median: float | None) -> float | None:
    """The step's step-to-step noise: the run's (a ratio of the step) where the job logged its
    steps, else the straggler verdict's."""
    if report.run is not None and median is not None:
        return report.run.noise * median
    return report.straggler.step_noise_ms if report.straggler else None


def _peak_memory_mib(report: model.Report, manifest: Manifest) -> float | None:
    """The most any rank held: the GPU's peak allocated where the traces say, else the
    processes' peak resident memory (a CPU trace's allocator events count tensors alone)."""
    device = [
        r.memory.peak_allocated_bytes / 2**20
        for r in report.ranks
        if r.memory is not None and r.memory.device.startswith("cuda")
    ]
    if device:
        return max(device)
    resident = [record.peak_rss_mib for record in manifest.ranks]
    return max(resident) if resident else None


def write_summary(meta: Path, summary: JobSummary) -> Path:
    """``meta/summary.json``, atomically."""
    path = meta / SUMMARY
    write_file(path, summary)
    return path


def read_summary(path: Path) -> JobSummary:
    """One job's line; raises :class:`~profiling.schema.files.FileRefused` in one line."""
    return read_file(path, JobSummary)
