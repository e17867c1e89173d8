"""A step's cross-rank dependency graph, from the lanes and meetings the critical path walks
(:mod:`.critical_path`), for the replay (:mod:`.replay`).

**The graph.** Each rank's step is its lane (what its GPU streams, or on a CPU job its step's
thread, did at each instant) cut at the rank's *events*:

- it *arrives* at each meeting it takes part in (a collective of its group, a send or a
  receive), at its measured arrival;
- it *blocks* in a meeting where it waited for it: its lane shows no work of its own (compute,
  memory) just before the meeting ended on it, as the walk decides. It waits from its last work
  or its last arrival at a meeting before that end (a rank that still launches collectives, which
  gloo runs on its worker thread, is not waiting yet), up to the meeting's end.

Between two events the rank *works*: the lane's time by kind (forward, backward and optimizer
compute, compute of no known phase, memory, communication outside a meeting, the host's gaps,
other). A collective begins its transfer when the last member has arrived and ends, for each
member that blocks in it, its measured transfer later (its end minus that last arrival); a
receive ends its transfer after the later of its send and itself. A sender whose trace has no
end of its own waits for the receive's end where its lane shows no work of its own there
(gloo's send is a rendezvous: the pipeline's schedule waits on it; its wait is read up to its own
send's end, on its own clock, where that is earlier), else it does not wait; a
member whose collective ran hidden under its work is not held by it. Where the trace ties a
stream's wait to a meeting (a Stream Wait Event on the event recorded after its kernel:
:mod:`profiling.analysis.per_trace.stream_waits`, HTA's sync edges), the meeting ends for the rank
where the work that waited began; else a wait is inferred where work resumes within
:data:`.rank_events.RESUMED_US` of its end. Left out: the launch queue's depth, contention between concurrent
transfers, and the previous step (each rank starts at its measured start).
"""

from __future__ import annotations

import dataclasses
import functools
import marshal
import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from profiling.analysis.across_ranks.critical_path.rank_events import WORK_KINDS, RankEvents, rank_events
from profiling.analysis.across_ranks.critical_path.walk import Meeting, RankStep
from profiling.analysis.across_ranks.critical_path.waves import Waves, waves_of
from profiling.analysis.per_trace.lanes import EPSILON_US
from slurm.common.forked import fork_safe, forked_map

# each step to graph: its number, the ranks that recorded it (on the common clock), its meetings
Walked = Sequence[tuple[int, Mapping[int, RankStep], Sequence[Meeting]]]
# a chunk of ranks' parts (frame index, rank, its events or why none) and the notes said meanwhile
Parts = tuple[list[tuple[int, int, RankEvents | str]], list[str]]
# fewer ranks are made in this process: at 256 a fork gains little (2 cores, 3 steps of a
# simulated GPU job: 0.26-0.33 s against 0.33), at 4096 a third (3.3-3.5 s against 5.0-5.6)
FORK_RANKS = 256


def meeting_kind(label: str) -> str:
    """A meeting's kind, as its transfer's median is taken over: the label's first word
    (``allreduce_``, ``recv_``, ``nccl:all_reduce``...)."""
    return label.split(" ", 1)[0] or "collective"


@dataclasses.dataclass(frozen=True)
class WorkGroups:
    """A step's ranks grouped by their count of events, for the replay to scale a group's work
    in one product and lay it where the waves read it (at 4096 ranks, a product a rank was a
    quarter of the replay, and moving each rank's results into place another)."""

    rows: list[np.ndarray]  # each group's rows
    before: list[np.ndarray]  # each group's work before each event: (rows, events, WORK_KINDS)
    after: list[np.ndarray]  # ... and after its last: (rows, WORK_KINDS)
    # per wave, its events laid group by group (each group's rows' events end to end, in order)
    events: list[np.ndarray]


@dataclasses.dataclass(frozen=True)
class StepGraph:
    """One step's dependency graph."""

    step: int
    ranks: list[int]
    starts: np.ndarray  # (R,) each rank's step start on the common clock
    measured_us: float  # the step: from the first rank's start to the last rank's end
    events: list[list[tuple[int, int, float]]]  # per rank, in order: (ARRIVE or BLOCK, meeting, transfer µs)
    work: list[np.ndarray]  # per rank: (events + 1, WORK_KINDS) µs worked before each event, and after
    members: list[int]  # per meeting: how many ranks arrive at it
    kinds: list[str]  # per meeting: its kind
    typical_us: list[float]  # per meeting: its members' median transfer (the ideal's)

    @functools.cached_property
    def totals(self) -> np.ndarray:
        """(R, WORK_KINDS): each rank's work of each kind in the step."""
        return np.stack([w.sum(axis=0) for w in self.work])

    @functools.cached_property
    def groups(self) -> WorkGroups:
        """The ranks' work grouped by their count of events (:class:`WorkGroups`)."""
        by_count: dict[int, list[int]] = {}
        for row, work in enumerate(self.work):
            by_count.setdefault(len(work), []).append(row)
        rows = [np.array(members) for members in by_count.values()]
        stacked = [np.stack([self.work[row] for row in members]) for members in rows]
        offsets = np.cumsum([0, *self.waves.counts])  # each row's first event, laid rank by rank
        place = np.empty(offsets[-1], dtype=np.intp)
        at = 0
        for members, work in zip(rows, stacked, strict=True):
            events, size = work.shape[1] - 1, len(members) * (work.shape[1] - 1)
            place[(offsets[members][:, None] + np.arange(events)).ravel()] = np.arange(at, at + size)
            at += size
        return WorkGroups(
            rows=rows,
            before=[np.ascontiguousarray(work[:, :-1]) for work in stacked],
            after=[work[:, -1] for work in stacked],
            events=[place[wave.events] for wave in self.waves.waves],
        )

    @functools.cached_property
    def waves(self) -> Waves:
        """The order its replays take its events in (found once: every replay of it uses it)."""
        return waves_of(self.events, self.members, self.typical_us)


def step_graph(step: int, ranks: Mapping[int, RankStep], meetings: Sequence[Meeting]) -> StepGraph | str:
    """The step's graph; a line saying why not (no rank, no length, a rank without a lane)."""
    return step_graphs([(step, ranks, meetings)])[0]


def step_graphs(
    steps: Walked,
    done_with: Callable[[int], None] | None = None,
    jobs: int = 1,
    notes: list[str] | None = None,
) -> list[StepGraph | str]:
    """Each step's graph (:func:`step_graph`), made a rank at a time over every step:
    ``done_with`` is told each rank once its lanes are no longer needed. At 4096 ranks, made a
    step at a time, every rank's lanes were held at once (0.8 GB), each read into memory not
    touched before: reading them took 1.1 ms a rank, against 0.3 ms one rank at a time.

    With ``jobs`` > 1, at :data:`FORK_RANKS` ranks or more, the ranks are split among ``jobs``
    processes forked from this one (:func:`~slurm.common.forked.forked_map`); ``notes``,
    the lines said as the lanes were read (a lanes file made again), gains theirs."""
    frames = frames_of(steps)
    everyone = sorted({rank for frame in frames if isinstance(frame, _Frame) for rank in frame.ranks})
    # split only where the chunks go to other processes: made here in turn, they would only
    # change the order the ranks' lanes are read in
    split = jobs > 1 and len(everyone) >= FORK_RANKS and fork_safe()
    chunks = [everyone[k::jobs] for k in range(jobs)] if split else [everyone]
    here = os.getpid()

    def made(ranks: list[int]) -> Parts | bytes:  # packed in a child, to be sent
        found = parts_of(frames, ranks, done_with, notes)
        return found if os.getpid() == here else packed(found)

    return assembled(
        frames, [got if isinstance(got, tuple) else unpacked(got) for got in forked_map(made, chunks)], notes
    )


def frames_of(steps: Walked) -> list[_Frame | str]:
    """Each step's frame, its graph to be made; a line saying why it has none."""
    return [_Frame.of(step, ranks, meetings) for step, ranks, meetings in steps]


def parts_of(
    frames: Sequence[_Frame | str],
    ranks: Iterable[int],
    done_with: Callable[[int], None] | None,
    notes: list[str] | None,
) -> Parts:
    """The ranks' parts of every frame, and the notes said as their lanes were read (taken out
    of ``notes`` and given back with the parts, wherever this runs)."""
    said = len(notes) if notes is not None else 0
    parts: list[tuple[int, int, RankEvents | str]] = []
    for rank in ranks:
        parts.extend(
            (index, rank, f.part(rank))
            for index, f in enumerate(frames)
            if isinstance(f, _Frame) and rank in f.ranks
        )
        if done_with is not None:
            done_with(rank)
    added = notes[said:] if notes is not None else []
    if notes is not None:
        del notes[said:]
    return parts, added


def assembled(
    frames: list[_Frame | str], found: Sequence[Parts], notes: list[str] | None
) -> list[StepGraph | str]:
    """The frames' graphs from every chunk's parts; ``notes`` gains the chunks' notes."""
    for _, added in found:
        if notes is not None:
            notes.extend(added)
    # in rank order, as made here: the first rank without a lane is the one a step's line names
    for index, rank, part in sorted((p for parts, _ in found for p in parts), key=lambda p: p[1]):
        if isinstance(frame := frames[index], _Frame):
            frames[index] = frame.with_part(rank, part)
    return [frame.graph() if isinstance(frame, _Frame) else frame for frame in frames]


def packed(found: Parts) -> bytes:
    """A chunk's parts and notes as marshal's bytes, each rank's work as its array's: from a
    forked child, pickled, their 90 000 small tuples took 0.1 s to send and 0.15 s to take back
    at 4096 ranks; marshal's take a quarter of that."""
    parts, notes = found
    return marshal.dumps(
        (
            [
                (index, rank, part if isinstance(part, str) else (part[0], part[1].tobytes(), part[2]))
                for index, rank, part in parts
            ],
            notes,
        )
    )


def unpacked(sent: bytes) -> Parts:
    """What :func:`packed` packed."""
    parts, notes = marshal.loads(sent)
    return [
        (
            index,
            rank,
            part
            if isinstance(part, str)
            else (part[0], np.frombuffer(part[1]).reshape(-1, len(WORK_KINDS)), part[2]),
        )
        for index, rank, part in parts
    ], notes


@dataclasses.dataclass
class _Frame:
    """A step's graph as it is made: its meetings, then each rank's events and work."""

    step: int
    ranks: Mapping[int, RankStep]
    meetings: list[Meeting]
    last: list[float]  # per meeting: its last member's arrival
    mine: dict[int, list[int]]  # per rank: its meetings' indices
    members: list[int]
    transfers: list[list[float]]  # per meeting: its members' transfers
    events: dict[int, list[tuple[int, int, float]]] = dataclasses.field(default_factory=dict)
    work: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, step: int, ranks: Mapping[int, RankStep], meetings: Sequence[Meeting]) -> _Frame | str:
        """The step's frame; a line saying why it has no graph (no rank, no length)."""
        if not ranks:
            return "no rank recorded the step"
        if max(r.end for r in ranks.values()) - min(r.start for r in ranks.values()) <= EPSILON_US:
            return "the step has no length"
        kept: list[Meeting] = []
        mine: dict[int, list[int]] = {}  # each rank's meetings: one pass, not ranks x meetings
        members: list[int] = []
        last: list[float] = []
        for meeting in meetings:
            inside = [(rank, at) for rank, at in meeting.arrivals.items() if rank in ranks]
            # a meeting a member reached after its step's end is the next step's (a GPU step can end
            # before the collectives its host launched within it)
            if any(at > ranks[rank].end for rank, at in inside):
                continue
            for rank, _ in inside:
                mine.setdefault(rank, []).append(len(kept))
            kept.append(meeting)
            members.append(len(inside))
            last.append(max((at for _, at in inside), default=0.0))
        return cls(step, ranks, kept, last, mine, members, [[] for _ in kept])

    def part(self, rank: int) -> RankEvents | str:
        """The rank's events and work in the step; a line where it has no lane."""
        found = self.ranks[rank]
        if found.lane is None:
            return f"rank {rank} has no lane of this step"
        return rank_events(found, found.lane, self.meetings, self.mine.get(rank, []), self.last)

    def with_part(self, rank: int, part: RankEvents | str) -> _Frame | str:
        """The frame with the rank's part; the part's line where it has none."""
        if isinstance(part, str):
            return part
        events, work, transfers = part
        self.events[rank], self.work[rank] = events, work
        for index, transfer in transfers:
            self.transfers[index].append(transfer)
        return self

    def graph(self) -> StepGraph:
        order = sorted(self.ranks)
        return StepGraph(
            step=self.step,
            ranks=order,
            starts=np.array([self.ranks[r].start for r in order]),
            measured_us=max(self.ranks[r].end for r in order) - min(self.ranks[r].start for r in order),
            events=[self.events[r] for r in order],
            work=[self.work[r] for r in order],
            members=self.members,
            kinds=[meeting_kind(m.label) for m in self.meetings],
            typical_us=_typical(self.meetings, self.transfers),
        )


def _typical(meetings: Sequence[Meeting], transfers: list[list[float]]) -> list[float]:
    """Each meeting's ideal transfer: a collective's, its members' median (a median over a kind
    would mix a 1 KB all-reduce with a 100 MB one, and traces name no size for most); a send's
    and receive's, which has one, the median of its kind's in the step (a pipeline's stages pass
    activations of one size): one slow transfer is not ideal."""
    # a meeting has a few members: statistics' median, not numpy's, a twentieth the time
    found = [statistics.median(mine) if mine else 0.0 for mine in transfers]
    single: dict[str, list[int]] = {}  # each kind's sends and receives, by index
    for index, (meeting, mine) in enumerate(zip(meetings, transfers, strict=True)):
        if len(mine) == 1 and len(meeting.ends) < len(meeting.arrivals):
            single.setdefault(meeting_kind(meeting.label), []).append(index)
    for indices in single.values():
        middle = statistics.median(found[index] for index in indices)
        for index in indices:
            found[index] = middle
    return found
