"""Point sets on a line, vectorised: how many pairs of two sets lie at each offset (their
cross-correlation, by FFT), the offsets where that count peaks, and one-to-one pairing by
mutual nearest neighbours. What :mod:`profiling.analysis.clocks.alignment` is built on: O(n log n),
never every pair."""

from __future__ import annotations

import numpy as np


def correlation(a: np.ndarray, b: np.ndarray, window: float, bin_us: float) -> np.ndarray:
    """``counts[k]``: pairs (i, j) with ``a[i] - b[j]`` near ``(k - L) * bin_us``, ``L`` bins each side
    of 0 covering ``window``; by counting the pairs that lie within the window where they are
    fewer than the bins an FFT would take (thousands of collectives a second, within a step's
    window: a tenth of its time), else by FFT of the two histograms, O(n log n) in the bins."""
    low = min(a.min(), b.min())
    ia, ib = ((a - low) // bin_us).astype(np.int64), np.sort(((b - low) // bin_us).astype(np.int64))
    lags = int(np.ceil(window / bin_us))
    size = 1 << int(max(ia.max(), ib.max()) + lags + 2).bit_length()  # no wrap-around
    first = np.searchsorted(ib, ia - lags, side="left")
    near = np.searchsorted(ib, ia + lags, side="right") - first  # of each a, the b within the lags
    if near.sum() <= size:
        # each a's b, one after the other: the positions first[i], first[i] + 1, ... of each run
        ends = np.cumsum(near)
        j = np.arange(ends[-1] if len(ends) else 0) - np.repeat(ends - near - first, near)
        differences = np.repeat(ia, near) - ib[j]
        return np.bincount(differences + lags, minlength=2 * lags + 1).astype(np.float64)
    fa = np.fft.rfft(np.bincount(ia, minlength=size).astype(np.float64))
    fb = np.fft.rfft(np.bincount(ib, minlength=size).astype(np.float64))
    circular = np.fft.irfft(fa * np.conj(fb), size)  # circular[k] = sum_t A[t + k] * B[t]
    return np.rint(np.concatenate([circular[-lags:], circular[: lags + 1]]))


def peaks(lag_counts: np.ndarray, bin_us: float, tolerance: float, most: int) -> list[float]:
    """The offsets (from the middle lag) of the ``most`` highest peaks of the correlation summed
    over ±``tolerance``, at most one per stretch of four tolerances.

    Found on bins of about half the tolerance: a finer grid would only place the peak more
    precisely than the pairing that refines it needs."""
    lags = len(lag_counts) // 2
    factor = max(1, int(tolerance / bin_us / 2))
    if factor > 1:
        lag_counts = np.add.reduceat(lag_counts, np.arange(0, len(lag_counts), factor))
    half = int(round(tolerance / (bin_us * factor)))
    # sums over [k - half, k + half] by slices of the running sum, padded at both ends
    running = np.cumsum(lag_counts)
    padded_sum = np.concatenate([np.zeros(half + 1), running, np.full(half, running[-1])])
    smoothed = padded_sum[2 * half + 1 :] - padded_sum[: len(lag_counts)]
    # whole counts, and a tie on a plateau goes to the lag with the most pairs of its own
    smoothed += lag_counts / (lag_counts.max() + 1.0)
    block = max(1, int(np.ceil(4 * tolerance / (bin_us * factor))))
    padded = np.concatenate([smoothed, np.full(-len(smoothed) % block, -1.0)]).reshape(-1, block)
    tops = np.argmax(padded, axis=1) + np.arange(len(padded)) * block
    tops = tops[np.argsort(-smoothed[tops], kind="stable")[:most]]
    # the middle of each (coarse) bin, in fine lags
    return [float((k * factor + (factor - 1) / 2 - lags) * bin_us) for k in tops]


def mutual_nearest(a: np.ndarray, b: np.ndarray, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``(i, j)`` in sorted ``a`` and ``b`` of the points that are each other's nearest,
    at most ``tolerance`` apart: a one-to-one pairing in O(n log n)."""
    if not len(a) or not len(b):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    nearest_in_b, nearest_in_a = _nearest(b, a), _nearest(a, b)
    i = np.arange(len(a))
    keep = (nearest_in_a[nearest_in_b] == i) & (np.abs(a - b[nearest_in_b]) <= tolerance)
    return i[keep], nearest_in_b[keep]


def _nearest(points: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query, the position of the nearest of the sorted ``points``."""
    right = np.minimum(np.searchsorted(points, queries), len(points) - 1)
    left = np.maximum(right - 1, 0)
    return np.where(np.abs(queries - points[left]) <= np.abs(points[right] - queries), left, right)


def nearest_gap(points: np.ndarray) -> np.ndarray:
    """Each sorted point's distance to its nearest neighbour (inf for a lone point)."""
    gaps = np.diff(points)
    before = np.concatenate([[np.inf], gaps])
    after = np.concatenate([gaps, [np.inf]])
    return np.minimum(before, after)
