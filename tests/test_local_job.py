"""End to end on this machine: submitit's local executor (real processes) and debug executor."""

from __future__ import annotations

from pathlib import Path

from tests.common import SMALL_JOB, check_job_folder, run_submit, submitted_job_id


def test_two_process_local_job_profiles_only_selected_rank(traces_root: Path) -> None:
    result = run_submit(
        "--cluster",
        "local",
        "--gpus",
        "2",
        "--profile-ranks",
        "1",
        "--traces-root",
        str(traces_root),
        "--wait",
        *SMALL_JOB,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    job_id = submitted_job_id(result.stdout)
    job_dir = traces_root / job_id
    assert f"traces will be written to {job_dir}" in result.stdout
    assert "[rank 0] step 20/20" in result.stdout  # --wait follows rank 0's progress
    manifest = check_job_folder(job_dir, job_id=job_id, world_size=2, profiled={1})
    assert manifest["trace_files"] == ["rank1_iter15_17.json"]
    assert manifest["launcher"] == "submitit-local"
    assert [(r["rank"], r["local_rank"], r["profiled"]) for r in manifest["ranks"]] == [
        (0, 0, False),
        (1, 1, True),
    ]
    assert {r["device"] for r in manifest["ranks"]} == {"cpu"}
    assert manifest["backend"] == "gloo"


def test_all_ranks_repeated_windows_gzipped(traces_root: Path) -> None:
    result = run_submit(
        "--cluster",
        "local",
        "--gpus",
        "2",
        "--profile-ranks",
        "all",
        "--traces-root",
        str(traces_root),
        "--schedule-wait",
        "2",
        "--warmup",
        "1",
        "--active",
        "2",
        "--repeat",
        "0",
        "--gzip-traces",
        "--wait",
        *SMALL_JOB,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    job_id = submitted_job_id(result.stdout)
    manifest = check_job_folder(traces_root / job_id, job_id=job_id, world_size=2, profiled={0, 1})
    # cycles of 5 steps in 20: windows 3-4, 8-9, 13-14, 18-19
    assert sorted(manifest["trace_files"]) == sorted(
        f"rank{r}_iter{a}_{b}.json.gz" for r in (0, 1) for a, b in ((3, 4), (8, 9), (13, 14), (18, 19))
    )


def test_debug_executor_runs_in_process(traces_root: Path) -> None:
    result = run_submit("--cluster", "debug", "--traces-root", str(traces_root), *SMALL_JOB, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    job_id = submitted_job_id(result.stdout)
    assert job_id.startswith("DEBUG_")
    manifest = check_job_folder(traces_root / job_id, job_id=job_id, world_size=1, profiled={0})
    assert manifest["launcher"] == "single"
    assert manifest["trace_files"] == ["rank0_iter15_17.json"]


def test_failed_local_job_exits_non_zero_with_error_tail(traces_root: Path) -> None:
    # An environment that every rank rejects makes the failure deterministic.
    result = run_submit(
        "--cluster",
        "local",
        "--gpus",
        "2",
        "--traces-root",
        str(traces_root),
        "--wait",
        *SMALL_JOB,
        timeout=240,
        env={"MASTER_PORT": "notaport"},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED on rank(s) 0, 1" in result.stdout
    assert "MASTER_PORT='notaport' is not an integer" in result.stdout
