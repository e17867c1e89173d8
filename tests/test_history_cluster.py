"""The history across real jobs of the test cluster: five balanced runs of one config, then three
with node2 slowed (both its ranks): each slowed run is flagged against the last five of its
config, the balanced ones are not, node2 is named slow in 3 jobs and given its ``--exclude``; a
job of a second config is not mixed in. At each job's end its verdict is in its SLURM Comment,
after the user's own, and sacct has it; ``--no-job-comment`` leaves the Comment alone."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from profiling.folder.layout import meta_of
from profiling.history.summary import read_summary
from profiling.schema import model
from tests.common import run_module, run_submit, submitted_job_id, wait_for_a_quiet_machine

pytestmark = pytest.mark.full_cluster

# 2 nodes of 2 ranks, a tiny MLP (no torchvision to import) with 10 ms of CPU work a step on
# every rank: the step is that work, steady; no traces (the run map's step logs are enough)
JOB = [
    "--cluster", "slurm", "--nodes", "2", "--gpus", "2", "--profile-ranks", "none", "--wait",
    "--workload", "tests.user_code.tiny_mlp:build", "--steps", "20", "--dtype", "fp32",
    "--threads-per-rank", "1", *(f"--inject-slowdown={rank}:10" for rank in range(4)),
    "--sbatch", "nodelist=node[1-2]",  # the slowed ranks 2 and 3 on node2, every time
]  # fmt: skip
NODE2_SLOWED = ["--inject-slowdown=2:40", "--inject-slowdown=3:40"]  # node2's ranks


def _job(traces_root: Path, *args: str) -> str:
    wait_for_a_quiet_machine(window_s=0.5)  # half a second of look: nine jobs in a row
    result = run_submit("--traces-root", str(traces_root), *JOB, *args, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return submitted_job_id(result.stdout)


def _comment(job_id: str) -> str:
    """The job's Comment: slurmctld's while it still holds the job, else the accounting's (a job
    ended more than MinJobAge ago, 60 s here, is gone from slurmctld: CI's ninth job came
    three jobs after the one it asked about)."""
    shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    if shown.returncode == 0:
        out = shown.stdout
        return out.split("Comment=", 1)[1].split("\n", 1)[0].strip() if "Comment=" in out else ""
    accounted = subprocess.run(
        ["sacct", "-X", "-n", "-j", job_id, "-o", "Comment%500"], capture_output=True, text=True, timeout=30
    )
    assert accounted.returncode == 0, accounted
    return accounted.stdout.strip()


def test_slowed_jobs_are_flagged_and_their_node_excluded(slurm_cluster, traces_root: Path) -> None:
    balanced = [_job(traces_root) for _ in range(5)]
    slowed = [_job(traces_root, *NODE2_SLOWED, "--sbatch", "comment=ablation 3")]
    slowed += [_job(traces_root, *NODE2_SLOWED) for _ in range(2)]
    other = _job(traces_root, "--batch-size", "16", "--no-job-comment")  # a second config
    reports = {
        job: model.checked((meta_of(traces_root / job) / "report.json").read_bytes())
        for job in [*balanced, *slowed, other]
    }
    flagged = {job: report.baseline.regression for job, report in reports.items() if report.baseline}
    assert flagged == {**dict.fromkeys(balanced, False), **dict.fromkeys(slowed, True), other: False}, {
        job: (r.baseline.line if r.baseline else None) for job, r in reports.items()
    }
    first = reports[slowed[0]].baseline
    assert first is not None and first.jobs == balanced[::-1] and first.change > 0.5
    markdown = (meta_of(traces_root / slowed[0]) / "report.md").read_text()
    said = (
        f"% slower than the last 5 jobs of this config (median {first.median_ms:.0f} ms a step): a regression"
    )
    assert said in markdown, markdown
    assert reports[other].baseline is not None and reports[other].baseline.jobs == []  # not mixed in
    summary = read_summary(meta_of(traces_root / slowed[0]) / "summary.json")
    assert (summary.name, summary.user) == ("profile-resnet18", pwd.getpwuid(os.getuid()).pw_name)
    assert summary.nodes == ["node1", "node2"] and summary.slow_nodes == ["node2"] and not summary.oom
    assert summary.ranks == 4 and summary.peak_memory_mib > 50  # a process's resident memory, MiB
    # the Comment: the user's own, then ours; sacct keeps it (this cluster stores comments)
    comment = _comment(slowed[0])
    assert comment.startswith("ablation 3 | slurm-profile: step ") and "slow node2" in comment, comment
    assert "+" in comment and "% vs last 5 (regression)" in comment, comment
    assert _comment(balanced[-1]).startswith("slurm-profile: step ") and "no OOM" in _comment(balanced[-1])
    assert _comment(other) in ("", "(null)")
    accounted = subprocess.run(
        ["sacct", "-X", "-n", "-j", slowed[0], "-o", "Comment%300"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "ablation 3 | slurm-profile:" in accounted.stdout, accounted
    # the history: node2 named in the 3 slowed jobs, given to --exclude
    listed = run_module("jobs.commands.history", str(traces_root))
    assert listed.returncode == 0, listed.stderr
    assert "node2: 3 of" in listed.stdout and "--sbatch exclude=node2" in listed.stdout, listed.stdout
    assert sum("REGRESSION" in line for line in listed.stdout.splitlines()) == 3, listed.stdout
    document = json.loads(run_module("jobs.commands.history", str(traces_root), "--json").stdout)
    assert document["exclude"] == ["node2"] and len(document["configs"]) == 2
