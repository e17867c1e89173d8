"""What the replay shows beside its numbers (:mod:`.what_if`): the part that holds the most
of the slowdown, the heat map of S, and each rank's step in each what-if (report.html's strips)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from profiling.analysis.across_ranks.critical_path.graph import StepGraph
from profiling.analysis.across_ranks.critical_path.rank_events import DELAY, WORK_KINDS
from profiling.analysis.across_ranks.critical_path.replay import Replayed
from profiling.analysis.per_trace.lanes import EPSILON_US
from profiling.schema.model_replay import ReplayHeat, ReplayMost, ReplayStrip, ReplayStrips
from slurm.common.mesh import DATA, PIPELINE, stages_of

Part = tuple  # ("rank", r), ("mesh", dim, index), ("kind", name), ("peers", r), ("stage", s), ...
SHARED = 0.5  # a coordinate whose every rank exceeds its peers this much of the most's is named
SPECIFIC_PARTS = ("peers", "stage")  # the what-ifs of one part, not the whole job's
WHAT = {
    "peers": "rank like its peers",
    "stage": "stage like the median stage",
    "hidden": "the exposed communication hidden",
    "no_host": "no host gaps",
}


class Strips:
    """Each shown rank's mean start, work and end in the measured step, the ideal and each
    what-if, summed as the steps are replayed: every rank, or at many ranks those apart."""

    def __init__(self, parts: list[Part], ranks: list[int]) -> None:
        apart = {part[1] for part in parts if part[0] == "rank"}
        self._parts, self._ranks = parts, ranks
        self._shown = [row for row, rank in enumerate(ranks) if rank in apart]
        self._variants = [v for v, part in enumerate(parts) if part[0] in ("measured", "ideal", *WHAT)]
        self._ends: list[np.ndarray] = []
        self._work: list[np.ndarray] = []
        self._starts: list[np.ndarray] = []

    def add(self, graph: StepGraph, found: Replayed) -> None:
        rows = np.ix_(self._variants, self._shown)
        self._ends.append(found.ends[rows])
        self._work.append(found.work[rows])
        self._starts.append(graph.starts[self._shown] - graph.starts.min())

    def made(self) -> ReplayStrips:
        ends, work = np.mean(self._ends, axis=0), np.mean(self._work, axis=0)
        return ReplayStrips(
            ranks=[self._ranks[row] for row in self._shown],
            start_ms=_ms(np.mean(self._starts, axis=0)),
            variants=[
                ReplayStrip(**identity(self._parts[v]), end_ms=_ms(end), work_ms=_ms(busy))
                for v, end, busy in zip(self._variants, ends, work, strict=True)
            ],
        )


def heat_map(parts: list[Part], table: np.ndarray, graphs: Sequence[StepGraph]) -> ReplayHeat:
    """S by stage x replica where the job has both (each cell's ranks as measured, the rest
    ideal), else by rank x step (the ranks apart, each step's S)."""
    ideal = table[:, parts.index(("ideal",))]
    cells = {part[1:]: column for column, part in enumerate(parts) if part[0] == "cell"}
    if cells:
        stages = sorted({stage for stage, _ in cells})
        replicas = sorted({replica for _, replica in cells})
        ratio = table.mean(axis=0) / ideal.mean() if ideal.mean() > 0 else np.ones(len(parts))
        values = [
            [_rounded(ratio[cells[s, d]]) if (s, d) in cells else None for d in replicas] for s in stages
        ]
        return ReplayHeat(
            rows=PIPELINE, columns=DATA, row_labels=stages, column_labels=replicas, values=values
        )
    ranks = {part[1]: column for column, part in enumerate(parts) if part[0] == "rank"}
    with np.errstate(divide="ignore", invalid="ignore"):
        per_step = np.where(ideal[:, None] > 0, table / ideal[:, None], 1.0)  # (steps, V)
    return ReplayHeat(
        rows="rank",
        columns="step",
        row_labels=sorted(ranks),
        column_labels=[graph.step for graph in graphs],
        values=[[_rounded(value) for value in per_step[:, ranks[rank]]] for rank in sorted(ranks)],
    )


def identity(part: Part) -> dict[str, Any]:
    """A variant's what, rank and coordinate, as the what-ifs name them."""
    return {
        "what": WHAT.get(part[0], part[0]),
        "rank": part[1] if part[0] == "peers" else None,
        "coordinate": f"{PIPELINE} {part[1]}" if part[0] == "stage" else None,
    }


def _ms(values: np.ndarray) -> list[float]:
    return [round(float(value) / 1e3, 4) for value in values]


def _rounded(value: float) -> float:
    return round(float(value), 4)  # a picture's worth, in a report.json of thousands of cells


def most(
    by_rank: Mapping[int, float],
    by_mesh: Mapping[str, Mapping[str, float]],
    graphs: Sequence[StepGraph],
    mesh: Mapping[int, Mapping[str, int]],
) -> ReplayMost | None:
    """The part that holds the most of the slowdown beyond its peers: the rank whose S most
    exceeds the median rank's; or, where every rank of one of its coordinates does nearly as
    much (a heavy stage: each of its ranks; a stage of one rank), that coordinate. None where
    no rank exceeds its peers."""
    if len(by_rank) < 2:
        return None
    middle = float(np.median(list(by_rank.values())))
    excess = {rank: value - middle for rank, value in by_rank.items()}
    rank = max(excess, key=lambda r: (excess[r], -r))
    if excess[rank] <= 0:
        return None
    dimension, index, slowdown, above = "rank", rank, by_rank[rank], excess[rank]
    for dim in sorted(mesh.get(rank, {}), key=lambda d: (d != PIPELINE, d)):
        coordinate = mesh[rank][dim]
        members = [r for r, where in mesh.items() if where.get(dim) == coordinate]
        if all(excess.get(member, 0.0) >= SHARED * excess[rank] for member in members):
            dimension, index, slowdown = dim, coordinate, by_mesh[dim][str(coordinate)]
            above = slowdown - float(np.median(list(by_mesh[dim].values())))
            break
    rows = [
        row
        for row, r in enumerate(graphs[0].ranks)
        if (r == index if dimension == "rank" else mesh.get(r, {}).get(dimension) == index)
    ]
    stage_of = stages_of(mesh)
    others = [
        row
        for row, r in enumerate(graphs[0].ranks)
        if row not in rows
        # a rank against its peers of the same stage, in a pipeline: each stage has its own layers
        and (dimension != "rank" or stage_of.get(r) == stage_of.get(index))
    ] or [row for row in range(len(graphs[0].ranks)) if row not in rows]
    totals = np.mean([graph.totals for graph in graphs], axis=0)  # (R, K) µs a step
    mine, theirs = totals[rows].mean(axis=0), totals[others].mean(axis=0)
    longer = mine - theirs
    longer[DELAY] = 0.0  # waiting is no kind of work
    order = [k for k in np.argsort(-longer, kind="stable") if longer[k] > 0]
    kinds: list[int] = []
    for k in order[:3]:  # the kinds that hold most of the difference
        held_most = longer[kinds].sum() >= 0.8 * longer[order].sum()
        if kinds and (held_most or longer[k] < 0.05 * longer[order[0]]):
            break
        kinds.append(int(k))
    held = float(theirs[kinds].sum()) if kinds else 0.0
    return ReplayMost(
        dimension=dimension,
        index=index,
        slowdown=slowdown,
        excess=above,
        kinds=[WORK_KINDS[k] for k in kinds],
        longer_ms=float(longer[kinds].sum()) / 1e3 if kinds else 0.0,
        longer_fraction=float(longer[kinds].sum()) / held if held > EPSILON_US else None,
    )
