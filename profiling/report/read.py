"""The map of the report: every trace of a folder -> its analysis record, each trace read once.

A trace with a fresh record (:mod:`profiling.analysis.record`) is not read; the others are read
by worker processes, each holding one trace at a time, and their records saved beside the
traces for the next report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TextIO

from profiling.analysis.record import TraceRecord, analyse_trace, load_fresh, reader_here, save
from profiling.folder.traces import TraceFile
from profiling.report.progress import Progress
from profiling.report.workers import Workers


@dataclasses.dataclass(frozen=True)
class Read:
    """Every trace's record, in the order of the traces, and which had to be read here."""

    records: list[TraceRecord]
    read_here: list[str]  # names of the traces this report read (no fresh record)


def read_records(traces: Sequence[TraceFile], workers: Workers, progress: TextIO | None = None) -> Read:
    found = {trace: load_fresh(trace) for trace in traces}
    stale = [trace for trace in traces if found[trace] is None]
    shown = Progress("read", len(stale), sum(t.path.stat().st_size for t in stale), stream=progress)
    for trace, record in zip(stale, workers.map(analyse_and_save, stale), strict=True):
        found[trace] = record
        shown.advance(nbytes=record.size)
    shown.close()
    return Read([found[trace] for trace in traces], [trace.path.name for trace in stale])


def analyse_and_save(trace: TraceFile, reader: str | None = None) -> TraceRecord:
    """One trace read and analysed (in a worker), its record saved beside it."""
    record = analyse_trace(trace, reader or reader_here())
    save(record, trace)
    return record
