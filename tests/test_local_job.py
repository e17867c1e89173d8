"""End to end on this machine: submitit's local executor (real processes) and debug executor."""

from __future__ import annotations

from pathlib import Path

from profiling.folder.layout import JobFolder
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
    # a job is one folder: its logs are in it, and the traces root holds nothing else
    assert sorted(p.name for p in traces_root.iterdir()) == [job_id]
    logs = JobFolder(traces_root, job_id).logs
    assert {f"{job_id}_{task}_log.{kind}" for task in (0, 1) for kind in ("out", "err")} <= {
        p.name for p in logs.iterdir()
    }


def test_the_default_dtype_is_chosen_for_the_device_and_said(traces_root: Path) -> None:
    result = run_submit(
        "--cluster", "local", "--gpus", "0", "--traces-root", str(traces_root), "--wait",
        "--steps", "20", "--image-size", "32", "--threads-per-rank", "1", timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    job_id = submitted_job_id(result.stdout)
    (record,) = check_job_folder(traces_root / job_id, job_id=job_id, world_size=1, profiled={0})["ranks"]
    chosen, why = record["dtype"]["chosen"], record["dtype"]["why"]
    assert chosen in ("bf16", "fp32") and why.startswith("auto: ")
    assert f"gloo on cpu, {chosen} ({why})" in result.stdout  # rank 0's first line


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
