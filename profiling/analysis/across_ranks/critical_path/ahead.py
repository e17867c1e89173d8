"""Each step's graph begun before the walk reaches it: on a cold report of many ranks,
children forked as the summary begins (the report's ``--jobs`` less one) make the ranks' parts
of every step's graph (:mod:`.graph`) on the cores the summary leaves idle, and the report's
process joins them once it has walked.

They take ranks from one shared counter, a few at a time, so none waits on another's share:
the children take all they can while the summary runs, the report's process the rest with
them. The graphs are the same as :func:`.graph.step_graphs` makes (tests/test_graphs_ahead.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Protocol

from profiling.analysis.across_ranks.critical_path.graph import (
    FORK_RANKS,
    Parts,
    StepGraph,
    Walked,
    assembled,
    frames_of,
    packed,
    parts_of,
    unpacked,
)
from profiling.analysis.across_ranks.critical_path.meetings import StepInputs, walk_inputs
from profiling.analysis.across_ranks.critical_path.meetings import walked as walked_step
from profiling.analysis.across_ranks.critical_path.walk import Key
from profiling.analysis.clocks.rank_clocks import Aligned
from slurm.common.forked import Forked, fork_safe

TAKEN = 8  # ranks taken from the counter at once: 10 ms of parts at 4096 ranks


class HeldLanes(Protocol):
    """What the child needs of :class:`.rank_lanes.RankLanes`: to let a rank's lanes go, and
    the lines said where a lanes file was made again."""

    remade: list[str]

    def forget_rank(self, rank: int) -> None: ...


Inputs = Callable[[], tuple[HeldLanes, list[StepInputs]]]  # the steps and their meetings, made in the child


class GraphsAhead:
    """Every step's graph, begun in ``children`` forked children now (``inputs``: the steps
    and their meetings, made in each); :meth:`graphs` joins them for the steps walked."""

    def __init__(self, inputs: Inputs, everyone: list[int], children: int = 1) -> None:
        self._counter = multiprocessing.get_context("fork").Value("q", 0)
        self._everyone = everyone
        self._children: list[Forked[tuple[list[int], bytes]]] = []
        try:
            self._children.extend(Forked(self._ahead, inputs) for _ in range(children))
        except BaseException:
            self.close()
            raise

    def graphs(
        self, walked: Walked, done_with: Callable[[int], None], notes: list[str]
    ) -> list[StepGraph | str]:
        """The graphs of the steps ``walked`` (a subset of the child's, in order), as
        :func:`.graph.step_graphs` makes them: this process takes the ranks left."""
        frames = frames_of(walked)
        found = [parts_of(frames, self._taken(), done_with, notes)]
        at = {step: index for index, (step, *_) in enumerate(walked)}
        for child in self._children:
            steps, sent = child.result()
            theirs, added = unpacked(sent)
            kept = [(at[steps[index]], rank, part) for index, rank, part in theirs if steps[index] in at]
            # a damaged lanes file the walk reached here and a child there was made again twice
            found.append((kept, [line for line in added if line not in notes]))
        return assembled(frames, found, notes)

    def close(self) -> None:
        """The children ended where their graphs were not taken (no step was walked)."""
        for child in self._children:
            child.close()

    def _ahead(self, inputs: Inputs) -> tuple[list[int], bytes]:
        """In the child: every step's parts for the ranks it takes, packed to be sent."""
        held, steps = inputs()
        walked = [walked_step(step) for step in steps]
        found: Parts = parts_of(frames_of(walked), self._taken(), held.forget_rank, held.remade)
        return [step for step, *_ in walked], packed(found)

    def _taken(self) -> Iterator[int]:
        """The ranks this process takes, until none is left."""
        while True:
            with self._counter.get_lock():
                first = self._counter.value
                self._counter.value = first + TAKEN
            if first >= len(self._everyone):
                return
            yield from self._everyone[first : first + TAKEN]


@contextlib.contextmanager
def graphs_ahead(
    per_rank: Mapping[int, list[Aligned]],
    spans: Mapping[int, Mapping[Key, tuple[float, float]] | None],
    anchor_steps: Mapping[Key, int],
    members: Mapping[Key, frozenset[int]] | None,
    jobs: int,
) -> Iterator[GraphsAhead | None]:
    """The graphs begun ahead in ``jobs`` - 1 children, where there are
    :data:`.graph.FORK_RANKS` ranks or more and ``jobs`` > 1 (and forking is safe); None
    elsewhere. The children are ended on leaving."""
    if jobs < 2 or len(per_rank) < FORK_RANKS or not fork_safe():
        yield None
        return
    inputs = partial(walk_inputs, per_rank, spans, anchor_steps, members, [])
    ahead = GraphsAhead(inputs, sorted(per_rank), jobs - 1)
    try:
        yield ahead
    finally:
        ahead.close()
