"""What no hardware writes, taken out of a trace's columns before anything is measured from them.

Both readers give the columns as the file has them (and agree on them, to the bit). A duration,
size or count that no run can have is a damaged file, not a figure: left in, it poisons every
mean it enters (a 1e300 µs span made a step of 1e297 ms; a −1 allocation a peak of −1 bytes).
Each kind left out is said in one line, naming what and how many, in the trace's warnings.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from profiling.analysis.reading.collectives import Collective
from profiling.analysis.reading.trace_columns import STEP_PREFIX, TraceEvents, step_number

MAX_SPAN_US = 1e12  # 11.6 days: longer than any recorded step
MAX_ELEMENTS = 1 << 40  # a tensor dimension, or a message's elements
MAX_BYTES = float(1 << 50)  # 1 PiB of memory
_SPAN_COLUMNS = ("span_start", "span_end", "span_thread", "span_name", "span_kind", "span_ordinal")
_GPU_COLUMNS = ("gpu_start", "gpu_end", "gpu_corr", "gpu_stream", "gpu_name", "gpu_ordinal")


def plausible(events: TraceEvents) -> tuple[TraceEvents, list[str]]:
    """``events`` without what no run can have, and a line for each kind left out."""
    said: list[str] = []
    changes: dict[str, Any] = {}  # TraceEvents fields, each of its own type
    for prefix, columns, what in (("span", _SPAN_COLUMNS, "CPU"), ("gpu", _GPU_COLUMNS, "GPU")):
        start, end = getattr(events, f"{prefix}_start"), getattr(events, f"{prefix}_end")
        bad = ~(np.isfinite(start) & np.isfinite(end) & (end >= start) & (end - start <= MAX_SPAN_US))
        if bad.any():
            kept = ~bad
            changes.update(
                {name: getattr(events, name)[kept] for name in columns if len(getattr(events, name))}
            )
            said.append(
                f"{int(bad.sum())} {what} event(s) of a negative, endless or not finite duration left out"
            )
    collectives = [c for c in events.collectives if _collective_fine(c)]
    if len(collectives) < len(events.collectives):
        changes["collectives"] = collectives
        said.append(
            f"{len(events.collectives) - len(collectives)} collective(s) of a negative duration or "
            "more than 2^40 elements left out"
        )
    ops = [op for op in events.counted_ops if op.flops >= 0]
    if len(ops) < len(events.counted_ops):
        changes["counted_ops"] = ops
        said.append(
            f"{len(events.counted_ops) - len(ops)} operator(s) with shapes no tensor has (a dimension "
            "beyond 2^40, or not a whole number) left out of the FLOPs"
        )
    memory, line = _memory(events)
    if line:
        changes.update(memory)
        said.append(line)
    huge = [name for name in events.names if name.startswith(STEP_PREFIX) and _huge_step(name)]
    if huge:
        said.append(f"{len(huge)} step(s) numbered beyond 2^31 ({huge[0]}) left out")
    return (dataclasses.replace(events, **changes) if changes else events), said


def _huge_step(name: str) -> bool:
    return name[len(STEP_PREFIX) :].isdigit() and step_number(name) is None


def _collective_fine(collective: Collective) -> bool:
    if not (math.isfinite(collective.start) and math.isfinite(collective.end)):
        return False
    if not 0 <= collective.end - collective.start <= MAX_SPAN_US:
        return False
    counts = [collective.arg(key) for key in ("In msg nelems", "Out msg nelems")]
    return all(
        not isinstance(count, int | float) or isinstance(count, bool) or 0 <= count <= MAX_ELEMENTS
        for count in counts
    )


def _memory(events: TraceEvents) -> tuple[dict[str, np.ndarray], str | None]:
    """The allocator's totals without what no device holds: negative, beyond 1 PiB or the
    device's memory, not finite, or reserved below allocated (each such instant unknown)."""
    allocated, reserved = events.memory_allocated, events.memory_reserved
    if not len(allocated):
        return {}, None
    limit = float(events.device_memory_bytes) if events.device_memory_bytes else MAX_BYTES
    on_gpu = events.memory_device >= 0
    ceiling = np.where(on_gpu, min(limit, MAX_BYTES), MAX_BYTES)
    known_a, known_r = ~np.isnan(allocated), ~np.isnan(reserved)
    wrong = known_a & ~((allocated >= 0) & (allocated <= ceiling))
    wrong |= known_r & ~((reserved >= 0) & (reserved <= ceiling))
    # a caching allocator holds what it hands out (the CPU's says 0 reserved: it keeps no cache)
    wrong |= on_gpu & known_a & known_r & (reserved < allocated)
    if not wrong.any():
        return {}, None
    allocated, reserved = allocated.copy(), reserved.copy()
    allocated[wrong] = reserved[wrong] = np.nan
    return (
        {"memory_allocated": allocated, "memory_reserved": reserved},
        f"{int(wrong.sum())} allocator instant(s) no device can have (negative, beyond its memory or "
        "1 PiB, a GPU's reserved below its allocated) read as unknown",
    )
