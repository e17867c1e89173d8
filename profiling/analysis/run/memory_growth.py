"""A rank's memory growing step after step: a leak, which a recorded window of a few steps
never shows, found in its step log's ``mem`` column (:mod:`profiling.folder.step_log`).

A run's memory rises in its first steps (the optimizer's state, the allocator's caches) and
then stays; the profiler's window adds a step up and down. A leak is a line: the same amount
more every step, from some step to the end. So each rank's series is fitted as flat up to a
step and a straight line from it (a hinge; every breakpoint is tried at once, from running
sums), and the line is a leak where it rises by at least :data:`MIN_GROWTH_MIB` over at
least :data:`MIN_POINTS` points and explains the series after the break (R² at least
:data:`MIN_R2`: a single step up fits a line at best 0.75). A series is first reduced to at
most :data:`POINTS` points (the peak of each stretch of steps), so that at 4096 ranks of
100 000 steps this is a few milliseconds a rank, and ranks whose last quarter is not above
their second are not fitted at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

POINTS = 256
MIN_POINTS = 8
MIN_GROWTH_MIB = 64.0
MIN_R2 = 0.9


@dataclasses.dataclass(frozen=True)
class Growth:
    """A series that grows by ``mib_per_step`` from ``since_step`` to ``last_step``."""

    since_step: int
    last_step: int
    mib_per_step: float
    from_mib: float  # the fitted line's value at since_step
    to_mib: float  # ... and at last_step

    def phrase(self) -> str:
        """``+38 MiB a step since step 120``."""
        return f"+{format_mib(self.mib_per_step)} a step since step {self.since_step}"

    def line(self, rank: int) -> str:
        """``rank 3: +38 MiB a step since step 120 (1.2 to 4.9 GiB)``."""
        return f"rank {rank}: {self.phrase()} ({format_mib(self.from_mib)} to {format_mib(self.to_mib)})"


def series_growth(steps: Sequence[int], mib: Sequence[float]) -> Growth | None:
    """The leak in one step per entry (a rank's own series, as it runs)."""
    first = np.asarray(steps, dtype=np.int64)
    return growth(reduce_series(first, np.ones(len(first), np.int64), np.asarray(mib, dtype=np.float64)))


@dataclasses.dataclass(frozen=True)
class Reduced:
    """A series of at most :data:`POINTS` points: each the peak of a stretch of steps."""

    first: np.ndarray  # each point's first step
    last: np.ndarray  # ... and last
    peak: np.ndarray  # the stretch's peak (MiB; NaN where none was recorded)

    @property
    def centre(self) -> np.ndarray:
        return (self.first + self.last) / 2.0


def reduce_series(first: np.ndarray, steps: np.ndarray, mib: np.ndarray, points: int = POINTS) -> Reduced:
    """A step log's rows (each row's first step, its step count, its value) as at most
    ``points`` stretches of about as many steps each (a long run's log has exact rows, then
    buckets of 100 steps: stretches of rows would be mostly its first steps). Rows alike in
    their steps give stretches alike: the run map lays the ranks' stretches side by side."""
    count = len(first)
    last = (first + steps - 1).astype(np.int64)
    if not count:
        empty = np.empty(0, np.int64)
        return Reduced(empty, empty, np.empty(0))
    edges = np.linspace(first[0], last[-1] + 1, min(points, int(last[-1] + 1 - first[0])) + 1)
    starts = np.unique(np.searchsorted(first, edges[:-1], side="left"))
    starts = starts[starts < count]
    values = np.where(np.isfinite(mib), mib, -np.inf).astype(np.float64)
    peak = np.maximum.reduceat(values, starts)
    ends = np.append(starts[1:], count) - 1
    return Reduced(
        first=first[starts].astype(np.int64), last=last[ends], peak=np.where(np.isfinite(peak), peak, np.nan)
    )


def growth(series: Reduced) -> Growth | None:
    """The leak in ``series`` (None: none; see the module's docstring)."""
    keep = np.isfinite(series.peak)
    x, y = series.centre[keep], series.peak[keep]
    n = len(y)
    if n < MIN_POINTS or not _rises(y):
        return None
    # every hinge at once: flat over [0, i), a line over [i, n); i in [0, n - MIN_POINTS]
    sse_flat = _flat_sse(y)
    slope, intercept, sse_line, r2 = _line_fits(x, y)
    breaks = np.arange(n - MIN_POINTS + 1)
    total = sse_flat[breaks] + sse_line[breaks]
    rise = slope[breaks] * (x[-1] - x[breaks])
    fits = (slope[breaks] > 0) & (r2[breaks] >= MIN_R2) & (rise >= MIN_GROWTH_MIB)
    if not fits.any():
        return None
    best = int(breaks[fits][np.argmin(total[fits])])
    return Growth(
        since_step=int(series.first[keep][best]),
        last_step=int(series.last[keep][-1]),
        mib_per_step=float(slope[best]),
        from_mib=float(intercept[best] + slope[best] * x[best]),
        to_mib=float(intercept[best] + slope[best] * x[-1]),
    )


def _rises(y: np.ndarray) -> bool:
    """The cheap test first: the last quarter's median above the second's by the least growth."""
    quarter = len(y) // 4
    return bool(np.median(y[-quarter:]) - np.median(y[quarter : 2 * quarter]) >= MIN_GROWTH_MIB / 2)


def _flat_sse(y: np.ndarray) -> np.ndarray:
    """For every i: the squared error of y[:i] about its mean."""
    s = np.concatenate([[0.0], np.cumsum(y)])
    s2 = np.concatenate([[0.0], np.cumsum(y * y)])
    count = np.arange(len(y) + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(s2 - np.where(count > 0, s * s / count, 0.0))


def _line_fits(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """For every i: the least-squares line through (x[i:], y[i:]), its squared error and R²."""

    def tail(values: np.ndarray) -> np.ndarray:
        return np.cumsum(values[::-1])[::-1]

    origin = x[0]
    x = x - origin  # the sums of squares stay well-conditioned
    n = np.arange(len(y), 0, -1, dtype=np.float64)
    sx, sy, sxx, syy, sxy = tail(x), tail(y), tail(x * x), tail(y * y), tail(x * y)
    var_x, var_y, cov = sxx - sx * sx / n, syy - sy * sy / n, sxy - sx * sy / n
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = np.where(var_x > 0, cov / var_x, 0.0)
        sse = np.maximum(var_y - slope * cov, 0.0)
        r2 = np.where(var_y > 0, 1.0 - sse / var_y, 0.0)
    intercept = (sy - slope * sx) / n - slope * origin
    return slope, intercept, sse, r2


def format_mib(value: float) -> str:
    if value >= 1024:
        return f"{value / 1024:.1f} GiB"
    if value >= 1:
        return f"{value:.0f} MiB" if value >= 10 else f"{value:.1f} MiB"
    return f"{value * 1024:.0f} KiB"


@dataclasses.dataclass(frozen=True)
class RunMemory:
    """Every rank's memory over the run, as the run map keeps it: a row per rank, a column per
    stretch of steps (at most :data:`POINTS`), each the stretch's peak."""

    kind: str  # "cuda": the allocator's peak in each step; "rss": the resident memory at its end
    first: np.ndarray  # each column's first step
    last: np.ndarray  # ... and last
    peak: np.ndarray  # (rows, columns) MiB; NaN where a rank recorded none
    growth: list[Growth | None]  # each row's leak, if any


def combine_memory(kinds: list[str], series: list[Reduced | None]) -> RunMemory | None:
    """The ranks' reduced series side by side (None where no rank recorded memory); a rank's
    leak is found on its own series."""
    present = [s for s in series if s is not None and np.isfinite(s.peak).any()]
    if not present:
        return None
    like = present[0]
    if all(_same_steps(s, like) for s in present):
        first, last = like.first, like.last
    else:  # ranks requeued apart: each laid on one grid over the whole run
        start, end = min(int(s.first[0]) for s in present), max(int(s.last[-1]) for s in present)
        edges = np.linspace(start, end + 1, min(POINTS, end + 1 - start) + 1)
        first, last = np.ceil(edges[:-1]).astype(np.int64), np.ceil(edges[1:]).astype(np.int64) - 1
    peak = np.full((len(series), len(first)), np.nan)
    for row, s in enumerate(series):
        if s is None or not len(s.peak):
            continue
        if _same_steps(s, like) and len(s.first) == len(first):
            peak[row] = s.peak
        else:
            peak[row] = np.interp((first + last) / 2.0, s.centre, s.peak, left=np.nan, right=np.nan)
    used = [kind for kind in kinds if kind]
    return RunMemory(
        kind="cuda" if "cuda" in used else "rss",
        first=first,
        last=last,
        peak=peak,
        growth=[growth(s) if s is not None else None for s in series],
    )


def _same_steps(a: Reduced, b: Reduced) -> bool:
    return a.first.shape == b.first.shape and a.first.tobytes() == b.first.tobytes()
