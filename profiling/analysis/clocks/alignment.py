"""Putting every rank's trace on one clock, by pairing the collectives the ranks took part in.

Each trace's ``ts`` counts from its own ``baseTimeNanoseconds``; moving it by the difference
of the bases puts it on the first rank's wall clock (the *prior*). Hosts' clocks still
disagree by up to milliseconds, so the offset is then measured: every rank leaves an
all-reduce, all-gather, reduce-scatter, all-to-all or barrier at nearly the same instant
(nobody finishes before the last rank's data is in), so the same collective's end on two
ranks gives their clock offset. Broadcasts, sends and receives do not: a receiver leaves as
soon as its data is in. They are paired too (for the straggler), but do not set the clock.

Collectives are paired by identity, never by position:

1. by process group and sequence number, where the trace has them (NCCL kernels and
   ``record_param_comms`` carry ``Process Group Name`` and ``Seq`` since torch 2.4);
2. else by what they are (operation, message size or input shapes, where recorded) and when
   they ended. Older traces say neither size nor sequence, and a job may run hundreds of
   all-reduces of one kind per step, about one per millisecond: then nearly every collective
   has a twin of its kind at every offset a clock could be off by, and what singles out the
   true offset is that at it *all* ends coincide, to within microseconds. So the offset is
   searched for as the peak of the cross-correlation of the two traces' end times (their
   histograms in bins of :data:`TOLERANCES_US`\\[0], correlated by FFT over every offset within
   a fraction of a step of the prior: O(n log n), never all pairs), then refined by pairing
   each collective with its nearest twin of the same kind (both each other's nearest, within
   a tolerance) and taking the median offset of those pairs.

The tolerance starts at a few microseconds and widens (:data:`TOLERANCES_US`, up to a tenth of a
step) until an offset pairs enough collectives: GPU ranks leave an NCCL collective within
microseconds, CPU ranks sharing cores leave gloo's within milliseconds. An offset is trusted
only if

- it pairs at least :data:`MIN_PAIRS` and :data:`MIN_SHARE` of the shorter trace's all-reduce-like
  collectives,
- chance explains at most half of its pairs: offsets elsewhere in the window pair that many
  just by density (their median is the *chance* level), and
- no other offset, further than a few tolerances away, pairs nearly as many beyond chance
  (:data:`AMBIGUOUS`): two such peaks are two explanations, and the report says so instead of
  guessing.

Otherwise the trace keeps the prior (its base time), and the report says why. What the
alignment reports is what its pairs achieve: the share of collectives paired, the median
absolute deviation of their offsets (``residual_us``: how far apart the ranks leave a
collective) and :attr:`Alignment.uncertainty_us`, the clock's accuracy, which the straggler test
takes: how well that many pairs pin the median (its standard error, 1.858 x MAD / sqrt(pairs):
1.2533 sigma / sqrt(n), sigma = 1.4826 x MAD), but never finer than the model itself errs (ranks
leave one collective apart, by the residual) nor than the timestamps' quantum (1 µs in traces
of whole microseconds), nor than an error a whole group of pairs shares (:func:`_systematic`:
the last rank to arrive may leave a few µs after the others, at every collective it was last
at). Ranks of one host share its clock and are not measured at all (:func:`on_one_clock`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from profiling.analysis.clocks.offset_search import MIN_PAIRS, MIN_SHARE, PairLine, match_all, search_offset
from profiling.analysis.reading.collectives import Instance, is_sequenced
from profiling.analysis.reading.instances import transfer_ranks
from profiling.analysis.robust import MAD_TO_SIGMA, MEDIAN_ERROR_PER_SIGMA

# How far apart two ends of one collective may be after alignment, tried in turn.
TOLERANCES_US = (5.0, 15.0, 50.0, 150.0, 500.0, 1_500.0, 5_000.0, 20_000.0)
_MIN_WINDOW_US = 2000.0
# The standard error of a median of n draws, per MAD and over sqrt(n)
_MEDIAN_ERROR = MEDIAN_ERROR_PER_SIGMA * MAD_TO_SIGMA
_MIN_GROUP = 3  # pairs in a group whose median counts towards the systematic error


@dataclasses.dataclass(frozen=True)
class Alignment:
    """How one trace is moved onto the reference trace's clock."""

    shift_us: float  # add to this trace's ts
    method: str  # "reference", "sequence numbers", "matched collectives", "base time"
    pairs: int  # all-reduce-like collectives paired to set the clock
    residual_us: float | None  # median absolute deviation of the pairs' offsets
    max_residual_us: float | None
    matched: dict[int, int]  # reference instance index -> this trace's instance index
    note: str = ""
    paired_share: float | None = None  # pairs / all-reduce-like collectives of the shorter trace
    uncertainty_us: float | None = None  # the shift's standard error: the clock's accuracy

    @property
    def paired(self) -> bool:
        return self.method in ("reference", "sequence numbers", "matched collectives", ONE_HOST, TRANSFERS)


ONE_HOST = "one host"
TRANSFERS = "sends and receives"


def on_one_clock(
    reference: Sequence[Instance],
    other: Sequence[Instance],
    *,
    shift_us: float,
    step_us: float | None,
    uncertainty_us: float = 0.0,
    note: str = "ranks of one host share its clock",
) -> Alignment:
    """``other`` on a clock known to be ``shift_us`` from ``reference``'s (two processes of one
    host: the shift their base times give, exactly); its collectives paired at that shift, for
    the straggler test. ``uncertainty_us``: how well the shift is known (0 on one host)."""
    window = max(_MIN_WINDOW_US, 0.4 * step_us) if step_us else _MIN_WINDOW_US
    by_seq = _pairs_by_sequence(reference, other)
    spread = max(TOLERANCES_US[2], 0.1 * step_us) if step_us else TOLERANCES_US[2]
    matched = dict(by_seq) if by_seq else match_all(reference, other, shift_us, spread, window)
    symmetric = [(i, j) for i, j in matched.items() if reference[i].symmetric]
    deviations = np.abs([reference[i].end - other[j].end - shift_us for i, j in symmetric])
    shorter = min(sum(i.symmetric for i in reference), sum(i.symmetric for i in other)) or 1
    return Alignment(
        shift_us=shift_us,
        method=ONE_HOST,
        pairs=len(symmetric),
        residual_us=float(np.median(deviations)) if symmetric else None,
        max_residual_us=float(deviations.max()) if symmetric else None,
        matched=matched,
        note=note,
        paired_share=len(symmetric) / shorter,
        uncertainty_us=uncertainty_us,
    )


def reference_alignment(count: int) -> Alignment:
    return Alignment(0.0, "reference", count, 0.0, 0.0, {i: i for i in range(count)}, "", 1.0, 0.0)


def align(
    reference: Sequence[Instance], other: Sequence[Instance], *, prior_us: float, step_us: float | None
) -> Alignment:
    """How to move ``other``'s trace onto ``reference``'s clock.

    ``prior_us`` is the shift the traces' base times give; ``step_us`` a typical step's
    duration, which bounds how far the clocks may disagree beyond the prior (a whole step
    would pair each collective with the next step's twin).
    """
    ref_clock = [i for i, inst in enumerate(reference) if inst.symmetric]
    other_clock = [j for j, inst in enumerate(other) if inst.symmetric]
    if not ref_clock or not other_clock:
        return base_time(prior_us, "no all-reduce-like collective in one of the traces")
    shorter = min(len(ref_clock), len(other_clock))
    needed = max(MIN_PAIRS, int(np.ceil(MIN_SHARE * shorter)))
    window = max(_MIN_WINDOW_US, 0.4 * step_us) if step_us else _MIN_WINDOW_US
    by_seq = _pairs_by_sequence(reference, other)
    if by_seq:
        pairs = [(i, j) for i, j in by_seq if reference[i].symmetric]
        if len(pairs) < needed:
            return base_time(
                prior_us,
                f"only {len(pairs)} of {shorter} all-reduce-like collectives share a sequence number",
            )
        offsets = np.array([reference[i].end - other[j].end for i, j in pairs])
        groups = _groups(reference, other, pairs, float(np.median(offsets)))
        return _measured(
            "sequence numbers", offsets, float(np.median(offsets)), dict(by_seq), shorter, groups
        )
    line = PairLine(reference, other, ref_clock, other_clock, window)
    tolerances = [t for t in TOLERANCES_US if not step_us or t <= max(TOLERANCES_US[0], 0.1 * step_us)]
    found = search_offset(line, prior_us, window, tolerances, needed, shorter)
    if isinstance(found, str):
        return base_time(prior_us, f"clocks could not be aligned: {found}")
    ref_index, other_index = line.ref_index[found.i], line.other_index[found.j]
    offsets = np.array([reference[i].end for i in ref_index]) - [other[j].end for j in other_index]
    # ends further from the clock than the tolerance and 6 MAD (4 sigma) are another collective's
    spread = max(found.tolerance, 6.0 * float(np.median(np.abs(offsets - found.offset))))
    matched = match_all(reference, other, found.offset, spread, window)
    groups = _groups(reference, other, list(zip(ref_index, other_index, strict=True)), found.offset)
    return _measured("matched collectives", offsets, found.offset, matched, shorter, groups)


def align_in_groups(
    reference: Sequence[Instance],
    other: Sequence[Instance],
    ranks: tuple[int, int],
    *,
    prior_us: float,
    step_us: float | None,
) -> Alignment:
    """:func:`align` over the collectives of the groups both ranks (``ranks``: the reference's,
    the other's) are in; where they share none that sets a clock, over the sends and receives
    between them (:func:`bounded_by_transfers`). In a job of one group, :func:`align` itself."""
    mine = [i for i, inst in enumerate(reference) if _shared(inst, ranks)]
    theirs = [j for j, inst in enumerate(other) if _shared(inst, ranks)]
    if len(mine) == len(reference) and len(theirs) == len(other):
        clock = align(reference, other, prior_us=prior_us, step_us=step_us)
    else:
        clock = align(
            [reference[i] for i in mine], [other[j] for j in theirs], prior_us=prior_us, step_us=step_us
        )
        clock = dataclasses.replace(clock, matched={mine[i]: theirs[j] for i, j in clock.matched.items()})
    if clock.paired:
        return clock
    bounded = bounded_by_transfers(reference, other, ranks, prior_us=prior_us)
    return bounded if bounded.paired else clock


def _shared(instance: Instance, ranks: tuple[int, int]) -> bool:
    """Whether both ranks take part in it (a collective of unknown group: every rank does)."""
    return instance.group is None or (ranks[0] in instance.group and ranks[1] in instance.group)


def bounded_by_transfers(
    reference: Sequence[Instance], other: Sequence[Instance], ranks: tuple[int, int], *, prior_us: float
) -> Alignment:
    """The shift the sends and receives between two ranks allow: no receive ends before its
    send began. A transfer from the reference to the other rank bounds the shift from below
    (the receive's end, moved, is after the send's start), one the other way from above; with
    both, the shift is the middle of what they allow, known to half its width. Pipeline stages
    pass activations forward and gradients back, so a pipeline's neighbours have both."""
    index = {inst.key: j for j, inst in enumerate(other) if inst.peer == ranks[0] and is_sequenced(inst)}
    low, high, matched = -np.inf, np.inf, {}
    for i, inst in enumerate(reference):
        j = index.get(inst.key) if inst.peer == ranks[1] else None
        if j is None:
            continue
        matched[i] = j
        theirs = other[j]
        if transfer_ranks(inst) == ranks:  # the reference sent it
            low = max(low, inst.arrival - theirs.end)
        else:
            high = min(high, inst.end - theirs.arrival)
    if not matched:
        return base_time(prior_us, "the ranks share no group and pass nothing to each other")
    if not (np.isfinite(low) and np.isfinite(high)):
        return base_time(
            prior_us, f"{len(matched)} transfer(s) between the ranks go one way only: a bound, no clock"
        )
    if low > high:
        return base_time(prior_us, f"the {len(matched)} transfers between the ranks contradict each other")
    return Alignment(
        shift_us=float((low + high) / 2),
        method=TRANSFERS,
        pairs=0,
        residual_us=None,
        max_residual_us=None,
        matched=matched,
        note=f"bounded by {len(matched)} transfers between the ranks, both ways",
        paired_share=None,
        uncertainty_us=float(max((high - low) / 2, 1.0)),
    )


def _pairs_by_sequence(reference: Sequence[Instance], other: Sequence[Instance]) -> list[tuple[int, int]]:
    index = {inst.key: i for i, inst in enumerate(other) if is_sequenced(inst)}
    return [(i, index[inst.key]) for i, inst in enumerate(reference) if inst.key in index]


def _measured(
    method: str,
    offsets: np.ndarray,
    shift: float,
    matched: dict[int, int],
    shorter: int,
    groups: Sequence[np.ndarray],
) -> Alignment:
    deviations = np.abs(offsets - shift)
    residual = float(np.median(deviations))
    # The pairs pin their median to its standard error; but the model itself errs by as much as
    # ranks leave one collective apart (GPUs of one host, a few µs), which the residual shows,
    # and no shift is known finer than the timestamps' quantum.
    quantum = 1.0 if np.all(offsets == np.round(offsets)) else 0.001
    uncertainty = max(
        _MEDIAN_ERROR * residual / np.sqrt(len(offsets)),
        residual,
        quantum,
        _systematic(offsets, groups, float(deviations.max())),
    )
    return Alignment(
        shift_us=shift,
        method=method,
        pairs=len(offsets),
        residual_us=residual,
        max_residual_us=float(deviations.max()),
        matched=matched,
        paired_share=len(offsets) / shorter,
        uncertainty_us=float(uncertainty),
    )


def _groups(
    reference: Sequence[Instance], other: Sequence[Instance], pairs: Sequence[tuple[int, int]], shift: float
) -> list[np.ndarray]:
    """Three ways to split the pairs, each a label per pair: by the collective's kind, by its
    step, and by which of the two ranks arrived last (on the measured clock)."""
    kinds = [reference[i].label.split(" ")[0] for i, _ in pairs]
    steps = [-1 if reference[i].step is None else reference[i].step for i, _ in pairs]
    last = [other[j].arrival + shift > reference[i].arrival for i, j in pairs]
    return [np.array(kinds), np.array(steps), np.array(last)]


def _systematic(offsets: np.ndarray, groups: Sequence[np.ndarray], worst: float) -> float:
    """What the residual does not show: an error that a whole group of pairs shares.

    Ranks do not leave a collective at one instant: the last to arrive may leave a few µs later
    (a ring's last hop), by more for larger messages. Every pair then carries that delay, the
    residual stays small, and the shift is off by it (6.2 µs at ± 1.8 on a real one-host job).
    A delay shared by every pair alike cannot be told from a clock offset by any pairing; what
    can be seen is how it varies: the range of the medians of groups (of at least
    :data:`_MIN_GROUP` pairs) by kind, by step and by which rank arrived last. Where one rank
    arrived last at nearly every pair, the last split has no second group: then the worst
    residual too."""
    spread = 0.0
    for labels in groups:
        medians = [
            float(np.median(offsets[labels == value]))
            for value in np.unique(labels)
            if np.count_nonzero(labels == value) >= _MIN_GROUP
        ]
        if len(medians) > 1:
            spread = max(spread, max(medians) - min(medians))
    one_sided = min(np.count_nonzero(groups[-1]), np.count_nonzero(~groups[-1])) < _MIN_GROUP
    return max(spread, worst) if one_sided and len(offsets) >= 2 * _MIN_GROUP else spread


def base_time(prior_us: float, why: str) -> Alignment:
    """The shift the base times give, with why the collectives could not do better."""
    return Alignment(prior_us, "base time", 0, None, None, {}, note=why)
