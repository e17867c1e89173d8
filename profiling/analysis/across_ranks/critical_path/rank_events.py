"""A rank's events in a step and its work before each (:class:`.graph.StepGraph`), read from its
lane and the step's meetings as :mod:`.graph`'s docstring says: where it arrives, where it
waits and from when, and its lane's time by kind in between."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profiling.analysis.across_ranks.critical_path.walk import WORK, Meeting, RankStep
from profiling.analysis.across_ranks.critical_path.waves import ARRIVE, BLOCK
from profiling.analysis.per_trace.lanes import EPSILON_US, KINDS, PHASES, Lane

WORK_KINDS = ("forward", "backward", "optimizer", "compute", "memory", "communication", "host", "other")
HOST = WORK_KINDS.index("host")
COMMUNICATION = WORK_KINDS.index("communication")
# the work a stage's layers make (compute by phase, their copies): what moving layers changes
LAYERS = [WORK_KINDS.index(kind) for kind in ("forward", "backward", "optimizer", "compute", "memory")]
# a block for a collective that ran hidden, at the rank's next wait: sorted after the arrivals
# and before the waits of one instant, then a block like them
_DEFERRED = 1
_OTHER = WORK_KINDS.index("other")
# time in no work: on a GPU lane, the GPU idle with work queued (waiting on another stream or an
# event the trace does not show); no rank's work, in no variant but the replay as measured
DELAY = _OTHER
_COMPUTING, _MOVING = (KINDS.index(kind) for kind in WORK)  # a lane's own work: a wait ends there
# work that resumes this soon after a hole, before a meeting ends, waited for it (two streams'
# recorded ends disagree by this much)
RESUMED_US = 100.0
RESUMED_SHARE = 0.1  # ... and within this share of the hole: a wait, not work begun meanwhile
TIED_US = 1.0  # a tied wait's end and a meeting's: one kernel's end, read twice (µs since 1970: 0.25 apart)


def _column(kind: str, phase: str | None) -> int:
    """A lane's span's column of WORK_KINDS: compute's by its phase."""
    if kind == "compute":
        return WORK_KINDS.index(phase or "compute")
    return WORK_KINDS.index(kind) if kind in WORK_KINDS else _OTHER


# a span's column by kind * _SLOTS + phase + 1 (a phase of -1, the trace does not say, is slot 0):
# one lookup of a flat table on int8 arithmetic, a third of a two-index lookup's time
_SLOTS = len(PHASES) + 1
_COLUMN = np.array([_column(kind, phase) for kind in KINDS for phase in (None, *PHASES)], dtype=np.int64)


# a rank's events in a step (ARRIVE or BLOCK, meeting, transfer µs), its work before each and
# after the last (events + 1, WORK_KINDS), and the transfers it saw: (meeting, µs)
RankEvents = tuple[list[tuple[int, int, float]], np.ndarray, list[tuple[int, float]]]


def rank_events(
    found: RankStep, lane: Lane, meetings: Sequence[Meeting], mine: Sequence[int], last: Sequence[float]
) -> RankEvents:
    """A rank's events in the step, in order, its work before each and after the last, and the
    transfer it saw of each meeting it waited in or needed: (meeting, µs)."""
    points: list[tuple[float, int, int, float, float]] = []  # (at, event, meeting, transfer, goes on at)
    deferred: list[tuple[float, int, float]] = []  # hidden collectives: (end, meeting, transfer)
    transfers: list[tuple[int, float]] = []
    for index, arrival, end, sender, waited, waits_from in _meetings_of(lane, found.rank, meetings, mine):
        meeting = meetings[index]
        points.append((arrival, ARRIVE, index, 0.0, arrival))
        if sender and (end <= arrival or not waited or not meeting.rendezvous):
            continue  # it went on working: sent, or queued
        transfer = max(0.0, end - last[index])
        transfers.append((index, transfer))
        if waited:
            points.append((waits_from, BLOCK, index, transfer, end))
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
    events = [
        (ARRIVE if event == ARRIVE else BLOCK, index, transfer) for _, event, index, transfer, _ in points
    ]
    return events, _worked(found, lane, points), transfers


def _worked(found: RankStep, lane: Lane, points: list[tuple[float, int, int, float, float]]) -> np.ndarray:
    """(events + 1, WORK_KINDS): the rank's work before each event, from where it went on (its
    last event, or the end of the meeting it last waited in); then from the last one to its
    step's end."""
    froms, tos, cursor = [], [], found.start
    for at, event, _, _, goes_on in points:
        froms.append(cursor)
        tos.append(max(at, cursor))
        cursor = max(goes_on, tos[-1]) if event == BLOCK else tos[-1]  # waited: on from the end
    froms.append(cursor)
    tos.append(max(found.end, cursor))
    upto = _kind_time(lane, found.start, np.array(tos + froms))
    return np.maximum(upto[: len(tos)] - upto[len(tos) :], 0.0)


def _meetings_of(
    lane: Lane, rank: int, everyone: Sequence[Meeting], indices: Sequence[int]
) -> list[tuple[int, float, float, bool, bool, float]]:
    """Per meeting of the rank (``indices`` in ``everyone``): (its index, the rank's arrival, the
    end it waited for, whether the rank only sent, whether its lane shows no work of its own just
    before that end, where it began waiting). A sender waits for the meeting's end. The wait
    begins after the rank's last work (compute, memory) before that end, not before its arrival
    or its last launch of a collective before it (gloo runs collectives on its worker thread).
    On a CPU lane such a collective leaves the step's thread in no operator while it waits (the
    host's, on the lane): that is waiting here, as it is for the walk. Arrays over the rank's
    meetings: a dense step has hundreds."""
    if not indices:
        return []
    meetings = [everyone[index] for index in indices]
    own = [meeting.ends.get(rank) for meeting in meetings]
    # per meeting: the rank's arrival, the end it waits for, its own send's end (inf: none), in
    # one array (a call a rank and step: numpy's calls, not their work, are most of its time)
    table = np.array(
        [
            (
                meeting.arrivals[rank],
                end if end is not None else max(meeting.ends.values(), default=meeting.arrivals[rank]),
                meeting.sent.get(rank, np.inf),
            )
            for end, meeting in zip(own, meetings, strict=True)
        ]
    )
    arrivals, ends, sent = table[:, 0], table[:, 1], table[:, 2]
    if len(lane.waits):
        # where the trace ties a stream's wait to the meeting (an event recorded after its
        # kernel), the work that waited began when the meeting ended for this rank, whatever its
        # kernel's recorded end: the wait is read up to there, never as the work
        held = _tied(lane.waits, ends)
        ends = np.where((held < ends) & (held >= arrivals), held, ends)
    # where the rank saw its wait end: a rendezvous sender at its own send's end where that is
    # earlier (the receive's end is read on the other rank's clock: read there, the launches the
    # sender made as it went on looked like launches before its wait, and its wait like work)
    seen = np.where((sent < ends) & (sent >= arrivals), sent, ends)
    # its own work's spans (by their indices: a boolean mask's indexing is three times slower)
    working = np.flatnonzero((lane.kinds == _COMPUTING) | (lane.kinds == _MOVING))
    worked_from, worked_until = lane.starts.take(working), lane.ends.take(working)
    kinds = lane.kinds_before(seen)
    waited = (kinds != _COMPUTING) & (kinds != _MOVING)
    # work that began a moment before the meeting ended, after a hole, began when it ended: the
    # recorded ends of two streams disagree by microseconds (a compute kernel 8 µs before the
    # receive it waits for ends), and read as 'working' the rank's whole wait became its work
    if len(worked_from):
        current = worked_from.searchsorted(seen, side="right") - 1
        at = np.maximum(current, 0)
        hole = np.where(current > 0, worked_from[at] - worked_until[np.maximum(current - 1, 0)], np.inf)
        waited |= (current >= 0) & (seen - worked_from[at] <= np.minimum(RESUMED_US, RESUMED_SHARE * hole))
    # a rank that still launches collectives does not wait yet; but a collective begun as this
    # one ended was held back by it (the grad norm's all-reduce by the last reduce-scatter)
    launches = np.sort(arrivals)
    launched = launches[np.maximum(launches.searchsorted(seen - RESUMED_US, side="right") - 1, 0)]
    last_work = worked_until.searchsorted(seen + EPSILON_US, side="right") - 1
    worked = worked_until[np.maximum(last_work, 0)] if len(worked_until) else arrivals
    waits_from = np.maximum(np.maximum(np.where(last_work >= 0, worked, arrivals), arrivals), launched)
    return list(
        zip(
            indices,
            arrivals.tolist(),
            ends.tolist(),
            [end is None for end in own],
            waited.tolist(),
            waits_from.tolist(),
            strict=True,
        )
    )


def _tied(waits: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each of ``ends``, the start of the work a tied wait held until it (``waits``: the
    lane's (end, start) pairs, by end); nan where no wait is tied to it."""
    found = np.full(len(ends), np.nan)
    if not len(waits):
        return found
    ended, resumed = waits[:, 0], waits[:, 1]
    for nearest in (ended.searchsorted(ends) - 1, ended.searchsorted(ends)):  # below it, above it
        k = np.clip(nearest, 0, len(ended) - 1)
        tied = np.isnan(found) & (np.abs(ended[k] - ends) <= TIED_US)
        found[tied] = resumed[k][tied]
    return found


def _kind_time(lane: Lane, start: float, at: np.ndarray) -> np.ndarray:
    """(len(at), WORK_KINDS): the lane's time of each kind from ``start`` to each of ``at``;
    time in no span is ``other``."""
    columns = _COLUMN.take(lane.kinds * _SLOTS + (lane.phases + 1))
    # np.maximum, not np.clip: a call a rank and step, and clip's wrapper costs as much as the work
    durations = np.maximum(lane.ends - lane.starts, 0.0)
    index = np.searchsorted(lane.starts, at, side="right")  # the spans begun by each point
    # the spans' time by kind between consecutive cut points, then summed up to each point: a
    # pass over the spans, not a spans x kinds table (thousands of spans a step, ten points)
    cuts = _distinct(index)
    marks = np.zeros(len(lane) + 1, dtype=np.int64)
    marks[cuts] = 1
    between = np.cumsum(marks[:-1])  # each span's bucket: the cuts at or before it
    kinds = len(WORK_KINDS)
    # as float: numpy's bincount of no spans (a GPU lane whose kernels have no launch) is int64
    summed = np.bincount(
        between * kinds + columns, weights=durations, minlength=(len(cuts) + 1) * kinds
    ).astype(np.float64)
    before = np.cumsum(summed.reshape(len(cuts) + 1, kinds), axis=0)  # row b: the spans before cuts[b]
    found = before[np.searchsorted(cuts, index)]
    last = index - 1
    live = np.flatnonzero(last >= 0)
    ran = last[live]
    found[live, columns[ran]] -= np.minimum(np.maximum(lane.ends[ran] - at[live], 0.0), durations[ran])
    found[:, _OTHER] += np.maximum(at - start - found.sum(axis=1), 0.0)
    return found


def _distinct(values: np.ndarray) -> np.ndarray:
    """np.unique of a few values (never none), in half its time: its wrapper is most of it."""
    ordered = np.sort(values)
    kept = np.empty(len(ordered), dtype=bool)
    kept[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=kept[1:])
    return ordered[kept]
