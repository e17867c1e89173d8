"""The gains that add up (``report.json``'s ``critical_path.replay.gains``): the largest
what-ifs of :mod:`.what_if`, replayed on top of each other, the largest first, each gain what
it adds to those before it. A rank's or a stage's what-if goes before a job-wide one it nearly
matches; a rank's before its stage's where it alone gains nearly as much (a stage slow because of
one of its ranks is that rank's, not its layers')."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from profiling.analysis.across_ranks.critical_path.graph import StepGraph
from profiling.analysis.across_ranks.critical_path.replay import MEASURED, Variants, combined, replay
from profiling.analysis.across_ranks.critical_path.views import SPECIFIC_PARTS, WHAT, Part, identity
from profiling.analysis.per_trace.lanes import EPSILON_US
from profiling.schema.model_replay import ReplayGain

GAINS = 5  # the what-ifs replayed on top of each other
SPECIFIC = 1.25  # a rank's or a stage's what-if goes before a job-wide one it nearly matches
SAME = 0.8  # a rank's what-if that gains this much of its stage's goes before it


class Plan(NamedTuple):
    """One variant: a part's modes for each rank's work of each kind (R, K) and for each rank's
    transfers (R,); a meeting kind whose transfers it has as measured, apart from the others."""

    part: Part
    work: np.ndarray
    transfer: np.ndarray
    measured_kind: str | None = None


def stacked(plans: Sequence[Plan]) -> Variants:
    """The plans side by side (the modes as int8: at 4096 ranks, 166 variants' work as int64
    were 43 MB in fresh pages, 0.1 s to stack)."""
    kinds = sorted({plan.measured_kind for plan in plans if plan.measured_kind is not None})
    return Variants(
        work=np.stack([plan.work for plan in plans], dtype=np.int8),
        transfer=np.stack([plan.transfer for plan in plans]),
        transfer_kind={
            kind: np.stack(
                [
                    np.full_like(plan.transfer, MEASURED) if plan.measured_kind == kind else plan.transfer
                    for plan in plans
                ]
            )
            for kind in kinds
        },
    )


def added_gains(
    plans: Sequence[Plan],
    mean: Mapping[Part, float],
    graphs: Sequence[StepGraph],
    stage_of: Mapping[int, int],
    lead: Part | None = None,
) -> list[ReplayGain]:
    """The largest what-ifs, each on top of those before it: the first alone, then the first two
    at once, and so on, each replayed; a gain is what its what-if adds to those before it.
    ``lead``: the what-if of the part that holds the most of S (its rank like its peers, its
    stage like the others), first where it gains anything: the verdict names that part, and its
    fix leads (a job-wide what-if such as no host gaps at all gains more, and names no one)."""
    measured = mean[("base",)]
    chosen = sorted(  # a stage's what-if before its one rank's, where they are the same
        (plan for plan in plans if plan.part[0] in WHAT and measured - mean[plan.part] > EPSILON_US),
        key=lambda plan: (
            -round((measured - mean[plan.part]) * (SPECIFIC if plan.part[0] in SPECIFIC_PARTS else 1.0), 3),
            plan.part[0] != "stage",
        ),
    )
    chosen = _rank_before_its_stage(chosen, mean, measured, stage_of)
    first = [plan for plan in chosen if plan.part == lead]
    chosen = (first + [plan for plan in chosen if plan.part != lead])[:GAINS]
    if not chosen:
        return []
    together = [chosen[0]]
    for plan in chosen[1:]:
        before = together[-1]
        work, transfer = combined(before.work, plan.work), combined(before.transfer, plan.transfer)
        together.append(Plan(plan.part, work, transfer))
    variants = stacked(together)
    lengths = [f.lengths for graph in graphs if not isinstance(f := replay(graph, variants, stage_of), str)]
    steps = [measured, *np.mean(lengths, axis=0).tolist()]
    gains = [
        ReplayGain(
            **identity(plan.part),
            gain_ms=(steps[k] - steps[k + 1]) / 1e3,
            share=(steps[k] - steps[k + 1]) / measured if measured > 0 else 0.0,
        )
        for k, plan in enumerate(chosen)
    ]
    return [gain for gain in gains if gain.gain_ms * 1e3 > EPSILON_US]  # nothing on top of those before


def _rank_before_its_stage(
    chosen: list[Plan], mean: Mapping[Part, float], measured: float, stage_of: Mapping[int, int]
) -> list[Plan]:
    """A rank's what-if before its stage's where it alone gains nearly as much (a stage slow
    because of one of its ranks is that rank's, not its layers'); a stage whose every rank is
    slow keeps its place, as none of them alone gains much."""
    ordered = list(chosen)
    for plan in chosen:
        if plan.part[0] != "stage" or sum(s == plan.part[1] for s in stage_of.values()) < 2:
            continue  # a stage of one rank is that rank: its layers' what-if goes first
        gain = measured - mean[plan.part]
        ranks = [
            other
            for other in ordered
            if other.part[0] == "peers"
            and stage_of.get(other.part[1]) == plan.part[1]
            and measured - mean[other.part] >= SAME * gain
        ]
        if ranks:
            ordered.remove(ranks[0])
            ordered.insert(ordered.index(plan), ranks[0])
    return ordered
