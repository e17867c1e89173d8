"""Why a GPU stream idles, in HTA's words (``get_idle_time_breakdown``).

On each stream, the gap before an activity (kernel, memcpy, memset) since the previous one on
that stream ended is its *idle interval*, and it has one cause:

- ``host_wait``: the CPU launched the activity only after the previous one had ended: the GPU
  waited for the host to enqueue work (a Python-bound loop, a data loader, a sync);
- ``kernel_wait``: otherwise, a gap shorter than :data:`KERNEL_GAP_US`: the cost of starting
  back-to-back kernels;
- ``other``: the rest: the activity was queued in time and still started late (waiting on
  another stream's event, a collective's peer, a memcpy's engine).

These are HTA's definitions, threshold included (its ``consecutive_kernel_delay`` default, 30,
compared with µs gaps), so the figures match HTA's on the same trace; an activity whose launch
the trace does not hold (launched before the recording began) is never a host wait, as in HTA.
Idle time is summed over streams: a GPU whose two streams take turns is idle on each half the
time and never idle as a device (the report's ``idle`` part is the device's).
"""

from __future__ import annotations

import msgspec
import numpy as np

CAUSES = ("host_wait", "kernel_wait", "other")
KERNEL_GAP_US = 30.0  # HTA's consecutive_kernel_delay default


class IdleCauses(msgspec.Struct, frozen=True, kw_only=True):
    """One trace's stream idle time by cause (µs), and how many gaps each cause had."""

    host_wait_us: float
    kernel_wait_us: float
    other_us: float
    gaps: tuple[int, int, int]  # host_wait, kernel_wait, other
    streams: int

    @property
    def total_us(self) -> float:
        return self.host_wait_us + self.kernel_wait_us + self.other_us

    def by_cause_us(self) -> dict[str, float]:
        return dict(zip(CAUSES, (self.host_wait_us, self.kernel_wait_us, self.other_us), strict=True))


def idle_causes(
    start: np.ndarray,
    end: np.ndarray,
    stream: np.ndarray,
    launched_at: np.ndarray,
    kernel_gap_us: float = KERNEL_GAP_US,
) -> IdleCauses:
    """The idle intervals of the GPU activities ``start``-``end`` on their ``stream``s, by cause;
    ``launched_at``: the CPU time of each one's launch (nan where the trace has none)."""
    order = np.lexsort((start, stream))
    start, end, stream, launched = start[order], end[order], stream[order], launched_at[order]
    follows = np.zeros(len(order), dtype=bool)  # has a predecessor on its stream
    follows[1:] = stream[1:] == stream[:-1]
    previous_end = np.empty(len(order))
    previous_end[0:1] = np.nan
    previous_end[1:] = end[:-1]
    gap = np.where(follows, start - previous_end, 0.0)
    follows &= gap > 0  # an activity that overlaps the one before it on its stream follows no idle time
    with np.errstate(invalid="ignore"):  # nan launches compare False: never a host wait
        host = follows & (launched > previous_end)
    kernel = follows & ~host & (gap < kernel_gap_us)
    other = follows & ~host & ~kernel
    return IdleCauses(
        host_wait_us=float(gap[host].sum()),
        kernel_wait_us=float(gap[kernel].sum()),
        other_us=float(gap[other].sum()),
        gaps=(int(host.sum()), int(kernel.sum()), int(other.sum())),
        streams=len(np.unique(stream)),
    )
