"""Every rank's traces on one clock: the rules that decide which rank is the reference, which
ranks are measured and which share a measured clock, over the mechanism of
:mod:`profiling.analysis.clocks.alignment` (how one trace is put on another's clock).

- The first rank's trace of each window is the reference; a window it did not record keeps
  the base times.
- Ranks of the reference's node are on its clock exactly: their base times give the shift.
- Each other node is measured once, by its first rank; its other ranks take the same
  correction on their own base times.
- The prior of every measurement is the shift the two traces' base times give.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence

from profiling.analysis.clocks import alignment
from profiling.analysis.clocks.alignment import Alignment
from profiling.analysis.per_trace.record import TraceRecord
from profiling.folder.traces import TraceFile


@dataclasses.dataclass(frozen=True)
class Aligned:
    """One trace's record, and how its clock was put on the first rank's."""

    trace: TraceFile
    record: TraceRecord
    clock: Alignment


def align_ranks(
    traces: Sequence[TraceFile], records: Sequence[TraceRecord], nodes: Mapping[int, str] | None = None
) -> dict[int, list[Aligned]]:
    """Every trace's clock against the first rank's trace of the same window; by rank, then window.

    ``nodes``: each rank's node, where known (the manifest of the toolkit's jobs; else the host a
    trace names). The ranks of one node share its clock: those of the first rank's node are on
    it exactly (their base times give the shift), and each other node is measured once, by one
    of its ranks, its other ranks taking the same correction.

    A node is measured against a rank already on the common clock with which one of its ranks
    shares a group (the first rank where it can be: in a job of one group, always), through
    their groups' collectives, else the sends and receives between them: in a job of data,
    pipeline and tensor parallel groups the first rank may share nothing with a rank, and the
    clocks are chained through the groups. A rank that nothing chains to keeps its base time.
    """
    first_rank = traces[0].rank
    node_of = {
        t.rank: (nodes or {}).get(t.rank) or r.host or None for t, r in zip(traces, records, strict=True)
    }
    reference = {t.first_step: r for t, r in zip(traces, records, strict=True) if t.rank == first_rank}
    steps = [s.duration_us for r in reference.values() for s in r.steps]
    step_us = statistics.median(steps) if steps else None
    clocks: dict[int, Alignment] = {}  # by the trace's index
    windows: dict[int, list[int]] = {}
    for index, trace in enumerate(traces):
        windows.setdefault(trace.first_step, []).append(index)
    for first_step, members in windows.items():
        theirs = reference.get(first_step)
        if theirs is None:
            why = "the first rank did not record this window"
            for index in members:
                clocks[index] = alignment.base_time(_prior_us(records[index], records[0]), why)
            continue
        clocks.update(
            _window_clocks(
                [(traces[i].rank, i, records[i]) for i in members], theirs, first_rank, node_of, step_us
            )
        )
    return by_rank(traces, records, [clocks[index] for index in range(len(traces))])


def _window_clocks(
    members: list[tuple[int, int, TraceRecord]],
    theirs: TraceRecord,
    first_rank: int,
    node_of: Mapping[int, str | None],
    step_us: float | None,
) -> dict[int, Alignment]:
    """The clocks of one window's traces (by index), chained from the first rank's."""
    clocks: dict[int, Alignment] = {}
    on_clock: dict[int, tuple[TraceRecord, Alignment]] = {}  # rank -> its record and clock
    corrections: dict[str, Alignment] = {}  # a measured node's correction beyond the base times
    home = node_of[first_rank]
    waiting = []
    for rank, index, record in sorted(members, key=lambda member: member[0] != first_rank):
        if rank == first_rank:
            clocks[index] = alignment.reference_alignment(len(record.instances))
        elif home is not None and node_of[rank] == home:
            clocks[index] = alignment.on_one_clock(
                theirs.instances, record.instances, shift_us=_prior_us(record, theirs), step_us=step_us
            )
        else:
            waiting.append((rank, index, record))
            continue
        on_clock[rank] = (record, clocks[index])
    partners = {rank: _partners(record) for rank, _, record in waiting}
    progress = True
    while waiting and progress:
        progress, left = False, []
        for rank, index, record in waiting:
            node = node_of[rank]
            clock = (
                _as_its_node(corrections[node], theirs, record, step_us)
                if node is not None and node in corrections
                else _measure(rank, record, partners[rank], on_clock, first_rank, step_us)
            )
            if clock is None:
                left.append((rank, index, record))
                continue
            if node is not None and node not in corrections:
                corrections[node] = dataclasses.replace(
                    clock, shift_us=clock.shift_us - _prior_us(record, theirs)
                )
            clocks[index] = clock
            on_clock[rank] = (record, clock)
            progress = True
        waiting = left
    for rank, index, record in waiting:
        clocks[index] = _unchained(rank, record, on_clock, theirs, step_us)
    return clocks


def _measure(
    rank: int,
    record: TraceRecord,
    partners: set[int],
    on_clock: Mapping[int, tuple[TraceRecord, Alignment]],
    first_rank: int,
    step_us: float | None,
) -> Alignment | None:
    """``record``'s clock measured against a rank on the common clock it can be paired with
    (the first rank first), chained onto that rank's clock; None where none. ``partners``: the
    ranks it shares a group or a transfer with; none known (a job of one group): the first rank,
    with which it shares as much as with any."""
    candidates = sorted(partners, key=lambda r: (r != first_rank, r)) if partners else [first_rank]
    anchors = [(r, *on_clock[r]) for r in candidates if r in on_clock]
    bounded: list[tuple[int, Alignment, Alignment]] = []
    for anchor, anchor_record, anchor_clock in anchors:
        clock = alignment.align_in_groups(
            anchor_record.instances,
            record.instances,
            (anchor, rank),
            prior_us=_prior_us(record, anchor_record),
            step_us=step_us,
        )
        if clock.method == alignment.TRANSFERS:  # a bound: a collective elsewhere may pin it
            bounded.append((anchor, clock, anchor_clock))
        elif clock.paired:
            return _chained(anchor, clock, anchor_clock)
    if bounded:
        return _chained(*min(bounded, key=lambda found: found[1].uncertainty_us or 0.0))
    return None


def _partners(record: TraceRecord) -> set[int]:
    """The ranks ``record``'s rank shares a group or a transfer with (empty: groups unknown)."""
    found: set[int] = set()
    groups = {instance.group for instance in record.instances if instance.group is not None}
    for group in groups:
        found.update(group)
    found.update(instance.peer for instance in record.instances if instance.peer is not None)
    found.discard(record.rank)
    return found


def _chained(anchor: int, clock: Alignment, anchor_clock: Alignment) -> Alignment:
    """``clock``, measured against ``anchor``'s trace, on the first rank's clock."""
    if anchor_clock.method == "reference":
        return clock
    return dataclasses.replace(
        clock,
        shift_us=clock.shift_us + anchor_clock.shift_us,
        matched={},  # pairs with the anchor's collectives, not the first rank's
        uncertainty_us=float(math.hypot(clock.uncertainty_us or 0.0, anchor_clock.uncertainty_us or 0.0)),
        note=f"chained through rank {anchor}" + (f"; {clock.note}" if clock.note else ""),
    )


def _unchained(
    rank: int,
    record: TraceRecord,
    on_clock: Mapping[int, tuple[TraceRecord, Alignment]],
    theirs: TraceRecord,
    step_us: float | None,
) -> Alignment:
    """The clock of a rank nothing chains to: why, from its pairing with the first rank."""
    tried = alignment.align(
        theirs.instances, record.instances, prior_us=_prior_us(record, theirs), step_us=step_us
    )
    if len(on_clock) > 1:
        return dataclasses.replace(
            tried,
            note=f"shares no group with any of the {len(on_clock)} rank(s) on the common clock "
            f"({tried.note})",
        )
    return tried


def by_rank(
    traces: Sequence[TraceFile], records: Sequence[TraceRecord], clocks: Sequence[Alignment]
) -> dict[int, list[Aligned]]:
    """Each trace with its record and clock, by rank, in the traces' order."""
    per_rank: dict[int, list[Aligned]] = {}
    for trace, record, clock in zip(traces, records, clocks, strict=True):
        per_rank.setdefault(trace.rank, []).append(Aligned(trace, record, clock))
    return per_rank


def _as_its_node(
    node_clock: Alignment, theirs: TraceRecord, record: TraceRecord, step_us: float | None
) -> Alignment:
    """A rank on a node already measured: the node's correction on its own base time."""
    return alignment.on_one_clock(
        theirs.instances,
        record.instances,
        shift_us=_prior_us(record, theirs) + node_clock.shift_us,
        step_us=step_us,
        uncertainty_us=node_clock.uncertainty_us or 0.0,
        note="its node's clock, measured by the node's first rank",
    )


def _prior_us(record: TraceRecord, reference: TraceRecord) -> float:
    """The shift the two traces' base times give (0 where either has none)."""
    mine, theirs = record.base_time_ns, reference.base_time_ns
    return (mine - theirs) / 1e3 if mine is not None and theirs is not None else 0.0
