"""Stage imbalance: a whole pipeline stage slower than the others, told apart from one slow rank.

In a pipeline every stage waits for the slowest one, microbatch after microbatch, and its
collectives within a stage stay balanced: the straggler test, which looks for one rank its
group waits for, finds none. What shows it is compute: each stage's mean compute per step over
its ranks (each data- and tensor-parallel replica of the stage does the same work). A stage is
named when its compute exceeds the other stages' median by :data:`IMBALANCE` or more, and by
more than :data:`SPREAD_FACTOR` times the largest spread among one stage's ranks: one slow rank
widens its own stage's spread and is a straggler, not an imbalance. The fix is the user's:
move layers off the stage (torchtitan's ``pipeline_parallel_split_points``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from profiling.schema import model
from profiling.schema.model_ranks import RankReport
from slurm.common.mesh import PIPELINE

IMBALANCE = 0.10  # a stage's compute this much above the others' median
SPREAD_FACTOR = 2.0  # ... and this many times the largest spread within one stage


def stage_balance(
    ranks: Sequence[RankReport], mesh: Mapping[int, Mapping[str, int]]
) -> model.StageBalance | None:
    """The stages' compute against each other; None without a pipeline of two stages or more."""
    by_stage: dict[int, list[RankReport]] = {}
    for rank in ranks:
        where = mesh.get(rank.rank) or {}
        if PIPELINE in where:
            by_stage.setdefault(where[PIPELINE], []).append(rank)
    if len(by_stage) < 2:
        return None
    stages = [
        model.StageCompute(
            stage=stage,
            ranks=[r.rank for r in members],
            compute_ms=statistics.fmean(r.compute_ms for r in members),
            spread_ms=max(r.compute_ms for r in members) - min(r.compute_ms for r in members),
        )
        for stage, members in sorted(by_stage.items())
    ]
    slowest = max(stages, key=lambda s: s.compute_ms)
    others = statistics.median(s.compute_ms for s in stages if s is not slowest)
    excess = (slowest.compute_ms - others) / others if others > 0 else 0.0
    spread = max(s.spread_ms for s in stages)
    evidence = (
        f"stage {slowest.stage} (ranks {_listed(slowest.ranks)}) computes {slowest.compute_ms:.1f} ms a "
        f"step, {100 * excess:+.0f}% against the other stages' median ({others:.1f} ms); the most "
        f"any stage's ranks differ among themselves: {spread:.1f} ms"
    )
    if excess >= IMBALANCE and slowest.compute_ms - others > SPREAD_FACTOR * spread:
        return model.StageBalance(
            verdict="imbalance",
            stage=slowest.stage,
            excess_pct=100 * excess,
            stages=stages,
            text=f"stage imbalance: {evidence}. Every stage waits for it: move layers off stage "
            f"{slowest.stage}",
        )
    return model.StageBalance(
        verdict="balanced",
        stage=None,
        excess_pct=100 * excess,
        stages=stages,
        text=f"stages balanced: {evidence}",
    )


def _listed(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
