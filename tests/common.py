"""What tests and benchmarks share: the repository, small job settings, running ``submit.py``
as a user would, and reading what a job left behind (through :class:`JobFolder`)."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from profiling.folder.layout import JobFolder
from profiling.folder.traces import list_traces

REPO = Path(__file__).resolve().parents[1]
# CI sets it: a trace scanner that was not built (no C compiler) fails its tests, not skips them
REQUIRE_SCANNER_ENV = "REQUIRE_SCANNER"
REQUIRE_HTA_ENV = "REQUIRE_HTA"  # set in CI: the comparisons with HTA fail where it is missing
# Small and quick, yet long enough for the default schedule's window (steps 15-17). fp32: bf16
# convolutions take a slow path on CPUs without AVX-512 (seconds per step at 32x32).
SMALL_WORKLOAD = ["--image-size", "32", "--dtype", "fp32", "--threads-per-rank", "1"]
SMALL_JOB = ["--steps", "20", *SMALL_WORKLOAD]
# Where the model does not matter (soak, faults, hangs): a tiny MLP under DDP, a millisecond a
# step and no torchvision (whose import alone is 2.8 s a rank)
TINY_JOB = [
    "--workload",
    "tests.user_code.tiny_mlp:build",
    "--steps",
    "20",
    "--dtype",
    "fp32",
    "--threads-per-rank",
    "1",
]
_SUBMITTED = re.compile(r"^submitted job (\S+)", re.MULTILINE)


def run_submit(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "submit.py"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def run_module(module: str, *args: str, timeout: float = 200) -> subprocess.CompletedProcess:
    """One of the toolkit's commands, ``python -m MODULE ARGS``, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def run_python(
    code: str, *, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """``python -c CODE`` in the repository, in a fresh interpreter (``env``: the whole environment)."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env
    )


def submitted_job_id(stdout: str) -> str:
    match = _SUBMITTED.search(stdout)
    assert match, f"no job id in output:\n{stdout}"
    return match.group(1)


def load_trace(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as handle:
        return json.load(handle)


def profiler_steps(trace: dict[str, Any]) -> list[int]:
    return sorted(
        int(event["name"].split("#")[1])
        for event in trace["traceEvents"]
        if event.get("name", "").startswith("ProfilerStep#") and event.get("ph") == "X"
    )


def load_manifest(job_dir: Path) -> dict[str, Any]:
    return json.loads(JobFolder.at(job_dir).manifest.read_text())


def check_job_folder(job_dir: Path, *, job_id: str, world_size: int, profiled: set[int]) -> dict[str, Any]:
    """The checks every finished job must pass; returns the manifest."""
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
        assert (
            0
            < record["step_time"]["min_s"]
            <= record["step_time"]["median_s"]
            <= record["step_time"]["max_s"]
        )
    for package in ("torch", "torchvision", "submitit"):
        assert manifest["versions"][package][0].isdigit()
    assert manifest["started_at"] <= manifest["ended_at"]
    return manifest


def sacct_state(job_id: str, timeout: float = 60) -> str:
    """The job's final state in SLURM's accounting (waiting while it still runs or completes)."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        state = out.stdout.strip().split("\n")[0].split(" ")[0] if out.stdout.strip() else ""
        if state not in ("", "PENDING", "RUNNING", "COMPLETING", "REQUEUED") or time.monotonic() > deadline:
            return state
        time.sleep(1)


def needs_scanner() -> pytest.MarkDecorator:
    """Skip where the C trace scanner was not built, but fail in CI (:data:`REQUIRE_SCANNER_ENV`)."""
    from profiling.analysis.reading import trace_scan

    required = bool(os.environ.get(REQUIRE_SCANNER_ENV))
    return pytest.mark.skipif(not trace_scan.AVAILABLE and not required, reason="the scanner is not built")


def import_hta() -> Any:
    """HTA's ``hta.trace_analysis``, for the tests that hold our figures to its: skipped where HTA
    is not installed (an optional test dependency, ``pip install '.[hta]'``), but failed where
    :data:`REQUIRE_HTA_ENV` is set (CI), so that they never skip there unseen."""
    try:
        return importlib.import_module("hta.trace_analysis")
    except ImportError as error:
        if os.environ.get(REQUIRE_HTA_ENV):
            pytest.fail(
                f"{REQUIRE_HTA_ENV} is set and HTA does not import ({error}). HINT: pip install '.[hta]'"
            )
        pytest.skip(f"HTA is an optional test dependency (pip install '.[hta]'): {error}")


def wait_for_a_quiet_machine(busy_below: float = 0.2, window_s: float = 2.0, limit_s: float = 40.0) -> None:
    """Before a test that times ranks against each other: wait (at most ``limit_s``) until the
    CPUs were busy less than ``busy_below`` of a ``window_s`` window, so that what the previous
    test left running (a cluster job ending, its report) does not slow one rank. CI's balanced
    straggler job got a slow stretch twice in a row right after the cluster tests (2026-12-03).
    The CPUs' own counters, not the load average: that one decays over a minute, and waiting
    for it cost CI a minute a test on an idle machine."""
    deadline = time.monotonic() + limit_s
    busy = _busy_share(window_s)
    while busy >= busy_below and time.monotonic() < deadline:
        busy = _busy_share(window_s)
    if busy >= busy_below:  # said in the test's output: a timing failure after it has a cause
        warnings.warn(
            f"the machine was still busy after {limit_s:g} s ({busy:.0%} of its CPUs over the last "
            f"{window_s:g} s, above {busy_below:.0%}): the test times its ranks on a busy machine",
            stacklevel=2,
        )
        print(f"wait_for_a_quiet_machine: gave up after {limit_s:g} s, the CPUs {busy:.0%} busy", flush=True)


def _busy_share(window_s: float) -> float:
    """The share of the CPUs' time spent not idle over the next ``window_s`` (/proc/stat)."""

    def counters() -> tuple[int, int]:
        with open("/proc/stat") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # all, idle + iowait

    total, idle = counters()
    time.sleep(window_s)
    total2, idle2 = counters()
    return 1.0 - (idle2 - idle) / max(total2 - total, 1)
