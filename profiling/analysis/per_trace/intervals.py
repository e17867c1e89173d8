"""Sets of time intervals as sorted, disjoint numpy arrays: union, difference, clipping, length.

A set is a pair ``(starts, ends)`` of float64 arrays, sorted and non-overlapping. The analysis
asks questions like "how long did communication run while no compute kernel did" per step;
with arrays these cost a sort and a few vector operations instead of a Python loop per event.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

EMPTY: Intervals = (np.empty(0), np.empty(0))


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """The union of possibly overlapping intervals, as a disjoint sorted set."""
    keep = ends > starts
    starts, ends = np.asarray(starts, dtype=float)[keep], np.asarray(ends, dtype=float)[keep]
    if not len(starts):
        return EMPTY
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    # a new merged interval begins where an interval starts after everything before it ended
    begins = np.empty(len(starts), dtype=bool)
    begins[0] = True
    begins[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(begins)
    last = np.append(first[1:] - 1, len(starts) - 1)
    return starts[first], reach[last]


def length(intervals: Intervals) -> float:
    starts, ends = intervals
    return float(np.sum(ends - starts))


def clip(intervals: Intervals, low: float, high: float) -> Intervals:
    """The part of a disjoint set inside [low, high)."""
    starts, ends = intervals
    first, last = np.searchsorted(ends, low, side="right"), np.searchsorted(starts, high, side="left")
    starts, ends = np.maximum(starts[first:last], low), np.minimum(ends[first:last], high)
    keep = ends > starts
    return starts[keep], ends[keep]


def contains(intervals: Intervals, t: float) -> bool:
    """Whether ``t`` lies in one of ``intervals`` (sorted, disjoint)."""
    starts, ends = intervals
    index = int(np.searchsorted(starts, t, side="right")) - 1
    return index >= 0 and t < ends[index]


def combine(*sets: Intervals) -> Intervals:
    """The union of several disjoint sets."""
    return union(np.concatenate([s for s, _ in sets]), np.concatenate([e for _, e in sets]))


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """``a`` minus ``b`` (both disjoint sets)."""
    if not len(a[0]) or not len(b[0]):
        return a
    # the complement of b, then intersected with a
    gaps_start = np.concatenate(([-np.inf], b[1]))
    gaps_end = np.concatenate((b[0], [np.inf]))
    return intersect(a, (gaps_start, gaps_end))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """``a`` and ``b`` (both disjoint sets): a sweep over both, vectorised through a merge."""
    if not len(a[0]) or not len(b[0]):
        return EMPTY
    # every boundary of either set, with how it changes the count of sets covering the point
    points = np.concatenate((a[0], a[1], b[0], b[1]))
    changes = np.concatenate(
        (np.ones(len(a[0])), -np.ones(len(a[1])), np.ones(len(b[0])), -np.ones(len(b[1])))
    )
    # ends before starts at the same instant: touching intervals do not intersect
    order = np.lexsort((changes, points))
    points, depth = points[order], np.cumsum(changes[order])
    inside = depth == 2
    starts, ends = points[:-1][inside[:-1]], points[1:][inside[:-1]]
    keep = ends > starts
    return starts[keep], ends[keep]


def exclusive(labelled: list[tuple[str, Intervals]]) -> dict[str, float]:
    """Time each set covers that no set before it in the list covers."""
    parts, covered = {}, EMPTY
    for label, spans in labelled:
        parts[label] = length(subtract(spans, covered))
        covered = combine(covered, spans)
    return parts
