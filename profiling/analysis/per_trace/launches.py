"""Which step each GPU activity belongs to: its launch (the runtime call its ``correlation``
id leads to) and HTA's rule for what counts (see :mod:`profiling.analysis.per_trace.breakdown`)."""

from __future__ import annotations

import numpy as np

from profiling.analysis.per_trace.idle import IdleCauses, idle_causes
from profiling.analysis.reading.trace_columns import TraceEvents


def steps_of(
    trace: TraceEvents, steps: list[tuple[int, float, float, int]], launched_at: np.ndarray
) -> np.ndarray:
    """The index of the step each GPU activity counts in; -1 where it does not count (see
    :mod:`profiling.analysis.per_trace.breakdown`)."""
    found = np.full(len(launched_at), -1)
    if not steps:
        return found
    with np.errstate(invalid="ignore"):  # nan: no launch in the trace
        counted = launched_at <= steps[-1][2] if len(steps) > 1 else np.ones(len(launched_at), dtype=bool)
        for index, (_, start, end, _) in enumerate(steps):
            found[(launched_at >= start) & (launched_at < end)] = index
    elsewhere = counted & (found < 0)
    began = np.searchsorted([s[1] for s in steps], trace.gpu_start[elsewhere], side="right") - 1
    found[elsewhere] = np.maximum(began, 0)
    return found


def launch_times(trace: TraceEvents, correlations: np.ndarray | None = None) -> np.ndarray:
    """The CPU time of the runtime call that launched each GPU activity (of the trace, or with
    these ``correlations``); nan where that call is not in the trace."""
    correlations = trace.gpu_corr if correlations is None else correlations
    found = np.full(len(correlations), np.nan)
    if not len(trace.launch_corr):
        return found
    order = np.argsort(trace.launch_corr, kind="stable")
    corr, ts = trace.launch_corr[order], trace.launch_ts[order]
    where = np.minimum(np.searchsorted(corr, correlations), len(corr) - 1)
    matched = corr[where] == correlations
    found[matched] = ts[where][matched]
    return found


def idle_of_counted(trace: TraceEvents, launched_at: np.ndarray, counted: np.ndarray | None) -> IdleCauses:
    """The streams' idle time by cause, over the activities the breakdown counts (HTA's set;
    ``counted`` None: a trace without steps, every activity)."""
    counted = np.ones(len(launched_at), dtype=bool) if counted is None else counted
    return idle_causes(
        trace.gpu_start[counted], trace.gpu_end[counted], trace.gpu_stream[counted], launched_at[counted]
    )
