"""Faults on the real SLURM cluster: a killed rank, preemption with resume, a soak (the task
side's faults, without a cluster: tests/test_task_faults.py)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from profiling.folder.layout import JobFolder
from tests.common import (
    SMALL_WORKLOAD,
    TINY_JOB,
    check_job_folder,
    load_manifest,
    profiler_steps,
    run_submit,
    sacct_state,
    submitted_job_id,
)
from tests.slurm_helpers import SubmittedJob, sbatch_script, wait_until_no_tasks


@pytest.mark.full_cluster
def test_sigkilled_rank_ends_the_job_quickly(slurm_cluster, traces_root: Path) -> None:
    job = SubmittedJob(
        traces_root,
        "--nodes",
        "2",
        "--gpus",
        "2",
        "--steps",
        "2000",
        *SMALL_WORKLOAD,
        "--profile-ranks",
        "all",
        "--schedule-wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "2",
        "--repeat",
        "2",
        "--dist-timeout",
        "60",
    )
    try:
        job.wait_for_line(r"^\[rank 0\] step 20/", timeout=120)  # both windows (2-3, 6-7) are written
        status, ended_in = job.kill_rank(2, timeout=120)
    finally:
        job.finish(timeout=1)
    out = job.output()
    assert status == 1, out
    assert ended_in < 60, f"the job took {ended_in:.0f}s to end after rank 2 was killed"
    assert "rank 2 failed first" in out
    assert re.search(r"srun: error: node2: task 2: Killed", out)
    assert sacct_state(job.job_id) == "FAILED"
    wait_until_no_tasks(job.job_id, timeout=30)
    # the traces written before the kill are complete, and listed by the failed attempt
    job_dir = traces_root / job.job_id
    expected = {f"rank{r}_iter{a}_{b}.json" for r in range(4) for a, b in ((2, 3), (6, 7))}
    assert {p.name for p in job_dir.glob("rank*.json")} == expected
    for path in job_dir.glob("rank*.json"):
        first, last = map(int, re.findall(r"\d+", path.name)[1:])
        assert profiler_steps(json.loads(path.read_text())) == list(range(first, last + 1))
    assert not list(job_dir.glob(".*.tmp"))
    (attempt,) = load_manifest(job_dir)["attempts"]
    assert attempt["outcome"] == "failed" and set(attempt["trace_files"]) == expected


PREEMPTED_STEPS = 60  # 4 ranks on 2 cores: each attempt's steps cost CI time


@pytest.mark.full_cluster
def test_preempted_job_is_requeued_and_resumes(slurm_cluster, traces_root: Path) -> None:
    job = SubmittedJob(
        traces_root,
        "--nodes",
        "2",
        "--gpus",
        "2",
        "--steps",
        str(PREEMPTED_STEPS),
        *SMALL_WORKLOAD,
        "--profile-ranks",
        "0,3",
        "--schedule-wait",
        "2",
        "--warmup",
        "1",
        "--active",
        "2",
        "--repeat",
        "0",
    )
    out, saved = job.preempt(after=r"^\[rank 0\] step 20/", timeout=240)
    assert 20 <= saved < PREEMPTED_STEPS
    assert f"restart 1 resuming at step {saved}" in out
    assert sacct_state(job.job_id) == "COMPLETED"

    folder = JobFolder(traces_root, job.job_id)
    assert stopped_at(folder) == [saved] * 4  # every rank, the same step
    job_dir, resumed_dir = folder.path, folder.attempt(1)
    manifest = load_manifest(job_dir)
    first, second = manifest["attempts"]
    assert (first["outcome"], first["resumed_from_step"], first["next_step"]) == ("preempted", 0, saved)
    assert (second["outcome"], second["resumed_from_step"], second["next_step"]) == (
        "completed",
        saved,
        PREEMPTED_STEPS,
    )
    assert second["folder"] == folder.attempt_name(1) and manifest["restart_count"] == 1
    # Each attempt's folder holds complete windows only, one file per rank and window, with
    # global step numbers: the first attempt's before the preemption, the second's after it.
    windows = [(a, a + 1) for a in range(3, PREEMPTED_STEPS, 5)]
    before = {w for w in windows if w[1] < saved}
    after = {w for w in windows if w[0] >= saved}
    for trace_dir, expected in ((job_dir, before), (resumed_dir, after)):
        names = {p.name for p in trace_dir.glob("rank*.json")}
        assert names == {f"rank{r}_iter{a}_{b}.json" for r in (0, 3) for a, b in expected}
        for path in trace_dir.glob("rank*.json"):
            trace = json.loads(path.read_text())
            a, b = map(int, re.findall(r"\d+", path.name)[1:])
            assert profiler_steps(trace) == [a, b]
            assert trace["distributedInfo"]["world_size"] == 4
    assert sorted(manifest["trace_files"]) == sorted(
        [p.name for p in job_dir.glob("rank*.json")]
        + [str(p.relative_to(job_dir)) for p in resumed_dir.glob("rank*.json")]
    )
    assert all(r["step_time"]["steps"] == PREEMPTED_STEPS - saved for r in manifest["ranks"])


SOAK_JOBS = 3  # each on the nodes the one before just left: its ports, its leftovers (20 took 8 min of CI)


@pytest.mark.full_cluster
def test_soak_jobs_back_to_back(slurm_cluster, traces_root: Path) -> None:
    """Small jobs, one after the other (sbatch dependency=singleton): 0 hangs, 0 failures."""
    job_ids = []
    for _ in range(SOAK_JOBS):
        result = run_submit(
            "--cluster",
            "slurm",
            "--nodes",
            "2",
            "--gpus",
            "1",
            "--profile-ranks",
            "all",
            "--traces-root",
            str(traces_root),
            "--job-name",
            f"soak-{traces_root.parent.name}",
            "--sbatch",
            "dependency=singleton",
            "--time",
            "5",
            *TINY_JOB,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        job_ids.append(submitted_job_id(result.stdout))
    deadline = time.monotonic() + 900
    states = {}
    for job_id in job_ids:
        states[job_id] = sacct_state(job_id, timeout=max(1, deadline - time.monotonic()))
    assert set(states.values()) == {"COMPLETED"}, states
    for job_id in job_ids:
        check_job_folder(traces_root / job_id, job_id=job_id, world_size=2, profiled={0, 1})


@pytest.mark.full_cluster
def test_plain_sbatch_job_is_requeued_and_resumes(slurm_cluster, traces_root: Path, tmp_path: Path) -> None:
    _, job_id = sbatch_script(
        ["--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=1"],
        ["--steps", "100", *SMALL_WORKLOAD, "--profile-ranks", "all", "--traces-root", str(traces_root)],
        tmp_path / "job.out",
        wait=False,
        timeout=60,
    )
    log = JobFolder(traces_root, job_id).logs / f"{job_id}_0_log.out"  # rank 0's output
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and "step 30/" in log.read_text()):
            assert time.monotonic() < deadline, log.read_text() if log.exists() else "no output"
            time.sleep(0.5)
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)
        assert sacct_state(job_id, timeout=240) == "COMPLETED", log.read_text()
    finally:
        subprocess.run(["scancel", job_id], timeout=30)
    out = log.read_text()
    saved = int(re.search(r"preempted: saved the state of step (\d+)", out).group(1))
    assert f"restart 1 resuming at step {saved}" in out
    assert stopped_at(JobFolder(traces_root, job_id)) == [saved] * 2
    attempts = load_manifest(traces_root / job_id)["attempts"]
    assert [(a["outcome"], a["next_step"]) for a in attempts] == [("preempted", saved), ("completed", 100)]
    # the tutorial's window (15-17) was recorded by the first attempt, and only there
    assert sorted(p.name for p in (traces_root / job_id).glob("rank*.json")) == [
        "rank0_iter15_17.json",
        "rank1_iter15_17.json",
    ]
    assert not list(JobFolder(traces_root, job_id).attempt(1).glob("rank*.json"))


def stopped_at(folder: JobFolder) -> list[int]:
    """The step at which each rank stopped for the preemption, from the ranks' logs, in rank order."""
    steps = {}
    for log in folder.logs.glob("*_log.out"):
        found = re.search(
            r"^preempted: (?:rank \d+ )?saved (?:the|its) state of step (\d+)", log.read_text(), re.M
        )
        if found:
            steps[int(log.name.split("_")[1])] = int(found.group(1))
    return [steps[rank] for rank in sorted(steps)]
