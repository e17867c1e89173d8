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
    it exactly (their base times give the shift), and each other node is measured once, by its
    first rank, its other ranks taking the same correction.
    """
    first_rank = traces[0].rank
    node_of = {
        t.rank: (nodes or {}).get(t.rank) or r.host or None for t, r in zip(traces, records, strict=True)
    }
    reference = {t.first_step: r for t, r in zip(traces, records, strict=True) if t.rank == first_rank}
    steps = [s.duration_us for r in reference.values() for s in r.steps]
    step_us = statistics.median(steps) if steps else None
    clocks = []
    measured: dict[tuple[str, int], Alignment] = {}  # a node's first rank's, by (node, window)
    for trace, record in zip(traces, records, strict=True):
        theirs = reference.get(trace.first_step)
        node = node_of[trace.rank]
        if trace.rank == first_rank:
            clock = alignment.reference_alignment(len(record.instances))
        elif theirs is None:
            why = "the first rank did not record this window"
            clock = alignment.base_time(_prior_us(record, records[0]), why)
        elif node is not None and node == node_of[first_rank]:
            clock = alignment.on_one_clock(
                theirs.instances, record.instances, shift_us=_prior_us(record, theirs), step_us=step_us
            )
        elif node is not None and (node, trace.first_step) in measured:
            clock = _as_its_node(measured[(node, trace.first_step)], theirs, record, step_us)
        else:
            clock = alignment.align(
                theirs.instances, record.instances, prior_us=_prior_us(record, theirs), step_us=step_us
            )
            if node is not None and clock.paired:
                measured[(node, trace.first_step)] = dataclasses.replace(
                    clock, shift_us=clock.shift_us - _prior_us(record, theirs)
                )  # the node's correction beyond the base times
        clocks.append(clock)
    return by_rank(traces, records, clocks)


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
