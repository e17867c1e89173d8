"""``python -m jobs.commands.list``: one line per job folder, newest first, never a traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from jobs.commands.list import main
from jobs.job_state import NO_RECORD as NO_MANIFEST
from jobs.listing import list_jobs, render_jobs
from jobs.runtime.records import process_start
from profiling.folder.layout import JobFolder
from profiling.folder.manifest import write_manifest
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from profiling.schema.manifest import Manifest
from tests.common import REPO
from tests.synthetic import cpu_job, write_job


def finished_job(root: Path, job_id: str, started: str) -> JobFolder:
    folder = JobFolder(root, job_id)
    write_job(folder.path, cpu_job(8, lambda step: {1: 30.0}), 8)
    build_report(folder.path, ReportSettings(merged_trace=False, plot=False))
    attempt = {"folder": ".", "resumed_from_step": 0, "next_step": 20, "trace_files": []}
    attempt |= {"started_at": started, "ended_at": started}
    rank = {"local_rank": 0, "node_rank": 0, "node": "n1", "hostname": "n1", "device": "cpu", "threads": 1}
    rank |= {"launcher": "slurm", "profiled": False, "trace_files": [], "windows": []}
    rank |= {"trace_export_s": 0.0, "peak_rss_mib": 1.0, "started_at": started}
    manifest = {
        "job_id": job_id,
        "launcher": "slurm",
        "nodes": 2,
        "master": "n1:29500",
        "backend": "gloo",
        "world_size": 4,
        "started_at": started,
        "trace_files": [],
        "attempts": [
            attempt | {"restart_count": 0, "outcome": "preempted"},
            attempt | {"restart_count": 1, "outcome": "completed"},
        ],
        "ranks": [
            rank | {"rank": r, "step_time": {"steps": 20, "median_s": 0.1 + r / 100}} for r in range(4)
        ],
    }
    write_manifest(folder, msgspec.convert(manifest, Manifest))
    return folder


@pytest.fixture
def root(tmp_path: Path) -> Path:
    finished_job(tmp_path, "41", "2026-11-30T10:00:00.000+00:00")
    finished_job(tmp_path, "42", "2026-11-30T11:00:00.000+00:00")
    running = JobFolder(tmp_path, "43")
    running.path.mkdir()
    (running.path / "rank0_iter15_17.json").write_text("{}")  # a trace, no manifest yet
    (tmp_path / "logs").mkdir()  # the flat logs folder of the layout before one folder per job
    (tmp_path / "notes").mkdir()  # not a job folder
    os.utime(running.path, (2_000_000_000, 2_000_000_000))  # 2033: the newest
    return tmp_path


def test_newest_first_with_outcome_step_time_and_straggler(root: Path) -> None:
    jobs = list_jobs(root)
    assert [job["job_id"] for job in jobs] == ["43", "42", "41"]
    newest, finished = jobs[0], jobs[1]
    assert newest["outcome"] == NO_MANIFEST and newest["traces"] == 1 and newest["nodes"] is None
    assert (finished["nodes"], finished["tasks_per_node"], finished["launcher"]) == (2, 2, "slurm")
    assert finished["outcome"] == "completed"  # the last attempt's
    assert finished["step_ms"] == pytest.approx(115.0)  # median over ranks of each rank's median
    assert finished["straggler"] == "rank 1" and finished["traces"] == 2 and finished["trace_bytes"] > 0
    lines = render_jobs(jobs).splitlines()
    assert lines[0].split()[:3] == ["job", "started", "(UTC)"]
    assert lines[2].startswith("42 ") and "2 x 2" in lines[2] and "rank 1" in lines[2]
    assert NO_MANIFEST in lines[1]


def test_a_running_job_is_described_by_what_its_rank_0_wrote_at_the_start(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "50")
    folder.meta.mkdir(parents=True)
    # rank 0 is this process: alive, so the job runs
    folder.running.write_text(
        json.dumps(
            {"job_id": "50", "world_size": 8, "nodes": 2, "launcher": "torchrun", "restart_count": 0,
             "started_at": "2026-11-30T12:00:00.000+00:00", "host": socket.gethostname(), "pid": os.getpid(),
             "pid_started": process_start()}
        )
    )  # fmt: skip
    [job] = list_jobs(tmp_path)
    assert (job["nodes"], job["tasks_per_node"], job["launcher"]) == (2, 4, "torchrun")
    assert job["started_at"] == "2026-11-30T12:00:00.000+00:00" and job["outcome"] == "running"


def test_json_for_scripts(root: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(root), "--json"]) == 0
    assert [job["job_id"] for job in json.loads(capsys.readouterr().out)] == ["43", "42", "41"]


def test_missing_root_is_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "jobs.commands.list", "/no/such/traces"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "python -m jobs.commands.list: error: traces root /no/such/traces is not a folder. "
        "HINT: pass as ROOT the traces root the jobs were submitted with, or set TRACES_ROOT"
    )


def test_empty_root(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == f"no job folder in {tmp_path}"
