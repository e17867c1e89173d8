"""Interval-set arithmetic, checked against a brute-force sweep over a fine grid."""

from __future__ import annotations

import numpy as np
import pytest

from profiling.analysis.per_trace import intervals


def covered(spans: intervals.Intervals, grid: np.ndarray) -> np.ndarray:
    starts, ends = spans
    return np.any((grid[:, None] >= starts) & (grid[:, None] < ends), axis=1)


def random_spans(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    starts = rng.integers(0, 100, count).astype(float)
    return starts, starts + rng.integers(0, 15, count)


@pytest.mark.parametrize("seed", range(20))
def test_union_subtract_intersect_clip_match_a_brute_force_sweep(seed: int) -> None:
    rng = np.random.default_rng(seed)
    grid = np.arange(0, 120, 0.5) + 0.25
    a, b = intervals.union(*random_spans(rng, 12)), intervals.union(*random_spans(rng, 9))
    for spans in (a, b):
        assert np.all(spans[0][1:] > spans[1][:-1])  # disjoint and sorted
    assert np.array_equal(covered(intervals.subtract(a, b), grid), covered(a, grid) & ~covered(b, grid))
    assert np.array_equal(covered(intervals.intersect(a, b), grid), covered(a, grid) & covered(b, grid))
    assert np.array_equal(covered(intervals.combine(a, b), grid), covered(a, grid) | covered(b, grid))
    clipped = intervals.clip(a, 30.0, 70.0)
    assert np.array_equal(covered(clipped, grid), covered(a, grid) & (grid >= 30) & (grid < 70))
    assert intervals.length(a) == pytest.approx(covered(a, grid).sum() * 0.5)


def test_edge_cases() -> None:
    assert intervals.length(intervals.union(np.array([5.0, 1.0]), np.array([5.0, 1.0]))) == 0  # empty spans
    touching = intervals.union(np.array([0.0, 10.0]), np.array([10.0, 20.0]))
    assert intervals.length(touching) == 20
    assert intervals.length(intervals.intersect(((0.0,), (10.0,)), ((10.0,), (20.0,)))) == 0
    assert intervals.length(intervals.subtract(intervals.EMPTY, touching)) == 0
