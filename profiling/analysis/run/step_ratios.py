"""The arithmetic of the run map (:mod:`profiling.analysis.run.run_map`) on rank x column arrays:
each cell against the other ranks' median, a row's running median, runs of flagged columns."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from profiling.analysis.robust import MAD_TO_SIGMA

# numpy's partitions, sorts and ufuncs release the GIL: a map's parts go to a few threads
_THREADS = min(4, len(os.sched_getaffinity(0)))
_Part = TypeVar("_Part")


def in_threads(function: Callable[[_Part], None], parts: Sequence[_Part]) -> None:
    """``function(part)`` for every part, in a few threads; each writes its own part of an
    output (disjoint slices of one array). The first error is raised."""
    if _THREADS < 2 or len(parts) < 2:
        for part in parts:
            function(part)
        return
    with ThreadPoolExecutor(min(_THREADS, len(parts))) as pool:
        for _ in pool.map(function, parts):
            pass


def threshold_of(ratio: np.ndarray, min_excess: float, sigmas: float) -> tuple[float, float]:
    """``(threshold, noise)``: how far above 1 a smoothed ratio is slow (at least ``min_excess``,
    or ``sigmas`` times the noise), and the noise: a robust standard deviation of a ratio from one
    step to the next."""
    change = np.subtract(ratio[:, 1:], ratio[:, :-1], dtype=np.float32)
    np.abs(change, out=change)
    flat = change.reshape(-1)  # a view: the median is found in place, missing steps last
    finite = len(flat) - int(np.count_nonzero(np.isnan(flat)))
    if not finite:
        return max(min_excess, 0.0), 0.0
    middle = sorted({(finite - 1) // 2, finite // 2})
    flat.partition(middle)  # NaN sorts last
    median = float(flat[middle].mean())
    noise = MAD_TO_SIGMA * median / np.sqrt(2)
    return max(min_excess, sigmas * noise), noise


_COLUMNS_AT_ONCE = 2048
_CHUNK_CELLS = 1 << 18  # cells of rows smoothed at a time: a chunk's lanes stay in the cache


def smoothed(ratio: np.ndarray, window: int) -> np.ndarray:
    """Each row's running median over ``window`` columns (NaN where the ratio is)."""
    if ratio.shape[1] < window:
        return ratio.copy()

    def fill(rows: slice) -> None:
        running[rows] = _smoothed_rows(ratio[rows], window)

    running = np.empty_like(ratio)
    in_threads(fill, _row_parts(ratio))
    return running


def smoothed_above(ratio: np.ndarray, window: int, level: float) -> np.ndarray:
    """Where :func:`smoothed` is above ``level`` (NaN: not), without keeping it: at 4096 ranks
    a map of floats is 180 MB, of booleans 45."""
    if ratio.shape[1] < window:
        return ratio > level

    def fill(rows: slice) -> None:
        above[rows] = _smoothed_rows(ratio[rows], window) > level

    above = np.empty(ratio.shape, dtype=bool)
    in_threads(fill, _row_parts(ratio))
    return above


def _row_parts(ratio: np.ndarray) -> list[slice]:
    """The rows a few at a time: a part's lanes stay in the cache."""
    rows = max(1, _CHUNK_CELLS // max(1, ratio.shape[1]))
    return [slice(first, first + rows) for first in range(0, ratio.shape[0], rows)]


def _smoothed_rows(part: np.ndarray, window: int) -> np.ndarray:
    missing = np.isnan(part)
    median = _running_median(np.where(missing, 1.0, part), window)  # missing: a median rank
    median[missing] = np.nan
    return median


def _running_median(values: np.ndarray, window: int) -> np.ndarray:
    """Each row's running median, ends padded with the end values: the window's ``window``
    shifted views of the rows put in order by compare-and-swap (elementwise minimum and
    maximum) until the middle one is in place. A few passes over the array, where a partition
    of every window is a call per cell."""
    half = window // 2
    padded = np.pad(values, ((0, 0), (half, half)), mode="edge")
    columns = values.shape[1]
    lanes = [padded[:, shift : shift + columns] for shift in range(window)]  # views, then owned
    for place in range(half + 1):  # after each pass, lanes[place] holds the place-th smallest
        for other in range(place + 1, window):
            low = np.minimum(lanes[place], lanes[other])
            if place < half:  # the last pass needs the smallest alone
                lanes[other] = np.maximum(lanes[place], lanes[other])
            lanes[place] = low
    return lanes[half]


def others_median(values: np.ndarray) -> np.ndarray:
    """For each cell, the median of its column without it (NaN: no other value).

    Of a column's r finite values sorted, s, the median of the r - 1 others is the mean of
    s[lower] and s[upper] (the middle of r - 1 values), each one further on where the cell sits
    at or before it. A cell's value tells where it sits (tied values are alike, whichever of
    them is the cell): at or before s[k] exactly when it is at most s[k]. So each column needs
    three order statistics, not a sort. Columns go in groups of equal r (one, where no rank
    missed a step).
    """
    dtype = np.result_type(values.dtype, np.float32)  # float32 stays so: 4096 ranks' maps are large
    median = np.full(values.shape, np.nan, dtype=dtype)
    counts = np.isfinite(values).sum(axis=0)
    parts: list[tuple[np.ndarray | slice, int]] = []
    for count in np.unique(counts).tolist():
        if count < 2:
            continue  # no other value
        group = np.flatnonzero(counts == count)
        # a few thousand columns at a time: the temporaries stay tens of MB at 4096 ranks
        for start in range(0, len(group), _COLUMNS_AT_ONCE):
            chunk = group[start : start + _COLUMNS_AT_ONCE]
            contiguous = slice(int(chunk[0]), int(chunk[-1]) + 1)
            # a slice where the columns are contiguous: a view, not a copy
            parts.append((contiguous if contiguous.stop - contiguous.start == len(chunk) else chunk, count))

    def fill(part: tuple[np.ndarray | slice, int]) -> None:
        columns, count = part
        median[:, columns] = _others_median_of(values[:, columns], count)

    in_threads(fill, parts)
    return median


def _others_median_of(part: np.ndarray, count: int) -> np.ndarray:
    """:func:`others_median` of columns that hold ``count`` finite values each."""
    dtype = np.result_type(part.dtype, np.float32)
    lower, upper = (count - 2) // 2, (count - 1) // 2
    s = _order_statistics(part, lower, upper + 2 - lower)  # s[lower] .. s[upper + 1]
    low, up = s[0], s[upper - lower]
    # arithmetic on masks, not np.where: its broadcasting is several times slower
    found = (part <= low).astype(dtype)
    found *= s[1] - low
    shift = (part <= up).astype(dtype)
    shift *= s[upper + 1 - lower] - up
    found += shift
    found += low + up
    found /= 2
    if count < len(part):
        found[~np.isfinite(part)] = np.nan
    return found


def _order_statistics(values: np.ndarray, first: int, n: int) -> list[np.ndarray]:
    """Per column, the ``first``-th to ``first + n - 1``-th smallest value (NaN sorts last)."""
    by_column = values.T.copy()  # partitioned in place, along contiguous rows: 3x faster
    by_column.partition(first, axis=1)
    rest = by_column[:, first + 1 :]
    following = np.sort(np.partition(rest, n - 2, axis=1)[:, : n - 1], axis=1) if n > 1 else rest[:, :0]
    return [by_column[:, first], *following.T]


def nanmedian(values: np.ndarray, axis: int) -> np.ndarray:
    """``np.nanmedian`` of a 2-D array along ``axis`` (NaN where all are), fast: rows of equal
    finite counts at once, a partition each (NaN sorts last). numpy's own goes row by row in
    Python once an array has NaN, a thousand times slower on a 4096-rank map."""
    rows = np.asarray(values).T if axis == 0 else np.asarray(values)
    counts = np.isfinite(rows).sum(axis=1)
    dtype = np.result_type(rows.dtype, np.float32)
    median = np.full(len(rows), np.nan, dtype=dtype)
    for count in np.unique(counts).tolist():
        if count == 0:
            continue
        everyone = counts[0] == count and (counts == count).all()
        if everyone:
            _middles(rows, count, out=median)
        else:
            where = counts == count
            median[where] = _middles(rows[where], count, out=np.empty(int(where.sum()), dtype=dtype))
    return median


def _middles(rows: np.ndarray, count: int, out: np.ndarray) -> np.ndarray:
    """Into ``out``, the median of each row's ``count`` finite values (NaN sorts last), a few
    rows at a time in threads."""
    upper = count // 2

    def fill(part: slice) -> None:
        ordered = np.partition(rows[part], upper, axis=1)
        # an even count's lower middle: the largest of those partitioned before the upper one
        lower = ordered[:, upper] if count % 2 else ordered[:, :upper].max(axis=1)
        out[part] = (lower + ordered[:, upper]) / 2

    in_threads(fill, _row_parts(rows))
    return out


def runs_of(mask: np.ndarray, gap: int) -> list[tuple[int, int]]:
    """``(first, last)`` column of each run of True, runs apart by ``gap`` or fewer joined."""
    where = np.flatnonzero(mask)
    if not len(where):
        return []
    breaks = np.flatnonzero(np.diff(where) > gap + 1)
    starts = np.concatenate([[where[0]], where[breaks + 1]])
    ends = np.concatenate([where[breaks], [where[-1]]])
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]
