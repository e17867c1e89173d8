"""Fixtures: a traces root per test, and the local SLURM cluster (helpers are in :mod:`tests.common`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def traces_root(tmp_path: Path) -> Path:
    return tmp_path / "traces"


REQUIRE_SLURM_ENV = "REQUIRE_SLURM"  # set to 1 in CI: a missing cluster fails instead of skipping


def slurm_cluster_nodes() -> int:
    """Idle-or-usable nodes of the local SLURM cluster; 0 if none answers."""
    import shutil

    if not shutil.which("sinfo"):
        return 0
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode:
        return 0
    return sum(
        1 for line in out.stdout.splitlines() if line.split()[-1].rstrip("*") in {"idle", "mix", "alloc"}
    )


@pytest.fixture
def slurm_cluster() -> int:
    """The number of nodes of the local SLURM cluster (``slurm/cluster.sh start``)."""
    nodes = slurm_cluster_nodes()
    if nodes < 2:
        reason = "no local SLURM cluster with 2+ nodes is up: run `slurm/cluster.sh start` as root"
        if os.environ.get(REQUIRE_SLURM_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_SLURM_ENV}=1)")
        pytest.skip(reason)
    return nodes
