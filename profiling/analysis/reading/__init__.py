"""Stage 1: a Chrome trace file into columns (:class:`~.trace_columns.TraceEvents`), by the C
scanner or the Python reader, refused alike (:class:`~.trace_errors.TraceFormatError`)."""

# the stage's entry points: what the rooms above it (the report) may take from it
from profiling.analysis.reading.trace_errors import TraceFormatError
from profiling.analysis.reading.trace_events import read

__all__ = [
    "TraceFormatError",
    "read",
]
