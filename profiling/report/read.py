"""The map of the report: every trace of a folder -> its analysis record, each trace read once.

A trace with a fresh record (:mod:`profiling.analysis.per_trace.record`) is not read; the others are read
by worker processes, each holding one trace at a time, and their records saved beside the
traces for the next report. A file that is no trace, or a trace that cannot be read (a
truncated ``.gz``, a trace that says no rank), is skipped and named; the others are reported on.
"""

from __future__ import annotations

import dataclasses
import itertools
import zlib
from collections.abc import Callable, Sequence
from typing import TextIO

import msgspec

from profiling.analysis.per_trace import (
    ReportError,
    TraceRecord,
    analyse_trace,
    load_checked,
    reader_here,
    save,
)
from profiling.folder.traces import TraceFile, TraceSource
from profiling.report.progress import Progress
from profiling.report.workers import Workers

# What reading a file that is not a whole trace raises (the readers' TraceFormatError, in a
# person's words, and ReportError are ValueErrors; a .gz cut short raises EOFError or zlib's):
# the file is skipped, the others are still read.
_UNREADABLE = (ValueError, OSError, EOFError, zlib.error, msgspec.DecodeError)


@dataclasses.dataclass(frozen=True)
class Read:
    """Every trace read, by rank and window, with its record; what was read here; what was skipped."""

    traces: list[TraceFile]
    records: list[TraceRecord]
    read_here: list[str]  # names of the traces this report read (no fresh record)
    skipped: list[str]  # one line per file that is not a trace the report can use, naming it


def read_records(
    sources: Sequence[TraceSource],
    workers: Workers,
    progress: TextIO | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> Read:
    """Every trace's record: kept where fresh, else read by ``workers``; ``meanwhile`` is called
    once the first traces are being read (here, where there are no workers)."""
    checked = {source: load_checked(source) for source in sources}
    found: dict[TraceSource, TraceRecord | str | None] = {
        source: kept for source, (kept, _) in checked.items()
    }
    remade = [note for _, note in checked.values() if note is not None]  # read again below
    stale = [source for source in sources if found[source] is None]
    shown = Progress("read", len(stale), sum(s.path.stat().st_size for s in stale), stream=progress)
    outcomes = workers.map(analyse_or_skip, stale)
    if meanwhile is not None:
        meanwhile()
    for source, outcome in zip(stale, outcomes, strict=True):
        found[source] = outcome
        shown.advance(nbytes=source.path.stat().st_size)
    shown.close()
    read, skipped = [], []
    for source in sources:
        outcome = found[source]
        try:
            if isinstance(outcome, str):
                raise ReportError(outcome)
            assert outcome is not None
            read.append((outcome.trace_file(source), outcome))
        except ReportError as error:
            skipped.append(f"skipped {error}")
    read.sort(key=lambda pair: pair[0])
    _refuse_overlaps([trace for trace, _ in read])
    read_here = [s.name for s in stale if isinstance(found[s], TraceRecord)]  # not the skipped ones
    return Read([trace for trace, _ in read], [record for _, record in read], read_here, [*remade, *skipped])


def analyse_and_save(source: TraceSource, reader: str | None = None) -> TraceRecord:
    """One trace read and analysed (in a worker), its record saved beside it."""
    return save(analyse_trace(source, reader or reader_here()), source)


def analyse_or_skip(source: TraceSource, reader: str | None = None) -> TraceRecord | str:
    """:func:`analyse_and_save`, or why the file cannot be reported on (``name: why``)."""
    try:
        return analyse_and_save(source, reader)
    except _UNREADABLE as error:
        why = str(error).removeprefix(f"{source.path}: ") or type(error).__name__
        return why if why.startswith(source.name) else f"{source.name}: {why}"


def _refuse_overlaps(traces: Sequence[TraceFile]) -> None:
    """Two files of one rank whose steps overlap are one window twice (a copy, a rename), or
    two runs in one folder: which to believe is the user's call."""
    for before, after in itertools.pairwise(traces):
        if before.rank == after.rank and after.first_step <= before.last_step:
            raise ReportError(
                f"{before.name} (steps {before.first_step}-{before.last_step}) and {after.name} (steps "
                f"{after.first_step}-{after.last_step}) both hold rank {before.rank}'s steps "
                f"{after.first_step}-{min(before.last_step, after.last_step)}. HINT: keep one of them, or "
                "report on each run's folder apart"
            )
