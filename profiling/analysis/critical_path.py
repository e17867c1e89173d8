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

The gains are estimates from the path, not a simulation:

- ``straggler``: at each meeting on the path, the last rank's lead over the next-to-last (had it
  arrived with the median rank, the collective would have begun when the next-to-last arrived);
  kept by rank (:attr:`StepPath.leads_us`), so that the report can count one rank's;
- ``overlap``: the communication on the path (hidden under compute, it would cost nothing);
- ``host``: the host time on the path (the GPU never left without work).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence

import numpy as np

KINDS = ("compute", "communication", "memory", "host", "other")
PHASES = ("forward", "backward", "optimizer")  # of compute, where the trace says
WORK = frozenset(("compute", "memory"))  # the rank's own work: a collective under it is hidden
WHAT_IF = {
    "straggler": "the last rank at each collective on the path arrives with the median rank",
    "overlap": "the communication on the path is hidden under compute",
    "host": "the host never leaves the GPU without work on the path",
}
_EPSILON_US = 1e-6
_UNCOVERED = "outside the trace's operators"


@dataclasses.dataclass(frozen=True)
class Span:
    """A stretch of a rank's lane: what the rank was doing from ``start`` to ``end`` (µs)."""

    start: float
    end: float
    kind: str  # one of KINDS
    name: str  # the op or kernel (the longest, where a stretch joins several)
    phase: str | None = None  # forward, backward or optimizer, where the trace says


class Lane:
    """A rank's lane in one step: sorted, disjoint spans as parallel arrays (a dense GPU step
    has thousands; the walk reads the stretches it goes through)."""

    def __init__(
        self,
        starts: np.ndarray,
        ends: np.ndarray,
        kinds: np.ndarray,
        names: np.ndarray,
        phases: np.ndarray,
        text: Sequence[str],
    ) -> None:
        self.starts, self.ends = starts, ends
        self.kinds, self.names, self.phases, self.text = kinds, names, phases, text

    @classmethod
    def of(cls, spans: Sequence[Span]) -> Lane:
        text = list(dict.fromkeys(span.name for span in spans))
        return cls(
            np.array([s.start for s in spans], dtype=float),
            np.array([s.end for s in spans], dtype=float),
            np.array([KINDS.index(s.kind) for s in spans], dtype=np.int8),
            np.array([text.index(s.name) for s in spans], dtype=np.int32),
            np.array([PHASES.index(s.phase) if s.phase else -1 for s in spans], dtype=np.int8),
            text,
        )

    def __len__(self) -> int:
        return len(self.starts)

    def kind_before(self, at: float) -> str | None:
        """What the lane shows just before ``at``."""
        index = int(np.searchsorted(self.ends, at - _EPSILON_US, side="left"))
        if index < len(self) and self.starts[index] < at:
            return KINDS[self.kinds[index]]
        return None


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


@dataclasses.dataclass(frozen=True)
class Meeting:
    """A collective every rank of the step reached, on the common clock."""

    label: str
    arrivals: Mapping[int, float]
    ends: Mapping[int, float]


@dataclasses.dataclass(frozen=True)
class Segment:
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
    gains_us: dict[str, float]  # WHAT_IF -> how much shorter the step would be
    leads_us: dict[tuple[int, str], float]  # (last rank, collective) -> its lead: the straggler gain

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclasses.dataclass(frozen=True)
class Undecided:
    step: int
    why: str


def step_path(
    step: int, ranks: Mapping[int, RankStep | None], meetings: Sequence[Meeting]
) -> StepPath | Undecided:
    """The path of one step; ``meetings`` in the order they began, ``ranks[r]`` None where rank
    r's clock could not be aligned or it has no record of the step."""
    missing = sorted(rank for rank, found in ranks.items() if found is None)
    if missing:
        return Undecided(step, f"rank(s) {_listed(missing)}: clock not aligned, or no record of the step")
    if not ranks:
        return Undecided(step, "no rank recorded it")
    steps = {rank: found for rank, found in ranks.items() if found is not None}
    ending = max(steps, key=lambda rank: (steps[rank].end, -rank))
    floor, t, rank = steps[ending].start, steps[ending].end, ending
    backwards: list[Segment] = []
    leads: dict[tuple[int, str], float] = {}
    before = len(meetings)  # meetings left to pass, earliest first: each is passed once at most
    while t > floor + _EPSILON_US:
        here = steps[rank]
        if here.lane is None:
            return Undecided(step, f"rank {rank} is on the path and has no lane of this step")
        found = _blocking(meetings[:before], here, t)
        if found is None:
            low = max(floor, here.start)
            backwards += _lane_part(here, low, t)
            if low > floor:  # this rank began the step after the ending rank did
                backwards.append(Segment(rank, "other", floor, low, f"rank {rank}'s previous step"))
            break
        before, meeting = found
        left = min(meeting.ends[rank], t)
        backwards += _lane_part(here, max(floor, left), t)
        last = max(meeting.arrivals, key=lambda r: (meeting.arrivals[r], -r))
        arrived = min(meeting.arrivals[last], left)
        others = [a for r, a in meeting.arrivals.items() if r != last]
        if arrived > floor:
            backwards.append(Segment(rank, "communication", arrived, left, meeting.label))
            lead = max(0.0, arrived - max(others, default=arrived))
            if lead > 0:
                leads[(last, meeting.label)] = leads.get((last, meeting.label), 0.0) + lead
        else:
            backwards.append(Segment(rank, "communication", floor, left, meeting.label))
        t, rank = max(arrived, floor), last
    segments = _joined(list(reversed(backwards)))
    duration = steps[ending].end - floor
    gains = {
        "straggler": min(sum(leads.values()), duration),
        "overlap": sum(s.duration for s in segments if s.kind == "communication"),
        "host": sum(s.duration for s in segments if s.kind == "host"),
    }
    return StepPath(step, ending, floor, steps[ending].end, segments, gains, leads)


def _blocking(meetings: Sequence[Meeting], here: RankStep, t: float) -> tuple[int, Meeting] | None:
    """The latest meeting that ended on this rank by ``t``, within its step, where it waited:
    (its index, it); None where the rank's own lane leads back to its step's start."""
    for index in range(len(meetings) - 1, -1, -1):
        meeting = meetings[index]
        end = meeting.ends.get(here.rank)
        if end is None or end > t + _EPSILON_US:
            continue
        if end <= here.start:
            return None
        if here.lane is not None and here.lane.kind_before(end) in WORK:
            continue  # hidden under the rank's own work: not on the path
        return index, meeting
    return None


def _lane_part(here: RankStep, low: float, high: float) -> list[Segment]:
    """The rank's lane from ``low`` to ``high``, latest first; uncovered time is ``other``."""
    lane, rank = here.lane, here.rank
    assert lane is not None  # the walk stops at a rank without one
    first = int(np.searchsorted(lane.ends, low, side="right"))
    last = int(np.searchsorted(lane.starts, high, side="left"))
    starts = np.maximum(lane.starts[first:last], low).tolist()
    ends = np.minimum(lane.ends[first:last], high).tolist()
    kinds, names, phases = (a[first:last].tolist() for a in (lane.kinds, lane.names, lane.phases))
    found: list[Segment] = []
    t = high
    for start, end, kind, name, phase in zip(
        reversed(starts), reversed(ends), reversed(kinds), reversed(names), reversed(phases), strict=True
    ):
        if end < t - _EPSILON_US:
            found.append(Segment(rank, "other", end, t, _UNCOVERED))
        found.append(
            Segment(rank, KINDS[kind], start, end, lane.text[name], PHASES[phase] if phase >= 0 else None)
        )
        t = start
    if t > low + _EPSILON_US:
        found.append(Segment(rank, "other", low, t, _UNCOVERED))
    return found


def _joined(segments: list[Segment]) -> list[Segment]:
    """Neighbours of one rank and kind as one, named by the longest; empty ones dropped."""
    runs: list[list] = []  # [segment, its end, its longest part's length]
    for segment in segments:
        length = segment.end - segment.start
        if length <= _EPSILON_US:
            continue
        if runs:
            run = runs[-1]
            first = run[0]
            if (
                first.rank == segment.rank
                and first.kind == segment.kind
                and abs(run[1] - segment.start) <= _EPSILON_US
            ):
                run[1] = segment.end
                if length > run[2]:
                    run[0], run[2] = dataclasses.replace(segment, start=first.start), length
                continue
        runs.append([segment, segment.end, length])
    return [
        segment if segment.end == end else dataclasses.replace(segment, end=end) for segment, end, _ in runs
    ]


def _listed(ranks: Sequence[int]) -> str:
    return ", ".join(str(rank) for rank in ranks[:8]) + (
        f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
    )
