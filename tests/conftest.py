"""Fixtures: a traces root per test, and the local SLURM cluster (helpers are in :mod:`tests.common`)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def traces_root(tmp_path: Path) -> Path:
    return tmp_path / "traces"


REQUIRE_SLURM_ENV = "REQUIRE_SLURM"  # set to 1 in CI: a missing cluster fails instead of skipping


def slurm_cluster_nodes() -> int:
    """Idle-or-usable nodes of the local SLURM cluster; 0 if none answers."""
    if not shutil.which("sinfo"):
        return 0
    out = _run(["sinfo", "-h", "-N", "-o", "%N %t"])
    if out is None or out.returncode:
        return 0
    return sum(
        1
        for line in out.stdout.splitlines()
        if line.split()[-1].rstrip("*") in {"idle", "mix", "alloc", "comp"}
    )


@dataclasses.dataclass(frozen=True)
class Flavour:
    """How the running cluster is configured (slurm/cluster.sh start [--no-gpus] [--no-accounting])."""

    nodes: int
    gpus: bool
    accounting: bool

    def __str__(self) -> str:
        gpus = "GPUs" if self.gpus else "no GPUs"
        return f"{self.nodes} nodes, {gpus}, {'accounting' if self.accounting else 'no accounting'}"


def cluster_flavour() -> Flavour | None:
    nodes = slurm_cluster_nodes()
    if nodes < 2:
        return None
    config, gres = _run(["scontrol", "show", "config"]), _run(["sinfo", "-h", "-o", "%G"])
    accounting = config is not None and "accounting_storage/none" not in config.stdout
    gpus = gres is not None and "gpu" in gres.stdout
    return Flavour(nodes, gpus, accounting)


def _run(command: list[str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _cluster(gpus: bool | None, accounting: bool | None, start: str) -> Flavour:
    flavour = cluster_flavour()
    if flavour is None:
        reason = f"no local SLURM cluster with 2+ nodes is up: run `{start}` as root"
        if os.environ.get(REQUIRE_SLURM_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_SLURM_ENV}=1)")
        pytest.skip(reason)
    if (gpus is not None and flavour.gpus != gpus) or (
        accounting is not None and flavour.accounting != accounting
    ):
        pytest.skip(f"needs another cluster than the one up ({flavour}): `{start}`")
    return flavour


@pytest.fixture
def slurm_cluster() -> int:
    """The number of nodes of the local SLURM cluster with GPUs and accounting."""
    return _cluster(gpus=True, accounting=True, start="slurm/cluster.sh start 4 8").nodes


@pytest.fixture
def bare_slurm_cluster() -> int:
    """The local SLURM cluster without GPUs or accounting: a CPU partition, no sacct."""
    return _cluster(
        gpus=False, accounting=False, start="slurm/cluster.sh start 2 4 --no-gpus --no-accounting"
    ).nodes


@pytest.fixture
def any_slurm_cluster() -> Flavour:
    """The local SLURM cluster, whichever flavour is up (for what must work on all)."""
    return _cluster(gpus=None, accounting=None, start="slurm/cluster.sh start 2 4")
