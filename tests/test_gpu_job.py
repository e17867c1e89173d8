"""The GPU path end to end, on a machine with CUDA (skipped without it; tests/gpu_checks.sh
runs every test marked ``gpu``): a 1-rank NCCL job on cuda:0, its trace and its report."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from profiling.folder.layout import meta_of
from profiling.schema import model
from tests.common import SMALL_JOB, run_submit, submitted_job_id

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_a_one_rank_nccl_job_on_cuda_has_kernels_gpu_sections_and_mfu(tmp_path: Path) -> None:
    result = run_submit(
        "--cluster", "local", "--gpus", "1", "--traces-root", str(tmp_path), "--wait", *SMALL_JOB, timeout=300
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nccl on cuda" in result.stdout
    report = model.checked((meta_of(tmp_path / submitted_job_id(result.stdout)) / "report.json").read_bytes())
    [rank] = report.ranks
    assert rank.device == "gpu" and rank.gpu is not None and rank.gpu.busy_ms > 0
    assert rank.kernels is not None and rank.kernels.top
    assert rank.flops is not None and rank.flops.device_name == torch.cuda.get_device_name(0)
    assert rank.flops.mfu is not None and 0 < rank.flops.mfu < 1, rank.flops.mfu_missing
    # the step log's memory is the CUDA allocator's peak in each step: ResNet18 holds some
    assert report.run is not None and report.run.memory == "cuda"
    assert report.run.ranks[0].memory_max_mib is not None and report.run.ranks[0].memory_max_mib > 10
