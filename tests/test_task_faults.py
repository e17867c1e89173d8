"""Faults on the task side, without a cluster: ``python -m jobs.task`` as srun would start it, in
made-up SLURM environments: a rendezvous that cannot happen is bounded, bad variables and a
traces root the nodes do not share stop every rank with one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.common import REPO, TINY_JOB, run_python


def fake_slurm_env(rank: int, port: int, **overrides: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "SUBMITIT_"))}
    env.update(
        SLURM_JOB_ID="999999",
        SLURM_PROCID=str(rank),
        SLURM_LOCALID=str(rank),
        SLURM_NTASKS="2",
        SLURM_NODEID="0",
        SLURM_JOB_NUM_NODES="1",
        SLURM_JOB_NODELIST="localhost",
        SLURM_TASKS_PER_NODE="2",
        MASTER_PORT=str(port),
    )
    env.update(overrides)
    return env


def run_task_process(
    env: dict[str, str], traces_root: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``python -m jobs.task`` as srun would start it, in the environment ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "jobs.task", "--traces-root", str(traces_root), *TINY_JOB, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unreachable_rendezvous_fails_within_the_timeout(traces_root: Path) -> None:
    port = free_port()  # nobody listens: rank 0 never comes
    started = time.monotonic()
    result = run_task_process(
        fake_slurm_env(1, port, MASTER_ADDR="127.0.0.1"), traces_root, "--dist-timeout", "5"
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert f"rank 1 could not join the job's rendezvous at 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    assert elapsed < 5 + 20, f"took {elapsed:.0f}s"


def test_unresolvable_master_addr(traces_root: Path) -> None:
    result = run_task_process(
        fake_slurm_env(1, free_port(), MASTER_ADDR="no-such-host.invalid"), traces_root, "--dist-timeout", "3"
    )
    assert result.returncode == 1
    assert "rendezvous at no-such-host.invalid:" in result.stderr


def test_master_port_taken(traces_root: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        result = run_task_process(fake_slurm_env(0, port), traces_root, "--dist-timeout", "5")
    assert result.returncode == 1
    assert f"rank 0 could not join the job's rendezvous at localhost:{port}" in result.stderr
    assert "EADDRINUSE" in result.stderr and "MASTER_PORT to pick another" in result.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"SLURM_PROCID": "2"}, "SLURM_PROCID=2 is not below SLURM_NTASKS=2"),
        ({"SLURM_NTASKS": "two"}, "SLURM_NTASKS='two' is not an integer"),
        ({"SLURM_JOB_NODELIST": "n[1-"}, "SLURM_JOB_NODELIST='n[1-'"),
        ({"SLURM_TASKS_PER_NODE": "3"}, "SLURM_TASKS_PER_NODE='3' describes 1 nodes and 3 tasks"),
    ],
)
def test_task_with_inconsistent_slurm_variables(overrides: dict, message: str, traces_root: Path) -> None:
    result = run_task_process(fake_slurm_env(0, free_port(), **overrides), traces_root, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m jobs.task: error: ") and message in lines[0], (
        result.stderr
    )


def test_a_traces_root_the_nodes_do_not_share_stops_every_rank_with_one_line(tmp_path: Path) -> None:
    # Two "nodes" whose ranks write to different folders, as /tmp on two machines would.
    port = free_port()
    two_nodes = {
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "nodeA,nodeB",
        "SLURM_TASKS_PER_NODE": "1(x2)",
    }
    roots = [tmp_path / "nodeA-tmp" / "traces", tmp_path / "nodeB-tmp" / "traces"]
    started = time.monotonic()
    ranks = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobs.task",
                "--traces-root",
                str(roots[rank]),
                *TINY_JOB,
                "--dist-timeout",
                "30",
            ],
            cwd=REPO,
            env=fake_slurm_env(
                rank, port, **two_nodes, SLURM_NODEID=str(rank), SLURM_LOCALID="0", MASTER_ADDR="127.0.0.1"
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [process.communicate(timeout=120) for process in ranks]
    assert time.monotonic() - started < 60  # at once, not after a timeout
    expected = (
        f"python -m jobs.task: error: --traces-root is not shared by every node: rank 0 on nodeA sees "
        f"{roots[0] / '999999'}, but not what was written there from nodeB (rank(s) 1, writing to "
        f"{roots[1] / '999999'}). HINT: use a folder on the shared filesystem, the same path on every "
        "node (--traces-root, or TRACES_ROOT)"
    )
    for process, (stdout, stderr) in zip(ranks, outputs, strict=True):
        assert process.returncode == 2, stdout + stderr
        assert stderr.strip().splitlines() == [expected]
    assert not list(roots[0].glob("999999/rank*.json"))  # stopped before training


def test_the_task_leaves_with_its_status_and_its_output_flushed() -> None:
    # without the interpreter's finalization (a DDP model's gloo threads outlive the group), yet
    # nothing printed or logged is lost
    program = (
        "import logging, sys; from jobs.task import leave; "
        "logging.basicConfig(stream=sys.stderr); print('said', end=''); "
        "logging.getLogger('x').warning('logged'); sys.stderr.write('written'); leave(3)"
    )
    result = run_python(program)
    assert result.returncode == 3
    assert result.stdout == "said" and "WARNING:x:logged" in result.stderr
    assert result.stderr.endswith("written")
