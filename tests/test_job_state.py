"""Whether a job still runs, as every tool sees it (jobs/job_state.py): jobs that
hung and failed, were SIGKILLed, cancelled or completed are refused by capture in one line
within 2 s, and listed with the size they were submitted with and how they ended."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from jobs.commands import capture
from jobs.job_state import NO_RECORD, job_state
from jobs.listing import list_jobs
from jobs.runtime.records import process_start
from profiling.folder.layout import JobFolder
from profiling.folder.manifest import record_attempt
from profiling.folder.step_log import read_step_log
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from profiling.schema.manifest import AttemptRecord, JobFacts
from slurm import scheduler
from tests.common import REPO, SMALL_JOB, SMALL_WORKLOAD, run_submit, submitted_job_id
from tests.slurm_helpers import SubmittedJob, task_processes


def refused(folder: JobFolder) -> str:
    """``jobs.capture`` of an ended job: one line, exit 2, at once; the line. "At once" is its
    sleeps, counted: under 2 s in all (no waiting out the accounting's lag), whatever the
    machine's load makes of the rest."""
    err = io.StringIO()
    slept: list[float] = []
    sleep = time.sleep

    def counted(seconds: float) -> None:
        slept.append(seconds)
        sleep(seconds)

    with (
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
        mock.patch.object(scheduler.time, "sleep", side_effect=counted),
    ):
        status = capture.main([str(folder.path), "--active", "3"])
    result = subprocess.CompletedProcess([], status, "", err.getvalue())
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert sum(slept) < 2.0, f"capture slept {sum(slept):.1f} s before it refused"
    assert result.stderr.endswith(": there is nothing to capture. HINT: capture a job while it runs\n")
    return result.stderr


def listed(folder: JobFolder) -> dict:
    (job,) = [job for job in list_jobs(folder.root) if job["job_id"] == folder.job_id]
    return job


def write(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))


class FakeScheduler:
    """``sacct`` and ``scontrol`` answering from scripts, one answer per call (the last repeats):
    the order in which SLURM's two daemons hear of a job's end, which the real cluster shows
    only by chance (CI saw sacct say RUNNING after squeue had let the job go)."""

    def __init__(self, sacct: list[str | None], scontrol: list[str | None]) -> None:
        self.answers = {"sacct": sacct, "scontrol": scontrol}
        self.calls = {"sacct": 0, "scontrol": 0}

    def __call__(self, command: list[str]) -> subprocess.CompletedProcess:
        name = command[0]
        script = self.answers[name]
        answer = script[min(self.calls[name], len(script) - 1)]
        self.calls[name] += 1
        if answer is None:  # no record: no accounting, or a job scontrol forgot
            return subprocess.CompletedProcess(command, 1, "", f"{name}: error: Invalid job id")
        if name == "scontrol":
            answer = f"JobId=7 JobState={answer} EndTime=2026-12-01T14:00:00"
        else:  # asked for JobID,State,End
            answer = f"7|{answer}"
        return subprocess.CompletedProcess(command, 0, answer + "\n", "")


@pytest.mark.parametrize(
    "sacct, scontrol, expected, sacct_calls",
    [
        (["RUNNING|Unknown"], ["COMPLETED"], "COMPLETED", 1),  # accounting behind the controller
        (["RUNNING|Unknown", "FAILED|2026-12-01T14:00:00"], ["COMPLETING"], "FAILED", 2),  # both behind
        (["COMPLETED|2026-12-01T14:00:00"], ["RUNNING"], "COMPLETED", 1),  # accounting's word first
        ([None], [None], scheduler.UNKNOWN_END, 1),  # neither knows it: at once, no waiting
        ([None], ["CANCELLED"], "CANCELLED", 1),  # no accounting
    ],
)
def test_a_job_out_of_the_queue_is_not_called_running_while_accounting_catches_up(
    monkeypatch: pytest.MonkeyPatch, sacct: list, scontrol: list, expected: str, sacct_calls: int
) -> None:
    fake = FakeScheduler(sacct, scontrol)
    monkeypatch.setattr(scheduler, "_run", fake)
    monkeypatch.setattr(scheduler.time, "sleep", lambda seconds: None)
    assert scheduler.ending("7")[0] == expected
    assert fake.calls["sacct"] == sacct_calls


class FakeClock:
    """``time`` as the scheduler's module uses it, whose sleeps pass at once: a bound on waiting
    is tested on the clock it is written against, not on a machine's load."""

    def __init__(self) -> None:
        self.now, self.slept = 0.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_accounting_that_stays_behind_is_waited_for_a_bounded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, clock = FakeScheduler(["RUNNING|Unknown"], [None]), FakeClock()
    monkeypatch.setattr(scheduler, "_run", fake)
    monkeypatch.setattr(scheduler, "time", clock)
    assert scheduler.ending("7", lag_s=1.5)[0] == "RUNNING"  # what it says, once the bound is past
    assert 1.5 <= clock.now < 1.5 + max(clock.slept)  # asked again up to the bound, and no longer
    assert fake.calls["sacct"] == len(clock.slept) + 1


def test_an_outcome_in_the_manifest_ends_the_job_whatever_running_json_says(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "7")
    write(folder.running, {"restart_count": 0, "launcher": "submitit-local", "pid": os.getpid()})
    failed = AttemptRecord(
        restart_count=0, folder=".", resumed_from_step=0, next_step=3, trace_files=[], outcome="failed",
        started_at="2026-12-01T08:00:00.000+00:00", ended_at="2026-12-01T08:02:31.123+00:00", error="X: y",
    )  # fmt: skip
    facts = JobFacts(job_id="7", launcher="submitit-local", nodes=1, master="h:1", backend="gloo")
    record_attempt(folder, facts, failed)
    state = job_state(folder)
    assert (state.running, state.outcome) == (False, "failed")
    assert state.how == "job 7 failed at 2026-12-01 08:02:31 UTC (X: y)"
    # a later attempt runs: its own running.json says so, and rank 0's process is alive
    write(folder.running, {"restart_count": 1, "launcher": "submitit-local", "host": os.uname().nodename,
                           "pid": os.getpid(), "pid_started": process_start()})  # fmt: skip
    assert job_state(folder).running is True


def test_processes_that_are_gone_or_were_reused_are_no_job(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "8")
    running = {"restart_count": 0, "launcher": "torchrun", "host": os.uname().nodename, "pid": os.getpid()}
    write(folder.running, {**running, "pid_started": process_start()})
    assert job_state(folder).outcome == "running"
    write(folder.running, {**running, "pid_started": "1"})  # the same pid, another process
    state = job_state(folder)
    assert (state.running, state.outcome) == (
        False,
        "killed",
    ) and "none of its processes is left" in state.how
    write(folder.running, {**running, "host": "elsewhere"})
    assert job_state(folder).running is None  # nothing here can tell
    assert job_state(JobFolder(tmp_path, "9")).outcome == NO_RECORD


def test_a_completed_job(traces_root: Path) -> None:
    result = run_submit("--cluster", "local", "--gpus", "2", "--traces-root", str(traces_root), "--wait",
                        *SMALL_JOB, timeout=240)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    folder = JobFolder(traces_root, submitted_job_id(result.stdout))
    assert f"job {folder.job_id} completed at " in refused(folder)
    job = listed(folder)
    assert (job["nodes"], job["tasks_per_node"], job["outcome"]) == (1, 2, "completed")


def test_a_local_job_whose_ranks_were_sigkilled(traces_root: Path) -> None:
    job = SubmittedJob(traces_root, "--gpus", "2", "--steps", "2000", *SMALL_WORKLOAD, cluster="local")
    try:
        job.wait_for_line(r"^\[rank 0\] step 10/", timeout=120)
        folder = JobFolder(traces_root, job.job_id)
        assert job_state(folder).outcome == "running"
        waiting = subprocess.Popen(
            [sys.executable, "-m", "jobs.commands.capture", str(folder.path), "--active", "500", "--wait"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not folder.capture_accepted(1).exists():  # taken, and 500 steps from being served
            assert time.monotonic() < deadline and waiting.poll() is None, waiting.communicate()
            time.sleep(0.5)
        flushed = -1
        while flushed < 0:  # the step logs' first flush (every 5 s): what the kill cannot take
            assert time.monotonic() < deadline + 30, "no step log flushed"
            logs = [read_step_log(path) for path in folder.step_logs()]
            flushed = min((log.last_step if len(log) else -1 for log in logs), default=-1)
            time.sleep(0.5)
        for pid in local_ranks(job.job_id):
            os.kill(pid, signal.SIGKILL)
        job.finish(timeout=60)
        out, err = waiting.communicate(timeout=30)  # --wait stops: the job ended first
    finally:
        job.finish(timeout=1)
    assert waiting.returncode == 1 and err.count("\n") == 1, out + err
    assert f"job {job.job_id} was killed" in err and err.endswith(", before capture 1 was served\n")
    deadline = time.monotonic() + 30  # submitit's controller sees its tasks gone, and ends
    while job_state(folder).running and time.monotonic() < deadline:
        time.sleep(0.5)
    assert folder.running.exists()  # nobody was left to remove it: it is not believed
    assert f"job {job.job_id} was killed: none of its processes is left" in refused(folder)
    listing = listed(folder)
    assert (listing["nodes"], listing["tasks_per_node"], listing["outcome"]) == (1, 2, "killed")
    # the step logs keep the run up to their last flush, and the report says where they end
    ends = build_report(folder.path, ReportSettings(jobs=1)).run.ends
    assert flushed <= ends.last_step < 1999 and ends.expected_last_step is None
    assert ends.note == (
        f"no manifest: the job did not end by itself (killed?); the logs end at step {ends.last_step}, "
        "their last flush"
    )


def local_ranks(job_id: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            f"SUBMITIT_LOCAL_JOB_ID={job_id}".encode() in environ
            and b"SUBMITIT_LOCAL_GLOBALID=0" in environ
            or (
                f"SUBMITIT_LOCAL_JOB_ID={job_id}".encode() in environ
                and b"SUBMITIT_LOCAL_GLOBALID=1" in environ
            )
        ):
            found.append(int(proc.name))
    assert len(found) == 2, found
    return found


@pytest.mark.full_cluster
@pytest.mark.bare_cluster
def test_a_slurm_job_cancelled_with_scancel(slurm_cluster, traces_root: Path) -> None:
    job = SubmittedJob(traces_root, "--nodes", "2", "--gpus", "0", "--tasks-per-node", "1",
                       "--steps", "2000", *SMALL_WORKLOAD)  # fmt: skip
    try:
        job.wait_for_line(r"^\[rank 0\] step 10/", timeout=180)
        folder = JobFolder(traces_root, job.job_id)
        assert listed(folder)["outcome"] == "running (in the queue)"
        subprocess.run(["scancel", job.job_id], check=True, timeout=30)
        job.finish(timeout=120)
    finally:
        job.finish(timeout=1)
    deadline = time.monotonic() + 60
    while job_state(folder).running and time.monotonic() < deadline:
        time.sleep(1)
    assert f"job {job.job_id} was cancelled at " in refused(folder)
    listing = listed(folder)
    assert (listing["nodes"], listing["tasks_per_node"], listing["outcome"]) == (2, 1, "cancelled")
    assert not task_processes(job.job_id)
