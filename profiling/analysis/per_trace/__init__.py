"""Stage 2: what one rank's traces measure, kept beside each trace as its analysis record
(:mod:`.record`)."""

# the stage's entry points: what the rooms above it (the report) may take from it
from profiling.analysis.per_trace.idle import CAUSES, KERNEL_GAP_US
from profiling.analysis.per_trace.kernels import FAMILIES
from profiling.analysis.per_trace.lanes import KINDS
from profiling.analysis.per_trace.record import (
    ReportError,
    TraceRecord,
    analyse_trace,
    load_checked,
    load_fresh,
    reader_here,
    save,
)

__all__ = [
    "CAUSES",
    "FAMILIES",
    "KERNEL_GAP_US",
    "KINDS",
    "ReportError",
    "TraceRecord",
    "analyse_trace",
    "load_checked",
    "load_fresh",
    "reader_here",
    "save",
]
