"""The replay (profiling/analysis/across_ranks/critical_path/replay.py, what_if.py) on steps whose answer
is worked out by hand: a 4-stage 1F1B pipeline whose last stage is 25 % slower, one rank 25 %
slower among 16 data-parallel ranks, and both balanced. Replayed as measured, each step comes
out at its measured length; the slowdown S, every attribution and every what-if are the hand's."""

from __future__ import annotations

import dataclasses

import pytest

from profiling.analysis.across_ranks.critical_path.graph import StepGraph, step_graph
from profiling.analysis.across_ranks.critical_path.verdict import follows_replay
from profiling.analysis.across_ranks.critical_path.what_if import replayed
from profiling.analysis.per_trace.lanes import PHASES
from profiling.schema.model import Straggler
from profiling.schema.model_path import Replay
from tests.step_graphs import data_parallel, gpu_pipelines, lane_of, one_f_one_b


def replay_of(built: tuple, mesh: dict | None = None, steps: int = 1) -> Replay:
    ranks, meetings = built
    graphs = [step_graph(step, ranks, meetings) for step in range(steps)]
    assert all(isinstance(graph, StepGraph) for graph in graphs), graphs
    found = replayed(graphs, [], mesh)  # type: ignore[arg-type]
    assert found is not None and found.undecided == []
    assert found.fidelity.worst == pytest.approx(0.0, abs=1e-12)  # replayed as measured: the step
    return found


def what_if(found: Replay, what: str, rank: int | None = None, coordinate: str | None = None) -> float:
    return next(
        w.gain_ms * 1e3 for w in found.what_if if (w.what, w.rank, w.coordinate) == (what, rank, coordinate)
    )


def test_a_rank_slower_than_its_15_peers_is_what_stragglers_cost() -> None:
    """Forward 10 µs and backward 20 on every rank but rank 7 (12.5 and 25), an all-reduce 5 µs
    after the last arrives, an optimizer of 5. Measured: 37.5 + 5 + 5 = 47.5 µs. Ideal: forward
    and backward at their means (10.15625, 20.3125): 30.46875 + 10 = 40.46875 µs."""
    forward, backward = [10.0] * 16, [20.0] * 16
    forward[7], backward[7] = 12.5, 25.0
    found = replay_of(data_parallel(forward, backward, transfer=5.0, optimizer=5.0))
    ideal = 40.46875
    step = found.steps[0]
    assert [step.measured_ms, step.replayed_ms, step.ideal_ms] == pytest.approx([0.0475, 0.0475, ideal / 1e3])
    assert found.slowdown == pytest.approx(47.5 / ideal) and found.host_share == pytest.approx(1.0)
    # rank 7 as measured, the rest ideal: the whole of it; any other rank: nothing (its 30 µs of
    # compute is under the ideal's 30.47)
    assert found.by_rank[7] == pytest.approx(47.5 / ideal)
    assert all(found.by_rank[r] == pytest.approx(1.0) for r in range(16) if r != 7)
    # each phase as measured on every rank (rank 7's forward 12.5, the backward ideal 20.3125)
    assert found.by_kind["forward"] == pytest.approx((12.5 + 20.3125 + 10) / ideal)
    assert found.by_kind["backward"] == pytest.approx((10.15625 + 25 + 10) / ideal)
    assert found.by_kind["optimizer"] == found.by_kind["allreduce"] == pytest.approx(1.0)
    # rank 7 like its peers: 40 µs, 7.5 shorter; another rank: no gain
    assert what_if(found, "rank like its peers", 7) == pytest.approx(7.5)
    assert what_if(found, "rank like its peers", 3) == pytest.approx(0.0)
    assert what_if(found, "the exposed communication hidden") == pytest.approx(5.0)
    # most of it is rank 7: its backward 5 µs and its forward 2.5 longer than its peers' 30
    most = found.most
    assert most is not None and (most.dimension, most.index, most.kinds) == (
        "rank",
        7,
        ["backward", "forward"],
    )
    assert [most.slowdown, most.longer_ms, most.longer_fraction] == pytest.approx(
        [47.5 / ideal, 0.0075, 0.25]
    )
    # the gains add up: rank 7 like its peers (47.5 -> 40), then the all-reduce hidden on top (-> 35)
    assert [(g.what, g.rank, g.gain_ms * 1e3) for g in found.gains] == [
        ("rank like its peers", 7, pytest.approx(7.5)),
        ("the exposed communication hidden", None, pytest.approx(5.0)),
    ]
    assert found.gains[0].share == pytest.approx(7.5 / 47.5)
    # the heat map, rank x step: rank 7's cell the hot one
    heat = found.heat
    assert (heat.rows, heat.columns, heat.column_labels) == ("rank", "step", [0])
    assert [row[0] for row in heat.values] == pytest.approx([1.0] * 7 + [47.5 / ideal] + [1.0] * 8, abs=1e-4)
    # the strips: measured, rank 7 works 42.5 µs and the others wait for it; like its peers, it
    # works 35 and everyone ends at 40
    strips = {(v.what, v.rank): v for v in found.strips.variants}
    measured, peers = strips["measured", None], strips["rank like its peers", 7]
    assert [measured.work_ms[7] * 1e3, measured.work_ms[0] * 1e3] == pytest.approx([42.5, 35.0])
    assert [e * 1e3 for e in measured.end_ms] == pytest.approx([47.5] * 16)
    assert peers.work_ms[7] * 1e3 == pytest.approx(35.0) and max(peers.end_ms) * 1e3 == pytest.approx(40.0)


def test_a_balanced_step_costs_nothing() -> None:
    found = replay_of(data_parallel([10.0] * 16, [20.0] * 16, transfer=5.0, optimizer=5.0, host=3.0))
    assert found.slowdown == pytest.approx(1.0)
    assert found.host_share == pytest.approx(43.0 / 40.0)  # 3 µs of host before each forward
    # one model: each rank's host gaps are its own work, at the mean in the ideal: no part exceeds
    # the whole (the model before it put S at 1 and every rank at 43 / 40)
    assert list(found.by_rank.values()) == pytest.approx([1.0] * 16)
    assert found.by_kind["host"] == pytest.approx(1.0)
    assert what_if(found, "no host gaps") == pytest.approx(3.0)
    assert found.most is None  # every rank alike: none holds more than its peers
    # the larger first: the all-reduce hidden (43 -> 38), then no host gaps on top of it (-> 35)
    assert [(g.what, g.gain_ms * 1e3) for g in found.gains] == [
        ("the exposed communication hidden", pytest.approx(5.0)),
        ("no host gaps", pytest.approx(3.0)),
    ]


def test_one_rank_s_host_gaps_are_that_rank_s_never_its_stage_s() -> None:
    """Stages of 2 ranks (pp 0: ranks 0, 1; pp 1: ranks 2, 3), every rank's layers alike, rank 3
    with 50 µs more host before its forward than the others. Moving layers would not shorten
    it: the stage like the median stage gains nothing; rank 3 like its peers gains the 50 µs,
    and is the first gain (CI once saw a 2 x 2 job's stage take a slowed rank's host gaps)."""
    built = data_parallel([10.0] * 4, [20.0] * 4, transfer=5.0, optimizer=5.0, host=[2.0, 2.0, 2.0, 52.0])
    found = replay_of(built, {r: {"pp": r // 2, "dp": r % 2} for r in range(4)})
    assert found.steps[0].measured_ms * 1e3 == pytest.approx(92.0)
    assert what_if(found, "stage like the median stage", coordinate="pp 1") == pytest.approx(0.0)
    assert what_if(found, "rank like its peers", 3) == pytest.approx(50.0)
    assert (found.gains[0].what, found.gains[0].rank) == ("rank like its peers", 3)
    assert found.gains[0].gain_ms * 1e3 == pytest.approx(50.0)


def test_a_rank_with_host_gaps_its_peers_lack_is_lowered_to_none() -> None:
    """A GPU rank whose device waits 50 µs for its host, among peers whose devices never wait:
    like its peers, it waits for nothing (its peers' host gaps are 0, not absent)."""
    built = data_parallel([10.0] * 4, [20.0] * 4, transfer=5.0, optimizer=5.0, host=[0.0, 0.0, 0.0, 50.0])
    found = replay_of(built)
    assert what_if(found, "rank like its peers", 3) == pytest.approx(50.0)
    assert what_if(found, "rank like its peers", 0) == pytest.approx(0.0)
    assert (found.gains[0].what, found.gains[0].rank) == ("rank like its peers", 3)


@pytest.mark.parametrize("microbatches", [4, 8])
def test_a_pipelines_last_stage_25_percent_slower_is_its_slowdown(microbatches: int) -> None:
    """4 stages, 1F1B, forward 10 µs and backward 20 a microbatch, the last stage's 12.5 and 25.
    Measured: the fill (3 forwards, 30 µs), m of the last stage's 37.5, the drain (3 backwards,
    60). Ideal: every stage at the means (10.625, 21.25), a balanced pipeline: (m + 3) x 31.875.
    The last stage as measured, the others ideal: 3 x 10.625 + 37.5 m + 3 x 21.25."""
    m = microbatches
    built = one_f_one_b(4, m, forward=[10.0, 10.0, 10.0, 12.5], backward=[20.0, 20.0, 20.0, 25.0])
    mesh = {stage: {"pp": stage} for stage in range(4)}
    found = replay_of(built, mesh)
    measured, ideal = 30 + 37.5 * m + 60, (m + 3) * 31.875
    assert found.steps[0].measured_ms * 1e3 == pytest.approx(measured)
    assert found.steps[0].ideal_ms * 1e3 == pytest.approx(ideal)
    assert found.slowdown == pytest.approx(measured / ideal)
    assert found.by_mesh["pp"]["3"] == pytest.approx((3 * 10.625 + 37.5 * m + 3 * 21.25) / ideal)
    assert found.by_rank[3] == found.by_mesh["pp"]["3"]
    # stage 0, 1 or 2 as measured (10 and 20, under the means), the rest ideal: its forward in the
    # fill and its backward in the drain 0.625 and 1.25 µs shorter than the ideal's
    assert [found.by_mesh["pp"][str(s)] for s in range(3)] == pytest.approx([(ideal - 1.875) / ideal] * 3)
    # the last stage like the median stage (10 and 20): the balanced 30 µs pipeline, (m + 3) x 30
    assert what_if(found, "stage like the median stage", coordinate="pp 3") == pytest.approx(
        measured - (m + 3) * 30.0
    )
    assert what_if(found, "stage like the median stage", coordinate="pp 0") == pytest.approx(0.0)
    # stage 3, not its one rank: forward and backward 25 % longer than the other stages'
    most = found.most
    assert most is not None and (most.dimension, most.index, most.kinds) == ("pp", 3, ["backward", "forward"])
    assert [most.longer_ms * 1e3, most.longer_fraction] == pytest.approx([7.5 * m, 0.25])
    # the stage like the others is the one gain: its rank like its peers adds nothing on top
    assert [(g.what, g.coordinate, g.gain_ms * 1e3) for g in found.gains] == [
        ("stage like the median stage", "pp 3", pytest.approx(measured - (m + 3) * 30.0))
    ]


def test_a_balanced_pipeline_has_no_slowdown_only_its_bubble() -> None:
    found = replay_of(
        one_f_one_b(4, 4, forward=10.0, backward=20.0), {s: {"pp": s} for s in range(4)}, steps=3
    )
    assert len(found.steps) == 3 and found.slowdown == pytest.approx(1.0)
    assert list(found.by_mesh["pp"].values()) == pytest.approx([1.0] * 4)
    assert found.most is None and found.gains == []
    assert found.steps[0].measured_ms * 1e3 == pytest.approx(7 * 30.0)  # m + p - 1 microbatches


def _pipelines(forward: list[float], backward: list[float]) -> tuple[dict, list, float]:
    return gpu_pipelines(4, 2, 6, forward, backward)


def test_a_slowed_worker_of_a_gpu_pipeline_is_its_slowdown_waiting_never_work() -> None:
    """Two 1F1B pipelines of 4 stages on GPU lanes (ranks replica + 2 x stage), 6 microbatches;
    rank 0 (stage 0 of replica 0) forward and backward 60 % slower. Every rank downstream of it
    waits in its receives, each receive recorded to end a moment after the compute it gates
    began (the lane reads 'compute' just before it): that wait is never work. The answers come
    from the builder's own simulation: the step, the ideal (every rank at the mean) and rank 0
    alone as measured."""
    forward, backward = [100.0] * 8, [200.0] * 8
    forward[0], backward[0] = 160.0, 320.0
    ranks, meetings, step = _pipelines(forward, backward)
    mean_f, mean_b = sum(forward) / 8, sum(backward) / 8
    ideal = _pipelines([mean_f] * 8, [mean_b] * 8)[2]
    alone = _pipelines([forward[0]] + [mean_f] * 7, [backward[0]] + [mean_b] * 7)[2]
    mesh = {r: {"pp": r // 2, "dp": r % 2} for r in range(8)}
    found = replay_of((ranks, meetings), mesh)
    assert found.steps[0].measured_ms * 1e3 == pytest.approx(step)
    assert found.steps[0].ideal_ms * 1e3 == pytest.approx(ideal, rel=1e-3)
    assert found.slowdown == pytest.approx(step / ideal, rel=1e-3)
    assert found.by_rank[0] == pytest.approx(alone / ideal, rel=1e-3)
    # the ranks downstream of it waited, and their waits are not their work: alone, each is ideal
    assert max(v for r, v in found.by_rank.items() if r != 0) == pytest.approx(1.0, abs=2e-3)
    assert max(found.by_rank.values()) <= 1.1 * found.slowdown
    most = found.most
    assert most is not None and (most.dimension, most.index) == ("rank", 0), most
    assert (found.gains[0].what, found.gains[0].rank) == ("rank like its peers", 0)


def test_a_wait_the_trace_ties_to_a_receive_is_a_wait_however_far_its_recorded_end() -> None:
    """The same pipelines, each receive recorded to end 30 µs after the compute it gates began:
    beyond what the replay infers as a wait (the holes are short). Untied, the waits read as
    work: the replay misses its step by over 5 %. With the Stream Wait Events that tie each
    compute to its receive (HTA's sync edges), the receive ends where the compute began: every
    step replays to its length, only rank 0 holds more than the ideal, and its gain is the one
    with the ends recorded right."""
    forward, backward = [100.0] * 8, [200.0] * 8
    forward[0], backward[0] = 160.0, 320.0
    mesh = {r: {"pp": r // 2, "dp": r % 2} for r in range(8)}
    untied = gpu_pipelines(4, 2, 6, forward, backward, late_end=30.0)
    found = replayed([step_graph(0, untied[0], untied[1])], [], mesh)  # type: ignore[list-item]
    assert found is not None and found.fidelity.worst > 0.05
    right = replay_of(gpu_pipelines(4, 2, 6, forward, backward)[:2], mesh)
    tied = replay_of(gpu_pipelines(4, 2, 6, forward, backward, late_end=30.0, tied=True)[:2], mesh)
    assert tied.most is not None and (tied.most.dimension, tied.most.index) == ("rank", 0)
    assert max(v for r, v in tied.by_rank.items() if r != 0) <= 1.0 + 1e-9
    assert (tied.gains[0].what, tied.gains[0].rank) == ("rank like its peers", 0)
    assert tied.gains[0].gain_ms == pytest.approx(right.gains[0].gain_ms, rel=1e-6)


@pytest.mark.parametrize("sent", [True, False])
def test_a_gloo_senders_wait_for_its_receiver_is_waiting_however_the_clocks_disagree(sent: bool) -> None:
    """Two stages on gloo (a CPU lane each). Stage 0 sends microbatch 0, computes microbatch 1,
    then waits in the schedule's ``work.wait()`` (no operator: the host's, on its lane) until its
    send meets the receive that stage 1 posts after 4 ms of host work; it goes on at its send's
    end (5000 µs), posting its next receive at 5050. The receive's end, read on stage 1's clock,
    is 5200. Read there, the receive posted at 5050 looked like a launch before the wait, and
    the 3 ms stage 0 waited its own host work (dp=2,pp=2 on the test cluster: rank 1's host
    18 ms a step over a balanced job's, of rank 3's 60 ms). With the send's own end, stage 0
    holds no host work, and stage 1 like its peer gains its 4 ms less the microbatch it waits
    for anyway."""
    from profiling.analysis.across_ranks.critical_path.rank_events import HOST
    from profiling.analysis.across_ranks.critical_path.walk import Meeting, RankStep

    forward = PHASES.index("forward")
    backward = PHASES.index("backward")
    ranks = {
        0: RankStep(0, 0.0, 7000.0, lane_of([
            (0.0, 1000.0, "compute", "F0", forward), (1000.0, 2000.0, "compute", "F1", forward),
            (2000.0, 6000.0, "host", "Python, outside torch's operators", -1),
            (6000.0, 7000.0, "compute", "B0", backward),
        ])),
        1: RankStep(1, 0.0, 6000.0, lane_of([
            (0.0, 4000.0, "host", "Python, outside torch's operators", -1),
            (4000.0, 5200.0, "communication", "gloo:recv", -1),
            (5200.0, 5900.0, "compute", "F0", forward), (5900.0, 6000.0, "compute", "B0", backward),
        ])),
    }  # fmt: skip
    meetings = [
        Meeting("recv_ F0", {0: 1000.0, 1: 4000.0}, {1: 5200.0}, True, {0: 5000.0} if sent else {}),
        Meeting("recv_ B0", {1: 5900.0, 0: 5050.0}, {0: 6000.0}, True, {1: 6000.0} if sent else {}),
    ]
    graph = step_graph(0, ranks, meetings)
    assert isinstance(graph, StepGraph)
    if not sent:  # the receive's end alone: the wait read as stage 0's work
        assert graph.totals[0, HOST] == pytest.approx(3050.0)
        return
    assert graph.totals[0, HOST] == pytest.approx(0.0)
    found = replay_of((ranks, meetings))
    assert found.steps[0].measured_ms * 1e3 == pytest.approx(7000.0)
    assert (found.gains[0].what, found.gains[0].rank) == ("rank like its peers", 1)
    assert found.gains[0].gain_ms * 1e3 == pytest.approx(4000.0 - 1000.0)  # less stage 0's F0


def test_a_long_last_stage_of_gpu_pipelines_is_a_stage_finding() -> None:
    """The same pipelines with the last stage (ranks 6, 7) 50 % longer: a stage imbalance, no rank."""
    forward, backward = [100.0] * 8, [200.0] * 8
    for r in (6, 7):
        forward[r], backward[r] = 150.0, 300.0
    ranks, meetings, step = _pipelines(forward, backward)
    mean_f, mean_b = sum(forward) / 8, sum(backward) / 8
    ideal = _pipelines([mean_f] * 8, [mean_b] * 8)[2]
    stage = _pipelines([mean_f] * 6 + forward[6:], [mean_b] * 6 + backward[6:])[2]
    found = replay_of((ranks, meetings), {r: {"pp": r // 2, "dp": r % 2} for r in range(8)})
    assert found.slowdown == pytest.approx(step / ideal, rel=1e-3)
    assert found.by_mesh["pp"]["3"] == pytest.approx(stage / ideal, rel=1e-3)
    most = found.most
    assert most is not None and (most.dimension, most.index) == ("pp", 3), most
    assert (found.gains[0].what, found.gains[0].coordinate) == ("stage like the median stage", "pp 3")


def test_a_rank_with_an_empty_lane_is_replayed_not_a_traceback() -> None:
    """A GPU rank whose kernels have no launch has an empty lane in the step: the replay takes
    it as no work (numpy's bincount of no spans is int64; the sums were cast into it)."""
    ranks, meetings = data_parallel([10.0] * 2, [20.0] * 2, transfer=5.0, optimizer=5.0)
    ranks[1] = dataclasses.replace(ranks[1], source=lane_of([]))
    graph = step_graph(0, ranks, meetings)
    assert isinstance(graph, StepGraph)
    found = replayed([graph], [])
    assert found is not None and found.slowdown > 0


def _undetermined() -> Straggler:
    return Straggler(
        verdict="undetermined",
        rank=None,
        text="straggler undetermined: 3 step(s) recorded, 8 needed with 16 ranks (--active)",
        ranks_compared=list(range(16)),
        ranks_without_paired_clock=[],
        collectives=3,
        steps=3,
        step_noise_ms=None,
        threshold_ms=None,
        clock_uncertainty_us=0.0,
        min_lateness_us=0.0,
        compute_ms={},
    )


def test_three_traced_steps_are_decided_by_the_replay_against_the_step_logs_noise() -> None:
    """The tutorial's schedule traces 3 steps: too few for arrival's test, never too few for the
    replay, judged against the noise the step logs give (they hold every step)."""
    forward, backward = [10.0] * 16, [20.0] * 16
    forward[7], backward[7] = 12.5, 25.0
    found = replay_of(data_parallel(forward, backward, transfer=5.0, optimizer=5.0), steps=3)
    decided = follows_replay(_undetermined(), found, lambda rank: f"rank {rank}", logs_noise_ms=0.001)
    assert decided is not None and (decided.verdict, decided.rank) == ("straggler", 7)
    assert "from the replay of step(s) 0-2" in decided.text
    noisy = follows_replay(_undetermined(), found, lambda rank: f"rank {rank}", logs_noise_ms=1.0)
    assert noisy is not None and noisy.verdict == "undetermined"  # 7 us a step, within 1 ms
    assert follows_replay(_undetermined(), found, lambda rank: f"rank {rank}") == _undetermined()
