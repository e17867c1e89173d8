"""``report.json``'s ``critical_path.replay``: every followed step replayed on its dependency
graph (:mod:`.replay`) as measured, without the host's gaps, ideal, and with one part at a time
as measured, the rest ideal; the slowdown that stragglers cost, its attribution, and the
what-ifs a user asks for.

As the OSDI 2025 what-if analysis defines them:

- **ideal**: each rank's compute (by phase), memory and other work at the mean of its kind over
  the ranks, each transfer at the median of its kind, no host gaps;
- **S** = the mean replayed step without host gaps ÷ the mean ideal step (a step 23 % longer than
  its ideal: S = 1.23); the host's share apart, the measured step ÷ the one replayed without
  host gaps;
- **attribution**: S of a part (a rank, a mesh coordinate, a kind) is the step replayed with
  that part's measured durations (a rank's or a coordinate's host gaps included) and the rest
  ideal, ÷ the ideal step;
- **what-ifs**, each on the measured step: a rank like its peers (its durations lowered to
  the median of the other ranks' where above), a stage like the median stage (its layers' work,
  compute by phase and memory, lowered to the median of the other stages' means: a user moves
  layers, never one rank's host gaps or a transfer), the exposed communication hidden, no host
  gaps;
- **gains that add up**: the largest what-ifs replayed on top of each other, the largest first
  (a rank's or a stage's before a job-wide one it nearly matches), each gain what it adds.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from profiling.analysis.across_ranks.replay import (
    AT_MOST_TYPICAL,
    MEAN,
    MEASURED,
    STAGE_MEDIAN,
    ZERO,
    Variants,
    combined,
    replay,
)
from profiling.analysis.across_ranks.replay_graph import (
    COMMUNICATION,
    DELAY,
    HOST,
    LAYERS,
    WORK_KINDS,
    StepGraph,
)
from profiling.analysis.across_ranks.replay_views import (
    SPECIFIC_PARTS,
    WHAT,
    Part,
    Strips,
    heat_map,
    identity,
    most,
)
from profiling.analysis.per_trace.lanes import EPSILON_US
from profiling.schema.model_replay import (
    Fidelity,
    Replay,
    ReplayGain,
    ReplayStep,
    ReplayWhatIf,
    UndecidedStep,
)
from slurm.layout import DATA, PIPELINE, stages_of

MAX_RANKS_APART = 32  # at most this many ranks get a variant of their own (the most off the mean)
GAINS = 5  # the what-ifs replayed on top of each other
MAX_CELLS = 64  # the heat map's stage x replica cells, each a variant; beyond, rank x step
SPECIFIC = 1.25  # a rank's or a stage's what-if goes before a job-wide one it nearly matches
SAME = 0.8  # a rank's what-if that gains this much of its stage's goes before it


def replayed(
    graphs: Sequence[StepGraph],
    undecided: list[UndecidedStep],
    mesh: Mapping[int, Mapping[str, int]] | None = None,
) -> Replay | None:
    """The replay of ``graphs`` (one a followed step, the same ranks in each); None without any.
    ``undecided``: the steps that could not be replayed, and why (those replay cannot are
    added)."""
    if not graphs:
        return None
    mesh = mesh or {}
    ranks = graphs[0].ranks
    stage_of = stages_of(mesh)
    kinds = sorted({kind for graph in graphs for kind in graph.kinds})
    plans = _plans(ranks, mesh, stage_of, _apart(graphs), kinds)
    parts = [plan.part for plan in plans]
    variants = _stacked(plans)
    strips = Strips(parts, ranks)
    lengths, steps = [], []
    for graph in graphs:
        found = replay(graph, variants, stage_of)
        if isinstance(found, str):
            undecided.append(UndecidedStep(step=graph.step, why=found))
            continue
        lengths.append(found.lengths)
        steps.append(graph)
        strips.add(graph, found)
    if not lengths:
        return None
    table = np.stack(lengths)  # (steps, V)
    mean = dict(zip(parts, table.mean(axis=0).tolist(), strict=True))
    ideal, measured = mean[("ideal",)], mean[("base",)]
    measured_us = statistics.fmean(g.measured_us for g in steps)
    errors = [abs(row[0] - g.measured_us) / g.measured_us for row, g in zip(table, steps, strict=True)]

    def ratio(part: Part) -> float:
        return mean[part] / ideal if ideal > 0 else 1.0

    by_mesh: dict[str, dict[str, float]] = {}
    for part in parts:
        if part[0] == "mesh":
            by_mesh.setdefault(part[1], {})[str(part[2])] = ratio(part)
    by_rank = {part[1]: ratio(part) for part in parts if part[0] == "rank"}
    return Replay(
        slowdown=ratio(("base",)),
        measured_ms=measured_us / 1e3,
        ideal_ms=ideal / 1e3,
        most=most(by_rank, by_mesh, steps, mesh),
        gains=_gains(plans, mean, steps, stage_of),
        host_share=measured / mean[("no_host",)] if mean[("no_host",)] > 0 else 1.0,
        steps=[
            ReplayStep(
                step=g.step, measured_ms=g.measured_us / 1e3, replayed_ms=row[0] / 1e3, ideal_ms=row[2] / 1e3
            )
            for row, g in zip(table, steps, strict=True)
        ],
        fidelity=Fidelity(median=float(np.median(errors)), worst=float(np.max(errors))),
        by_rank=by_rank,
        by_kind={part[1]: ratio(part) for part in parts if part[0] == "kind"},
        by_mesh=by_mesh,
        heat=heat_map(parts, table, steps),
        strips=strips.made(),
        what_if=sorted(
            (
                ReplayWhatIf(
                    **identity(part),
                    step_ms=mean[part] / 1e3,
                    gain_ms=(measured - mean[part]) / 1e3,
                )
                for part in parts
                if part[0] in WHAT
            ),
            key=lambda w: -w.gain_ms,
        ),
        undecided=undecided,
        variants=len(parts),
    )


def _apart(graphs: Sequence[StepGraph]) -> list[int]:
    """The ranks that get variants of their own: every rank, or at many ranks those whose work
    is the furthest from the mean (a slow rank, a rank of a heavy stage)."""
    ranks = graphs[0].ranks
    if len(ranks) <= MAX_RANKS_APART:
        return list(ranks)
    totals = np.mean([g.totals.sum(axis=1) for g in graphs], axis=0)
    furthest = np.argsort(-np.abs(totals - totals.mean()), kind="stable")[:MAX_RANKS_APART]
    return sorted(ranks[row] for row in furthest)


class Plan(NamedTuple):
    """One variant: a part's modes for each rank's work of each kind (R, K) and for each rank's
    transfers (R,); a meeting kind whose transfers it has as measured, apart from the others."""

    part: Part
    work: np.ndarray
    transfer: np.ndarray
    measured_kind: str | None = None


def _plans(
    ranks: list[int],
    mesh: Mapping[int, Mapping[str, int]],
    stage_of: Mapping[int, int],
    apart: list[int],
    kinds: list[str],
) -> list[Plan]:
    """Each part's variant (the module's docstring says which); ``kinds``: the meeting kinds."""
    rows = {rank: row for row, rank in enumerate(ranks)}
    shape = (len(ranks), len(WORK_KINDS))

    # One model for S and every part: a rank's own work (compute by phase, memory, its host's
    # gaps) as measured or ideal; the GPU's unexplained idle (waiting on what the trace does not
    # show) is no one's work, left out of all but the replay as measured (its fidelity)
    def ideal() -> tuple[np.ndarray, np.ndarray]:
        work = np.full(shape, MEAN)
        work[:, DELAY] = ZERO
        return work, np.full(len(ranks), MEAN)

    def measured() -> tuple[np.ndarray, np.ndarray]:
        work = np.full(shape, MEASURED)
        work[:, DELAY] = ZERO
        return work, np.full(len(ranks), MEASURED)

    plans = [Plan(("measured",), np.full(shape, MEASURED), np.full(len(ranks), MEASURED))]
    plans.append(Plan(("base",), *measured()))
    plans.append(Plan(("ideal",), *ideal()))
    work, transfer = measured()
    work[:, HOST] = ZERO
    plans.append(Plan(("no_host",), work, transfer))

    def alone(part: Part, chosen: list[int]) -> Plan:  # the chosen rows as measured, the rest ideal
        work, transfer = ideal()
        work[chosen], transfer[chosen] = MEASURED, MEASURED
        work[:, DELAY] = ZERO
        return Plan(part, work, transfer)

    for rank in apart:  # one rank as measured, the rest ideal; and the rank like its peers
        plans.append(alone(("rank", rank), [rows[rank]]))
        work, transfer = measured()
        work[rows[rank]], transfer[rows[rank]] = AT_MOST_TYPICAL, AT_MOST_TYPICAL
        work[:, DELAY] = ZERO
        plans.append(Plan(("peers", rank), work, transfer))
    cell_of = {r: (at[PIPELINE], at[DATA]) for r, at in mesh.items() if PIPELINE in at and DATA in at}
    cells = sorted(set(cell_of.values()))
    for cell in cells if len(cells) <= MAX_CELLS else []:  # the heat map's: a stage's ranks of one replica
        chosen = [rows[r] for r, found in cell_of.items() if r in rows and found == cell]
        plans.append(alone(("cell", *cell), chosen))
    coordinates = sorted({(dim, index) for where in mesh.values() for dim, index in where.items()})
    for dim, index in coordinates:
        chosen = [rows[r] for r, at in mesh.items() if r in rows and at.get(dim) == index]
        plans.append(alone(("mesh", dim, index), chosen))
    for stage in sorted(set(stage_of.values())):  # the layers' work alone: what moving layers changes
        work, transfer = measured()
        work[np.ix_([rows[r] for r, s in stage_of.items() if s == stage and r in rows], LAYERS)] = (
            STAGE_MEDIAN
        )
        plans.append(Plan(("stage", stage), work, transfer))
    for column, name in enumerate(WORK_KINDS):  # one kind as measured on every rank
        if column == DELAY:
            continue
        work, transfer = ideal()
        work[:, column] = MEASURED
        plans.append(Plan(("kind", name), work, transfer))
    plans += [Plan(("kind", kind), *ideal(), kind) for kind in kinds]  # its transfers as measured
    work, transfer = measured()
    work[:, COMMUNICATION], transfer[:] = ZERO, ZERO
    plans.append(Plan(("hidden",), work, transfer))
    return plans


def _stacked(plans: Sequence[Plan]) -> Variants:
    """The plans side by side."""
    kinds = sorted({plan.measured_kind for plan in plans if plan.measured_kind is not None})
    return Variants(
        work=np.stack([plan.work for plan in plans]),
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


def _gains(
    plans: Sequence[Plan],
    mean: Mapping[Part, float],
    graphs: Sequence[StepGraph],
    stage_of: Mapping[int, int],
) -> list[ReplayGain]:
    """The largest what-ifs, each on top of those before it: the first alone, then the first two
    at once, and so on, each replayed; a gain is what its what-if adds to those before it."""
    measured = mean[("base",)]
    chosen = sorted(  # a stage's what-if before its one rank's, where they are the same
        (plan for plan in plans if plan.part[0] in WHAT and measured - mean[plan.part] > EPSILON_US),
        key=lambda plan: (
            -round((measured - mean[plan.part]) * (SPECIFIC if plan.part[0] in SPECIFIC_PARTS else 1.0), 3),
            plan.part[0] != "stage",
        ),
    )
    chosen = _rank_before_its_stage(chosen, mean, measured, stage_of)[:GAINS]
    if not chosen:
        return []
    together = [chosen[0]]
    for plan in chosen[1:]:
        before = together[-1]
        work, transfer = combined(before.work, plan.work), combined(before.transfer, plan.transfer)
        together.append(Plan(plan.part, work, transfer))
    variants = _stacked(together)
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
