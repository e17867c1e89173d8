"""Clusters configured unlike ours: CPU partitions (no GPU gres) and no accounting (no sacct).

CI runs these on the ``bare`` flavour of the test cluster (``pytest -m bare_cluster``); the CPU-job
tests run on the full cluster as well.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiling.folder.layout import JobFolder
from tests.common import REPO, SMALL_JOB, SMALL_WORKLOAD, check_job_folder, run_submit, submitted_job_id
from tests.slurm_helpers import SubmittedJob, sbatch_script, wait_until_no_tasks


@pytest.mark.full_cluster
@pytest.mark.bare_cluster
def test_cpu_job_two_nodes_two_tasks_each(slurm_cluster, traces_root: Path) -> None:
    result = run_submit(
        "--cluster", "slurm", "--nodes", "2", "--gpus", "0", "--tasks-per-node", "2",
        "--profile-ranks", "0,3", "--wait", "--traces-root", str(traces_root), *SMALL_JOB, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(slurm: 2 node(s) x 2 task(s), no GPU)" in result.stdout
    job_id = submitted_job_id(result.stdout)
    manifest = check_job_folder(traces_root / job_id, job_id=job_id, world_size=4, profiled={0, 3})
    assert [(r["rank"], r["local_rank"], r["node"]) for r in manifest["ranks"]] == [
        (0, 0, "node1"), (1, 1, "node1"), (2, 0, "node2"), (3, 1, "node2"),
    ]  # fmt: skip
    assert {r["device"] for r in manifest["ranks"]} == {"cpu"} and manifest["backend"] == "gloo"
    script = (JobFolder(traces_root, job_id).logs / f"{job_id}_submission.sh").read_text()
    assert "#SBATCH --ntasks-per-node=2" in script and "gpu" not in script


@pytest.mark.full_cluster
@pytest.mark.bare_cluster
def test_plain_sbatch_without_a_gpu_line(slurm_cluster, traces_root: Path, tmp_path: Path) -> None:
    result, job_id = sbatch_script(
        ["--nodes=2", "--ntasks-per-node=2"],
        ["--profile-ranks", "all", "--traces-root", str(traces_root), *SMALL_JOB],
        tmp_path / "slurm-%j.out",
        wait=True,
        timeout=300,
    )
    assert result.returncode == 0, (tmp_path / f"slurm-{job_id}.out").read_text()
    manifest = check_job_folder(traces_root / job_id, job_id=job_id, world_size=4, profiled={0, 1, 2, 3})
    assert {r["device"] for r in manifest["ranks"]} == {"cpu"}


@pytest.mark.bare_cluster
def test_gpus_asked_of_a_cpu_partition_is_one_line(slurm_cluster, traces_root: Path) -> None:
    result = run_submit("--cluster", "slurm", "--gpus", "1", "--traces-root", str(traces_root), *SMALL_JOB)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("submit.py: error: submission failed: ") and "Invalid generic resource" in line


@pytest.mark.bare_cluster
def test_wait_without_accounting_on_a_completed_job(slurm_cluster, traces_root: Path) -> None:
    result = run_submit(
        "--cluster", "slurm", "--nodes", "2", "--gpus", "0", "--tasks-per-node", "1", "--wait",
        "--traces-root", str(traces_root), *SMALL_JOB, timeout=300,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert re.search(r"^job \d+ done; traces in ", result.stdout, re.MULTILINE)
    assert "Bypassing sacct" not in out  # submitit's warning, twice every 15 s before
    assert out.count("accounting is unavailable") <= 1


@pytest.mark.bare_cluster
def test_wait_without_accounting_names_the_killed_rank(slurm_cluster, traces_root: Path) -> None:
    job = SubmittedJob(
        traces_root, "--nodes", "2", "--gpus", "0", "--tasks-per-node", "2", "--steps", "2000",
        *SMALL_WORKLOAD, "--dist-timeout", "60",
    )  # fmt: skip
    try:
        job.wait_for_line(r"^\[rank 0\] step 10/", timeout=180)  # the folder exists from the start
        listing = subprocess.run(
            [sys.executable, "-m", "jobs.commands.list", str(traces_root)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        (line,) = [line for line in listing.stdout.splitlines() if line.startswith(f"{job.job_id} ")]
        assert "running (in the queue)" in line  # from squeue: no manifest yet
        assert " 2 x 2 " in line and " slurm " in line  # from meta/running.json
        status, ended_in = job.kill_rank(2, timeout=120)
    finally:
        job.finish(timeout=1)
    out = job.output()
    assert status == 1, out
    assert ended_in < 60, f"--wait took {ended_in:.0f}s to end after rank 2 was killed:\n{out}"
    assert "rank 2 failed first" in out and "task 2 left no result" in out
    assert re.search(r"srun: error: node2: task 2: Killed", out)
    assert "Bypassing sacct" not in out and out.count("accounting is unavailable") <= 1
    wait_until_no_tasks(job.job_id, timeout=30)
    assert JobFolder(traces_root, job.job_id).path.is_dir()
