"""Finding the offset at which two traces' collectives end together, where nothing but their
kind and their end times pairs them: the cross-correlation of the end times (by FFT, over the
offsets a clock may be off by), its peaks tried at widening tolerances, each refined on mutually
nearest pairs of the same kind and step, and judged against what chance pairs
(:mod:`profiling.analysis.clocks.alignment` says why and when)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from profiling.analysis.clocks.point_sets import correlation, mutual_nearest, nearest_gap, peaks
from profiling.analysis.reading.collectives import Instance

MIN_PAIRS = 3
MIN_SHARE = 0.3
# A second offset whose pairs beyond chance reach this share of the best's makes it ambiguous.
AMBIGUOUS = 0.8
_PEAKS = 12  # offsets tried at each tolerance, the correlation's highest
_REFINED = 4  # of which refined: those that pair most
_CHANCE_OFFSETS = 24  # offsets across the window that measure what chance pairs
_MAX_BINS = 1 << 21


class PairLine:
    """Two traces' collectives as points on one line: each kind far from the others, so that a
    nearest neighbour is always of the same kind, and ``reference - other`` is an offset."""

    def __init__(
        self,
        reference: Sequence[Instance],
        other: Sequence[Instance],
        ref_indices: Sequence[int],
        other_indices: Sequence[int],
        window: float,
    ) -> None:
        ref_ends = np.array([reference[i].end for i in ref_indices])
        other_ends = np.array([other[j].end for j in other_indices])
        # relative to one origin: absolute µs since the epoch keep only 0.25 µs in a float64
        self.origin = float(min(ref_ends.min(), other_ends.min()))
        self.ref_ends, self.other_ends = ref_ends - self.origin, other_ends - self.origin
        codes: dict[Any, int] = {}
        # what a collective is, and the step that issued it: a shift by a period of alike
        # collectives pairs none across a step boundary
        ref_codes = np.array([codes.setdefault(_identity(reference[i]), len(codes)) for i in ref_indices])
        other_codes = np.array([codes.setdefault(_identity(other[j]), len(codes)) for j in other_indices])
        self.span = float(max(self.ref_ends.max(), self.other_ends.max()))
        self.separation = 4.0 * (self.span + window) + 1.0  # beyond any offset tried
        self.ref_points, self.ref_index = self._points(self.ref_ends, ref_codes, ref_indices)
        self.other_points, self.other_index = self._points(self.other_ends, other_codes, other_indices)
        # copies of the whole line side by side, one per offset tried at once (:meth:`counts`)
        self._copy_apart = (len(codes) + 1) * self.separation

    def _points(
        self, ends: np.ndarray, codes: np.ndarray, indices: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        points = codes * self.separation + ends
        order = np.argsort(points, kind="stable")
        return points[order], np.asarray(indices)[order]

    def pairs(self, offset: float, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
        """Positions (in the sorted points) of the collectives paired at ``offset``."""
        return mutual_nearest(self.ref_points, self.other_points + offset, tolerance)

    def counts(self, offsets: np.ndarray, tolerance: float) -> np.ndarray:
        """How many collectives :meth:`pairs` pairs at each of ``offsets``, in one pass: a copy of
        the line per offset, far apart, paired at once."""
        apart = (np.arange(len(offsets)) * self._copy_apart)[:, None]
        ref = (self.ref_points[None, :] + apart).ravel()
        other = (self.other_points[None, :] + np.asarray(offsets)[:, None] + apart).ravel()
        i, _ = mutual_nearest(ref, other, tolerance)
        return np.bincount(i // len(self.ref_points), minlength=len(offsets))


def _identity(instance: Instance) -> tuple[Any, ...]:
    return (instance.key, instance.step)


@dataclasses.dataclass(frozen=True)
class _Fit:
    offset: float
    tolerance: float
    i: np.ndarray  # positions in the line's reference points
    j: np.ndarray
    chance: float = 0.0  # pairs any offset in the window makes at this tolerance

    @property
    def count(self) -> int:
        return len(self.i)

    @property
    def excess(self) -> float:
        return self.count - self.chance


def search_offset(
    line: PairLine, prior_us: float, window: float, tolerances: Sequence[float], needed: int, shorter: int
) -> _Fit | str:
    """The offset that pairs the collectives, or why none can be trusted.

    The first tolerance whose best offset is trusted sets the offset; wider ones are taken
    while they pair more collectives beyond chance at that offset (jittery ends), and not once
    they only add chance pairs.
    """
    bin_us = max(tolerances[0], (line.span + 2 * window) / _MAX_BINS)
    lag_counts = correlation(line.ref_ends, line.other_ends + prior_us, window, bin_us)
    found: _Fit | None = None
    most, why = 0, ""
    for tolerance in tolerances:
        fit, doubt = _trial(line, lag_counts, bin_us, prior_us, window, tolerance, needed)
        if found is None:
            if doubt is None:
                found = fit
            elif doubt.startswith("ambiguous"):
                return doubt
            elif fit.count >= MIN_PAIRS:
                why = doubt
            most = max(most, fit.count)
            continue
        if doubt is not None or abs(fit.offset - found.offset) > tolerance or fit.excess <= found.excess:
            break
        found = fit
    return (
        found
        or why
        or f"only {most} of {shorter} all-reduce-like collectives could be paired (at least {needed} needed)"
    )


def _trial(
    line: PairLine,
    lag_counts: np.ndarray,
    bin_us: float,
    prior_us: float,
    window: float,
    tolerance: float,
    needed: int,
) -> tuple[_Fit, str | None]:
    """The best offset at one tolerance, and why it cannot be trusted (None if it can)."""
    candidates = prior_us + np.array(peaks(lag_counts, bin_us, tolerance, _PEAKS))
    # the peaks that pair most as they are, each moved to where its pairs agree
    promising = candidates[np.argsort(-line.counts(candidates, tolerance), kind="stable")[:_REFINED]]
    fits = [_fit(line, float(offset), tolerance) for offset in promising]
    best = max(fits, key=lambda fit: fit.count)
    apart = 4.0 * tolerance
    elsewhere = prior_us + np.linspace(-window, window, _CHANCE_OFFSETS)
    elsewhere = elsewhere[np.abs(elsewhere - best.offset) > apart]
    chance = float(np.median(line.counts(elsewhere, tolerance))) if len(elsewhere) else 0.0
    best = dataclasses.replace(best, chance=chance)
    if best.count < needed or best.excess < 0.5 * best.count:
        return best, (
            f"no offset pairs enough of them beyond chance: at best {best.count} within {tolerance:g} µs "
            f"(at {best.offset:.1f} µs), where any offset pairs {chance:g}, and {needed} are needed"
        )
    rival = max((f for f in fits if abs(f.offset - best.offset) > apart), key=lambda f: f.count, default=None)
    if rival is not None and rival.count - chance >= AMBIGUOUS * best.excess:
        return best, (
            f"ambiguous: shifts of {best.offset:.1f} and {rival.offset:.1f} µs pair {best.count} and "
            f"{rival.count} collectives within {tolerance:g} µs (chance: {chance:g})"
        )
    return best, None


def _fit(line: PairLine, offset: float, tolerance: float) -> _Fit:
    """The pairs near ``offset``, the offset moved to their median until it settles."""
    for _ in range(4):
        i, j = line.pairs(offset, tolerance)
        if not len(i):
            break
        median = float(np.median(line.ref_points[i] - line.other_points[j]))
        if median == offset:
            break
        offset = median
    i, j = line.pairs(offset, tolerance)
    return _Fit(offset, tolerance, i, j)


def match_all(
    reference: Sequence[Instance], other: Sequence[Instance], shift: float, spread: float, window: float
) -> dict[int, int]:
    """Every collective with its twin, once aligned: the twin of the same kind and step that is
    nearest in time, and much nearer than any other collective of that kind on either side (less
    than half the gap to its neighbours).

    All-reduce-like ones within ``spread`` of the clock: ranks leave them together, to within what
    the clock's pairs show; broadcasts and the like, whose ends differ by how long receivers
    waited, within the window. The straggler test needs every collective that can be paired.
    """
    matched: dict[int, int] = {}
    for symmetric, limit in ((True, spread), (False, window)):
        ref_indices = [i for i, inst in enumerate(reference) if inst.symmetric == symmetric]
        other_indices = [j for j, inst in enumerate(other) if inst.symmetric == symmetric]
        if not ref_indices or not other_indices:
            continue
        line = PairLine(reference, other, ref_indices, other_indices, window)
        i, j = line.pairs(shift, limit)
        a, b = line.ref_points, line.other_points + shift
        clear = np.abs(a[i] - b[j]) < 0.5 * np.minimum(nearest_gap(a)[i], nearest_gap(b)[j])
        i, j = i[clear], j[clear]
        matched.update(zip(line.ref_index[i].tolist(), line.other_index[j].tolist(), strict=True))
    return dict(sorted(matched.items()))
