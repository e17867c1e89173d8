"""Each step's time on the GPU, from one trace: the step's GPU span (from its first activity to
the next step's first), what ran in it by HTA's kinds, what of the compute each CPU phase
launched, and how much communication ran under compute (see :mod:`.breakdown`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from profiling.analysis.per_trace import intervals
from profiling.analysis.per_trace.kernels import KERNEL_TYPES, hta_kernel_type
from profiling.analysis.per_trace.lanes import PHASES as COMPUTE_PHASES
from profiling.analysis.reading.trace_columns import TraceEvents


@dataclasses.dataclass(frozen=True)
class GpuStep:
    start_us: float  # start of the step's GPU span (trace clock)
    duration_us: float  # the GPU span: the parts add up to it
    busy_us: float
    communication_overlapped_us: float
    compute_by_phase_us: dict[str, float]  # COMPUTE_PHASES -> part of compute; adds up to compute
    activities: int  # GPU activities launched by this step


def gpu_steps(
    trace: TraceEvents,
    steps: list[tuple[int, float, float, int]],
    step_of: np.ndarray,
    phase: np.ndarray,
) -> list[tuple[dict[str, float], float, GpuStep]]:
    """Each step's GPU parts (HTA's kinds, each counted where no kind before it ran, and idle),
    its communication time, and its GPU span, from the activities tied to it (``step_of``)
    and the CPU phase that launched each (``phase``)."""
    kind_of_name = np.array(
        [KERNEL_TYPES.index(hta_kernel_type(name)) for name in trace.names], dtype=np.int8
    )
    kinds = kind_of_name[trace.gpu_name] if len(trace.names) else np.zeros(0, dtype=np.int8)
    tied = step_of >= 0
    by_kind = {
        kind: intervals.union(trace.gpu_start[tied & (kinds == code)], trace.gpu_end[tied & (kinds == code)])
        for code, kind in enumerate(KERNEL_TYPES)
    }
    firsts = [
        float(trace.gpu_start[step_of == i].min()) if (step_of == i).any() else None
        for i in range(len(steps))
    ]
    # where no step launched anything, every span is empty and this is not read
    last_end = float(trace.gpu_end[step_of >= 0].max()) if (step_of >= 0).any() else 0.0
    compute = tied & (kinds == KERNEL_TYPES.index("compute"))
    by_phase = [
        intervals.union(trace.gpu_start[compute & (phase == code)], trace.gpu_end[compute & (phase == code)])
        for code in range(len(COMPUTE_PHASES))
    ]
    found = []
    for index, (_, start, _, _) in enumerate(steps):
        later = [first for first in firsts[index + 1 :] if first is not None]
        first = firsts[index]
        if first is None:  # launched nothing: an empty span
            span_start = span_end = start
        else:
            span_start = first
            span_end = max(span_start, later[0]) if later else last_end
        within = {kind: intervals.clip(spans, span_start, span_end) for kind, spans in by_kind.items()}
        parts = intervals.exclusive([(kind, within[kind]) for kind in KERNEL_TYPES])
        busy = sum(parts.values())
        parts["idle"] = max(0.0, (span_end - span_start) - busy)
        gpu = GpuStep(
            start_us=span_start,
            duration_us=span_end - span_start,
            busy_us=busy,
            communication_overlapped_us=intervals.length(
                intervals.intersect(within["communication"], within["compute"])
            ),
            compute_by_phase_us=intervals.exclusive(
                [
                    (p, intervals.clip(spans, span_start, span_end))
                    for p, spans in zip(COMPUTE_PHASES, by_phase, strict=True)
                ]
            ),
            activities=int((step_of == index).sum()),
        )
        found.append((parts, intervals.length(within["communication"]), gpu))
    return found
