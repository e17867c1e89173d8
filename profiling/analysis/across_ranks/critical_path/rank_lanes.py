"""Each rank's recorded steps for the critical path, their lanes loaded only where the walk or
the replay reaches them, and let go once done: at thousands of ranks the lanes are most of the
report's memory."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from profiling.analysis.across_ranks.critical_path.walk import RankStep
from profiling.analysis.clocks.rank_clocks import Aligned
from profiling.analysis.per_trace.lanes import Lane, StepLane
from profiling.analysis.per_trace.record import load_lanes


class RankLanes:
    """``steps``: each rank's recorded steps on the first rank's clock (None where its clock is
    not on the first rank's); a lanes file found damaged is made again from its trace, and
    ``remade`` hears a line for each (those made in another process are added to it there)."""

    def __init__(self, per_rank: Mapping[int, list[Aligned]], remade: list[str]) -> None:
        self.remade = remade
        # per rank: (a trace's last step, what lets the trace's lanes go)
        self._loaded: dict[int, list[tuple[int, Callable[[], None]]]] = {}
        self.steps = {rank: self._rank_steps(rank, traces) for rank, traces in per_rank.items()}

    def forget_step(self, step: int) -> None:
        """The step's lanes let go, and each trace's whose last step it was."""
        for found in self.steps.values():
            if (at := found.get(step)) is not None:
                at.forget_lane()
        for traces in self._loaded.values():
            for last, clear in traces:
                if last <= step:
                    clear()

    def forget_rank(self, rank: int) -> None:
        """The rank's lanes let go, of every step and trace."""
        for found in self.steps[rank].values():
            if found is not None:
                found.forget_lane()
        for _, clear in self._loaded.get(rank, []):
            clear()

    def _rank_steps(self, rank: int, traces: list[Aligned]) -> dict[int, RankStep | None]:
        found: dict[int, RankStep | None] = {}
        for t in traces:
            shift = t.clock.shift_us
            lanes = functools.cache(functools.partial(self._lanes_of, t))  # once a trace
            if t.record.steps:
                last = max(step.step for step in t.record.steps)
                self._loaded.setdefault(rank, []).append((last, lanes.cache_clear))
            for step in t.record.steps:
                span = (
                    (step.gpu.start_us, step.gpu.duration_us)
                    if step.gpu
                    else (step.start_us, step.duration_us)
                )
                start, end = span[0] + shift, span[0] + span[1] + shift
                lane = functools.partial(_lane, lanes, step.step, shift)
                found[step.step] = RankStep(rank, start, end, lane) if t.clock.paired else None
        return found

    def _lanes_of(self, trace: Aligned) -> tuple[list[StepLane], list[str]]:
        found, note = load_lanes(trace.record, trace.trace.source)
        if note is not None:
            self.remade.append(note)
        return found


def _lane(lanes: Callable[[], tuple[list[StepLane], list[str]]], step: int, shift: float) -> Lane | None:
    steps, names = lanes()
    return next((lane.lane(shift, names) for lane in steps if lane.step == step), None)
