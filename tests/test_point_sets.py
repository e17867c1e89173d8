"""The point-set primitives under the clock alignment, on sets small enough to check by hand."""

from __future__ import annotations

import numpy as np

from profiling.analysis.clocks.point_sets import correlation, mutual_nearest, nearest_gap, peaks


def test_correlation_counts_the_pairs_at_each_offset() -> None:
    a = np.array([10.0, 20.0, 35.0])
    b = a - 5.0  # every point of a is 5 after one of b
    counts = correlation(a, b, window=30.0, bin_us=1.0)  # lags -30 .. 30
    assert counts[30 + 5] == 3 and counts.sum() == 9  # all 9 pairs lie within the window
    assert peaks(counts, bin_us=1.0, tolerance=1.0, most=1) == [5.0]


def test_mutual_nearest_pairs_each_point_once_and_leaves_the_lonely_out() -> None:
    a = np.array([0.0, 10.0, 20.0, 30.0])
    b = np.array([0.5, 10.2, 29.9])  # 20 has no twin
    i, j = mutual_nearest(a, b, tolerance=1.0)
    assert list(zip(i.tolist(), j.tolist(), strict=True)) == [(0, 0), (1, 1), (3, 2)]
    assert nearest_gap(b).tolist() == [9.7, 9.7, 19.7]


def test_counting_the_pairs_gives_the_fft_correlation() -> None:
    rng = np.random.default_rng(3)
    a = np.sort(rng.uniform(0, 50_000, 400))
    b = np.sort(a - 1234.5 + rng.normal(0, 3, 400))
    by_fft = correlation(a, b, window=5000.0, bin_us=5.0)  # 160 000 pairs, more than the bins
    by_pairs = correlation(a[:40], b[:40], window=5000.0, bin_us=5.0)  # 1 600 pairs, fewer
    assert by_fft.argmax() == by_pairs.argmax()
    assert abs((by_fft.argmax() - 1000) * 5.0 - 1234.5) <= 5.0  # the lag of the true offset, to a bin
    bins = np.floor((np.concatenate([a[:40], b[:40]]) - min(a.min(), b.min())) / 5.0)
    assert by_pairs.sum() == (np.abs(np.subtract.outer(bins[:40], bins[40:])) <= 1000).sum()
