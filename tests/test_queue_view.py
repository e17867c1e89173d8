"""One view of SLURM for a command that follows jobs (slurm/queue_view.py): one squeue and one
sacct for all its jobs, a finished job never asked about again, a delay that grows with how
long the jobs have been watched. SLURM's commands are faked here; the real cluster's tests
(test_job_state, test_list, test_monitor) run through the same view."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jobs.listing import list_jobs
from profiling.folder.layout import JobFolder
from slurm import queue_view, scheduler
from slurm.queue_view import QueueView


class FakeSlurm:
    """squeue knows ``queued`` (id -> state); sacct knows every other job as COMPLETED."""

    def __init__(self, queued: dict[str, str]) -> None:
        self.queued = queued
        self.calls: list[list[str]] = []

    def __call__(self, command: list[str]) -> subprocess.CompletedProcess:
        self.calls.append(command)
        ids = command[command.index("-j") + 1].split(",") if "-j" in command else []
        if command[0] == "squeue":
            lines = [f"{i} {self.queued[i]}" for i in ids if i in self.queued]
            return subprocess.CompletedProcess(command, 0, "\n".join(lines), "")
        if command[0] == "sacct":
            lines = [f"{i}|COMPLETED|2026-12-02T10:00:0{n % 10}" for n, i in enumerate(ids)]
            return subprocess.CompletedProcess(command, 0, "\n".join(lines), "")
        return subprocess.CompletedProcess(command, 1, "", "Invalid job id")

    def count(self, name: str) -> int:
        return sum(command[0] == name for command in self.calls)


def slurm_job(root: Path, job_id: str) -> None:
    folder = JobFolder(root, job_id)
    folder.meta.mkdir(parents=True)
    folder.meta.joinpath("submitted.json").write_text(f'{{"job_id": "{job_id}", "launcher": "slurm"}}')


def test_a_listing_asks_squeue_and_sacct_once_for_all_its_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm({"105": "RUNNING"})
    monkeypatch.setattr(scheduler, "_run", fake)
    for job_id in ("101", "102", "103", "104", "105"):
        slurm_job(tmp_path, job_id)
    jobs = {job["job_id"]: job for job in list_jobs(tmp_path)}
    assert jobs["105"]["outcome"].startswith("running") and jobs["101"]["outcome"] == "completed"
    assert (fake.count("squeue"), fake.count("sacct")) == (1, 1), fake.calls  # not one per ended job
    [sacct] = [command for command in fake.calls if command[0] == "sacct"]
    assert sacct[sacct.index("-j") + 1] == "101,102,103,104"


def test_a_finished_job_is_not_asked_about_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm({})
    monkeypatch.setattr(scheduler, "_run", fake)
    view = QueueView()
    assert view.state("7") == "" and view.ending("7")[0] == "COMPLETED"
    for _ in range(5):
        assert view.state("7") == "" and view.ending("7")[0] == "COMPLETED"
    assert (fake.count("squeue"), fake.count("sacct")) == (1, 1)


def test_the_queue_is_read_less_often_the_longer_it_is_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm({"7": "RUNNING"})
    monkeypatch.setattr(scheduler, "_run", fake)
    now = [0.0]
    view = QueueView(clock=lambda: now[0])
    assert view.delay_s == queue_view.MIN_DELAY_S
    reads = []
    for second in range(0, 3600, 1):
        now[0] = float(second)
        before = fake.count("squeue")
        assert view.state("7") == "RUNNING"
        if fake.count("squeue") > before:
            reads.append(second)
    assert reads[:3] == [0, 2, 4]  # a young job: every 2 s
    assert reads[-1] - reads[-2] == queue_view.MAX_DELAY_S  # an hour on: every 30 s
    assert len(reads) < 3600 / 10
