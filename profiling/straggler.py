"""Which rank the others wait for, with the evidence, or that none stands out.

Under DDP every rank's step lasts as long as the slowest rank's, so step times cannot tell
who that is, and compute cannot either: a rank slowed on the CPU side (data loading, a slow
host, Python) computes no more than the others, they just wait longer in NCCL or gloo. What
tells is *arrival*: once the clocks are aligned (:mod:`profiling.alignment`), the rank that
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

With too few steps for the first test to ever pass (``ranks ** (1 - steps) >= ALPHA``) the
answer is "undetermined", with the number of steps it would take; otherwise, failing either
test, "no significant straggler". Each answer comes with the numbers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

ALPHA = 0.01


def steps_needed(ranks: int) -> int:
    """The fewest steps in which one rank holding the others back every time passes the test."""
    return 1 + math.floor(math.log(1 / ALPHA) / math.log(ranks)) + 1 if ranks > 1 else 0


def find_straggler(
    arrivals: Mapping[int, Mapping[Hashable, float] | None],
    anchor_steps: Mapping[Hashable, int],
    step_ms: Mapping[int, Sequence[float]],
    compute_ms: Mapping[int, float],
) -> dict[str, Any] | None:
    """The verdict over ranks (None for a single rank); inputs are keyed by rank.

    ``arrivals[rank]`` maps each collective (by a key shared across ranks) to when the rank
    reached it, on the common clock; None for a rank whose clock could not be paired.
    ``anchor_steps`` gives each collective's step.
    """
    if len(arrivals) < 2:
        return None
    ranks = sorted(r for r, found in arrivals.items() if found is not None)
    anchors = sorted(set.intersection(*(set(arrivals[r]) for r in ranks)), key=str) if ranks else []
    steps = sorted({anchor_steps[k] for k in anchors})
    noise_ms = _step_noise_ms(step_ms)
    threshold_ms = noise_ms / math.sqrt(len(steps)) if steps else 0.0
    verdict: dict[str, Any] = {
        "ranks_compared": ranks,
        "ranks_without_paired_clock": sorted(set(arrivals) - set(ranks)),
        "collectives": len(anchors),
        "steps": len(steps),
        "step_noise_ms": noise_ms,
        "threshold_ms": threshold_ms,
        "compute_ms": {str(r): compute_ms[r] for r in sorted(compute_ms)},
    }
    if len(ranks) < 2 or not anchors:
        why = (
            f"only {len(ranks)} rank(s) with a paired clock"
            if len(ranks) < 2
            else "no collective paired on every rank"
        )
        return {**verdict, "verdict": "undetermined", "rank": None, "text": f"straggler undetermined: {why}"}

    times = np.array([[arrivals[r][k] for k in anchors] for r in ranks])
    order = np.argsort(times, axis=0)
    last, second = order[-1], order[-2]
    gaps_ms = (times[last, np.arange(len(anchors))] - times[second, np.arange(len(anchors))]) / 1e3
    step_of = np.array([steps.index(anchor_steps[k]) for k in anchors])
    charged = np.zeros((len(ranks), len(steps)))  # ms of waiting each rank caused in each step
    np.add.at(charged, (last, step_of), gaps_ms)
    held_back = np.bincount(np.argmax(charged, axis=0), minlength=len(ranks))
    last_counts = np.bincount(last, minlength=len(ranks))
    candidate = int(max(range(len(ranks)), key=lambda row: (held_back[row], charged[row].sum())))
    rank = ranks[candidate]
    charged_ms = float(charged[candidate].mean())
    mine = last == candidate
    p = min(1.0, len(ranks) * _binomial_tail(int(held_back[candidate]), len(steps), 1 / len(ranks)))
    verdict.update(
        candidate=rank,
        last_arrivals={str(r): int(c) for r, c in zip(ranks, last_counts, strict=True)},
        steps_held_back={str(r): int(c) for r, c in zip(ranks, held_back, strict=True)},
        charged_ms_per_step={str(r): float(c) for r, c in zip(ranks, charged.mean(axis=1), strict=True)},
        p_value=p,
    )
    evidence = (
        f"arrived last at {int(last_counts[candidate])} of {len(anchors)} collectives, "
        f"{float(gaps_ms[mine].mean()) if mine.any() else 0.0:.2f} ms after the next rank on average, "
        f"and held the others back in {int(held_back[candidate])} of {len(steps)} steps "
        f"(p = {p:.2g}; {charged_ms:.2f} ms per step against a step-to-step noise of {threshold_ms:.2f} ms)"
    )
    needed = steps_needed(len(ranks))
    if len(steps) < needed:
        return {
            **verdict,
            "verdict": "undetermined",
            "rank": None,
            "text": f"straggler undetermined: {len(steps)} step(s) recorded, {needed} needed with "
            f"{len(ranks)} ranks (--active); the most likely, rank {rank}, {evidence}",
        }
    if p < ALPHA and charged_ms > threshold_ms:
        median_compute = statistics.median(compute_ms.values())
        over = 100 * (compute_ms[rank] - median_compute) / median_compute if median_compute else 0.0
        compute = f"; its compute per step is {compute_ms[rank]:.2f} ms, {over:+.1f}% against the median rank"
        return {
            **verdict,
            "verdict": "straggler",
            "rank": rank,
            "compute_over_median_pct": over,
            "text": f"straggler: rank {rank} {evidence}{compute}",
        }
    return {
        **verdict,
        "verdict": "none",
        "rank": None,
        "text": f"no significant straggler: the most often late, rank {rank}, {evidence}",
    }


def _step_noise_ms(step_ms: Mapping[int, Sequence[float]]) -> float:
    spreads = [statistics.stdev(times) for times in step_ms.values() if len(times) > 1]
    return statistics.median(spreads) if spreads else 0.0


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))
