"""The critical path and the replay on real jobs of the test cluster: a rank slowed by 80 ms a
step is on the path with at least that much time, the gain the path estimates is the late
rank's and about the slowdown; replayed, each step comes out at its measured length, the rank
holds the most of the slowdown and its gain comes first; a balanced job's S is within its noise
of 1, and no rank is named.

The estimate against the measured difference of the two jobs' step times (within 15 %) is
``tests/bench/bench_critical_path.py``: on CI's shared machine the two jobs' step times move
with whatever else runs (the balanced job 91 ms a step alone, 135-138 ms in CI, the slowed
rank's 80 ms of CPU up to 230 ms of wall time), which no assertion on their difference survives.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from profiling.folder.layout import meta_of
from profiling.schema import model
from tests.common import SMALL_WORKLOAD, run_submit, submitted_job_id, wait_for_a_quiet_machine

pytestmark = pytest.mark.full_cluster

# 2 nodes of one rank each: the slowed rank has a core of its own; 16 steps recorded
TWO_NODES = [
    "--cluster", "slurm", "--nodes", "2", "--gpus", "1", "--profile-ranks", "all", "--steps", "24",
    "--schedule-wait", "4", "--warmup", "2", "--active", "16", "--wait", *SMALL_WORKLOAD,
]  # fmt: skip
INJECTED_MS = 80.0


def job_report(traces_root: Path, *args: str) -> tuple[model.Report, str]:
    result = run_submit("--traces-root", str(traces_root), *TWO_NODES, *args, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    folder = traces_root / submitted_job_id(result.stdout)
    report = model.checked((meta_of(folder) / "report.json").read_bytes())
    return report, (meta_of(folder) / "report.md").read_text()


def limits(markdown: str) -> str:
    return markdown.split("## What limits the step")[1].split("\n## ")[0]


# once more if it fails: a noisy neighbour on the shared CI machine can slow either job
@pytest.mark.flaky(reruns=1)
def test_a_slowed_rank_is_on_the_path_and_its_estimated_gain_is_the_measured_one(
    slurm_cluster, traces_root: Path
) -> None:
    wait_for_a_quiet_machine()
    slowed, slowed_md = job_report(traces_root, "--inject-slowdown", f"1:{INJECTED_MS:.0f}")
    # each job on a quiet machine: the slowed job's end (its report, accounting) can slow one
    # rank of a job started at once (CI: the balanced job 11.2 ms a step over its ideal, S 1.09,
    # against a step-to-step noise of 10.6 ms; its first try had failed too)
    wait_for_a_quiet_machine()
    balanced, balanced_md = job_report(traces_root)
    path = slowed.critical_path
    assert path is not None and path.undecided == [] and len(path.steps) == 16
    listed = [step for step in path.steps if step.step in path.segments_for]  # the first 8
    own = [
        sum(s.end_us - s.start_us for s in step.segments if s.rank == 1 and s.kind in ("host", "compute"))
        / 1e3
        for step in listed
    ]
    on_path = [ms for ms in own if ms > 0]
    assert len(listed) == 8 and len(on_path) >= 0.9 * len(listed), own
    assert statistics.median(own) >= 0.8 * INJECTED_MS, own  # its CPU time; more wall time when shared
    estimated = next(w for w in path.what_if if w.what == "straggler")
    assert estimated.rank == 1 and 0.8 * INJECTED_MS <= estimated.gain_ms <= path.step_ms, estimated
    # replayed: every step at its measured length; rank 1 holds the most, its host gaps; the
    # first gain is rank 1 like its peers, about the slowdown, and no other line counts it again
    replay = path.replay
    assert replay is not None and replay.fidelity.median <= 0.02, replay.fidelity
    assert replay.most is not None and (replay.most.dimension, replay.most.index) == ("rank", 1), replay.most
    assert "host" in replay.most.kinds and replay.by_rank[1] > replay.by_rank[0]
    first = replay.gains[0]
    assert (first.what, first.rank) == ("rank like its peers", 1), first
    assert first.gain_ms >= 0.8 * INJECTED_MS, first
    assert "Most of it is **rank 1**" in limits(slowed_md)
    assert "1. **Rank 1 like its peers**" in limits(slowed_md)
    assert balanced.critical_path is not None and balanced.critical_path.undecided == []
    # the balanced job: S at most 1.15 (a step waits for each meeting's slowest rank, the
    # ideal for none: S is above 1 in a balanced job too), and no rank named, no rank line
    even = balanced.critical_path.replay
    assert even is not None and even.fidelity.median <= 0.02, even.fidelity
    assert even.slowdown <= 1.15, even
    assert "like its peers" not in limits(balanced_md), limits(balanced_md)
    assert "Most of it is" not in limits(balanced_md), limits(balanced_md)
    assert balanced.straggler is not None and balanced.straggler.verdict != "straggler", balanced.straggler
