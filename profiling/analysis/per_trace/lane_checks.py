"""A lane read back from its cache, checked: the bytes of a :class:`~.lanes.StepLane` that a
damaged file (cut short, another trace's, an index out of range) holds are no lane, and the
critical path must not walk them (:func:`profiling.analysis.per_trace.record.load_lanes`)."""

from __future__ import annotations

import numpy as np

from profiling.analysis.per_trace.lanes import EPSILON_US, KINDS, PHASES, StepLane


def lane_problem(lane: StepLane, names: int) -> str | None:
    """What makes these bytes no lane (read back from a cache), in words; None if they are one."""
    sizes = {"starts": 8, "ends": 8, "kinds": 1, "names": 4, "phases": 1}
    if any(len(getattr(lane, field)) % size for field, size in sizes.items()):
        return "is cut short"
    counts = {len(getattr(lane, field)) // size for field, size in sizes.items()}
    if len(counts) != 1:
        return "has arrays of different lengths"
    starts, ends = np.frombuffer(lane.starts, np.float64), np.frombuffer(lane.ends, np.float64)
    if not len(starts):
        return None
    # one reduction an array where it can be: at 4096 ranks every lane of the job is checked
    # (a NaN or an infinity makes the sums so, and a span that ends before it starts a negative length)
    if not (np.isfinite(starts.sum() + ends.sum()) and (ends - starts).min() >= 0):
        return "has spans that are not times"
    if len(starts) > 1 and (starts[1:] - ends[:-1]).min() < -EPSILON_US:
        return "has spans out of order"
    # read unsigned, a negative index is above every valid one: one max an array, not a min and
    # a max (a phase of -1, none said, is 0 once one is added, wrapping)
    kinds, phases = np.frombuffer(lane.kinds, np.uint8), np.frombuffer(lane.phases, np.uint8)
    if kinds.max() >= len(KINDS) or (phases + np.uint8(1)).max() > len(PHASES):
        return "names a kind or phase there is none of"
    if np.frombuffer(lane.names, np.uint32).max() >= names:
        return "names an operator there is none of"
    return None
