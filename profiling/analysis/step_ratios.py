"""The arithmetic of the run map (:mod:`profiling.analysis.run_map`) on rank x column arrays:
each cell against the other ranks' median, a row's running median, runs of flagged columns."""

from __future__ import annotations

import numpy as np

_MAD_TO_SIGMA = 1.4826


def threshold_of(ratio: np.ndarray, min_excess: float, sigmas: float) -> tuple[float, float]:
    """``(threshold, noise)``: how far above 1 a smoothed ratio is slow (at least ``min_excess``,
    or ``sigmas`` times the noise), and the noise: a robust standard deviation of a ratio from one
    step to the next."""
    change = np.abs(np.diff(ratio, axis=1))
    finite = change[np.isfinite(change)]
    noise = float(_MAD_TO_SIGMA * np.median(finite) / np.sqrt(2)) if len(finite) else 0.0
    return max(min_excess, sigmas * noise), noise


_CHUNK_CELLS = 1 << 22  # rows smoothed at a time: the windows' copy stays at tens of MB


def smoothed(ratio: np.ndarray, window: int) -> np.ndarray:
    """Each row's running median over ``window`` columns (NaN where the ratio is)."""
    if ratio.shape[1] < window:
        return ratio
    half = window // 2
    running = np.empty_like(ratio)
    rows = max(1, _CHUNK_CELLS // (ratio.shape[1] * window))
    for first in range(0, ratio.shape[0], rows):
        part = ratio[first : first + rows]
        filled = np.where(np.isnan(part), 1.0, part)  # a missing step counts as the median rank
        padded = np.pad(filled, ((0, 0), (half, half)), mode="edge")
        windows = np.lib.stride_tricks.sliding_window_view(padded, window, axis=1)
        running[first : first + rows] = np.partition(windows, half, axis=2)[..., half]
    return np.where(np.isnan(ratio), np.nan, running)


def others_median(values: np.ndarray) -> np.ndarray:
    """For each cell, the median of its column without it (NaN: no other value), for every
    cell at once: each column sorted once, the median of the rest read off at the positions
    it would have without the cell."""
    rows = values.shape[0]
    order = np.argsort(values, axis=0)  # NaN last
    ordered = np.take_along_axis(values, order, axis=0)
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.arange(rows)[:, None].repeat(values.shape[1], axis=1), axis=0)
    rest = np.isfinite(values).sum(axis=0, keepdims=True) - 1  # values besides the cell's
    lower, upper = (rest - 1) // 2, rest // 2

    def at(index: np.ndarray) -> np.ndarray:
        # index into the column without the cell: past the cell's position, one further
        shifted = index + (index >= position)
        return np.take_along_axis(ordered, np.clip(shifted, 0, rows - 1), axis=0)

    median = (at(np.broadcast_to(lower, values.shape)) + at(np.broadcast_to(upper, values.shape))) / 2
    return np.where((rest >= 1) & np.isfinite(values), median, np.nan)


def runs_of(mask: np.ndarray, gap: int) -> list[tuple[int, int]]:
    """``(first, last)`` column of each run of True, runs apart by ``gap`` or fewer joined."""
    where = np.flatnonzero(mask)
    if not len(where):
        return []
    breaks = np.flatnonzero(np.diff(where) > gap + 1)
    starts = np.concatenate([[where[0]], where[breaks + 1]])
    ends = np.concatenate([where[breaks], [where[-1]]])
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]
