"""A step replayed on its cross-rank dependency graph (:mod:`.graph`), with the
durations changed: the what-if analysis of "Understanding Stragglers in Large Model Training
Using What-if Analysis" (OSDI 2025).

**Replayed** with every duration as measured, a step comes out at its measured length where
the clocks agree (its *fidelity*). **Variants** change the durations, per rank and kind:
``MEASURED``; ``MEAN``, the rank's time of that kind scaled to the mean over the ranks that
have any (each op then runs at its kind's mean); ``AT_MOST_TYPICAL``, lowered to the median
of the other ranks' where above (a rank like its peers: a mean would hold the straggler itself);
``STAGE_MEDIAN``, lowered to the median of the other stages' means; ``ZERO``; ``LOWEST``, the lower of the
two lowerings (two what-ifs at once: :func:`combined`). A meeting's transfer is
measured, its members' median (or lowered to it), or zero: a collective's members leave it
together, and its transfer is its own (a median over a kind would mix a 1 KB all-reduce with a
100 MB one; traces name no size for most). Every variant is replayed in one pass over the
step's events, the variants side by side in numpy arrays, a wave of events at a time
(:mod:`.waves`): the pass is a Python loop over waves, never over events × variants.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from profiling.analysis.across_ranks.critical_path.graph import StepGraph, WorkGroups
from profiling.analysis.across_ranks.critical_path.rank_events import HOST
from profiling.analysis.across_ranks.critical_path.waves import (
    LOWERED_AMOUNT,
    MEASURED_AMOUNT,
    NO_AMOUNT,
    TYPICAL_AMOUNT,
    Wave,
)
from profiling.analysis.per_trace.lanes import EPSILON_US

# what a variant does to a duration (the module's docstring says how)
MEASURED, MEAN, AT_MOST_TYPICAL, STAGE_MEDIAN, ZERO, LOWEST = 0, 1, 2, 3, 4, 5
# a block of variants replayed at once holds at most this many (event, variant) cells of each
# array: at 4096 ranks a step's 166 variants side by side were 83 MB of work before its events
# alone, in pages first touched there (page faults four times slower in the report's process
# than alone: 0.3 s of a 0.5 s replay), 32 at a time a fifth, their memory reused; a job of a few
# ranks has thousands of small waves a step, where blocks would only multiply numpy's calls
BLOCK_CELLS = 2_000_000
# each mode's amount of a transfer: a lookup, not np.select's five passes over (R, V) per kind
_AMOUNT_OF = np.full(LOWEST + 1, NO_AMOUNT, dtype=np.intp)
_AMOUNT_OF[[MEASURED, MEAN]] = (MEASURED_AMOUNT, TYPICAL_AMOUNT)
_AMOUNT_OF[[AT_MOST_TYPICAL, LOWEST]] = LOWERED_AMOUNT


@dataclasses.dataclass(frozen=True)
class Variants:
    """Variants side by side: what each does to each rank's work of each kind, and to each
    rank's transfers (of every meeting kind, or of one kind apart)."""

    work: np.ndarray  # (V, R, WORK_KINDS): any mode
    transfer: np.ndarray  # (V, R): MEASURED, MEAN (the meeting's median), AT_MOST_TYPICAL, LOWEST or ZERO
    transfer_kind: dict[str, np.ndarray]  # meeting kind -> (V, R), where a variant treats it apart


def combined(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Two what-ifs' modes at once, cell by cell: each lowers a duration or leaves it as
    measured, and the two lower it as far as the lower of them."""
    both = np.where(first == second, first, LOWEST)
    both = np.where((first == ZERO) | (second == ZERO), ZERO, both)
    return np.where(first == MEASURED, second, np.where(second == MEASURED, first, both))


@dataclasses.dataclass(frozen=True)
class Replayed:
    """One step replayed in every variant."""

    ends: np.ndarray  # (V, R) each rank's end (µs), from the first rank's start
    work: np.ndarray  # (V, R) each rank's work (µs): the rest of its step it waited
    # where asked (``timed``): per rank, (events, V) when it reached each event, its work before
    # it done, and when it went on from it; on the common clock
    reached: list[np.ndarray] | None = None
    left: list[np.ndarray] | None = None

    @property
    def lengths(self) -> np.ndarray:
        """(V,) each variant's step (µs): from the first rank's start to the last rank's end."""
        return self.ends.max(axis=1)


def replay(
    graph: StepGraph,
    variants: Variants,
    stage_of: Mapping[int, int] | None = None,
    *,
    timed: bool = False,
    jobs: int = 1,
) -> Replayed | str:
    """The step replayed in each variant; a line saying why not where the graph waits on
    itself (clocks that disagree). ``timed``: keep when each rank reached and left each event
    (the ideal trace's; a few variants). ``jobs``: the threads the blocks of variants are
    replayed in (numpy lets go of the GIL in the arrays' work, most of a block's time)."""
    order = graph.waves
    if order.stuck:
        stuck = [graph.ranks[row] for row in order.stuck]
        return f"rank(s) {stuck[:8]} wait on each other in a cycle (their clocks disagree)"
    by_mode = _by_mode(graph, stage_of)
    transfers = _transfers(graph, variants)
    count = variants.work.shape[0]
    per_block = max(1, BLOCK_CELLS // max(sum(order.counts), 1))
    firsts = range(0, count, per_block)
    made = graph.groups  # made once, before any thread needs it

    def block(first: int) -> tuple[np.ndarray, ...]:
        scale = _looked_up(by_mode, variants.work[first : first + per_block])
        return _replayed_block(graph, made, scale, transfers, first, timed)

    if jobs > 1 and len(firsts) > 1:
        with ThreadPoolExecutor(min(jobs, len(firsts))) as threads:
            blocks = list(threads.map(block, firsts))
    else:
        blocks = [block(first) for first in firsts]
    ends, work = np.concatenate([b[0] for b in blocks], axis=1).T, np.concatenate([b[1] for b in blocks])
    origin = float(np.min(graph.starts))
    if not timed:
        return Replayed(ends=ends - origin, work=work)
    cut = np.cumsum(order.counts)[:-1]
    reached, left = (np.concatenate([b[k] for b in blocks], axis=1) for k in (2, 3))
    return Replayed(ends=ends - origin, work=work, reached=np.split(reached, cut), left=np.split(left, cut))


def _replayed_block(
    graph: StepGraph, groups: WorkGroups, scale: np.ndarray, transfers: _Transfers, first: int, timed: bool
) -> tuple[np.ndarray, ...]:
    """A block of variants replayed (``scale``: theirs, (V, R, K); the first is ``first`` of
    all): each rank's end (R, V) and work (V, R); where ``timed``, when each rank reached and
    left each event, laid end to end (events, V)."""
    count = scale.shape[0]
    before, after = _scaled_work(groups, scale)
    t = np.repeat(graph.starts[:, None].astype(np.float64), count, axis=1)  # (R, V): each rank's clock
    latest = np.full((len(graph.members), count), -np.inf)  # each meeting's last arrival
    reached = np.empty_like(before) if timed else None  # laid rank by rank, as the waves' events
    left = np.empty_like(before) if timed else None
    for wave, grouped in zip(graph.waves.waves, groups.events, strict=True):
        t[wave.rows] += before[grouped]
        if reached is not None:
            reached[wave.events] = t[wave.rows]
        if len(wave.arriving):
            last = np.maximum.reduceat(t[wave.arriving], wave.firsts, axis=0)
            latest[wave.met] = np.maximum(latest[wave.met], last)
        if len(wave.blocked):
            moved = transfers.at(wave, first, count)
            t[wave.blocked] = np.maximum(t[wave.blocked], latest[wave.held_by] + moved)
        if left is not None:
            left[wave.events] = t[wave.rows]
    work = np.einsum("vrk,rk->vr", scale, graph.totals)
    return (t + after, work) if reached is None or left is None else (t + after, work, reached, left)


def _scaled_work(groups: WorkGroups, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each rank's work before each of its events in every variant, laid group by group
    (:class:`.graph.WorkGroups`): (events, V); and after its last: (R, V). ``scale``: (V, R, K)."""
    count = scale.shape[0]
    before = np.empty((sum(work.shape[0] * work.shape[1] for work in groups.before), count))
    after = np.empty((scale.shape[1], count))
    at = 0
    for rows, work, last in zip(groups.rows, groups.before, groups.after, strict=True):
        factors = scale[:, rows, :].transpose(1, 2, 0)  # (rows, K, V)
        size = work.shape[0] * work.shape[1]
        np.matmul(work, factors, out=before[at : at + size].reshape(*work.shape[:2], count))
        after[rows] = np.einsum("rk,rkv->rv", last, factors)
        at += size
    return before, after


@dataclasses.dataclass(frozen=True)
class _Transfers:
    """The transfer a rank waits out at a block, in every variant, by the variant's mode for the
    rank: as measured (MEASURED), lowered to its meeting's typical (AT_MOST_TYPICAL or LOWEST),
    that typical (MEAN) or none (ZERO). A meeting kind set apart has its own modes. Made a
    wave's blocks at a time: every event in every variant at once was 190 MB a step at 4096
    ranks."""

    chosen: np.ndarray  # (1 + kinds, R, V): the column of a wave's amounts each mode takes
    which: np.ndarray | None  # per meeting: its row of modes; None where no kind is set apart

    def at(self, wave: Wave, first: int, count: int) -> np.ndarray:
        """(blocks, V): the transfers of the wave's blocks, in ``count`` variants from ``first``."""
        rows = 0 if self.which is None else self.which[wave.held_by]
        chosen = self.chosen[rows, wave.blocked, first : first + count]
        # np.take_along_axis's indices, made here: its own checks were half of this (14 000 calls)
        return wave.amounts[np.arange(len(chosen))[:, None], chosen]


def _transfers(graph: StepGraph, variants: Variants) -> _Transfers:
    """What :class:`_Transfers` needs, for the graph's meetings in these variants."""
    kinds = sorted(variants.transfer_kind)
    apart = {kind: 1 + index for index, kind in enumerate(kinds)}
    # (1 + kinds, R, V): a rank's modes in every variant side by side
    modes = np.stack([variants.transfer, *(variants.transfer_kind[kind] for kind in kinds)]).transpose(
        0, 2, 1
    )
    chosen = _AMOUNT_OF[modes]
    which = np.array([apart.get(kind, 0) for kind in graph.kinds], dtype=np.int64) if kinds else None
    return _Transfers(chosen=chosen, which=which)


def _median_of_the_others(column: np.ndarray, present: np.ndarray) -> np.ndarray:
    """(R,): for each rank with work of this kind, the median of the other such ranks' (its own,
    where it has no peer: a rank is not lowered to itself among two); 0 for the others."""
    found = np.zeros_like(column)
    values = column[present]
    n = len(values)
    if n < 2:
        found[present] = values
        return found
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)  # each value's place among them

    def without(index: int) -> np.ndarray:  # the index-th of the others, for each value left out
        return ordered[np.where(index < position, index, index + 1)]

    left = n - 1  # the others
    middle = without(left // 2) if left % 2 else (without(left // 2 - 1) + without(left // 2)) / 2
    found[present] = middle
    return found


def scales(graph: StepGraph, variants: Variants, stage_of: Mapping[int, int] | None) -> np.ndarray:
    """(V, R, K): what each variant multiplies each rank's work of each kind by."""
    return _looked_up(_by_mode(graph, stage_of), variants.work)


def _looked_up(by_mode: np.ndarray, modes: np.ndarray) -> np.ndarray:
    """(V, R, K): each variant's factors, by its modes (V, R, K) from :func:`_by_mode`'s table:
    a lookup, not np.select's pass over every cell a mode."""
    return np.take_along_axis(by_mode, modes.astype(np.intp, copy=False), axis=0)


def _by_mode(graph: StepGraph, stage_of: Mapping[int, int] | None) -> np.ndarray:
    """(modes, R, K): what each mode multiplies each rank's work of each kind by (a mode's
    value is its row)."""
    totals = graph.totals
    has = totals > EPSILON_US
    counts = has.sum(axis=0)
    mean = np.where(counts > 0, totals.sum(axis=0) / np.maximum(counts, 1), 0.0)
    # the host's ideal is its median over the ranks: one rank slowed on its host (its data
    # loading, a noisy neighbour) held the mean up for every other rank, whose part then
    # replayed longer than the whole job
    mean[HOST] = float(np.median(totals[:, HOST]))
    # a rank's peers are the ranks with work of that kind (a stage's own kind of work is not lowered
    # to nothing), but every rank has a host: none of its gaps is 0 of it, not an absence
    among = has.copy()
    among[:, HOST] = True
    peers = np.stack(
        [_median_of_the_others(totals[:, k], among[:, k]) for k in range(totals.shape[1])], axis=1
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        to_mean = np.where(has, mean / totals, 1.0)
        to_typical = np.minimum(np.where(has, peers / totals, 1.0), 1.0)
    to_stage = np.ones_like(to_mean)
    stages = np.array([(stage_of or {}).get(rank, -1) for rank in graph.ranks])
    present = sorted(set(stages.tolist()) - {-1})
    if len(present) > 1:  # each stage's ranks lowered to the median of the other stages' means
        means = np.stack([totals[stages == s].mean(axis=0) for s in present])  # (stages, K)
        others = np.stack([np.median(np.delete(means, i, axis=0), axis=0) for i in range(len(present))])
        staged = stages >= 0  # a rank of no stage is its own
        middle = np.where(staged[:, None], others[np.searchsorted(present, np.maximum(stages, 0))], totals)
        with np.errstate(divide="ignore", invalid="ignore"):
            to_stage = np.minimum(np.where(has, middle / totals, 1.0), 1.0)
    lowest = np.minimum(to_typical, to_stage)
    return np.stack([np.ones_like(to_mean), to_mean, to_typical, to_stage, np.zeros_like(to_mean), lowest])
