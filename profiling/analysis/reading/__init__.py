"""Stage 1: a Chrome trace file into columns (:class:`~.trace_columns.TraceEvents`), by the C
scanner or the Python reader, refused alike (:class:`~.trace_errors.TraceFormatError`)."""

from slurm.basics import public_names

# the stage's entry points: what the rooms above it (the report) may take from it
__all__, __getattr__ = public_names(
    __name__,
    {
        "TraceFormatError": "trace_errors",
        "read": "trace_events",
    },
)
