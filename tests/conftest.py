"""Fixtures: a traces root per test, and the local SLURM cluster (helpers are in :mod:`tests.common`)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.common import SMALL_JOB, run_submit, submitted_job_id


@pytest.fixture
def traces_root(tmp_path: Path) -> Path:
    return tmp_path / "traces"


REQUIRE_SLURM_ENV = "REQUIRE_SLURM"  # set to 1 in CI: a missing cluster fails instead of skipping


CLUSTER_SH = Path(__file__).resolve().parents[1] / "slurm" / "cluster.sh"
FLAVOURS_TABLE = CLUSTER_SH.with_name("flavours.tsv")


@dataclasses.dataclass(frozen=True)
class Flavour:
    """A row of slurm/flavours.tsv: how the local test cluster is configured, and its marker."""

    name: str
    nodes: int
    cpus: int
    gpus: bool
    accounting: bool
    marker: str
    about: str

    @property
    def start(self) -> str:
        return f"slurm/cluster.sh start {self.name}"


def read_flavours() -> dict[str, Flavour]:
    rows = (line.split("\t") for line in FLAVOURS_TABLE.read_text().splitlines())
    return {
        name: Flavour(name, int(nodes), int(cpus), gpus == "yes", accounting == "yes", marker, about)
        for name, nodes, cpus, gpus, accounting, marker, about in (
            row for row in rows if row[0] and not row[0].startswith("#")
        )
    }


FLAVOURS = read_flavours()


# a build of profiling/analysis/reading/_scan.c of one's own (CI: under AddressSanitizer and UBSan), used
# by every test in place of the installed scanner (tests/sanitize_scanner.sh)
SCANNER_BUILD_ENV = "SCANNER_BUILD"


def pytest_configure(config: pytest.Config) -> None:
    if build := os.environ.get(SCANNER_BUILD_ENV):
        _use_scanner_build(Path(build))
    config.addinivalue_line("markers", "gpu: needs CUDA (skipped without it): tests/gpu_checks.sh runs them")
    for flavour in FLAVOURS.values():
        config.addinivalue_line(
            "markers",
            f"{flavour.marker}: runs on the {flavour.name} test cluster ({flavour.about}): `{flavour.start}`",
        )


def _use_scanner_build(path: Path) -> None:
    import importlib.util

    from profiling.analysis.reading import trace_scan

    spec = importlib.util.spec_from_file_location("profiling.analysis.reading._scan", path)
    assert spec is not None and spec.loader is not None, f"{SCANNER_BUILD_ENV}={path}: not a module"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    trace_scan._scan, trace_scan.AVAILABLE = module, True


def running_flavour() -> Flavour | None:
    """The flavour of the local SLURM cluster that is up (cluster.sh's own record), None if none
    is, or its nodes do not answer."""
    if not shutil.which("sinfo"):
        return None
    name = _run(["bash", str(CLUSTER_SH), "flavour"])
    flavour = FLAVOURS.get(name.stdout.strip()) if name is not None and name.returncode == 0 else None
    out = _run(["sinfo", "-h", "-N", "-o", "%N %t"])
    if flavour is None or out is None or out.returncode:
        return None
    usable = sum(
        line.split()[-1].rstrip("*") in {"idle", "mix", "alloc", "comp"} for line in out.stdout.splitlines()
    )
    return flavour if usable >= flavour.nodes else None


def _run(command: list[str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None


@pytest.fixture
def slurm_cluster(request: pytest.FixtureRequest) -> Flavour:
    """The local SLURM cluster, if it is of a flavour the test is marked for (skipped otherwise,
    or failed where ``REQUIRE_SLURM=1`` and none is up)."""
    wanted = [f for f in FLAVOURS.values() if request.node.get_closest_marker(f.marker)]
    assert wanted, (
        f"mark the test with the flavours it runs on: {', '.join(f.marker for f in FLAVOURS.values())}"
    )
    running = running_flavour()
    if running is None:
        reason = f"no local SLURM test cluster is up: run `{wanted[0].start}` as root"
        if os.environ.get(REQUIRE_SLURM_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_SLURM_ENV}=1)")
        pytest.skip(reason)
    if running not in wanted:
        pytest.skip(
            f"needs the {' or '.join(f.name for f in wanted)} cluster, {running.name} is up: "
            f"`{wanted[0].start}`"
        )
    return running


@pytest.fixture(scope="session")
def real_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-rank local job, every rank profiled, gzipped traces, with its report (the
    tests of the report and of its page read it; none writes into it)."""
    root = tmp_path_factory.mktemp("traces")
    result = run_submit(
        "--cluster", "local", "--gpus", "2", "--profile-ranks", "all", "--gzip-traces",
        "--traces-root", str(root), "--wait", *SMALL_JOB, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "report in " in result.stdout
    return root / submitted_job_id(result.stdout)
