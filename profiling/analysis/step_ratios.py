"""The arithmetic of the run map (:mod:`profiling.analysis.run_map`) on rank x column arrays:
each cell against the other ranks' median, a row's running median, runs of flagged columns."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

_MAD_TO_SIGMA = 1.4826


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
    noise = _MAD_TO_SIGMA * median / np.sqrt(2)
    return max(min_excess, sigmas * noise), noise


_COLUMNS_AT_ONCE = 2048
_CHUNK_CELLS = 1 << 18  # cells of rows smoothed at a time: a chunk's lanes stay in the cache


def smoothed(ratio: np.ndarray, window: int) -> np.ndarray:
    """Each row's running median over ``window`` columns (NaN where the ratio is)."""
    running = np.empty_like(ratio)
    for rows, median in _smoothed_chunks(ratio, window):
        running[rows] = median
    return running


def smoothed_above(ratio: np.ndarray, window: int, level: float) -> np.ndarray:
    """Where :func:`smoothed` is above ``level`` (NaN: not), without keeping it: at 4096 ranks
    a map of floats is 180 MB, of booleans 45."""
    above = np.empty(ratio.shape, dtype=bool)
    for rows, median in _smoothed_chunks(ratio, window):
        above[rows] = median > level
    return above


def _smoothed_chunks(ratio: np.ndarray, window: int) -> Iterator[tuple[slice, np.ndarray]]:
    if ratio.shape[1] < window:
        yield slice(None), ratio
        return
    rows = max(1, _CHUNK_CELLS // ratio.shape[1])
    for first in range(0, ratio.shape[0], rows):
        part = ratio[first : first + rows]
        missing = np.isnan(part)
        median = _running_median(np.where(missing, 1.0, part), window)  # missing: a median rank
        median[missing] = np.nan
        yield slice(first, first + rows), median


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
    for count in np.unique(counts).tolist():
        if count < 2:
            continue  # no other value
        group = np.flatnonzero(counts == count)
        # a few thousand columns at a time: the temporaries stay tens of MB at 4096 ranks
        for start in range(0, len(group), _COLUMNS_AT_ONCE):
            columns = group[start : start + _COLUMNS_AT_ONCE]
            contiguous = slice(int(columns[0]), int(columns[-1]) + 1)
            if contiguous.stop - contiguous.start == len(columns):
                columns = contiguous  # a view, not a copy
            median[:, columns] = _others_median_of(values[:, columns], count)
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
    median = np.full(len(rows), np.nan, dtype=np.result_type(rows.dtype, np.float32))
    for count in np.unique(counts).tolist():
        if count == 0:
            continue
        where = slice(None) if counts[0] == count and (counts == count).all() else counts == count
        upper = count // 2
        ordered = np.partition(rows[where], upper, axis=1)
        # an even count's lower middle: the largest of those partitioned before the upper one
        lower = ordered[:, upper] if count % 2 else ordered[:, :upper].max(axis=1)
        median[where] = (lower + ordered[:, upper]) / 2
    return median


def runs_of(mask: np.ndarray, gap: int) -> list[tuple[int, int]]:
    """``(first, last)`` column of each run of True, runs apart by ``gap`` or fewer joined."""
    where = np.flatnonzero(mask)
    if not len(where):
        return []
    breaks = np.flatnonzero(np.diff(where) > gap + 1)
    starts = np.concatenate([[where[0]], where[breaks + 1]])
    ends = np.concatenate([where[breaks], [where[-1]]])
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]
