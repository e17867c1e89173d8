"""The waits between one rank's GPU streams that its trace records, as HTA's critical path reads
them (its sync edges): a Stream Wait Event (``cuda_sync``) on a stream holds that stream's next
activity until the event it names is reached on the stream waited on, and that event follows
the last activity launched there before the ``cudaEventRecord`` whose correlation it gives.

A wait so tied says which activity the next one waited for: a compute kernel after a receive
waited for the receive, however far apart the two streams' recorded clocks put their ends
(:mod:`profiling.analysis.across_ranks.critical_path.graph` reads it so). A wait whose record, stream or
activities the trace lacks ties nothing."""

from __future__ import annotations

import numpy as np

from profiling.analysis.per_trace.launches import launch_times
from profiling.analysis.reading.trace_columns import TraceEvents

NO_WAITS = (np.zeros(0), np.zeros(0))


def stream_waits(trace: TraceEvents, launched_at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each tied wait's (end of the activity waited for, start of the activity that waited), in
    the trace's time, by the end; ``launched_at``: each GPU activity's launch
    (:func:`.launches.launch_times`)."""
    if not len(trace.wait_ts):
        return NO_WAITS
    recorded_at = launch_times(trace, trace.wait_record_corr)
    waited_end = np.full(len(trace.wait_ts), np.nan)
    resumed_at = np.full(len(trace.wait_ts), np.nan)
    for stream in np.unique(trace.wait_on_stream[trace.wait_on_stream >= 0]).tolist():
        # the last activity launched on the stream waited on before the record
        mine = np.flatnonzero((trace.gpu_stream == stream) & np.isfinite(launched_at))
        mine = mine[np.argsort(launched_at[mine], kind="stable")]
        which = np.flatnonzero((trace.wait_on_stream == stream) & np.isfinite(recorded_at))
        before = np.searchsorted(launched_at[mine], recorded_at[which], side="right") - 1
        found = before >= 0
        waited_end[which[found]] = trace.gpu_end[mine[before[found]]]
    for stream in np.unique(trace.wait_stream[trace.wait_stream >= 0]).tolist():
        # the waiting stream's first activity from the wait on
        mine = np.flatnonzero(trace.gpu_stream == stream)
        mine = mine[np.argsort(trace.gpu_start[mine], kind="stable")]
        which = np.flatnonzero(trace.wait_stream == stream)
        after = np.searchsorted(trace.gpu_start[mine], trace.wait_ts[which], side="left")
        found = after < len(mine)
        resumed_at[which[found]] = trace.gpu_start[mine[after[found]]]
    tied = np.isfinite(waited_end) & np.isfinite(resumed_at) & (trace.wait_stream != trace.wait_on_stream)
    order = np.argsort(waited_end[tied], kind="stable")
    return waited_end[tied][order], resumed_at[tied][order]


def waits_within(waits: tuple[np.ndarray, np.ndarray], window: tuple[float, float]) -> bytes:
    """The waits whose waiting activity starts in ``window`` (a step's GPU span), as a lane
    keeps them: float64 pairs (end waited for, start that waited)."""
    ended, resumed = waits
    inside = (resumed >= window[0]) & (resumed < window[1])
    return np.column_stack((ended[inside], resumed[inside])).astype(np.float64).tobytes()
