"""``--auto-capture`` on the test cluster, 2 nodes x 2 ranks, no rank profiled by the schedule: a
rank slowed in steps 20-60 is captured inside them with a reference rank, and the report names it
from that window; the same job balanced captures nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.common import SMALL_WORKLOAD, load_manifest, run_submit, submitted_job_id

JOB = ["--steps", "80", "--profile-ranks", "none", "--auto-capture", *SMALL_WORKLOAD]
QUIET_NOISE = 0.05  # the run's step-to-step noise (relative) on this machine at its usual: 0.03


def _log(folder: Path, rank: int) -> str:
    return "".join(p.read_text() for p in (folder / "logs").glob(f"*_{rank}_log.*"))


def _run(traces_root: Path, *extra: str) -> tuple[Path, dict]:
    result = run_submit(
        "--cluster", "slurm", "--nodes", "2", "--gpus", "2", *JOB, *extra,
        "--traces-root", str(traces_root), "--wait", timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    folder = traces_root / submitted_job_id(result.stdout)
    return folder, json.loads((folder / "meta" / "report.json").read_text())


@pytest.mark.full_cluster
def test_a_rank_slowed_while_the_job_runs_is_captured_then_and_named_from_that_window(
    slurm_cluster, traces_root: Path
) -> None:
    folder, report = _run(traces_root, "--inject-slowdown", "1:80@20-60")
    manifest = load_manifest(folder)
    assert manifest["profiler"]["auto_capture"]["max_captures"] == 3
    [capture] = manifest["captures"]
    trigger = capture["trigger"]
    assert trigger["rank"] == 1 and trigger["ratio"] > trigger["slow_above"] >= 1.2, trigger
    assert sorted(capture["ranks"]) == sorted({1, trigger["reference"]}) and trigger["reference"] != 1
    # the smoothing, and the gaps of 2 a stretch may hold, can take in a noisy step just before it
    assert trigger["first"] >= 15 and trigger["last"] <= 60
    assert 20 <= capture["first"] <= capture["last"] <= 60, capture  # while it was slow
    traces = sorted(p.name for p in folder.glob("rank*_iter*"))
    assert traces == sorted(
        f"rank{r}_iter{capture['first']}_{capture['last']}.json" for r in capture["ranks"]
    )
    # the decision in rank 0's log (its node's trigger), the reason in the recording ranks', and
    # in the report
    assert f"--auto-capture: capture 1 of ranks {capture['ranks'][0]}" in _log(folder, 0)
    assert f"asked for by --auto-capture: {trigger['why']}" in _log(folder, 1)
    [captured] = report["run"]["captures"]
    assert captured["automatic"] and captured["rank"] == 1 and sorted(captured["traces"]) == traces
    # what limits the step, from the captured steps alone: rank 1
    replay = report["critical_path"]["replay"]
    assert {s["step"] for s in replay["steps"]} <= set(range(capture["first"], capture["last"] + 1))
    assert (replay["most"]["dimension"], replay["most"]["index"]) == ("rank", 1), replay["most"]
    straggler = report["straggler"]
    if report["run"]["noise"] <= QUIET_NOISE:
        assert straggler["rank"] == 1, straggler["text"]
    else:
        # 3 steps traced: the verdict is the replay's against the step logs' noise, which on this
        # machine rose to 8 % of the step on 2026-12-07 evening (its usual: 3 %) and then held
        # rank 1's excess over its peers (18-37 ms) under it: undetermined, the replay's most still
        # rank 1 (above), arrival's likeliest then by chance. It never names another rank
        assert straggler["rank"] in (1, None), straggler["text"]
    markdown = (folder / "meta" / "report.md").read_text()
    assert (
        f"Steps {capture['first']}-{capture['last']}, replayed here, were captured automatically" in markdown
    )
    assert "**Captured automatically** (`--auto-capture`, 1)" in markdown


@pytest.mark.full_cluster
def test_the_same_job_balanced_captures_nothing(slurm_cluster, traces_root: Path) -> None:
    folder, report = _run(traces_root)
    assert load_manifest(folder).get("captures") in (None, [])
    assert list(folder.glob("rank*_iter*")) == [] and not (folder / "meta" / "capture").exists()
    assert "--auto-capture" not in _log(folder, 0) and report["run"]["captures"] == []
