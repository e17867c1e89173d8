"""Each step's peak memory from the allocator's instants a trace holds (``profile_memory``:
``[memory]`` events, each with the allocator's totals after an allocation or a free), per
device: the most allocated, the most reserved (CUDA's caching allocator; a CPU reserves
nothing of its own), and the operator running at the peak. On a CPU the totals count what was
allocated since the profiler started (torch keeps no CPU total before it)."""

from __future__ import annotations

import msgspec
import numpy as np

from profiling.analysis.reading.trace_columns import ANALYSED, TraceEvents


class StepMemory(msgspec.Struct, frozen=True):
    step: int
    device: str  # "cpu", "cuda:0"
    peak_allocated: int  # bytes
    peak_reserved: int | None  # bytes; None where the allocator reserves nothing (a CPU)
    peak_op: str | None  # the innermost operator running when the peak was reached


def device_of(device_id: int) -> str:
    return "cpu" if device_id < 0 else f"cuda:{device_id}"


def step_memory(events: TraceEvents, steps: list[tuple[int, float, float]]) -> list[StepMemory]:
    """Each step's (number, start, end) peak on each device its trace's instants name."""
    found = []
    ts, allocated, reserved = events.memory_ts, events.memory_allocated, events.memory_reserved
    analysed = np.flatnonzero(events.span_kind == ANALYSED)
    for device_id in np.unique(events.memory_device).tolist():
        mine = np.flatnonzero((events.memory_device == device_id) & ~np.isnan(allocated))
        for number, start, end in steps:
            inside = mine[(ts[mine] >= start) & (ts[mine] < end)]
            if not len(inside):
                continue
            peak = inside[int(np.argmax(allocated[inside]))]
            most_reserved = np.nanmax(reserved[inside]) if not np.isnan(reserved[inside]).all() else 0.0
            found.append(
                StepMemory(
                    step=number,
                    device=device_of(device_id),
                    peak_allocated=int(allocated[peak]),
                    peak_reserved=int(most_reserved) if most_reserved > 0 else None,
                    peak_op=_running_at(events, analysed, float(ts[peak])),
                )
            )
    return found


# what allocates for the operator that called it: the caller is named instead
_ALLOCATING = frozenset(("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::resize_"))


def _running_at(events: TraceEvents, analysed: np.ndarray, at: float) -> str | None:
    """The innermost operator whose span holds ``at`` (the one that began last), on any thread;
    above the allocation itself (``aten::empty``), where something called it."""
    holding = analysed[(events.span_start[analysed] <= at) & (events.span_end[analysed] >= at)]
    names = [events.names[int(events.span_name[i])] for i in holding[np.argsort(-events.span_start[holding])]]
    return next((name for name in names if name not in _ALLOCATING), names[0] if names else None)
