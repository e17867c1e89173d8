"""The critical path of a step across ranks: what set its length, and what fixing each part
would gain.

The walk starts at the step's end on the rank that ended it last and goes back in time:

- on a rank, it follows the rank's *lane*, what the rank was doing at each instant of its step
  (GPU kernels, else CPU operators; a gap where the GPU had nothing queued is the host's);
- at a collective every rank reached (a *meeting*), the rank could not go on before the last
  rank arrived: the time after that arrival is the collective's transfer, the time before it
  waiting, which is never on the path; the walk goes on on the last rank, at its arrival.

A rank goes through a meeting only where it was waiting in it: where its lane shows its own
work (compute or memory) just before the meeting ended, the collective ran hidden under that
work and the walk stays on the lane. The walk ends at the ending rank's step start, so the
segments of a step add up to that rank's step, exactly on the common clock (the clocks' ± is
what the times may be off by). A step with a rank whose clock could not be aligned, or with no
record of that step, cannot be followed: it is *undecided*, with the reason, never guessed.

In a pipeline (``stage_of``: each rank's stage) the path runs through every stage: forward
from the first stage to the one it spends the most time on, back through the others after.
What it runs on those other stages in the forward and backward passes is the pipeline's
*bubble*: the time the path's own stage sat idle, waiting for its neighbours to fill the
pipeline and drain it (an equal pipeline of p stages and m microbatches, 1F1B: (p - 1) of the
m + p - 1 microbatches' time, the textbook bubble). Those segments are kind ``bubble``; the
collectives and the optimizer of the other stages are not (they are no neighbour's wait).

The gains are estimates from the path, not a simulation:

- ``straggler``: at each meeting on the path, the last rank's lead over the next-to-last (had it
  arrived with the median rank, the collective would have begun when the next-to-last arrived);
  kept by rank (:attr:`StepPath.leads_us`), so that the report can count one rank's;
- ``overlap``: the communication on the path (hidden under compute, it would cost nothing);
- ``host``: the host time on the path (the GPU never left without work);
- ``bubble``: the bubble on the path (more microbatches, or an interleaved schedule, shrink it).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from profiling.analysis.per_trace.lanes import EPSILON_US, KINDS, PHASES, Lane

# a collective across the ranks: (its window's first step, its key, or the first rank's index)
Key = tuple[int, int | str]

WORK = frozenset(("compute", "memory"))  # the rank's own work: a collective under it is hidden
WHAT_IF = {
    "straggler": "the last rank at each collective on the path arrives with the median rank",
    "overlap": "the communication on the path is hidden under compute",
    "host": "the host never leaves the GPU without work on the path",
    "bubble": "the pipeline's fill and drain cost nothing",
}
BUBBLE = "bubble"
PATH_KINDS = (*KINDS, BUBBLE)  # a path's segments: a lane's kinds, and the pipeline's bubble
_FILLING = frozenset(("compute", "memory"))  # the kinds a neighbour stage's bubble is made of
_UNCOVERED = "outside the trace's operators"


@dataclasses.dataclass(frozen=True)
class RankStep:
    """One rank's step on the common clock, and its lane (time the lane does not cover reads
    as ``other``); the lane may come as a function that loads it, called only if the walk
    reaches this rank (None: it has none)."""

    rank: int
    start: float
    end: float
    source: Lane | Callable[[], Lane | None]

    @functools.cached_property
    def lane(self) -> Lane | None:
        return self.source if isinstance(self.source, Lane) else self.source()

    def forget_lane(self) -> None:
        """Let the lane go once the step is walked and replayed (loaded again if asked): the
        replay loads every rank's, 4096 of them a step at 4096 ranks."""
        self.__dict__.pop("lane", None)


@dataclasses.dataclass(frozen=True)
class Meeting:
    """A collective every rank of the step reached, on the common clock."""

    label: str
    arrivals: Mapping[int, float]
    ends: Mapping[int, float]
    # a transfer whose sender waits for the receive (gloo's send, a rendezvous the pipeline's
    # schedule waits on); an NCCL send's kernel holds no compute on its GPU
    rendezvous: bool = True
    # a rendezvous sender's own end of its send, on its own clock moved to the common one: where
    # it went on, which the receive's end (the other rank's clock) can miss by the clocks' error
    sent: Mapping[int, float] = dataclasses.field(default_factory=dict)


class Segment(NamedTuple):
    """A stretch of the path (a tuple: a dense step's path holds thousands)."""

    rank: int
    kind: str
    start: float
    end: float
    name: str
    phase: str | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclasses.dataclass(frozen=True)
class StepPath:
    step: int
    ending_rank: int
    start: float
    end: float
    segments: list[Segment]  # in time order, contiguous from start to end
    gains_us: dict[str, float]  # "overlap", "host" -> how much shorter the step would be
    leads_us: dict[tuple[int, str], float]  # (last rank, collective) -> its lead: the straggler gain

    @property
    def duration(self) -> float:
        return self.end - self.start

    def straggler_us(self, rank: int | None) -> float:
        """The straggler gain of ``rank``: its leads at the meetings on the path."""
        held = sum(lead for (late, _), lead in self.leads_us.items() if late == rank)
        return min(held, self.duration)


@dataclasses.dataclass(frozen=True)
class Undecided:
    step: int
    why: str


def step_path(
    step: int,
    ranks: Mapping[int, RankStep | None],
    meetings: Sequence[Meeting],
    stage_of: Mapping[int, int] | None = None,
) -> StepPath | Undecided:
    """The path of one step; ``meetings`` in the order they began, ``ranks[r]`` None where rank
    r's clock could not be aligned or it has no record of the step; ``stage_of``: each rank's
    pipeline stage, where the job has a pipeline (its bubble is then told apart)."""
    missing = sorted(rank for rank, found in ranks.items() if found is None)
    if missing:
        return Undecided(step, f"rank(s) {_listed(missing)}: clock not aligned, or no record of the step")
    if not ranks:
        return Undecided(step, "no rank recorded it")
    steps = {rank: found for rank, found in ranks.items() if found is not None}
    ending = max(steps, key=lambda rank: (steps[rank].end, -rank))
    floor, t, rank = steps[ending].start, steps[ending].end, ending
    backwards = _Pieces()
    leads: dict[tuple[int, str], float] = {}
    before = len(meetings)  # meetings left to pass, earliest first: each is passed once at most
    while t > floor + EPSILON_US:
        here = steps[rank]
        if here.lane is None:
            return Undecided(step, f"rank {rank} is on the path and has no lane of this step")
        found = _blocking(meetings[:before], here, t)
        if found is None:
            low = max(floor, here.start)
            backwards.lane(here, low, t)
            if low > floor:  # this rank began the step after the ending rank did
                backwards.one(rank, "other", floor, low, f"rank {rank}'s previous step")
            break
        before, meeting = found
        left = min(meeting.ends[rank], t)
        backwards.lane(here, max(floor, left), t)
        last = max(meeting.arrivals, key=lambda r: (meeting.arrivals[r], -r))
        arrived = min(meeting.arrivals[last], left)
        others = [a for r, a in meeting.arrivals.items() if r != last]
        if arrived > floor:
            backwards.one(rank, "communication", arrived, left, meeting.label)
            lead = max(0.0, arrived - max(others, default=arrived))
            if lead > 0:
                leads[(last, meeting.label)] = leads.get((last, meeting.label), 0.0) + lead
        else:
            backwards.one(rank, "communication", floor, left, meeting.label)
        t, rank = max(arrived, floor), last
    segments = backwards.joined()
    gains = {
        "overlap": sum(s.duration for s in segments if s.kind == "communication"),
        "host": sum(s.duration for s in segments if s.kind == "host"),
    }
    if stage_of and len(set(stage_of.values())) > 1:
        segments = _bubbled(segments, stage_of)
        gains[BUBBLE] = sum(s.duration for s in segments if s.kind == BUBBLE)
    return StepPath(step, ending, floor, steps[ending].end, segments, gains, leads)


def _bubbled(segments: list[Segment], stage_of: Mapping[int, int]) -> list[Segment]:
    """The segments with the pipeline's bubble told apart: the forward and backward work the
    path runs on stages other than the one it runs the most of it on (the ending stage's
    collectives and optimizer do not count: they come after the pipeline)."""
    filling = [s.kind in _FILLING and s.phase != "optimizer" and s.rank in stage_of for s in segments]
    on_stage: dict[int, float] = {}
    for s, fills in zip(segments, filling, strict=True):
        if fills:
            on_stage[stage_of[s.rank]] = on_stage.get(stage_of[s.rank], 0.0) + s.duration
    if not on_stage:
        return segments
    own = max(on_stage, key=lambda stage: (on_stage[stage], stage))  # a tie: the later stage
    return [
        s._replace(kind=BUBBLE) if fills and stage_of[s.rank] != own else s
        for s, fills in zip(segments, filling, strict=True)
    ]


def _blocking(meetings: Sequence[Meeting], here: RankStep, t: float) -> tuple[int, Meeting] | None:
    """The latest meeting that ended on this rank by ``t``, within its step, where it waited:
    (its index, it); None where the rank's own lane leads back to its step's start."""
    for index in range(len(meetings) - 1, -1, -1):
        meeting = meetings[index]
        end = meeting.ends.get(here.rank)
        if end is None or end > t + EPSILON_US:
            continue
        if end <= here.start:
            return None
        if here.lane is not None and here.lane.kind_before(end) in WORK:
            continue  # hidden under the rank's own work: not on the path
        return index, meeting
    return None


_OTHER = KINDS.index("other")
Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class _Pieces:
    """The path's segments as the walk finds them, latest first, each piece as columns (rank,
    kind, start, end, name, phase): a dense step's path crosses thousands of kernels, and a
    Python object for each (then joined) took most of the walk's time."""

    def __init__(self) -> None:
        self._backwards: list[Columns] = []

    def one(self, rank: int, kind: str, start: float, end: float, name: str) -> None:
        names = np.empty(1, dtype=object)
        names[0] = name
        self._backwards.append(
            (np.array([rank]), np.array([KINDS.index(kind)]), np.array([start]), np.array([end]), names,
             np.array([-1]))
        )  # fmt: skip

    def lane(self, here: RankStep, low: float, high: float) -> None:
        """The rank's lane from ``low`` to ``high``; time it does not cover is ``other``."""
        lane = here.lane
        assert lane is not None  # the walk stops at a rank without one
        first = int(np.searchsorted(lane.ends, low, side="right"))
        last = int(np.searchsorted(lane.starts, high, side="left"))
        starts = np.maximum(lane.starts[first:last], low)
        ends = np.minimum(lane.ends[first:last], high)
        # the gap after each span, up to the next span (the last: up to ``high``), and before the first
        following = np.append(starts[1:], high)
        after = np.flatnonzero(ends < following - EPSILON_US)
        first_start = starts[0] if len(starts) else high
        leading = [low] if first_start > low + EPSILON_US else []
        gap_starts = np.concatenate([ends[after], leading])
        gap_ends = np.concatenate([following[after], [first_start] * len(leading)])
        # spans, gaps after them, the gap before the first: each in its place in time
        order = np.argsort(
            np.concatenate([2 * np.arange(len(starts)) + 1, 2 * after + 2, [0] * len(leading)])
        )
        uncovered = np.empty(len(gap_starts), dtype=object)
        uncovered[:] = _UNCOVERED
        self._backwards.append(
            (
                np.full(len(order), here.rank),
                np.concatenate([lane.kinds[first:last], np.full(len(gap_starts), _OTHER)])[order],
                np.concatenate([starts, gap_starts])[order],
                np.concatenate([ends, gap_ends])[order],
                np.concatenate([lane.text_of(lane.names[first:last]), uncovered])[order],
                np.concatenate([lane.phases[first:last], np.full(len(gap_starts), -1)])[order],
            )
        )

    def joined(self) -> list[Segment]:
        """The segments in time order, neighbours of one rank and kind as one, named by the
        longest; empty ones dropped."""
        if not self._backwards:
            return []
        rank, kind, start, end, name, phase = (
            np.concatenate(c) for c in zip(*reversed(self._backwards), strict=True)
        )
        length = end - start
        kept = length > EPSILON_US
        rank, kind, start, end, name, phase, length = (
            a[kept] for a in (rank, kind, start, end, name, phase, length)
        )
        if not len(rank):
            return []
        begins = np.ones(len(rank), dtype=bool)
        begins[1:] = (
            (rank[1:] != rank[:-1]) | (kind[1:] != kind[:-1]) | (np.abs(end[:-1] - start[1:]) > EPSILON_US)
        )
        run = np.cumsum(begins) - 1
        firsts = np.flatnonzero(begins)
        lasts = np.append(firsts[1:] - 1, len(rank) - 1)
        by_length = np.lexsort((-length, run))  # stable: the first of equal lengths
        longest = by_length[np.searchsorted(run[by_length], np.arange(len(firsts)))]
        return [
            Segment(r, KINDS[k], s, e, n, PHASES[p] if p >= 0 else None)
            for r, k, s, e, n, p in zip(
                rank[firsts].tolist(), kind[longest].tolist(), start[firsts].tolist(), end[lasts].tolist(),
                name[longest].tolist(), phase[longest].tolist(), strict=True,
            )
        ]  # fmt: skip


def _listed(ranks: Sequence[int]) -> str:
    return ", ".join(str(rank) for rank in ranks[:8]) + (
        f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
    )
