"""Shared helpers: run ``submit.py`` as a user would, and read what a job left behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# Small and quick, yet long enough for the default schedule's window (steps 15-17).
SMALL_JOB = ["--steps", "20", "--image-size", "32", "--threads-per-rank", "1"]


def run_submit(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "submit.py"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def submitted_job_id(stdout: str) -> str:
    match = re.search(r"^submitted job (\S+)", stdout, re.MULTILINE)
    assert match, f"no job id in output:\n{stdout}"
    return match.group(1)


def profiler_steps(trace: dict[str, Any]) -> list[int]:
    return sorted(
        int(event["name"].split("#")[1])
        for event in trace["traceEvents"]
        if event.get("name", "").startswith("ProfilerStep#") and event.get("ph") == "X"
    )


def load_manifest(job_dir: Path) -> dict[str, Any]:
    return json.loads((job_dir / "meta" / "manifest.json").read_text())


def check_job_folder(job_dir: Path, *, job_id: str, world_size: int, profiled: set[int]) -> dict[str, Any]:
    """The checks every finished job must pass; returns the manifest."""
    from profiling.traces import list_traces, load_trace

    traces = list_traces(job_dir)
    assert {t.rank for t in traces} == profiled, f"traces in {job_dir}: {[t.path.name for t in traces]}"
    for trace_file in traces:
        trace = load_trace(trace_file.path)
        info = trace["distributedInfo"]
        assert info["rank"] == trace_file.rank
        assert info["world_size"] == world_size
        assert profiler_steps(trace) == list(range(trace_file.first_step, trace_file.last_step + 1))
    assert not [p for p in job_dir.iterdir() if p.name.endswith(".tmp")], "temporary files left behind"
    # HTA reads every .json/.gz of the folder as a trace: nothing else may sit there
    loose = {p.name for p in job_dir.iterdir() if p.name.endswith((".json", ".gz"))}
    assert loose == {t.path.name for t in traces}, loose

    manifest = load_manifest(job_dir)
    assert manifest["job_id"] == job_id
    assert manifest["world_size"] == world_size
    assert manifest["profiled_ranks"] == sorted(profiled)
    assert sorted(manifest["trace_files"]) == sorted(t.path.name for t in traces)
    assert [r["rank"] for r in manifest["ranks"]] == list(range(world_size))
    for record in manifest["ranks"]:
        assert record["step_time"]["steps"] == manifest["workload"]["steps"]
        assert 0 < record["step_time"]["min_s"] <= record["step_time"]["median_s"] <= record["step_time"]["max_s"]
    for package in ("torch", "torchvision", "submitit"):
        assert manifest["versions"][package][0].isdigit()
    assert manifest["started_at"] <= manifest["ended_at"]
    return manifest


@pytest.fixture
def traces_root(tmp_path: Path) -> Path:
    return tmp_path / "traces"


REQUIRE_SLURM_ENV = "REQUIRE_SLURM"  # set to 1 in CI: a missing cluster fails instead of skipping


def slurm_cluster_nodes() -> int:
    """Idle-or-usable nodes of the local SLURM cluster; 0 if none answers."""
    import shutil

    if not shutil.which("sinfo"):
        return 0
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode:
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.split()[-1].rstrip("*") in {"idle", "mix", "alloc"})


@pytest.fixture
def slurm_cluster() -> int:
    """The number of nodes of the local SLURM cluster (``slurm/cluster.sh start``)."""
    nodes = slurm_cluster_nodes()
    if nodes < 2:
        reason = "no local SLURM cluster with 2+ nodes is up: run `slurm/cluster.sh start` as root"
        if os.environ.get(REQUIRE_SLURM_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_SLURM_ENV}=1)")
        pytest.skip(reason)
    return nodes


def sacct_state(job_id: str, timeout: float = 60) -> str:
    """The job's final state in SLURM's accounting (waiting while it still runs or completes)."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"], capture_output=True, text=True, timeout=30
        )
        state = out.stdout.strip().split("\n")[0].split(" ")[0] if out.stdout.strip() else ""
        if state not in ("", "PENDING", "RUNNING", "COMPLETING", "REQUEUED") or time.monotonic() > deadline:
            return state
        time.sleep(1)
