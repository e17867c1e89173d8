"""The order a step's replay (:mod:`.replay`) takes its events in, a *wave* at a time.

A rank's events form a chain: it arrives at a meeting, or blocks in one until every member has
arrived. Which event can follow which is the graph's alone, whatever the durations a variant
gives them, so the order is found once a graph, on integers: each rank goes as far as it can,
and a meeting that fills lets go the ranks held in it. An event's wave is one after the
rank's previous event's; a block's is also one after the last wave in which a member arrived
at its meeting. Every event of a wave then depends only on earlier waves, and a wave is replayed
in a few numpy operations over all its events in every variant (a rank appears at most once in
a wave). At 4096 ranks of pp=8,dp=64,tp=8 a step had 62 000 events in 16 waves: replayed an
event at a time, each a few numpy operations on arrays of variants, a report's seven replays took
2.9-3.1 s, a wave at a time 1.1-1.3 s (most of it gained in the gains' and the ideal trace's
replays of 5 and 2 variants, where a numpy call costs the same for a few values). A job of a
few ranks has a few events a wave, and gains nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np

ARRIVE, BLOCK = 0, 2  # a rank's events
# a block's amounts of transfer (Wave.amounts), as the replay's variants take them
MEASURED_AMOUNT, LOWERED_AMOUNT, TYPICAL_AMOUNT, NO_AMOUNT = range(4)
Events = Sequence[Sequence[tuple[int, int, float]]]  # per row, in order: (ARRIVE or BLOCK, meeting, transfer)


@dataclasses.dataclass(frozen=True)
class Wave:
    """The events of one wave, as indices in the step's events laid end to end (rank by rank)."""

    events: np.ndarray  # every event of the wave
    rows: np.ndarray  # each one's rank (its row in the graph)
    arriving: np.ndarray  # the ranks of its arrivals, by meeting
    met: np.ndarray  # the meetings arrived at, each once
    firsts: np.ndarray  # where each of ``met`` begins in ``arriving`` (for ``reduceat``)
    blocked: np.ndarray  # the ranks of its blocks
    held_by: np.ndarray  # ... their meetings
    # ... their transfers, (blocks, 4) by *_AMOUNT: as measured, lowered to their meeting's
    # typical, that typical, none
    amounts: np.ndarray


@dataclasses.dataclass(frozen=True)
class Waves:
    """A step's events in waves; ``stuck``: the rows whose events never all come (a cycle)."""

    waves: list[Wave]
    counts: list[int]  # each row's events
    stuck: list[int]


def waves_of(events: Events, members: Sequence[int], typical: Sequence[float]) -> Waves:
    """The waves of a step's events, whose meetings have ``members`` arrivals each and a
    ``typical`` transfer."""
    counts = [len(mine) for mine in events]
    offsets = [0, *itertools.accumulate(counts)]
    waves = [-1] * offsets[-1]  # each event's wave
    arrived = [0] * len(members)
    after = [0] * len(members)  # one past the last wave a member arrived in
    done, next_wave = [0] * len(events), [0] * len(events)
    waiting: dict[int, list[int]] = {}  # the rows held in each meeting not yet full
    ready = [row for row, mine in enumerate(events) if mine]  # rows that can go on
    while ready:  # a row as far as it can go; those its arrivals let go, in turn
        row = ready.pop()
        mine, index, at, base = events[row], done[row], next_wave[row], offsets[row]
        while index < len(mine):
            event, meeting, _ = mine[index]
            if event == ARRIVE:
                arrived[meeting] += 1
                if at >= after[meeting]:
                    after[meeting] = at + 1
                if arrived[meeting] == members[meeting]:
                    ready.extend(waiting.pop(meeting, ()))
            elif arrived[meeting] < members[meeting]:
                waiting.setdefault(meeting, []).append(row)  # a member has not arrived yet
                break
            elif after[meeting] > at:
                at = after[meeting]
            waves[base + index] = at
            at += 1
            index += 1
        done[row], next_wave[row] = index, at
    stuck = [row for row, mine in enumerate(events) if done[row] < len(mine)]
    flat = list(itertools.chain.from_iterable(events))
    kinds = np.array([event for event, _, _ in flat], dtype=np.int64)
    meetings = np.array([meeting for _, meeting, _ in flat], dtype=np.int64)
    transfers = np.array([transfer for _, _, transfer in flat], dtype=np.float64)
    rows = np.repeat(np.arange(len(events)), counts)
    usual = np.asarray(typical, dtype=np.float64)[meetings]
    amounts = np.column_stack((transfers, np.minimum(transfers, usual), usual, np.zeros_like(usual)))
    found = _cut(np.array(waves, dtype=np.int64), kinds, meetings, rows, amounts) if not stuck else []
    return Waves(found, counts, stuck)


def _cut(
    wave: np.ndarray, kind: np.ndarray, meeting: np.ndarray, row: np.ndarray, amounts: np.ndarray
) -> list[Wave]:
    """The events (their wave, kind, meeting, row and transfers, laid end to end) grouped by wave: in one
    sort, a wave's arrivals first, by meeting, then its blocks (a job of few ranks has thousands
    of small waves a step: numpy's calls a wave were most of the time)."""
    if not len(wave):
        return []
    arrives = kind == ARRIVE
    order = np.lexsort((meeting, ~arrives, wave))
    wave, arrives, meeting, row, amounts = (
        wave[order],
        arrives[order],
        meeting[order],
        row[order],
        amounts[order],
    )
    changes = np.empty(len(wave), dtype=bool)
    changes[0], changes[1:] = True, wave[1:] != wave[:-1]
    starts = np.flatnonzero(changes)
    ends = np.append(starts[1:], len(wave))
    middles = starts + np.add.reduceat(arrives.astype(np.int64), starts)  # where each wave's blocks begin
    runs = np.flatnonzero(arrives & (changes | np.append(True, meeting[1:] != meeting[:-1])))
    low, high = np.searchsorted(runs, starts), np.searchsorted(runs, middles)
    return [
        Wave(
            events=order[start:end],
            rows=row[start:end],
            arriving=row[start:middle],
            met=meeting[runs[lo:hi]],
            firsts=runs[lo:hi] - start,
            blocked=row[middle:end],
            held_by=meeting[middle:end],
            amounts=amounts[middle:end],
        )
        for start, middle, end, lo, hi in zip(
            starts.tolist(), middles.tolist(), ends.tolist(), low.tolist(), high.tolist(), strict=True
        )
    ]
