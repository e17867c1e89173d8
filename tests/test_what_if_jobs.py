"""The what-if on two production pipeline jobs whose answer is published: the OSDI 2025 paper's
artifact (tests/data/what-if-jobs/, its README and PROVENANCE.md). The report reads their traces
as any folder of torch.profiler traces, and must find what the paper's own tool finds: S within
5 %, the same top stage and the same dominant data-parallel rank; its verdict must name the
slowed worker (AR) and the long stage (ST); no part's S more than 10 % above the job's."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from profiling.report.build import build_report

DATA = Path(__file__).parent / "data" / "what-if-jobs"


def _paper(job: str) -> dict:
    return json.loads((DATA / f"result-{job}.json").read_text())


@pytest.fixture(scope="module", params=["ST", "AR"])
def job(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    folder = tmp_path_factory.mktemp(request.param) / "traces"
    shutil.copytree(DATA / request.param, folder)
    build_report(folder)
    return request.param, json.loads((folder / "meta" / "report.json").read_text())


def _top(found: dict[str, float]) -> str:
    return max(found, key=lambda k: found[k])


def test_the_slowdown_and_its_parts_are_the_papers(job: tuple[str, dict]) -> None:
    name, report = job
    paper, replay = _paper(name), job[1]["critical_path"]["replay"]
    assert replay["slowdown"] == pytest.approx(paper["blocking_slowdown"], rel=0.05)
    assert _top(replay["by_mesh"]["pp"]) == _top(paper["blocking_decompose_by_stage"])
    top_dp = _top(paper["blocking_decompose_by_dp_rank"])
    values = sorted(paper["blocking_decompose_by_dp_rank"].values())
    if values[-1] - 1 > 2 * (values[-2] - 1):  # a dp rank that dominates (AR's 0), else none (ST)
        assert _top(replay["by_mesh"]["dp"]) == top_dp
    parts = [*replay["by_rank"].values(), *(v for by in replay["by_mesh"].values() for v in by.values())]
    assert max(parts) <= 1.1 * replay["slowdown"], replay
    assert replay["fidelity"]["median"] <= 0.02 and replay["fidelity"]["worst"] <= 0.05


def test_the_verdict_follows_the_replay(job: tuple[str, dict]) -> None:
    name, report = job
    straggler, stages = report["straggler"], report["stages"]
    gains = report["critical_path"]["replay"]["gains"]
    if name == "AR":  # one worker slowed on purpose: dp 0 of stage 0, rank 0
        assert (straggler["verdict"], straggler["rank"]) == ("straggler", 0), straggler["text"]
        assert "rank 0 (pp 0, dp 0)" in straggler["text"]
        assert (gains[0]["what"], gains[0]["rank"]) == ("rank like its peers", 0), gains
        assert stages["verdict"] != "imbalance" and "balanced" not in stages["text"]
    else:  # a long last stage: a stage imbalance, no rank
        assert straggler["verdict"] != "straggler", straggler["text"]
        assert (stages["verdict"], stages["stage"]) == ("imbalance", 3), stages["text"]
        assert (gains[0]["what"], gains[0]["coordinate"]) == ("stage like the median stage", "pp 3"), gains


def _peers(trace: dict) -> set[tuple[int, int]]:
    from profiling.analysis.per_trace.breakdown import analyse
    from profiling.analysis.per_trace.groups import trace_groups
    from profiling.analysis.reading.instances import instances, transfer_ranks
    from profiling.analysis.reading.trace_events import from_document

    events = from_document(trace)
    info = trace["distributedInfo"]
    found = instances(analyse(events).collectives, info["rank"], trace_groups(info)[0])
    return {pair for i in found if (pair := transfer_ranks(i)) is not None}


def _trace(name: str) -> dict:
    with gzip.open(DATA / "ST" / name) as raw:
        return json.load(raw)


def test_nccl_peers_are_read_from_the_traces() -> None:
    """Sends and receives of a real NCCL trace are tied by the peers the kernels name (``Src
    Rank`` / ``Dst Rank``), through the reader, not around it: rank 2, dp 0 of stage 1, receives
    from rank 0 and sends to rank 4, forward, and the other way backward."""
    assert _peers(_trace("rank2_iter23_1048.json.gz")) == {(0, 2), (2, 4), (4, 2), (2, 0)}


@pytest.mark.parametrize("peer", [99, 2, -1, 3.0, "4", 10**20, True])
def test_a_peer_that_cannot_be_ties_nothing(peer: object) -> None:
    """Out of the world, the rank itself, negative, not an int: that kernel's peer is not read."""
    trace = _trace("rank2_iter23_1048.json.gz")
    for event in trace["traceEvents"]:
        args = event.get("args", {})
        if args.get("Dst Rank") == 4:
            args["Dst Rank"] = peer
    assert _peers(trace) == {(0, 2), (4, 2), (2, 0)}
