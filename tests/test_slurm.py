"""On the real local SLURM cluster (slurm/cluster.sh): submit.py, plain sbatch, failures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiling.job_folder import logs_folder
from tests.common import REPO, SMALL_JOB, check_job_folder, run_submit, sacct_state, submitted_job_id

pytestmark = pytest.mark.slurm


def check_slurm_identities(manifest: dict, nodes: int, tasks_per_node: int) -> None:
    """Every rank's identity is exactly what SLURM assigned: block distribution over node1..N."""
    assert manifest["launcher"] == "slurm"
    assert manifest["nodes"] == nodes
    assert manifest["hostnames"] == [f"node{n + 1}" for n in range(nodes)]
    assert manifest["master"].startswith("node1:")
    assert [(r["rank"], r["local_rank"], r["node_rank"], r["node"]) for r in manifest["ranks"]] == [
        (rank, rank % tasks_per_node, rank // tasks_per_node, f"node{rank // tasks_per_node + 1}")
        for rank in range(nodes * tasks_per_node)
    ]


def test_submit_py_two_nodes(slurm_cluster: int, traces_root: Path, tmp_path: Path) -> None:
    # A job name that would inject a command if any layer failed to quote it.
    canary = tmp_path / "injected"
    name = f"prof; touch {canary} \"q\" 'r'"
    result = run_submit(
        "--cluster",
        "slurm",
        "--nodes",
        "2",
        "--gpus",
        "2",
        "--profile-ranks",
        "0,3",
        "--wait",
        "--traces-root",
        str(traces_root),
        "--job-name",
        name,
        *SMALL_JOB,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    job_id = submitted_job_id(result.stdout)
    assert "[rank 0] step 20/20" in result.stdout
    manifest = check_job_folder(traces_root / job_id, job_id=job_id, world_size=4, profiled={0, 3})
    check_slurm_identities(manifest, nodes=2, tasks_per_node=2)
    assert sorted(manifest["trace_files"]) == ["rank0_iter15_17.json", "rank3_iter15_17.json"]
    assert sacct_state(job_id) == "COMPLETED"
    job_name = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobName"], capture_output=True, text=True, timeout=30
    ).stdout.strip()
    assert job_name == name.replace('"', "`")  # slurmdbd stores double quotes as backticks
    assert not canary.exists()


def test_plain_sbatch_batch_script(slurm_cluster: int, traces_root: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            "sbatch",
            "--wait",
            "--nodes=2",
            "--ntasks-per-node=2",
            "--gpus-per-node=2",
            f"--output={tmp_path}/slurm-%j.out",
            "slurm/profile_resnet18.sbatch",
            "--profile-ranks",
            "0,3",
            "--traces-root",
            str(traces_root),
            *SMALL_JOB,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHON": sys.executable},
    )
    job_id = re.search(r"Submitted batch job (\d+)", result.stdout).group(1)
    log = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert result.returncode == 0, log
    manifest = check_job_folder(traces_root / job_id, job_id=job_id, world_size=4, profiled={0, 3})
    check_slurm_identities(manifest, nodes=2, tasks_per_node=2)
    assert "step 20/20" in log
    assert not logs_folder(traces_root).exists()  # no submitit anywhere in the loop


def test_plain_sbatch_bad_options_fail_the_job_with_one_line(slurm_cluster: int, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            "sbatch",
            "--wait",
            "--nodes=1",
            "--ntasks-per-node=2",
            "--gpus-per-node=2",
            f"--output={tmp_path}/slurm-%j.out",
            "slurm/profile_resnet18.sbatch",
            "--profile-ranks",
            "5",
            "--traces-root",
            str(tmp_path),
            *SMALL_JOB,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable},
    )
    job_id = re.search(r"Submitted batch job (\d+)", result.stdout).group(1)
    log = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert result.returncode != 0
    assert "jobs.task: error: --profile-ranks '5' selects rank 5, but the job has 2 ranks" in log
    assert "Traceback" not in log


def test_failed_rank_fails_the_job_visibly(slurm_cluster: int, traces_root: Path) -> None:
    started = time.monotonic()
    result = run_submit(
        "--cluster",
        "slurm",
        "--nodes",
        "2",
        "--gpus",
        "2",
        "--inject-failure",
        "1:3",
        "--wait",
        "--traces-root",
        str(traces_root),
        *SMALL_JOB,
        timeout=300,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    job_id = submitted_job_id(result.stdout)
    assert "rank 1 failed first" in result.stdout
    assert "InjectedFailure: rank 1 failed at step 3 (--inject-failure)" in result.stdout
    assert sacct_state(job_id) == "FAILED"
    assert elapsed < 120, f"the failed job took {elapsed:.0f}s to be reported"
