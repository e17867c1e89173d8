"""The whole run at a glance: every rank's time for every step, from the ranks' step logs.

The measure is the training thread's CPU time per step (:mod:`profiling.folder.step_log`):
under DDP every rank's *wall* time per step is the same, the fast ones waiting in the
all-reduce for the slow one, but waiting takes no CPU, so a rank's CPU time is its own work.
Each rank's time is set against the median of the *other* ranks at that step (the *ratio*):
with few ranks the plain median moves with the slow rank itself (of 4, it is the mean of the
middle two), and a rank 30 % slower would show as 20 %. A slow rank is a stripe in the rank x
step map, a slow node a band of stripes.

- **Scores**, in the sense of NVIDIA Resiliency Extension's straggler detection: *relative*,
  the fastest rank's median time over the rank's (1: the fastest; 0.5: twice as slow);
  *individual*, the rank's best interval median over its median (1: as fast as it ever was).
  Over the whole run, and per interval (the run cut into :data:`INTERVALS` spans of steps).
- **Segments**: the steps where a rank was persistently slow. Each rank's ratios are first
  smoothed by a running median of :data:`SMOOTHING` steps, which keeps the edges of a slow
  stretch where they are and removes one- or two-step hiccups (the step that closes a trace
  window costs a third more, say). A step is slow when the smoothed ratio exceeds
  1 + :data:`MIN_EXCESS`, or more where the run is noisier: :data:`NOISE_SIGMAS` robust
  standard deviations of the step-to-step change of the ratios (a rank that is steadily a
  little slower does not widen it). Slow steps apart by at most :data:`MAX_GAP` are one
  segment, of at least :data:`MIN_STEPS` slow steps: persistently slow, not a burst (a
  balanced 4-rank job on 2 cores has bursts of 5 steps 20 % slower). ``MIN_EXCESS`` is 20 %: ranks that share
  cores differ by 10-15 % of CPU time by themselves (4 ranks on this project's 2-core
  machines), and NVIDIA's detector flags a score below 0.75, a third slower, by default.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np

from profiling.analysis.run import step_ratios
from profiling.analysis.run.memory_growth import RunMemory
from profiling.analysis.run.step_ratios import others_median, runs_of

METRIC = "cpu"
MIN_EXCESS = 0.2
NOISE_SIGMAS = 3.0
SMOOTHING = 5
MAX_GAP = 2
MIN_STEPS = 10
INTERVALS = 10


@dataclasses.dataclass(frozen=True)
class RunMap:
    """Every rank's :data:`METRIC` time, rank x column: a column is a step, or a bucket of steps
    of a long run."""

    ranks: np.ndarray  # the rank of each row, ascending
    nodes: list[str]  # the node of each row
    first: np.ndarray  # each column's first step
    width: np.ndarray  # each column's steps
    values: np.ndarray  # (rows, columns) median ms of METRIC; NaN: not recorded
    row_medians: dict[str, np.ndarray]  # each other time's name -> each row's median ms
    last_step: np.ndarray  # each row's last step recorded
    gpu: bool  # GPU times were measured
    memory: RunMemory | None = None  # every rank's memory over the run, where recorded

    @property
    def step_median(self) -> np.ndarray:
        """Each column's median rank."""
        return step_ratios.nanmedian(self.values, axis=0)

    # cached: every analysis of the map reads it (segments, threshold, binned, last_compared),
    # and it is a pass over every column; the map is frozen, and nothing writes into it
    @functools.cached_property
    def ratio(self) -> np.ndarray:
        """Each rank's time over the median of the other ranks in its column. The others' median
        is not kept (``values / ratio`` gives it back): at 4096 ranks each map is 180 MB."""
        ratio = others_median(self.values)
        with np.errstate(invalid="ignore", divide="ignore"):
            np.divide(self.values, ratio, out=ratio)
        return ratio

    def excess_ms(self, cells: tuple) -> np.ndarray:
        """How much longer than the other ranks' median the rank took, at ``cells`` (an index
        of the map, e.g. ``(row, columns)``; where the rank took no time, NaN)."""
        values = self.values[cells]
        with np.errstate(invalid="ignore", divide="ignore"):
            return values - values / self.ratio[cells]

    @functools.cached_property
    def threshold(self) -> tuple[float, float]:
        """See :func:`threshold`."""
        return step_ratios.threshold_of(self.ratio, MIN_EXCESS, NOISE_SIGMAS)

    @functools.cached_property
    def slow(self) -> np.ndarray:
        """See :func:`slow_mask`."""
        return step_ratios.smoothed_above(self.ratio, SMOOTHING, 1.0 + self.threshold[0])

    def last_of(self, column: int) -> int:
        return int(self.first[column] + self.width[column] - 1)

    @property
    def last_compared(self) -> np.ndarray:
        """Each row's last step that other ranks also recorded (-1: none). While a job runs,
        the ranks flush their logs at different times, and one rank's log ends steps before or
        after the others': its time can be set against theirs only up to here."""
        finite = np.isfinite(self.ratio)
        last_column = finite.shape[1] - 1 - np.argmax(finite[:, ::-1], axis=1)
        last = self.first[last_column] + self.width[last_column] - 1
        return np.where(finite.any(axis=1), last, -1)


@dataclasses.dataclass(frozen=True)
class Segment:
    """Steps ``first`` to ``last`` in which ``rank`` was slow: ``slow_steps`` of them, by a
    median of ``excess_ms`` (``ratio`` times the other ranks' median)."""

    rank: int
    node: str
    first: int
    last: int
    slow_steps: int
    excess_ms: float
    ratio: float


@dataclasses.dataclass(frozen=True)
class Scores:
    """One rank's scores (see the module docstring); ``intervals``: (first step, last step,
    median ms, relative, individual) of each interval."""

    rank: int
    median_ms: float
    relative: float
    individual: float
    intervals: list[tuple[int, int, float, float, float]]


def threshold(run: RunMap) -> tuple[float, float]:
    """``(threshold, noise)``: how far above 1 a smoothed ratio makes a step slow, and the
    run's noise: a robust standard deviation of a ratio from one step to the next."""
    return run.threshold


def slow_mask(run: RunMap) -> np.ndarray:
    """rank x column: where the rank's smoothed ratio is above the run's threshold."""
    return run.slow


def segments(run: RunMap) -> list[Segment]:
    """Every rank's persistently slow steps, in rank order, then step order."""
    if len(run.ranks) < 2:
        return []  # no other rank to be slower than
    ratio = run.ratio
    slow_steps_of = slow_mask(run)
    found = []
    for row, rank in enumerate(run.ranks):
        slow = slow_steps_of[row]
        for start, end in runs_of(slow, MAX_GAP):
            columns = np.flatnonzero(slow[start : end + 1]) + start
            slow_steps = int(run.width[columns].sum())
            if slow_steps < MIN_STEPS:
                continue
            found.append(
                Segment(
                    rank=int(rank),
                    node=run.nodes[row],
                    first=int(run.first[start]),
                    last=run.last_of(end),
                    slow_steps=slow_steps,
                    excess_ms=float(np.median(run.excess_ms((row, columns)))),
                    ratio=float(np.median(ratio[row, columns])),
                )
            )
    return found


def scores(run: RunMap, intervals: int = INTERVALS) -> list[Scores]:
    """Every rank's relative and individual scores, over the run and per interval."""
    values = run.values
    median = step_ratios.nanmedian(values, axis=1)
    first, last = int(run.first[0]), run.last_of(len(run.first) - 1)
    edges = np.linspace(first, last + 1, min(intervals, len(run.first)) + 1)
    interval_of = np.clip(np.searchsorted(edges, run.first, side="right") - 1, 0, len(edges) - 2)
    # the columns are in step order, so an interval's are a slice: a view of the map, where a
    # list of columns copied it (180 MB at 4096 ranks, 0.4 s)
    starts = np.searchsorted(interval_of, np.arange(len(edges) - 1), side="left").tolist()
    ends = np.searchsorted(interval_of, np.arange(len(edges) - 1), side="right").tolist()
    spans = [range(start, end) for start, end in zip(starts, ends, strict=True) if end > start]
    by_interval = np.column_stack([step_ratios.nanmedian(values[:, c.start : c.stop], axis=1) for c in spans])
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = _nanmin(median, axis=0) / median
        best = _nanmin(by_interval, axis=1)
        individual = best / median
        relative_by = _nanmin(by_interval, axis=0) / by_interval
        individual_by = best[:, None] / by_interval
    bounds = [(int(run.first[c[0]]), run.last_of(int(c[-1]))) for c in spans]
    # plain floats by the row at once: float() of numpy scalars 40 000 times cost a second
    per_interval = zip(by_interval.tolist(), relative_by.tolist(), individual_by.tolist(), strict=True)
    per_rank = (run.ranks.tolist(), median.tolist(), relative.tolist(), individual.tolist(), per_interval)
    return [
        Scores(
            rank=rank,
            median_ms=row_median,
            relative=row_relative,
            individual=row_individual,
            intervals=[(a, b, m, r, i) for (a, b), m, r, i in zip(bounds, *intervals, strict=True)],
        )
        for rank, row_median, row_relative, row_individual, intervals in zip(*per_rank, strict=True)
    ]


def tail(run: RunMap, steps: int) -> RunMap:
    """The last ``steps`` steps of the run (whole columns): what a rank is doing now."""
    end = run.last_of(len(run.first) - 1)
    keep = run.first + run.width - 1 > end - steps
    return dataclasses.replace(
        run,
        first=run.first[keep],
        width=run.width[keep],
        values=run.values[:, keep],
    )


@dataclasses.dataclass(frozen=True)
class Binned:
    """A run in at most a given number of columns, each the median of the columns it joins."""

    ratio: np.ndarray  # (rows, columns): each rank's time over the other ranks' median
    step_median: np.ndarray  # each column's median rank, ms
    first: np.ndarray  # each column's first step
    last: np.ndarray  # and last


def binned(run: RunMap, columns: int) -> Binned:
    """The run in at most ``columns`` columns, for a picture of a long run."""
    ratio, step_median = run.ratio, run.step_median
    if len(run.first) <= columns:
        return Binned(ratio, step_median, run.first, run.first + run.width - 1)
    edges = np.linspace(0, len(run.first), columns + 1).astype(int)
    return Binned(
        ratio=binned_medians(ratio, edges),
        step_median=binned_medians(step_median[None, :], edges)[0],
        first=run.first[edges[:-1]],
        last=np.array([run.last_of(b - 1) for b in edges[1:]]),
    )


_BINNED_ROWS = 256  # rows binned at a time: the gathered bins stay a few MB


def binned_medians(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each row's median over the columns of each bin ``edges[i]:edges[i + 1]``, every bin at
    once: the bins gathered as rows of one array (a short bin padded with NaN)."""
    widths = np.diff(edges)
    at = edges[:-1, None] + np.arange(widths.max())
    at = np.where(at < edges[1:, None], at, values.shape[1])  # past its bin: the NaN column
    binned = np.empty((len(values), len(widths)), dtype=np.result_type(values.dtype, np.float32))
    for first in range(0, len(values), _BINNED_ROWS):
        part = values[first : first + _BINNED_ROWS]
        padded = np.concatenate([part, np.full((len(part), 1), np.nan, dtype=part.dtype)], axis=1)
        gathered = padded[:, at].reshape(-1, at.shape[1])  # (rows x bins, widest bin)
        binned[first : first + _BINNED_ROWS] = step_ratios.nanmedian(gathered, 1).reshape(len(part), -1)
    return binned


def _nanmin(values: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmin(values, axis=axis)
