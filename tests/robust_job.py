"""A small job folder that holds every kind of file the report reads back: two ranks' traces
(steps, a collective, an op with shapes, the allocator's instants), their records and lanes,
each rank's step log (exact rows and buckets), the manifest and an out-of-memory dump; and
the checks every report of a damaged copy of it must pass (tests/test_robustness.py,
tests/test_report_fuzz.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec

from profiling.analysis.per_trace.peaks import FASTEST_TFLOPS
from profiling.folder.layout import JobFolder, ReportFiles
from profiling.folder.manifest import write_manifest
from profiling.folder.step_log import StepLogHeader, StepLogWriter
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from profiling.schema import model
from profiling.schema.manifest import Manifest
from tests.synthetic import cpu_job, write_job, x

STEPS = 8
LOG_STEPS = 40
SETTINGS = ReportSettings(plot=False, merged_trace=False, jobs=1)
MM_ARGS = {"Input Dims": [[64, 128], [128, 32]], "Input type": ["float", "float"]}
MEMORY = {"Total Allocated": 1 << 20, "Total Reserved": 2 << 20, "Device Id": -1, "Bytes": 4096}


def traces() -> list[dict]:
    """Two ranks' traces: each step with an ``aten::mm`` of known shapes and memory instants."""
    found = cpu_job(STEPS)
    for trace in found:
        steps = [e for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")]
        for step in steps:
            trace["traceEvents"] += [
                x(
                    "aten::mm",
                    step["ts"] + 6,
                    20,
                    **{"Input Dims": [[64, 128], [128, 32]], "Input type": ["float"]},
                ),
                memory_instant(step["ts"] + 7, MEMORY),
            ]
    return found


def memory_instant(ts: float, args: dict) -> dict:
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100, "tid": 1, "ts": ts,
            "s": "t", "args": args}  # fmt: skip


def make_job(
    root: Path, trace_list: list[dict] | None = None, nodes: tuple[str, str] = ("node1", "node2")
) -> JobFolder:
    """The job ``root/42``, its caches made by a first report."""
    folder = write_job(root / "42", trace_list if trace_list is not None else traces(), STEPS)
    job = JobFolder.at(folder)
    for rank in range(2):
        header = StepLogHeader(rank=rank, world_size=2, restart=0, node=nodes[rank], gpu=False,
                               exact_steps=20, bucket_steps=5)  # fmt: skip
        writer = StepLogWriter(job.step_log(rank), header)
        for step in range(LOG_STEPS):
            writer.add(step, 120.0, 100.0 + rank, mem_mib=500.0 + step)
        writer.close()
    write_manifest(job, manifest())
    job.oom_dump(1).parent.mkdir(parents=True, exist_ok=True)
    job.oom_dump(1).write_text(json.dumps(oom_dump()))
    build_report(job.path, SETTINGS)
    return job


def manifest() -> Manifest:
    attempt = {"restart_count": 0, "folder": ".", "resumed_from_step": 0, "next_step": LOG_STEPS,
               "outcome": "completed", "trace_files": [], "started_at": "t0", "ended_at": "t1"}  # fmt: skip
    document = {"job_id": "42", "launcher": "local", "nodes": 2, "master": "node1:29500", "backend": "gloo",
                "attempts": [attempt], "trace_files": [], "world_size": 2,
                "workload": {"name": "resnet18", "steps": LOG_STEPS}, "schedule": {"wait": 10, "warmup": 0,
                "active": STEPS, "repeat": 1}}  # fmt: skip
    return msgspec.convert(document, Manifest)


def oom_dump() -> dict:
    return {"rank": 1, "node": "node2", "step": 39, "device": "cpu", "error": "can't allocate memory",
            "written_at": 1764000000.0, "pid": 7, "allocated_bytes": 3 << 30, "reserved_bytes": None,
            "peak_bytes": 3 << 30, "total_bytes": 4 << 30, "limit": "RLIMIT_AS",
            "last_steps": [[38, 537.0], [39, 538.0]]}  # fmt: skip


def copy_job(job: JobFolder, root: Path) -> JobFolder:
    shutil.copytree(job.path, root / job.job_id)
    return JobFolder(root, job.job_id)


def report_holds(job: JobFolder) -> model.Report:
    """The report of ``job`` as the rules ask: written whatever the input, held to its model
    (no negative size or count, no NaN), every rate one a device can have; returns it."""
    built = build_report(job.path, SETTINGS)
    files = ReportFiles.of(job.path)
    typed = model.checked(files.json.read_bytes())
    assert typed == built and files.markdown.exists() and files.page.exists()
    for rank in typed.ranks:
        if rank.flops is not None:
            assert rank.flops.tflops_per_s <= 2 * FASTEST_TFLOPS and (rank.flops.mfu or 0.0) <= 1.0
        if rank.memory is not None:
            assert rank.memory.peak_allocated_bytes <= 1 << 50
            assert rank.memory.peak_reserved_bytes is None or rank.memory.peak_reserved_bytes <= 1 << 50
    return typed


def said(report: model.Report) -> str:
    """Every line the report says of its inputs: its warnings, the run's unreadable logs."""
    lines = [*report.warnings, *(report.run.unreadable if report.run else [])]
    lines += [r.flops.mfu_missing for r in report.ranks if r.flops and r.flops.mfu_missing]
    return "\n".join(lines)
