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
2. else by what they are (operation, message size or input shapes) and when they ended: each
   candidate pair of the same kind within a plausible distance (a fraction of a step) votes
   for an offset, the offset most pairs agree on within a tolerance wins, and each collective
   is paired with the one that fits it best. A collective missing from one trace (a thinned
   trace, a window that starts a collective later) then just has no partner. The tolerance
   starts at 1 ms and widens (:data:`TOLERANCES_US`, at most a tenth of a step) only if too
   few pairs agree: ranks sharing CPU cores leave a collective milliseconds apart.

The offset is the median over the pairs; its spread (median absolute deviation) is reported.
Without at least :data:`MIN_PAIRS` pairs, and a third of the collectives of the shorter trace,
the pairing is not trusted: the trace keeps the prior, and the report says so. An unpaired
shift is never applied.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from profiling.trace_events import Collective

# How far apart two ends of one collective may be after alignment, tried in turn.
TOLERANCES_US = (1_000.0, 5_000.0, 20_000.0)
MIN_PAIRS = 3
_MIN_WINDOW_US = 2000.0
_KIND = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
# Collectives that no rank leaves before every rank has arrived (letters only, lower case).
_SYMMETRIC = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "barrier")


@dataclasses.dataclass(frozen=True)
class Instance:
    """One collective in one rank's trace, by what identifies it across ranks."""

    key: tuple[Any, ...]
    arrival: float  # when this rank got to it (trace clock, µs)
    end: float  # when it left it
    label: str  # for people: "allreduce (pg 0, seq 12)", "gloo:all_reduce [[2048]]"
    symmetric: bool  # every rank leaves it together: its end sets the clock


@dataclasses.dataclass(frozen=True)
class Alignment:
    """How one trace is moved onto the reference trace's clock."""

    shift_us: float  # add to this trace's ts
    method: str  # "reference", "sequence numbers", "matched collectives", "base time", "none"
    pairs: int
    residual_us: float | None  # median absolute deviation of the pairs' offsets
    max_residual_us: float | None
    matched: dict[int, int]  # reference instance index -> this trace's instance index
    note: str = ""

    @property
    def paired(self) -> bool:
        return self.method in ("reference", "sequence numbers", "matched collectives")


def instances(collectives: Sequence[Collective]) -> list[Instance]:
    """The collectives a rank took part in, in the order they started.

    GPU: NCCL kernels; a rank *arrives* when its kernel starts (it spins there until every rank
    has). CPU: gloo's operators run on worker threads in the order c10d's operators queued
    them; a rank arrives when it queues the operation (the c10d operator's start) and leaves
    when gloo's operator ends.
    """
    kernels = [c for c in collectives if c.gpu]
    if kernels:
        return [_kernel_instance(c) for c in kernels]
    executed = [c for c in collectives if c.name.startswith("gloo:")]
    queued = [c for c in collectives if c.name.startswith("c10d::")]
    consistent = len(queued) >= len(executed) and all(
        _same_kind(q.name, e.name) for q, e in zip(queued, executed, strict=False)
    )
    found = []
    for index, op in enumerate(executed):
        dims = op.arg("Input Dims")
        arrival = queued[index].start if consistent else op.start
        label = f"{op.name} {_text(dims)}".strip()
        found.append(Instance(("op", op.name, dims), arrival, op.end, label, _is_symmetric(op.name)))
    return found


def _kernel_instance(kernel: Collective) -> Instance:
    group, seq = kernel.arg("Process Group Name"), kernel.arg("Seq")
    kind = kernel.arg("Collective name") or _kernel_kind(kernel.name)
    symmetric = _is_symmetric(kind)
    if seq is not None:
        label = f"{kind} (group {group}, seq {seq})"
        return Instance(("seq", group, seq), kernel.start, kernel.end, label, symmetric)
    size = (kernel.arg("In msg nelems"), kernel.arg("Out msg nelems"))
    label = f"{kind} ({size[0]} elements)" if size[0] is not None else kind
    return Instance(("op", kind, size), kernel.start, kernel.end, label, symmetric)


def _is_symmetric(kind: str) -> bool:
    letters = re.sub(r"[^a-z]", "", kind.split(":")[-1].lower())
    return letters.startswith(_SYMMETRIC)


def _kernel_kind(name: str) -> str:
    match = _KIND.search(name)
    return match[1] if match else name


def _same_kind(queued: str, executed: str) -> bool:
    """``c10d::allreduce_`` queues ``gloo:all_reduce``; ``c10d::_allgather_base_`` ``gloo:all_gather``."""
    a = re.sub(r"[^a-z]", "", queued.split("::", 1)[-1].lower())
    b = re.sub(r"[^a-z]", "", executed.split(":", 1)[-1].lower())
    return a.startswith(b) or b.startswith(a)


def _text(value: Any) -> str:
    return "" if value is None else str(value).replace("(", "[").replace(")", "]").replace(",]", "]")


def reference_alignment(count: int) -> Alignment:
    return Alignment(0.0, "reference", count, 0.0, 0.0, {i: i for i in range(count)})


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
        return _unpaired(prior_us, "no all-reduce-like collective in one of the traces")
    window = max(_MIN_WINDOW_US, 0.4 * step_us) if step_us else _MIN_WINDOW_US
    needed = max(MIN_PAIRS, int(np.ceil(0.3 * min(len(ref_clock), len(other_clock)))))
    by_seq = _pairs_by_sequence(reference, other)
    if by_seq:
        pairs, method = [(i, j) for i, j in by_seq if reference[i].symmetric], "sequence numbers"
    else:
        method, pairs, tolerance = "matched collectives", [], TOLERANCES_US[0]
        for tolerance in (
            t for t in TOLERANCES_US if not step_us or t <= max(TOLERANCES_US[0], 0.1 * step_us)
        ):
            pairs = _pairs_by_vote(reference, other, ref_clock, other_clock, prior_us, window, tolerance)
            if len(pairs) >= needed:
                break
    if len(pairs) < needed:
        total = min(len(ref_clock), len(other_clock))
        return _unpaired(
            prior_us,
            f"only {len(pairs)} of {total} all-reduce-like collectives could be paired "
            f"(at least {needed} needed)",
        )
    offsets = [reference[i].end - other[j].end for i, j in pairs]
    shift = statistics.median(offsets)
    deviations = [abs(o - shift) for o in offsets]
    matched = dict(by_seq) if by_seq else _pair_all(reference, other, shift, tolerance, window)
    return Alignment(
        shift_us=shift,
        method=method,
        pairs=len(pairs),
        residual_us=statistics.median(deviations),
        max_residual_us=max(deviations),
        matched=matched,
    )


def _pairs_by_sequence(reference: Sequence[Instance], other: Sequence[Instance]) -> list[tuple[int, int]]:
    index = {inst.key: i for i, inst in enumerate(other) if inst.key[0] == "seq"}
    return [(i, index[inst.key]) for i, inst in enumerate(reference) if inst.key in index]


def _pairs_by_vote(
    reference: Sequence[Instance],
    other: Sequence[Instance],
    ref_indices: Sequence[int],
    other_indices: Sequence[int],
    prior_us: float,
    window: float,
    tolerance: float,
) -> list[tuple[int, int]]:
    ends_by_key: dict[Any, list[tuple[float, int]]] = collections.defaultdict(list)
    for j in other_indices:
        ends_by_key[other[j].key].append((other[j].end + prior_us, j))
    candidates: list[tuple[float, int, int]] = []  # (offset beyond the prior, reference index, other index)
    for i in ref_indices:
        for end, j in ends_by_key.get(reference[i].key, ()):
            if abs(reference[i].end - end) <= window:
                candidates.append((reference[i].end - end, i, j))
    if not candidates:
        return []
    offsets = np.array([c[0] for c in candidates])
    # the offset most reference collectives agree on: each votes once per tolerance-wide bin
    bins = np.floor(offsets / tolerance).astype(np.int64)
    votes: dict[int, set[int]] = collections.defaultdict(set)
    for (_, i, _), b in zip(candidates, bins, strict=True):
        for neighbour in (b - 1, b, b + 1):  # a peak may straddle a bin edge
            votes[int(neighbour)].add(i)
    best = max(votes, key=lambda b: (len(votes[b]), -abs(b)))
    center = float(np.median(offsets[np.abs(bins - best) <= 1]))
    return _one_to_one([(abs(offset - center), i, j) for offset, i, j in candidates], tolerance)


def _pair_all(
    reference: Sequence[Instance], other: Sequence[Instance], shift: float, tolerance: float, window: float
) -> dict[int, int]:
    """Every collective with its twin of the same kind nearest in time, once aligned.

    All-reduce-like ones within the tolerance the clock was set with; broadcasts and the like,
    whose ends differ by how long receivers waited, within the window.
    """
    by_key: dict[Any, list[int]] = collections.defaultdict(list)
    for j, inst in enumerate(other):
        by_key[inst.key].append(j)
    candidates = [
        (abs(inst.end - other[j].end - shift) / (tolerance if inst.symmetric else window), i, j)
        for i, inst in enumerate(reference)
        for j in by_key.get(inst.key, ())
    ]
    return dict(_one_to_one(candidates, 1.0))


def _one_to_one(candidates: list[tuple[float, int, int]], limit: float) -> list[tuple[int, int]]:
    """Greedy pairing by closeness (``(distance, i, j)``), each index used once, distance <= limit."""
    used_ref, used_other, pairs = set(), set(), []
    for distance, i, j in sorted(candidates):
        if distance > limit:
            break
        if i not in used_ref and j not in used_other:
            used_ref.add(i)
            used_other.add(j)
            pairs.append((i, j))
    return sorted(pairs)


def _unpaired(prior_us: float, why: str) -> Alignment:
    return Alignment(prior_us, "base time", 0, None, None, {}, note=why)
