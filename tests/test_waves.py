"""The replay a wave at a time (profiling/analysis/across_ranks/critical_path/waves.py) against the
replay an event at a time it replaced, on random graphs: the same clocks, but for rounding, in
every variant; and a graph whose ranks wait on each other in a cycle is refused, naming them."""

from __future__ import annotations

import random

import numpy as np
import pytest

from profiling.analysis.across_ranks.critical_path import replay as replay_module
from profiling.analysis.across_ranks.critical_path.graph import StepGraph
from profiling.analysis.across_ranks.critical_path.rank_events import WORK_KINDS
from profiling.analysis.across_ranks.critical_path.replay import (
    AT_MOST_TYPICAL,
    MEAN,
    MEASURED,
    ZERO,
    Variants,
    replay,
    scales,
)
from profiling.analysis.across_ranks.critical_path.waves import ARRIVE, BLOCK, waves_of


def _graph(seed: int, ranks: int, meetings: int) -> StepGraph:
    """Meetings in one order for all, each of a random group: its members arrive, then some of
    them block in it (a send's sender goes on); each rank's work before each event random."""
    rng = random.Random(seed)
    events: list[list[tuple[int, int, float]]] = [[] for _ in range(ranks)]
    members = []
    for meeting in range(meetings):
        group = rng.sample(range(ranks), rng.randint(1, min(ranks, 5)))
        members.append(len(group))
        for rank in group:
            events[rank].append((ARRIVE, meeting, 0.0))
            if rng.random() < 0.7:
                events[rank].append((BLOCK, meeting, rng.uniform(0.0, 50.0)))
    kinds = len(WORK_KINDS)
    work = [
        np.array([[rng.uniform(0, 100) for _ in range(kinds)] for _ in range(len(e) + 1)]) for e in events
    ]
    starts = np.array([rng.uniform(0, 20) for _ in range(ranks)])
    return StepGraph(
        step=0,
        ranks=list(range(ranks)),
        starts=starts,
        measured_us=1.0,
        events=events,
        work=work,
        members=members,
        kinds=[rng.choice(["allreduce_", "send_"]) for _ in range(meetings)],
        typical_us=[rng.uniform(0.0, 30.0) for _ in range(meetings)],
    )


def _variants(seed: int, ranks: int, count: int = 6) -> Variants:
    rng = np.random.default_rng(seed)
    modes = [MEASURED, MEAN, AT_MOST_TYPICAL, ZERO]
    return Variants(
        work=rng.choice(modes, size=(count, ranks, len(WORK_KINDS))),
        transfer=rng.choice(modes, size=(count, ranks)),
        transfer_kind={"send_": rng.choice(modes, size=(count, ranks))},
    )


def _one_event_at_a_time(graph: StepGraph, variants: Variants) -> tuple[np.ndarray, list[list[np.ndarray]]]:
    """The replay as it was before the waves: each rank as far as it can go, again while any
    went on; (V, R) ends and each rank's clock at each event it left."""
    scale = scales(graph, variants, None)
    rows, count = len(graph.ranks), variants.work.shape[0]
    t = [np.full(count, graph.starts[row]) for row in range(rows)]
    adds = [graph.work[row] @ scale[:, row, :].T for row in range(rows)]
    transfers = [
        [_transfer(graph, variants, row, m, t) for _, m, t in mine] for row, mine in enumerate(graph.events)
    ]
    done, added = [0] * rows, [False] * rows
    left: list[list[np.ndarray]] = [[] for _ in range(rows)]
    arrived: list[list[np.ndarray]] = [[] for _ in graph.members]
    moved = True
    while moved:
        moved = False
        for row in range(rows):
            events = graph.events[row]
            while done[row] < len(events):
                event, meeting, _ = events[done[row]]
                if not added[row]:
                    t[row] = t[row] + adds[row][done[row]]
                    added[row] = True
                if event == ARRIVE:
                    arrived[meeting].append(t[row])
                elif len(arrived[meeting]) < graph.members[meeting]:
                    break
                else:
                    t[row] = np.maximum(t[row], np.max(arrived[meeting], axis=0) + transfers[row][done[row]])
                left[row].append(t[row])
                done[row] += 1
                added[row] = False
                moved = True
    ends = np.stack([t[row] + adds[row][-1] for row in range(rows)], axis=1)
    return ends - float(np.min(graph.starts)), left


def _transfer(graph: StepGraph, variants: Variants, row: int, meeting: int, measured: float) -> np.ndarray:
    """(V,): what each variant makes of a block's transfer, by its mode for the rank."""
    modes = variants.transfer_kind.get(graph.kinds[meeting], variants.transfer)[:, row]
    typical = graph.typical_us[meeting]
    by_mode = {MEASURED: measured, AT_MOST_TYPICAL: min(measured, typical), MEAN: typical, ZERO: 0.0}
    return np.array([by_mode[int(mode)] for mode in modes])


@pytest.mark.parametrize("jobs", [1, 2])
def test_variants_replayed_in_blocks_and_threads_are_replayed_as_one_at_a_time(
    jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _graph(5, ranks=7, meetings=19)
    events = sum(graph.waves.counts)
    monkeypatch.setattr(replay_module, "BLOCK_CELLS", 4 * events)  # blocks of 4 variants, the last of 3
    variants = _variants(5, len(graph.ranks), count=11)
    found = replay(graph, variants, jobs=jobs)
    assert not isinstance(found, str)
    ends, _ = _one_event_at_a_time(graph, variants)
    assert np.allclose(found.ends, ends, rtol=1e-12, atol=0.0)
    assert np.allclose(found.work, np.einsum("vrk,rk->vr", scales(graph, variants, None), graph.totals))


@pytest.mark.parametrize("seed", range(12))
def test_the_waves_replay_each_event_as_one_event_at_a_time_did(seed: int) -> None:
    graph = _graph(seed, ranks=3 + seed % 6, meetings=4 + 3 * seed)
    variants = _variants(seed, len(graph.ranks))
    found = replay(graph, variants, timed=True)
    assert not isinstance(found, str) and found.left is not None and found.reached is not None
    ends, left = _one_event_at_a_time(graph, variants)
    # equal but for the last bits: the replay scales a group of ranks' work in one product, whose
    # sums over the kinds may round in another order than a rank's own product
    assert np.allclose(found.ends, ends, rtol=1e-12, atol=0.0)
    for row, mine in enumerate(left):
        assert np.allclose(found.left[row], np.array(mine).reshape(len(mine), -1), rtol=1e-12, atol=0.0)
        assert found.reached[row].shape == found.left[row].shape
        assert (found.reached[row] <= found.left[row]).all()  # a wait only ever holds a rank back


def test_a_wave_holds_each_rank_once_and_a_block_after_every_arrival_at_its_meeting() -> None:
    graph = _graph(5, ranks=6, meetings=20)
    order = graph.waves
    assert order.stuck == [] and sum(len(w.events) for w in order.waves) == sum(order.counts)
    wave_of: dict[int, int] = {}
    for number, wave in enumerate(order.waves):
        assert len(set(wave.rows.tolist())) == len(wave.rows)
        wave_of.update(dict.fromkeys(wave.events.tolist(), number))
    flat = [(event, meeting) for mine in graph.events for event, meeting, _ in mine]
    for index, (event, meeting) in enumerate(flat):
        if event == BLOCK:
            arrivals = [wave_of[i] for i, (e, m) in enumerate(flat) if e == ARRIVE and m == meeting]
            assert wave_of[index] > max(arrivals)


def test_ranks_that_wait_on_each_other_in_a_cycle_are_named() -> None:
    # rank 0 waits in meeting 1 before it arrives at 0; rank 1 waits in 0 before it arrives at 1
    events = [[(BLOCK, 1, 1.0), (ARRIVE, 0, 0.0)], [(BLOCK, 0, 1.0), (ARRIVE, 1, 0.0)]]
    order = waves_of(events, [1, 1], [1.0, 1.0])
    assert order.stuck == [0, 1] and order.waves == []
    graph = StepGraph(
        step=3,
        ranks=[4, 9],
        starts=np.zeros(2),
        measured_us=1.0,
        events=events,
        work=[np.ones((len(e) + 1, len(WORK_KINDS))) for e in events],
        members=[1, 1],
        kinds=["allreduce_", "send_"],
        typical_us=[1.0, 1.0],
    )
    found = replay(graph, _variants(0, 2))
    assert found == "rank(s) [4, 9] wait on each other in a cycle (their clocks disagree)"
