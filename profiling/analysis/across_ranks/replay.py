"""A step replayed on its cross-rank dependency graph, with the durations changed: the what-if
analysis of "Understanding Stragglers in Large Model Training Using What-if Analysis" (OSDI
2025), on the lanes and meetings the critical path walks (:mod:`.critical_path`).

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
(gloo's send is a rendezvous: the pipeline's schedule waits on it), else it does not wait; a
member whose collective ran hidden under its work is not held by it. Left
out: dependencies between a rank's streams other than its lane's order (an event a stream
waits on), the launch queue's depth, contention between concurrent transfers, and the previous
step (each rank starts at its measured start).

**Replayed** with every duration as measured, a step comes out at its measured length where
the clocks agree (its *fidelity*). **Variants** change the durations, per rank and kind:
``MEASURED``; ``MEAN``, the rank's time of that kind scaled to the mean over the ranks that
have any (each op then runs at its kind's mean); ``AT_MOST_TYPICAL``, lowered to the median
of the other ranks' where above (a rank like its peers: a mean would hold the straggler itself);
``STAGE_MEDIAN``, lowered to the median of the other stages' means; ``ZERO``; ``LOWEST``, the lower of the
two lowerings (two what-ifs at once: :func:`combined`). A meeting's transfer is
measured, its members' median (or lowered to it), or zero: a collective's members leave it
together, and its transfer is its own (a median over a kind would mix a 1 KB all-reduce with a
100 MB one; traces name no size for most). Every variant is replayed in one pass over the
step's events, the variants side by side in numpy arrays: the pass is a Python loop over
events, never over events × variants.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from profiling.analysis.across_ranks.critical_path import WORK, Meeting, RankStep
from profiling.analysis.per_trace.lanes import EPSILON_US, KINDS, PHASES, Lane

WORK_KINDS = ("forward", "backward", "optimizer", "compute", "memory", "communication", "host", "other")
HOST = WORK_KINDS.index("host")
COMMUNICATION = WORK_KINDS.index("communication")
# what a variant does to a duration (the module's docstring says how)
MEASURED, MEAN, AT_MOST_TYPICAL, STAGE_MEDIAN, ZERO, LOWEST = 0, 1, 2, 3, 4, 5
ARRIVE, BLOCK = 0, 2  # a rank's events
_DEFERRED = 1  # a block for a collective that ran hidden, at the rank's next wait (sorted before it)
_OTHER = WORK_KINDS.index("other")
_COMPUTING, _MOVING = (KINDS.index(kind) for kind in WORK)  # a lane's own work: a wait ends there
# a lane's kind -> its column; compute by its phase (the last: -1, no phase known)
_KIND_COLUMN = np.array([WORK_KINDS.index(kind) if kind in WORK_KINDS else _OTHER for kind in KINDS])
_PHASE_COLUMN = np.array([WORK_KINDS.index(phase) for phase in PHASES] + [WORK_KINDS.index("compute")])


def meeting_kind(label: str) -> str:
    """A meeting's kind, as its transfer's median is taken over: the label's first word
    (``allreduce_``, ``recv_``, ``nccl:all_reduce``...)."""
    return label.split(" ", 1)[0] or "collective"


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

    @property
    def totals(self) -> np.ndarray:
        """(R, WORK_KINDS): each rank's work of each kind in the step."""
        return np.stack([w.sum(axis=0) for w in self.work])


def step_graph(step: int, ranks: Mapping[int, RankStep], meetings: Sequence[Meeting]) -> StepGraph | str:
    """The step's graph; a line saying why not (no rank, no length, a rank without a lane)."""
    order = sorted(ranks)
    if not order:
        return "no rank recorded the step"
    if max(ranks[r].end for r in order) - min(ranks[r].start for r in order) <= EPSILON_US:
        return "the step has no length"
    # a meeting a member reached after its step's end is the next step's (a GPU step can end
    # before the collectives its host launched within it)
    meetings = [m for m in meetings if all(a <= ranks[r].end for r, a in m.arrivals.items() if r in ranks)]
    last = [max((m.arrivals[r] for r in m.arrivals if r in ranks), default=0.0) for m in meetings]
    mine: dict[int, list[int]] = {}  # each rank's meetings: one pass, not ranks x meetings
    members = [0] * len(meetings)
    for index, meeting in enumerate(meetings):
        for member in meeting.arrivals:
            if member in ranks:
                mine.setdefault(member, []).append(index)
                members[index] += 1
    events, work = [], []
    transfers: list[list[float]] = [[] for _ in meetings]
    for rank in order:
        found = ranks[rank]
        lane = found.lane
        if lane is None:
            return f"rank {rank} has no lane of this step"
        points: list[tuple[float, int, int, float, float]] = []  # (at, event, meeting, transfer, goes on at)
        # a rank that still launches collectives does not wait yet (gloo runs them on its worker)
        launches = np.sort([meetings[index].arrivals[rank] for index in mine.get(rank, [])])
        worked_until = lane.ends[(lane.kinds == _COMPUTING) | (lane.kinds == _MOVING)]  # its work's ends
        deferred: list[tuple[float, int, float]] = []  # hidden collectives: (end, meeting, transfer)
        for index in mine.get(rank, []):
            meeting = meetings[index]
            arrival = meeting.arrivals[rank]
            points.append((arrival, ARRIVE, index, 0.0, arrival))
            end = meeting.ends.get(rank)
            if end is None:  # a sender: gloo's waits while its receiver takes the data
                end = max(meeting.ends.values(), default=arrival)
                if end <= arrival or lane.kind_before(end) in WORK:
                    continue  # it went on working: sent, or queued
            transfer = max(0.0, end - last[index])
            transfers[index].append(transfer)
            if lane.kind_before(end) not in WORK:  # it waited there
                launched = launches[np.searchsorted(launches, end, side="right") - 1]
                points.append(
                    (max(_waits_from(worked_until, end, arrival), launched), BLOCK, index, transfer, end)
                )
            elif len(meeting.ends) < len(meeting.arrivals):  # a receive, its data there in time
                points.append((max(arrival, end), BLOCK, index, transfer, max(arrival, end)))
            else:  # hidden under its work: the rank needs it by its next wait, or its step's end
                deferred.append((end, index, transfer))
        waits = sorted(at for at, event, *_ in points if event == BLOCK)
        for end, index, transfer in deferred:
            if end > found.end:
                continue  # it ran on into the next step: this one did not wait for it
            at = next((w for w in waits if w >= end), found.end)
            points.append((at, _DEFERRED, index, transfer, at))
        points.sort(key=lambda p: (p[0], p[1]))  # at one instant: arrivals, the deferred, the waits
        # the work before each event: from where the rank went on (its last event, or the end of
        # the meeting it last waited in) to the event; then from the last one to its step's end
        froms, tos, cursor = [], [], found.start
        for at, event, _, _, goes_on in points:
            froms.append(cursor)
            tos.append(max(at, cursor))
            cursor = max(goes_on, tos[-1]) if event == BLOCK else tos[-1]  # waited: on from the end
        froms.append(cursor)
        tos.append(max(found.end, cursor))
        upto = _kind_time(lane, found.start, np.array(tos + froms))
        worked = upto[: len(tos)] - upto[len(tos) :]
        events.append(
            [
                (ARRIVE if event == ARRIVE else BLOCK, index, transfer)
                for _, event, index, transfer, _ in points
            ]
        )
        work.append(np.clip(worked, 0.0, None))
    return StepGraph(
        step=step,
        ranks=order,
        starts=np.array([ranks[r].start for r in order]),
        measured_us=max(ranks[r].end for r in order) - min(ranks[r].start for r in order),
        events=events,
        work=work,
        members=members,
        kinds=[meeting_kind(m.label) for m in meetings],
        typical_us=[float(np.median(found)) if found else 0.0 for found in transfers],
    )


def _waits_from(worked_until: np.ndarray, end: float, arrival: float) -> float:
    """Where the rank began waiting for a meeting that ended at ``end``: after its last work
    (compute, memory) before it, not before its arrival. On a CPU lane a collective run by
    gloo's worker thread leaves the step's thread in no operator while it waits (the host's,
    on the lane): that is waiting here, as it is for the walk."""
    index = int(np.searchsorted(worked_until, end + EPSILON_US, side="right")) - 1
    return max(float(worked_until[index]) if index >= 0 else arrival, arrival)


def _kind_time(lane: Lane, start: float, at: np.ndarray) -> np.ndarray:
    """(len(at), WORK_KINDS): the lane's time of each kind from ``start`` to each of ``at``;
    time in no span is ``other``."""
    columns = _KIND_COLUMN[lane.kinds.astype(np.int64)]
    computing = lane.kinds == KINDS.index("compute")
    columns[computing] = _PHASE_COLUMN[lane.phases[computing].astype(np.int64)]
    durations = np.clip(lane.ends - lane.starts, 0.0, None)
    index = np.searchsorted(lane.starts, at, side="right")  # the spans begun by each point
    # the spans' time by kind between consecutive cut points, then summed up to each point: a
    # pass over the spans, not a spans x kinds table (thousands of spans a step, ten points)
    cuts = np.unique(index)
    between = np.searchsorted(cuts, np.arange(len(lane)), side="right")  # each span's bucket
    kinds = len(WORK_KINDS)
    summed = np.bincount(between * kinds + columns, weights=durations, minlength=(len(cuts) + 1) * kinds)
    before = np.cumsum(summed.reshape(len(cuts) + 1, kinds), axis=0)  # row b: the spans before cuts[b]
    found = before[np.searchsorted(cuts, index)]
    last = index - 1
    live = np.flatnonzero(last >= 0)
    found[live, columns[last[live]]] -= np.clip(lane.ends[last[live]] - at[live], 0.0, durations[last[live]])
    found[:, _OTHER] += np.clip(at - start - found.sum(axis=1), 0.0, None)
    return found


@dataclasses.dataclass(frozen=True)
class Variants:
    """Variants side by side: what each does to each rank's work of each kind, and to each
    rank's transfers (of every meeting kind, or of one kind apart)."""

    names: list[str]
    work: np.ndarray  # (V, R, WORK_KINDS): MEASURED, MEAN, STAGE_MEDIAN or ZERO
    transfer: np.ndarray  # (V, R): MEASURED, MEAN (the kind's median) or ZERO
    transfer_kind: dict[str, np.ndarray]  # meeting kind -> (V, R), where a variant treats it apart


def combined(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Two what-ifs' modes at once, cell by cell: each lowers a duration or leaves it as
    measured, and the two lower it as far as the lower of them."""
    both = np.where(first == second, first, LOWEST)
    both = np.where((first == ZERO) | (second == ZERO), ZERO, both)
    return np.where(first == MEASURED, second, np.where(second == MEASURED, first, both))


@dataclasses.dataclass(frozen=True)
class Replayed:
    """One step replayed in every variant."""

    ends: np.ndarray  # (V, R) each rank's end (µs), from the first rank's start
    work: np.ndarray  # (V, R) each rank's work (µs): the rest of its step it waited

    @property
    def lengths(self) -> np.ndarray:
        """(V,) each variant's step (µs): from the first rank's start to the last rank's end."""
        return self.ends.max(axis=1)


def replay(graph: StepGraph, variants: Variants, stage_of: Mapping[int, int] | None = None) -> Replayed | str:
    """The step replayed in each variant; a line saying why not where the graph waits on
    itself (clocks that disagree)."""
    scale = _scales(graph, variants, stage_of)  # (V, R, K)
    rows, count = len(graph.ranks), len(variants.names)
    t = [np.full(count, graph.starts[row]) for row in range(rows)]
    # each rank's work before each event in every variant, one product a rank: (events + 1, V)
    adds = [graph.work[row] @ scale[:, row, :].T for row in range(rows)]
    transfers = _transfers(graph, variants)
    done, added = [0] * rows, [False] * rows  # events passed; the work before the next one added
    arrived: list[list[np.ndarray]] = [[] for _ in graph.members]
    latest: dict[int, np.ndarray] = {}  # each full meeting's last arrival, in every variant
    moved = True
    while moved:  # each rank as far as it can go; again while any went on
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
                    break  # a member has not arrived yet
                else:
                    if meeting not in latest:
                        latest[meeting] = np.max(arrived[meeting], axis=0)
                    t[row] = np.maximum(t[row], latest[meeting] + transfers[row][done[row]])
                done[row] += 1
                added[row] = False
                moved = True
    stuck = [graph.ranks[row] for row in range(rows) if done[row] < len(graph.events[row])]
    if stuck:
        return f"rank(s) {stuck[:8]} wait on each other in a cycle (their clocks disagree)"
    ends = np.stack([t[row] + adds[row][-1] for row in range(rows)], axis=1)
    work = np.einsum("vrk,rk->vr", scale, graph.totals)
    return Replayed(ends=ends - float(np.min(graph.starts)), work=work)


def _transfers(graph: StepGraph, variants: Variants) -> list[np.ndarray]:
    """Each rank's transfer at each of its events in every variant, (events, V) a rank, made
    before the pass: measured x (its mode is MEASURED) + lowered x (AT_MOST_TYPICAL or LOWEST) +
    typical x (MEAN); ZERO weighs nothing. A meeting kind set apart has its own modes."""
    kinds = sorted(variants.transfer_kind)
    modes = np.stack(
        [variants.transfer, *(variants.transfer_kind[kind] for kind in kinds)]
    )  # (1 + kinds, V, R)
    apart = {kind: 1 + index for index, kind in enumerate(kinds)}
    # (1 + kinds, R, V): a rank's weights in every variant side by side, gathered a row at a time
    modes = np.ascontiguousarray(modes.transpose(0, 2, 1))
    measuring = (modes == MEASURED).astype(float)
    lowering = ((modes == AT_MOST_TYPICAL) | (modes == LOWEST)).astype(float)
    typical = (modes == MEAN).astype(float)
    found = []
    for row, events in enumerate(graph.events):
        if not events:
            found.append(np.zeros((0, modes.shape[2])))
            continue
        which = np.array([apart.get(graph.kinds[meeting], 0) for _, meeting, _ in events])
        measured = np.array([transfer for _, _, transfer in events])
        usual = np.array([graph.typical_us[meeting] for _, meeting, _ in events])
        lowered = np.minimum(measured, usual)
        found.append(
            measuring[which, row] * measured[:, None]
            + lowering[which, row] * lowered[:, None]
            + typical[which, row] * usual[:, None]
        )
    return found


def _median_of_the_others(column: np.ndarray, present: np.ndarray) -> np.ndarray:
    """(R,): for each rank with work of this kind, the median of the other such ranks' (its own,
    where it has no peer: a rank is not lowered to itself among two); 0 for the others."""
    found = np.zeros_like(column)
    values = column[present]
    n = len(values)
    if n < 2:
        found[present] = values
        return found
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)  # each value's place among them

    def without(index: int) -> np.ndarray:  # the index-th of the others, for each value left out
        return ordered[np.where(index < position, index, index + 1)]

    left = n - 1  # the others
    middle = without(left // 2) if left % 2 else (without(left // 2 - 1) + without(left // 2)) / 2
    found[present] = middle
    return found


def _scales(graph: StepGraph, variants: Variants, stage_of: Mapping[int, int] | None) -> np.ndarray:
    """(V, R, K): what each variant multiplies each rank's work of each kind by."""
    totals = graph.totals
    has = totals > EPSILON_US
    counts = has.sum(axis=0)
    mean = np.where(counts > 0, totals.sum(axis=0) / np.maximum(counts, 1), 0.0)
    peers = np.stack([_median_of_the_others(totals[:, k], has[:, k]) for k in range(totals.shape[1])], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        to_mean = np.where(has, mean / totals, 1.0)
        to_typical = np.minimum(np.where(has, peers / totals, 1.0), 1.0)
    to_stage = np.ones_like(to_mean)
    stages = np.array([(stage_of or {}).get(rank, -1) for rank in graph.ranks])
    present = sorted(set(stages.tolist()) - {-1})
    if len(present) > 1:  # each stage's ranks lowered to the median of the other stages' means
        means = np.stack([totals[stages == s].mean(axis=0) for s in present])  # (stages, K)
        others = {s: np.median(np.delete(means, i, axis=0), axis=0) for i, s in enumerate(present)}
        middle = np.stack([others.get(s, own) for s, own in zip(stages.tolist(), totals, strict=True)])
        with np.errstate(divide="ignore", invalid="ignore"):
            to_stage = np.minimum(np.where(has, middle / totals, 1.0), 1.0)
    mode = variants.work
    return np.select(
        [mode == MEASURED, mode == MEAN, mode == AT_MOST_TYPICAL, mode == STAGE_MEDIAN, mode == LOWEST],
        [1.0, to_mean, to_typical, to_stage, np.minimum(to_typical, to_stage)],
        0.0,
    )
