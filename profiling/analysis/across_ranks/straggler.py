"""Which rank the others wait for, with the evidence, or that none stands out.

Under DDP every rank's step lasts as long as the slowest rank's, so step times cannot tell
who that is, and compute cannot either: a rank slowed on the CPU side (data loading, a slow
host, Python) computes no more than the others, they just wait longer in NCCL or gloo. What
tells is *arrival*: once the clocks are aligned (:mod:`profiling.analysis.clocks.alignment`), the rank that
reaches a collective last is the one every other rank waits for there, for as long as it came
after the one before it (its *gap*).

The evidence is counted per step, because one late start delays every collective of that
step: in each step, each rank is charged the gaps of the collectives it came last to, and the
rank charged most *held the others back* in that step. A rank is named the straggler only if

- it held the others back in more steps than chance allows: the binomial tail of that count,
  with a 1-in-ranks chance each step, times the number of ranks (any of them could have been
  the one), is below :data:`ALPHA`; and
- what it was charged per step exceeds the step-to-step noise of a step's mean: the standard
  deviation of step times (median over ranks) over the square root of the number of steps.

Lateness is only evidence where the clocks are better than it: with clocks known to ±X µs
(:attr:`profiling.analysis.clocks.alignment.Alignment.uncertainty_us`, the largest among the
ranks compared), a rank that came to a collective less than :data:`CLOCK_MARGIN` × X after the
one before it is not counted as last there. Identical ranks on well-aligned clocks are so
never anyone's fault.

With too few steps for the first test to ever pass (``ranks ** (1 - steps) >= ALPHA``) the
answer is "undetermined", with the number of steps it would take; otherwise, failing either
test, "no significant straggler". Each answer comes with the numbers.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from profiling.analysis.across_ranks.critical_path.walk import Key
from profiling.schema.model import Straggler

ALPHA = 0.01
CLOCK_MARGIN = 3.0  # lateness below this many times the clocks' uncertainty is no evidence


def steps_needed(ranks: int) -> int:
    """The fewest steps in which one rank holding the others back every time passes the test."""
    return 1 + math.floor(math.log(1 / ALPHA) / math.log(ranks)) + 1 if ranks > 1 else 0


def find_straggler(
    arrivals: Mapping[int, Mapping[Key, float] | None],
    anchor_steps: Mapping[Key, int],
    step_ms: Mapping[int, Sequence[float]],
    compute_ms: Mapping[int, float],
    clock_uncertainty_us: Mapping[int, float] | None = None,
    names: Mapping[int, str] | None = None,
    members: Mapping[Key, frozenset[int]] | None = None,
    stage_of: Mapping[int, int] | None = None,
) -> Straggler | None:
    """The verdict over ranks (None for a single rank); inputs are keyed by rank.

    ``arrivals[rank]`` maps each collective (by a key shared across ranks) to when the rank
    reached it, on the common clock; None for a rank whose clock could not be paired.
    ``anchor_steps`` gives each collective's step; ``clock_uncertainty_us`` how well each
    rank's clock is known (0 where not given); ``names``: how the text names a rank, where not
    ``rank N`` ("rank 13 (dp 1, pp 3, tp 1)", in a job with a layout); ``members``: the ranks
    of each collective's group, where it is not every rank's (a job of data, pipeline and tensor
    parallel groups): there a rank is last among its group's members. ``stage_of``: each rank's
    pipeline stage, in a job with a pipeline: a rank is compared with its peers of the same stage
    alone (at a collective that spans stages, a later stage always arrives later), where the
    job has collectives within a stage; else across them, as the only evidence there is.
    """
    if len(arrivals) < 2:
        return None
    if len(set((stage_of or {}).values())) > 1:
        within = {key: group for key, group in (members or {}).items() if _one_stage(group, stage_of or {})}
        if within:
            members = within
            anchor_steps = {key: step for key, step in anchor_steps.items() if key in within}
    verdict = _verdict(
        arrivals, anchor_steps, step_ms, compute_ms, clock_uncertainty_us or {}, names or {}, members or {}
    )
    return msgspec.convert(verdict, Straggler, strict=False)  # str keys of ranks as ints


def _one_stage(group: frozenset[int], stage_of: Mapping[int, int]) -> bool:
    """Whether a collective's group lies within one pipeline stage."""
    return len({stage_of.get(rank) for rank in group}) == 1


def _verdict(
    arrivals: Mapping[int, Mapping[Key, float] | None],
    anchor_steps: Mapping[Key, int],
    step_ms: Mapping[int, Sequence[float]],
    compute_ms: Mapping[int, float],
    clock_uncertainty_us: Mapping[int, float],
    names: Mapping[int, str],
    members: Mapping[Key, frozenset[int]],
) -> dict[str, Any]:
    ranks = sorted(r for r, found in arrivals.items() if found is not None)
    unaligned = sorted(set(arrivals) - set(ranks))
    # collectives every compared member of their group reached, in a known step
    anchors = sorted(shared_collectives(arrivals, ranks, members, anchor_steps), key=str)
    steps = sorted({anchor_steps[k] for k in anchors})
    noise_ms = _step_noise_ms(step_ms)
    uncertainty_us = max((clock_uncertainty_us.get(r, 0.0) for r in ranks), default=0.0)
    verdict: dict[str, Any] = {
        "ranks_compared": ranks,
        "ranks_without_paired_clock": unaligned,
        "collectives": len(anchors),
        "steps": len(steps),
        "step_noise_ms": noise_ms,
        "threshold_ms": noise_ms / math.sqrt(len(steps)) if steps and noise_ms is not None else None,
        "clock_uncertainty_us": uncertainty_us,
        "min_lateness_us": CLOCK_MARGIN * uncertainty_us,
        "compute_ms": {str(r): compute_ms[r] for r in sorted(compute_ms)},
    }
    if len(ranks) < 2 or not anchors:
        why = (
            f"the clocks could not be aligned for rank(s) {', '.join(map(str, unaligned))}, which leaves "
            f"{len(ranks)} rank(s) to compare"
            if len(ranks) < 2
            else "no collective paired on every rank of its group"
        )
        return {**verdict, "verdict": "undetermined", "rank": None, "text": f"straggler undetermined: {why}"}
    step_index = {step: index for index, step in enumerate(steps)}
    step_of = [step_index[anchor_steps[k]] for k in anchors]
    if members:  # a collective's lateness is told among, and on the clocks of, its own members
        taking_part = Memberships.of(arrivals, ranks, members, anchors, None)
        last, gaps_us = taking_part.last_and_gaps()
        margin = CLOCK_MARGIN * np.array([clock_uncertainty_us.get(r, 0.0) for r in ranks])
        margins = np.maximum.reduceat(margin[taking_part.rows], taking_part.starts)
        charges = _Charges.of(last, gaps_us, step_of, len(ranks), len(steps), verdict, True, margins)
    else:
        times = np.array([[arrivals[r][k] for k in anchors] for r in ranks])  # type: ignore[index]
        order = np.argsort(times, axis=0, kind="stable")
        columns = np.arange(times.shape[1])
        gaps_us = times[order[-1], columns] - times[order[-2], columns]
        charges = _Charges.of(order[-1], gaps_us, step_of, len(ranks), len(steps), verdict)
    if charges is None:
        return {
            **verdict,
            "verdict": "none",
            "candidate": None,
            "rank": None,
            "text": f"no significant straggler: no rank reached any of the {len(anchors)} collectives "
            f"more than {verdict['min_lateness_us']:.1f} µs after the next one ({CLOCK_MARGIN:g} × the "
            f"clocks' uncertainty of {uncertainty_us:.1f} µs)",
        }
    return _judge(charges, ranks, len(anchors), len(steps), compute_ms, verdict, names)


def shared_collectives(
    found: Mapping[int, Mapping[Key, Any] | None],
    ranks: Sequence[int],
    members: Mapping[Key, frozenset[int]],
    among: Mapping[Key, Any] | None = None,
) -> list[Key]:
    """The collectives (of ``among``, where given) that every compared rank of their group
    reached, with two of them at least; a collective of no known group is every rank's."""
    if not ranks:
        return []
    if not members:  # one group: what every rank reached (the quick way at thousands of ranks)
        common = set.intersection(*(set(found[r] or {}) for r in ranks))
        return [key for key in common if among is None or key in among]
    compared = frozenset(ranks)
    keys = set().union(*(set(found[r] or {}) for r in ranks))
    shared = []
    for key in keys:
        if among is not None and key not in among:
            continue
        group = members.get(key)
        expected = compared if group is None else group & compared
        if len(expected) >= 2 and all(key in (found[r] or {}) for r in expected):
            shared.append(key)
    return shared


@dataclasses.dataclass(frozen=True)
class _Charges:
    """Who came last where, and what it cost the others (rows: ranks compared)."""

    last: np.ndarray  # the row that came last, at each collective that tells
    gaps_ms: np.ndarray  # how long after the next rank it came there
    charged: np.ndarray  # ms of waiting each row caused in each step
    held_back: np.ndarray  # steps in which each row was charged most

    @classmethod
    def of(
        cls,
        last_rows: np.ndarray,
        gaps_us: np.ndarray,
        step_of: Sequence[int],
        rows: int,
        steps: int,
        verdict: dict[str, Any],
        largest: bool = False,
        margins: np.ndarray | None = None,
    ) -> _Charges | None:
        """None where no rank came last by more than the clocks can tell (then nobody did).
        ``last_rows``, ``gaps_us``: at each collective, the row that came last and how long after
        the next.

        ``largest``: charge each rank, in each step, the largest of its gaps rather than their sum.
        A job of many small groups has hundreds of collectives a step, each with a last member by
        chance: summed, those chance gaps of every rank grew as large as a slowed rank's one
        long gap (8 ranks of dp x pp x tp on 2 cores: 116-180 ms a step against 284).
        ``margins``: the least lateness that tells at each collective, where not the verdict's
        one for all (its members' clocks' uncertainty, in a job of many groups)."""
        evidence = gaps_us > (verdict["min_lateness_us"] if margins is None else margins)
        if not evidence.any():
            return None
        last, gaps_ms = last_rows[evidence], gaps_us[evidence] / 1e3
        charged = np.zeros((rows, steps))
        where = (last, np.asarray(step_of, dtype=np.int64)[evidence])
        (np.maximum if largest else np.add).at(charged, where, gaps_ms)
        blamed = charged.max(axis=0) > 0  # steps in which some rank held the others back
        held_back = np.bincount(np.argmax(charged, axis=0)[blamed], minlength=rows)
        return cls(last, gaps_ms, charged, held_back)


@dataclasses.dataclass(frozen=True)
class Memberships:
    """Each collective's members' times, one entry per (collective, member), by collective then
    time: in a job of many groups, a dense ranks x collectives table is mostly empty (4096 ranks
    x 8000 collectives of groups of 8 and 64: 33 million cells for 57 000 entries)."""

    rows: np.ndarray  # the member's row among the ranks compared
    columns: np.ndarray  # the collective's index
    times: np.ndarray  # the member's time there (the field asked for: arrival or end)
    starts: np.ndarray  # where each collective's entries begin

    @classmethod
    def of(
        cls,
        found: Mapping[int, Mapping[Key, Any] | None],
        ranks: Sequence[int],
        members: Mapping[Key, frozenset[int]],
        keys: Sequence[Key],
        field: int | None,
    ) -> Memberships:
        """From ``found[rank][key]`` (its element ``field``, or itself where None) for each key's
        members among ``ranks`` (every rank where the key has no group)."""
        row_of = {rank: row for row, rank in enumerate(ranks)}
        rows, columns, times = [], [], []
        for column, key in enumerate(keys):
            group = members.get(key)
            for rank in ranks if group is None else sorted(group):
                if rank in row_of:
                    value = found[rank][key]  # type: ignore[index]
                    rows.append(row_of[rank])
                    columns.append(column)
                    times.append(value if field is None else value[field])
        order = np.lexsort((np.array(times), np.array(columns)))
        rows_a, columns_a, times_a = np.array(rows)[order], np.array(columns)[order], np.array(times)[order]
        starts = (
            np.flatnonzero(np.r_[True, columns_a[1:] != columns_a[:-1]])
            if len(columns_a)
            else np.zeros(0, int)
        )
        return cls(rows_a, columns_a, times_a, starts)

    def last_and_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """At each collective, the member that came last and how long after the next."""
        ends = np.r_[self.starts[1:], len(self.rows)] - 1
        return self.rows[ends], self.times[ends] - self.times[ends - 1]


def _judge(
    charges: _Charges,
    ranks: list[int],
    collectives: int,
    steps: int,
    compute_ms: Mapping[int, float],
    verdict: dict[str, Any],
    names: Mapping[int, str],
) -> dict[str, Any]:
    """The verdict on the rank charged most: straggler, none, or too few steps to tell."""
    held_back, charged = charges.held_back, charges.charged
    candidate = int(max(range(len(ranks)), key=lambda row: (held_back[row], charged[row].sum())))
    rank, mine = ranks[candidate], charges.last == candidate
    label = names.get(rank) or f"rank {rank}"
    charged_ms = float(charged[candidate].mean())
    lateness_ms = float(charges.gaps_ms[mine].mean()) if mine.any() else 0.0
    last_counts = np.bincount(charges.last, minlength=len(ranks))
    p = min(1.0, len(ranks) * _binomial_tail(int(held_back[candidate]), steps, 1 / len(ranks)))
    verdict.update(
        candidate=rank,
        lateness_ms=lateness_ms,
        last_arrivals={str(r): int(c) for r, c in zip(ranks, last_counts, strict=True)},
        steps_held_back={str(r): int(c) for r, c in zip(ranks, held_back, strict=True)},
        charged_ms_per_step={str(r): float(c) for r, c in zip(ranks, charged.mean(axis=1), strict=True)},
        p_value=p,
    )
    threshold = verdict["threshold_ms"]
    noise = (
        f" against a step-to-step noise of {threshold:.2f} ms"
        if threshold is not None
        else "; the step-to-step noise cannot be measured from one step"
    )
    evidence = (
        f"arrived last at {int(last_counts[candidate])} of {collectives} collectives, "
        f"{lateness_ms:.2f} ms after the next rank on average, "
        f"and held the others back in {int(held_back[candidate])} of {steps} steps "
        f"(p = {p:.2g}; {charged_ms:.2f} ms per step{noise})"
    )
    needed = steps_needed(len(ranks))
    if steps < needed:
        return {
            **verdict,
            "verdict": "undetermined",
            "rank": None,
            "text": f"straggler undetermined: {steps} step(s) recorded, {needed} needed with "
            f"{len(ranks)} ranks (--active); the most likely, {label}, {evidence}",
        }
    if p < ALPHA and threshold is not None and charged_ms > threshold:
        median_compute = statistics.median(compute_ms.values())
        over = 100 * (compute_ms[rank] - median_compute) / median_compute if median_compute else 0.0
        compute = f"; its compute per step is {compute_ms[rank]:.2f} ms, {over:+.1f}% against the median rank"
        return {
            **verdict,
            "verdict": "straggler",
            "rank": rank,
            "compute_over_median_pct": over,
            "text": f"straggler: {label} {evidence}{compute}",
        }
    return {
        **verdict,
        "verdict": "none",
        "rank": None,
        "text": f"no significant straggler: the most often late, {label}, {evidence}",
    }


def _step_noise_ms(step_ms: Mapping[int, Sequence[float]]) -> float | None:
    """The median rank's step-to-step spread; None where no rank recorded two steps."""
    spreads = [statistics.stdev(times) for times in step_ms.values() if len(times) > 1]
    return statistics.median(spreads) if spreads else None


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))
