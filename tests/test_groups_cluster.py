"""The toolkit's own job of many groups on the test cluster, across 2 nodes: ``--parallel``
(a transformer LM, FSDP2 over dp, 1F1B over pp, TP over tp, gloo) with one rank slowed; every
rank's clock is chained to rank 0's through the groups and the pipeline's sends, and the slowed
rank is named with its coordinates."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiling.analysis.clocks.alignment import TRANSFERS
from tests.common import (
    REPO,
    SMALL_WORKLOAD,
    load_trace,
    run_submit,
    submitted_job_id,
    wait_for_a_quiet_machine,
)

# 8 recorded steps: enough for the straggler test with 4 or 8 ranks; no Python frames (the
# FSDP and pipelining Python made 77 MB a rank for 3 steps with them); a model of one block a
# stage, 32 wide (8 ranks on 2 cores: 51 s a job against 61 with the default's two of 64)
JOB = ["--steps", "10", "--schedule-wait", "1", "--warmup", "1", "--active", "8", "--batch-size", "8",
       "--workload-arg", "layers=1", "--workload-arg", "dim=32", "--workload-arg", "seq=16",
       "--profile-ranks", "all", "--no-stack", *SMALL_WORKLOAD]  # fmt: skip


def _run(traces_root: Path, parallel: str, gpus: int, *extra: str) -> tuple[Path, dict]:
    result = run_submit(
        "--cluster", "slurm", "--nodes", "2", "--gpus", str(gpus), "--parallel", parallel, *extra, *JOB,
        "--traces-root", str(traces_root), "--wait", timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    folder = traces_root / submitted_job_id(result.stdout)
    return folder, json.loads((folder / "meta" / "report.json").read_text())


def _every_rank_aligned(report: dict, world: int) -> None:
    """Every rank on rank 0's clock, and every step's critical path followed, its segments adding
    up to the step, across the ranks in half the steps at least (a slowed rank that never waited
    can hold a whole step; the bubble: tests/test_pipeline_bubble.py, on a known schedule); every
    step replayed at its measured length."""
    clocks = {rank["rank"]: rank["clock"] for rank in report["ranks"]}
    assert sorted(clocks) == list(range(world))
    assert all(clock["method"] != "base time" for clock in clocks.values()), clocks
    assert any(clock["method"] == TRANSFERS for clock in clocks.values())  # the stages' sends bound them
    path = report["critical_path"]
    assert path["undecided"] == [] and len(path["steps"]) == 8
    # the first steps list their segments, as many as report.json's budget holds (a CPU step of
    # this job has thousands)
    listed = [step for step in path["steps"] if step["step"] in path["segments_for"]]
    assert listed and listed[0] == path["steps"][0] and all(step["segments"] for step in listed)
    for step in listed:
        assert sum(s["end_us"] - s["start_us"] for s in step["segments"]) == pytest.approx(step["ms"] * 1e3)
    # it crosses ranks, but a slowed rank that started first and never waited holds a whole step
    crossed = [len({s["rank"] for s in step["segments"]}) > 1 for step in listed]
    assert sum(crossed) >= len(crossed) // 2, crossed
    assert len({row["rank"] for row in path["by_rank_kind"]}) > 1  # over every step
    replay = path["replay"]  # every step replayed, at its measured length
    assert replay["undecided"] == [] and len(replay["steps"]) == 8, replay["undecided"]
    # within the report's own threshold, not tighter: 4 ranks share this machine's 2 cores, and a
    # rank the OS puts off shows as an idle gap no graph holds (a CI run saw a median of 2.3 %)
    fidelity = replay["fidelity"]
    assert fidelity["median"] <= fidelity["threshold"], fidelity


def _most(report: dict) -> tuple[str, int]:
    most = report["critical_path"]["replay"]["most"]
    return most["dimension"], most["index"]


@pytest.mark.full_cluster
def test_a_data_by_pipeline_job_across_two_nodes_names_its_slowed_rank(
    slurm_cluster, traces_root: Path
) -> None:
    folder, report = _run(traces_root, "dp=2,pp=2", 2, "--inject-slowdown", "3:200")
    _every_rank_aligned(report, 4)
    assert report["layout"]["dims"] == {"pp": 2, "dp": 2}
    assert [rank["mesh"] for rank in report["ranks"]] == [
        {"pp": 0, "dp": 0}, {"pp": 0, "dp": 1}, {"pp": 1, "dp": 0}, {"pp": 1, "dp": 1}
    ]  # fmt: skip
    straggler = report["straggler"]
    assert (straggler["verdict"], straggler["rank"]) == ("straggler", 3), straggler["text"]
    assert straggler["text"].startswith("straggler: rank 3 (pp 1, dp 1) arrived last")
    trace = load_trace(next(folder.glob("rank2_*.json")))
    labels = {e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("pg ")}
    assert {label.split(" peer ")[0].split(" ", 2)[2] for label in labels} == {"mesh_pp", "mesh_dp"}
    assert any(label.endswith("mesh_pp peer 0") for label in labels)
    # the run map's rows by stage, from the manifest's --parallel (tests/test_report_page.py draws them)
    page = (folder / "meta" / "report.html").read_text()
    assert '{"dim":"pp","label":"stage 1","first":2,"end":4}' in page
    # Stage 1 also runs the head and the loss: at this size ~+30% of compute on CPU, a real
    # imbalance that the verdict names or not as the noise among one stage's ranks (4 ranks on 2
    # cores) allows. The slowed rank's 200 ms are host time, never a stage's compute: whichever
    # verdict, it is about the stages, each with both its ranks (a late rank alone is no stage's
    # imbalance: tests/test_groups.py, on traces with a known answer).
    stages = report["stages"]
    assert [stage["ranks"] for stage in stages["stages"]] == [[0, 1], [2, 3]]
    compute = {stage["stage"]: stage["compute_ms"] for stage in stages["stages"]}
    assert compute[1] > compute[0]  # the head and the loss
    assert stages["verdict"] == "balanced" or stages["text"].startswith(
        "stage imbalance: stage 1 (ranks 2, 3)"
    )
    # replayed: rank 3 holds the most (its host gaps), not its stage: rank 2 is no late rank.
    # Or its replica, dp 1 (ranks 1 and 3): rank 1 waits for rank 3's sends, and on a CPU lane
    # a wait gloo leaves outside any operator is host time, so both share the excess (CI saw
    # it once). The first gain is rank 3 like its peers (its fix leads: the verdict names it) or
    # every host gap gone. Rank 3's host gaps are lowered to its peers' median, which holds some
    # of their waits for it (gloo's, outside any operator): 132 ms of its 200 on a quiet machine
    # (2026-12-07), 85 ms in a CI run the same day (4 ranks on 2 cores: the burning rank takes
    # its core from the rank beside it, which then runs late too), against the step replayed
    # with every rank's work as measured. What holds on a loaded machine: it gains well beyond
    # the step-to-step noise, and over a third of what was injected
    assert _most(report) in {("rank", 3), ("dp", 1)}, report["critical_path"]["replay"]["most"]
    replay = report["critical_path"]["replay"]
    assert max(replay["by_rank"], key=replay["by_rank"].get) == "3", replay["by_rank"]
    first = replay["gains"][0]
    assert (first["what"], first["rank"]) in {("rank like its peers", 3), ("no host gaps", None)}, first
    noise = report["critical_path"]["noise_ms"] or 0.0
    assert first["gain_ms"] >= max(70.0, noise), (first, noise)


# the job of issue 57: the LM's default size, a batch of 16, rank 3 given 60 ms a step
QUIET_NOISE_MS = 30.0  # its step-to-step noise on this machine at its usual: 15 ms
ISSUE_JOB = ["--steps", "12", "--schedule-wait", "2", "--warmup", "1", "--active", "8", "--batch-size", "16",
             "--profile-ranks", "all", "--no-stack", *SMALL_WORKLOAD]  # fmt: skip


# 4 ranks on 2 cores: the step-to-step noise moves with the machine (15 ms in most runs; CI saw
# 58.7 ms twice running on 2026-12-07, against a gain of 40.6 ms, and the report rightly named no one)
@pytest.mark.flaky(reruns=2)
@pytest.mark.full_cluster
def test_a_rank_given_60_ms_in_a_data_by_pipeline_job_is_the_first_line(
    slurm_cluster, traces_root: Path
) -> None:
    """Rank 3 (pp 1, dp 1) burns 60 ms of CPU before each step. Its stage-0 peer, rank 1, waits
    for it in gloo's ``work.wait()`` (the host's, on its lane): waiting, not its work, so
    rank 3 like its peers gains beyond the noise and is the first line (35.8 and 40.7 ms a step
    on this machine, 2026-12-07; the noise 15 ms). The rest of the 60 ms is hidden by the
    microbatch stage 1 waits for anyway, or was taken from the ranks beside it (2 cores)."""
    wait_for_a_quiet_machine()
    result = run_submit(
        "--cluster", "slurm", "--nodes", "2", "--gpus", "2", "--parallel", "dp=2,pp=2", *ISSUE_JOB,
        "--inject-slowdown", "3:60", "--traces-root", str(traces_root), "--wait", timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    meta = traces_root / submitted_job_id(result.stdout) / "meta"
    report = json.loads((meta / "report.json").read_text())
    first = report["critical_path"]["replay"]["gains"][0]
    assert (first["what"], first["rank"]) == ("rank like its peers", 3), report["critical_path"]["replay"][
        "gains"
    ]
    limits = (meta / "report.md").read_text().split("## What limits the step")[1]
    first_line = limits.split("\n1. ", 1)[1] if "\n1. " in limits else ""
    noise = report["critical_path"]["noise_ms"] or 0.0
    if noise <= QUIET_NOISE_MS:
        assert first["gain_ms"] > noise, (first, noise)
        assert first_line.startswith("**Rank 3 like its peers**"), limits
    else:
        # a step-to-step noise near the 60 ms injected hides them: CI runs of 2026-12-07 evening
        # saw 49-62 ms six times (the machine's times moved by half between runs that hour)
        # against a gain of 18-35 ms. The report then rightly gives rank 3 no line; never another's
        assert not re.match(r"\*\*Rank (?!3 )", first_line), limits


@pytest.mark.full_cluster
def test_a_last_stage_with_more_layers_is_a_stage_imbalance(slurm_cluster, traces_root: Path) -> None:
    _, report = _run(traces_root, "dp=2,pp=2", 2, "--workload-arg", "last_stage_layers=6")
    _every_rank_aligned(report, 4)
    stages = report["stages"]
    assert (stages["verdict"], stages["stage"]) == ("imbalance", 1), stages["text"]
    assert stages["text"].startswith("stage imbalance: stage 1 (ranks 2, 3) computes")
    assert report["straggler"]["verdict"] != "straggler", report["straggler"]["text"]
    # replayed: stage 1, both its ranks, holds the most; the first gain is the stage like stage 0
    replay = report["critical_path"]["replay"]
    assert _most(report) == ("pp", 1) and replay["slowdown"] > 1.1, replay["most"]
    assert replay["by_mesh"]["pp"]["1"] > replay["by_mesh"]["pp"]["0"]
    first = replay["gains"][0]
    assert (first["what"], first["coordinate"]) == ("stage like the median stage", "pp 1"), replay["gains"]


@pytest.mark.flaky(reruns=1)  # 8 ranks on 2 cores: CI once saw rank 6's compute 170 % inflated
@pytest.mark.full_cluster
def test_a_data_by_pipeline_by_tensor_job_across_two_nodes(slurm_cluster, traces_root: Path) -> None:
    _, report = _run(traces_root, "dp=2,pp=2,tp=2", 4, "--inject-slowdown", "5:400")
    _every_rank_aligned(report, 8)
    assert report["layout"]["dims"] == {"pp": 2, "dp": 2, "tp": 2}
    straggler = report["straggler"]
    # 8 ranks on 2 cores: the slowed rank is the one most often last; the verdict is usually, not
    # always, past the test's p < 0.01
    assert straggler["candidate"] == 5, straggler["text"]
    assert "rank 5 (pp 1, dp 0, tp 1)" in straggler["text"]
    # replayed: its 400 ms of host gaps hold the most, alone or with a coordinate of it
    replay = report["critical_path"]["replay"]
    assert max(replay["by_rank"], key=replay["by_rank"].get) == "5", replay["by_rank"]
    dimension, index = _most(report)
    assert (dimension, index) == ("rank", 5) or report["ranks"][5]["mesh"][dimension] == index


@pytest.mark.full_cluster
def test_a_hang_inside_one_data_parallel_group_names_the_group_and_torch_reads_the_dumps(
    slurm_cluster, traces_root: Path
) -> None:
    """Rank 3 (pp 1, dp 1) stops at step 8: its dp peer, rank 2, waits in FSDP's all-gather of
    their group. The verdict names that group by its place in the mesh, the collective's number in
    it and rank 3's line; torch's own fr_trace reads meta/flight_recorder/ as it is and agrees."""
    result = run_submit(
        "--cluster", "slurm", "--nodes", "2", "--gpus", "2", "--parallel", "dp=2,pp=2", *JOB,
        "--steps", "20", "--profile-ranks", "none", "--inject-hang", "3:8", "--dist-timeout", "20",
        "--traces-root", str(traces_root), "--wait", timeout=300,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    folder = traces_root / submitted_job_id(result.stdout)
    hang = subprocess.run(
        [sys.executable, "-m", "jobs.commands.hang", str(folder)], cwd=REPO, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert hang.returncode == 0, hang.stderr
    first, stuck = hang.stdout.splitlines()[:2]
    found = re.fullmatch(
        r"hang: rank 3 on \S+ never reached (gloo:\w+) #(\d+) of the dp group at pp 1 \(ranks 2-3, "
        r"process group (\d+) mesh_dp, sizes .*; rank\(s\) 2 waited for it\) at step 8",
        first,
    )
    assert found, first
    assert stuck.startswith("  rank 3 was stuck at workload/loop.py:") and "in _hang_forever" in stuck
    op, seq, group = found.groups()
    dumps = folder / "meta" / "flight_recorder"
    assert sorted(p.name for p in dumps.iterdir()) == [f"rank_{rank}" for rank in range(4)]
    torch_says = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(dumps)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert torch_says.returncode == 0, torch_says.stderr
    said = torch_says.stdout + torch_says.stderr
    assert f"Not all ranks joining collective, sequence number: {seq}" in said, said
    assert f"group info: {group}:mesh_dp" in said and f"collective: {op}" in said
    assert "missing ranks: {3}" in said and "expected ranks: {2, 3}" in said
