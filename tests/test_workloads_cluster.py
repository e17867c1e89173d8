"""Your own model and your own loop on the test cluster: ``--workload`` through submitit and
plain sbatch, a preempted workload resuming from its own state, and ``ProfiledRun`` under srun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiling.folder.layout import JobFolder
from tests.common import REPO, SMALL_WORKLOAD, load_manifest, run_submit, submitted_job_id
from tests.slurm_helpers import SubmittedJob, sbatch_script
from tests.test_workloads import OWN_LOOP, TINY, check_tiny_job


@pytest.mark.full_cluster
def test_a_workload_of_your_own_on_the_cluster_through_submitit_and_sbatch(
    slurm_cluster, traces_root: Path, tmp_path: Path
) -> None:
    result = run_submit(
        "--cluster", "slurm", "--nodes", "2", "--gpus", "2", "--workload", TINY,
        "--workload-arg", "hidden=48", "--steps", "20", *SMALL_WORKLOAD, "--profile-ranks", "0,3",
        "--traces-root", str(traces_root), "--wait", timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    check_tiny_job(traces_root / submitted_job_id(result.stdout), world_size=4)
    done, job_id = sbatch_script(
        ["--nodes=2", "--ntasks-per-node=2"],
        ["--workload", TINY, "--workload-arg", "hidden=48", "--steps", "20", *SMALL_WORKLOAD,
         "--profile-ranks", "1,2", "--traces-root", str(traces_root)],
        tmp_path / "slurm-%j.out", wait=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, (tmp_path / f"slurm-{job_id}.out").read_text()
    check_tiny_job(traces_root / job_id, world_size=4)


@pytest.mark.full_cluster
def test_a_preempted_workload_of_your_own_resumes_from_its_own_state(
    slurm_cluster, traces_root: Path
) -> None:
    job = SubmittedJob(
        traces_root, "--nodes", "2", "--gpus", "1", "--workload", TINY, "--workload-arg", "hidden=48",
        "--steps", "200", *SMALL_WORKLOAD, "--profile-ranks", "none",
        # the tiny MLP alone runs 300 steps before submit.py has shown step 30 and scancel is sent
        "--inject-slowdown", "0:40", "--inject-slowdown", "1:40",
    )  # fmt: skip
    out, saved = job.preempt(after=r"^\[rank 0\] step 30/", timeout=240)
    folder = JobFolder(traces_root, job.job_id)
    assert all(folder.checkpoint_state(rank).exists() for rank in (0, 1))  # each rank its own
    assert not folder.checkpoint_state().exists()
    assert f"restart 1 resuming at step {saved}" in out
    assert f"rank 0 resumed its own state: {saved} steps run" in out
    first, second = load_manifest(folder.path)["attempts"]
    assert (first["outcome"], second["outcome"], second["resumed_from_step"]) == (
        "preempted",
        "completed",
        saved,
    )


@pytest.mark.flaky(reruns=1)  # gloo's threads racing the interpreter's exit (pytorch#179291): CI saw SIGABRT
@pytest.mark.full_cluster
def test_the_api_under_srun(slurm_cluster, tmp_path: Path) -> None:
    result = subprocess.run(
        ["srun", "--nodes=2", "--ntasks-per-node=1", f"--chdir={tmp_path}", sys.executable, str(OWN_LOOP),
         str(tmp_path / "traces")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": str(_free_port())},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    [folder] = (tmp_path / "traces").iterdir()
    manifest = load_manifest(folder)
    assert (manifest["launcher"], manifest["world_size"], manifest["nodes"]) == ("slurm", 2, 2)
    assert folder.name == manifest["job_id"] and folder.name.isdigit()  # SLURM's job id
    assert sorted(p.name for p in folder.glob("rank*.json")) == ["rank0_iter3_5.json", "rank1_iter3_5.json"]


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
