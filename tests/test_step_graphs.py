"""Steps' graphs made a rank at a time (profiling/analysis/across_ranks/critical_path/graph.py,
step_graphs): the same graphs as made a step at a time, each rank's lanes loaded only once the
ranks before it are done with, and a step whose rank has no lane said, the others made; at
many ranks the same graphs made in two processes."""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest

from profiling.analysis.across_ranks.critical_path.graph import FORK_RANKS, StepGraph, step_graph, step_graphs
from profiling.analysis.across_ranks.critical_path.walk import Meeting, RankStep
from profiling.analysis.per_trace.lanes import Lane
from tests.step_graphs import data_parallel


def _steps(count: int) -> list[tuple[int, dict[int, RankStep], list[Meeting]]]:
    """``count`` steps of 4 data-parallel ranks, rank 2 slower in step 1."""
    steps = []
    for step in range(count):
        forward = [10.0, 10.0, 15.0 if step == 1 else 10.0, 10.0]
        ranks, meetings = data_parallel(forward, [20.0] * 4, transfer=5.0, optimizer=5.0)
        steps.append((step, ranks, meetings))
    return steps


def test_graphs_made_a_rank_at_a_time_are_those_made_a_step_at_a_time() -> None:
    steps = _steps(3)
    together = step_graphs(steps)
    for (step, ranks, meetings), made in zip(steps, together, strict=True):
        alone = step_graph(step, ranks, meetings)
        assert isinstance(made, StepGraph) and isinstance(alone, StepGraph)
        assert (made.events, made.typical_us, made.members) == (alone.events, alone.typical_us, alone.members)
        assert all(np.array_equal(a, b) for a, b in zip(made.work, alone.work, strict=True))
    assert [g.measured_us for g in together if isinstance(g, StepGraph)] == [40.0, 45.0, 40.0]


def test_each_ranks_lanes_are_loaded_once_the_ranks_before_it_are_done_with() -> None:
    loaded: list[tuple[int, int]] = []  # (rank, step), in the order loaded
    steps = []
    for step, ranks, meetings in _steps(3):
        counted = {}
        for rank, found in ranks.items():
            lane = found.lane

            def load(rank: int = rank, step: int = step, lane: Lane | None = lane) -> Lane | None:
                loaded.append((rank, step))
                return lane

            counted[rank] = dataclasses.replace(found, source=load)
        steps.append((step, counted, meetings))
    done: list[tuple[int, set[int]]] = []  # (rank, the ranks loaded by then)
    step_graphs(steps, lambda rank: done.append((rank, {r for r, _ in loaded})))
    assert [rank for rank, _ in done] == [0, 1, 2, 3]
    assert all(by_then == set(range(rank + 1)) for rank, by_then in done)
    assert sorted(loaded) == [(rank, step) for rank in range(4) for step in range(3)]  # each once


def test_a_step_whose_rank_has_no_lane_is_said_and_the_others_made() -> None:
    steps = _steps(2)
    step, ranks, meetings = steps[1]
    steps[1] = (step, {**ranks, 2: dataclasses.replace(ranks[2], source=lambda: None)}, meetings)
    made = step_graphs(steps)
    assert isinstance(made[0], StepGraph)
    assert made[1] == "rank 2 has no lane of this step"


def _noted_steps(notes: list[str]) -> list[tuple[int, dict[int, RankStep], list[Meeting]]]:
    """FORK_RANKS data-parallel ranks, 2 steps; ranks 3 and 4 say where their lanes are read."""
    steps = []
    for step in range(2):
        forward = [10.0 + (rank % 7) for rank in range(FORK_RANKS)]
        ranks, meetings = data_parallel(forward, [20.0] * FORK_RANKS, transfer=5.0, optimizer=5.0)
        for rank in (3, 4):  # one rank of each process
            lane = ranks[rank].lane

            def remade(rank: int = rank, step: int = step, lane: Lane | None = lane) -> Lane | None:
                notes.append(f"rank {rank}'s lanes of step {step} made again, in process {os.getpid()}")
                return lane

            ranks[rank] = dataclasses.replace(ranks[rank], source=remade)
        steps.append((step, ranks, meetings))
    return steps


def test_graphs_made_in_two_processes_are_those_made_in_one_and_their_notes_come_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At FORK_RANKS ranks, two processes (a forked child makes every other rank): the same
    graphs; the lines said as a lane is read in the child (a lanes file made again) are said here.
    The suite has imported torch (other tests): this process forks as if it had not."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    alone = step_graphs(_noted_steps([]))
    notes: list[str] = []
    forked = step_graphs(_noted_steps(notes), jobs=2, notes=notes)
    for one, two in zip(alone, forked, strict=True):
        assert isinstance(one, StepGraph) and isinstance(two, StepGraph)
        assert (one.events, one.typical_us, one.measured_us) == (two.events, two.typical_us, two.measured_us)
        assert all(np.array_equal(a, b) for a, b in zip(one.work, two.work, strict=True))
    assert sorted(note.rsplit(",", 1)[0] for note in notes) == [
        f"rank {rank}'s lanes of step {step} made again" for rank in (3, 4) for step in range(2)
    ]
    assert len({note.rsplit(" ", 1)[1] for note in notes}) == 2  # here, and in the child
