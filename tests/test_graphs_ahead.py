"""Steps' graphs begun ahead (profiling/analysis/across_ranks/critical_path/ahead.py): a child
forked before the walk and the report's process taking ranks from one counter make the same
graphs as step_graphs, for the steps walked only; the lines said in either come back; a child
whose graphs are not taken is ended; a child's error is raised in the report's process."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest

from profiling.analysis.across_ranks.critical_path.ahead import GraphsAhead, HeldLanes
from profiling.analysis.across_ranks.critical_path.graph import FORK_RANKS, StepGraph, step_graphs
from profiling.analysis.across_ranks.critical_path.meetings import StepInputs
from profiling.analysis.per_trace.lanes import Lane
from tests.step_graphs import data_parallel


@dataclasses.dataclass
class _Held:
    """A RankLanes' part the graphs use: the lines said, and the ranks let go (in this process)."""

    remade: list[str] = dataclasses.field(default_factory=list)
    forgotten: list[int] = dataclasses.field(default_factory=list)

    def forget_rank(self, rank: int) -> None:
        self.forgotten.append(rank)


def _in_process(step: int) -> str:
    return f"rank 5's lanes of step {step} made again, in process {os.getpid()}"


def _steps(held: _Held, said: Callable[[int], str] = _in_process) -> list[StepInputs]:
    """FORK_RANKS data-parallel ranks, 3 steps; reading rank 5's lanes says ``said(step)``."""
    steps: list[StepInputs] = []
    for step in range(3):
        forward = [10.0 + (rank % 5) + step for rank in range(FORK_RANKS)]
        ranks, meetings = data_parallel(forward, [20.0] * FORK_RANKS, transfer=5.0, optimizer=5.0)
        lane = ranks[5].lane

        def remade(step: int = step, lane: Lane | None = lane) -> Lane | None:
            held.remade.append(said(step))
            return lane

        ranks[5] = dataclasses.replace(ranks[5], source=remade)
        steps.append((step, dict(ranks), meetings))
    return steps


def _inputs(held: _Held) -> tuple[HeldLanes, list[StepInputs]]:
    return held, _steps(held)


@pytest.fixture(autouse=True)
def _forks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite has imported torch (other tests): this process forks as if it had not."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)


@pytest.mark.parametrize("children", [1, 2])
def test_graphs_begun_ahead_are_those_made_after_the_walk_for_the_steps_walked(children: int) -> None:
    alone = step_graphs(_steps(_Held())[1:])
    ahead = GraphsAhead(lambda: _inputs(_Held()), list(range(FORK_RANKS)), children)
    here = _Held()
    try:
        walked = [
            (step, {r: f for r, f in ranks.items() if f is not None}, m)
            for step, ranks, m in _steps(here)[1:]
        ]
        here.remade.clear()  # the steps made here: what is said from now is the graphs'
        time.sleep(1.0)  # the walk, meanwhile: the child has taken ranks by now
        made = ahead.graphs(walked, here.forget_rank, here.remade)
    finally:
        ahead.close()
    assert len(made) == len(alone) == 2  # step 0, not walked, is left out
    for one, two in zip(alone, made, strict=True):
        assert isinstance(one, StepGraph) and isinstance(two, StepGraph)
        assert (one.step, one.events, one.typical_us, one.measured_us) == (
            two.step,
            two.events,
            two.typical_us,
            two.measured_us,
        )
        assert all(np.array_equal(a, b) for a, b in zip(one.work, two.work, strict=True))
    # rank 5's lanes were read in one process or the other: its lines come back, the walked steps'
    # and, from the child, the one it made of step 0 too
    said = sorted(note.rsplit(",", 1)[0] for note in here.remade)
    assert {f"rank 5's lanes of step {step} made again" for step in (1, 2)} <= set(said)
    assert set(here.forgotten) < set(range(FORK_RANKS))  # the children took some ranks
    assert len(said) == len(set(said))  # each line once


def test_a_child_whose_graphs_are_not_taken_is_ended() -> None:
    ahead = GraphsAhead(lambda: _inputs(_Held()), list(range(FORK_RANKS)))
    ahead.close()  # the path was kept: no graph is needed
    ahead.close()  # twice is once


def test_a_childs_error_is_raised_where_its_graphs_are_taken() -> None:
    def broken() -> tuple[HeldLanes, list[StepInputs]]:
        raise ValueError("the meetings could not be read")

    ahead = GraphsAhead(broken, list(range(FORK_RANKS)))
    try:
        with pytest.raises(ValueError, match="the meetings could not be read"):
            ahead.graphs([], _Held().forget_rank, [])
    finally:
        ahead.close()


def test_a_lanes_file_made_again_by_the_walk_and_a_child_is_said_once() -> None:
    line = "rank 5's lanes file was made again from its trace: its checksum differs"

    def inputs() -> tuple[HeldLanes, list[StepInputs]]:
        held = _Held()
        return held, _steps(held, lambda step: line)

    ahead = GraphsAhead(inputs, list(range(FORK_RANKS)))
    try:
        time.sleep(1.0)  # the child takes the first ranks, rank 5 among them, while this one walks
        notes = [line]  # the walk reached rank 5 here, and made its file again too
        ahead.graphs(_steps(_Held())[1:], _Held().forget_rank, notes)
    finally:
        ahead.close()
    assert notes == [line]
