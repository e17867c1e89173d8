"""Running and watching jobs on the local SLURM cluster, for the SLURM tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.common import REPO, submitted_job_id

BATCH_SCRIPT = "slurm/profile_resnet18.sbatch"


def sbatch_script(
    resources: list[str], task_options: list[str], output: Path, *, wait: bool, timeout: float
) -> tuple[subprocess.CompletedProcess, str]:
    """``sbatch [--wait] RESOURCES --output=OUTPUT slurm/profile_resnet18.sbatch TASK_OPTIONS``
    from the repository, the tasks run by this Python: (sbatch's result, the job's id)."""
    result = subprocess.run(
        [
            "sbatch",
            *(["--wait"] if wait else []),
            *resources,
            f"--output={output}",
            BATCH_SCRIPT,
            *task_options,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHON": sys.executable},
    )
    found = re.search(r"Submitted batch job (\d+)", result.stdout)
    assert found, result.stdout + result.stderr
    return result, found.group(1)


class SubmittedJob:
    """``submit.py --wait`` running in the background, followed through rank 0's output."""

    def __init__(self, traces_root: Path, *args: str, cluster: str = "slurm") -> None:
        self.cluster = cluster
        self.log = traces_root.parent / "submit.log"
        self._out = open(self.log, "w")  # noqa: SIM115 - closed by finish()
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "submit.py"),
                "--cluster",
                cluster,
                "--wait",
                "--traces-root",
                str(traces_root),
                *args,
            ],
            cwd=REPO,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def output(self) -> str:
        return self.log.read_text()

    def wait_for_line(self, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.output(), re.MULTILINE):
            assert self.process.poll() is None, f"submit.py ended early:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {pattern!r} within {timeout}s:\n{self.output()}"
            time.sleep(0.5)

    @property
    def job_id(self) -> str:
        return submitted_job_id(self.output())

    def kill_rank(self, rank: int, timeout: float) -> tuple[int, float]:
        """SIGKILL one task of the job; submit.py's exit status and how long it took to end."""
        killed_at = time.monotonic()
        os.kill(task_processes(self.job_id)[rank], 9)
        status = self.finish(timeout=timeout)
        return status, time.monotonic() - killed_at

    def preempt(self, after: str, timeout: float) -> tuple[str, int]:
        """Once rank 0 printed ``after``, preempt the job as SLURM does (USR2 to every task) and
        wait for it to be requeued and end well: submit.py's output, and the step it saved."""
        try:
            self.wait_for_line(after, timeout=120)
            subprocess.run(["scancel", "--signal=USR2", self.job_id], check=True, timeout=30)
            status = self.finish(timeout=timeout)
        finally:
            self.finish(timeout=1)
        out = self.output()
        saved = re.search(r"preempted: saved the state of step (\d+)", out)
        assert status == 0 and saved, out
        return out, int(saved.group(1))

    def finish(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                if self.cluster == "slurm":
                    subprocess.run(["scancel", self.job_id], timeout=30)
            self._out.close()


def task_processes(job_id: str) -> dict[int, int]:
    """rank -> pid of the job's task processes on this machine (all nodes are on it)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = dict(
                item.split("=", 1)
                for item in (proc / "environ").read_bytes().decode(errors="replace").split("\0")
                if "=" in item
            )
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if (
            environ.get("SLURM_JOB_ID") == job_id
            and b"submitit.core._submit" in cmdline
            and "SLURM_PROCID" in environ
        ):
            found[int(environ["SLURM_PROCID"])] = int(proc.name)
    return found


def wait_until_no_tasks(job_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while task_processes(job_id):
        assert time.monotonic() < deadline, f"tasks of job {job_id} still running: {task_processes(job_id)}"
        time.sleep(0.5)
