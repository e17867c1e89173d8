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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from profiling.analysis.across_ranks.critical_path.gains import Plan, added_gains, stacked
from profiling.analysis.across_ranks.critical_path.graph import StepGraph
from profiling.analysis.across_ranks.critical_path.ideal_trace import ideal_trace
from profiling.analysis.across_ranks.critical_path.rank_events import (
    COMMUNICATION,
    DELAY,
    HOST,
    LAYERS,
    WORK_KINDS,
)
from profiling.analysis.across_ranks.critical_path.replay import (
    AT_MOST_TYPICAL,
    MEAN,
    MEASURED,
    STAGE_MEDIAN,
    ZERO,
    replay,
)
from profiling.analysis.across_ranks.critical_path.views import (
    WHAT,
    Part,
    Strips,
    heat_map,
    identity,
    most,
)
from profiling.schema.model_replay import (
    Fidelity,
    Replay,
    ReplayMost,
    ReplayStep,
    ReplayWhatIf,
    UndecidedStep,
)
from slurm.common.mesh import DATA, PIPELINE, stages_of

MAX_RANKS_APART = 32  # at most this many ranks get a variant of their own (the most off the mean)
MAX_CELLS = 64  # the heat map's stage x replica cells, each a variant; beyond, rank x step
UNCERTAIN = 0.05  # a step replayed further off its measured length than this is less certain


def replayed(
    graphs: Sequence[StepGraph],
    undecided: list[UndecidedStep],
    mesh: Mapping[int, Mapping[str, int]] | None = None,
    ideal_sink: Callable[[dict[str, Any]], object] | None = None,
    jobs: int = 1,
) -> Replay | None:
    """The replay of ``graphs`` (one a followed step, the same ranks in each); None without any.
    ``undecided``: the steps that could not be replayed, and why (those replay cannot are
    added). ``ideal_sink``: given the first replayed step's ideal trace (:mod:`.ideal_trace`).
    ``jobs``: the threads each step's variants are replayed in."""
    if not graphs:
        return None
    mesh = mesh or {}
    ranks = graphs[0].ranks
    stage_of = stages_of(mesh)
    kinds = sorted({kind for graph in graphs for kind in graph.kinds})
    plans = _plans(ranks, mesh, stage_of, _apart(graphs), kinds)
    parts = [plan.part for plan in plans]
    variants = stacked(plans)
    strips = Strips(parts, ranks)
    lengths, steps = [], []
    for graph in graphs:
        found = replay(graph, variants, stage_of, jobs=jobs)
        if isinstance(found, str):
            undecided.append(UndecidedStep(step=graph.step, why=found))
            continue
        lengths.append(found.lengths)
        steps.append(graph)
        strips.add(graph, found)
    if not lengths:
        return None
    if ideal_sink is not None:
        _ideal_trace(steps[0], plans, stage_of, ideal_sink)
    table = np.stack(lengths)  # (steps, V)
    mean = dict(zip(parts, table.mean(axis=0).tolist(), strict=True))
    ideal, measured = mean[("ideal",)], mean[("base",)]
    measured_us = statistics.fmean(g.measured_us for g in steps)
    # fidelity from the replay whose waits all come from the graph: the recorded idle left out
    errors = [abs(row[1] - g.measured_us) / g.measured_us for row, g in zip(table, steps, strict=True)]

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
        most=(found_most := most(by_rank, by_mesh, steps, mesh)),
        gains=added_gains(plans, mean, steps, stage_of, _lead(found_most)),
        host_share=measured / mean[("no_host",)] if mean[("no_host",)] > 0 else 1.0,
        steps=_steps(table, steps, errors),
        fidelity=_fidelity(steps, errors),
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


def _ideal_trace(
    graph: StepGraph,
    plans: Sequence[Plan],
    stage_of: Mapping[int, int],
    sink: Callable[[dict[str, Any]], object],
) -> None:
    """The step replayed as measured (every wait from the graph) and ideal, as a trace, to ``sink``."""
    shown = [plan.part[1] for plan in plans if plan.part[0] == "rank"]
    trace = ideal_trace(graph, stacked(plans[1:3]), ["replayed as measured", "ideal"], stage_of, shown)
    if trace is not None:
        sink(trace)


def _lead(found: ReplayMost | None) -> Part | None:
    """The what-if of the part that holds the most: its rank like its peers, its stage like the
    median stage."""
    if found is None:
        return None
    if found.dimension == "rank":
        return ("peers", found.index)
    return ("stage", found.index) if found.dimension == PIPELINE else None


def _fidelity(graphs: Sequence[StepGraph], errors: list[float]) -> Fidelity:
    return Fidelity(
        median=float(np.median(errors)),
        worst=float(np.max(errors)),
        threshold=UNCERTAIN,
        uncertain=[g.step for g, error in zip(graphs, errors, strict=True) if error > UNCERTAIN],
    )


def _steps(table: np.ndarray, graphs: Sequence[StepGraph], errors: list[float]) -> list[ReplayStep]:
    """Each step as measured, replayed (every wait from the graph) and ideal, with its error."""
    return [
        ReplayStep(
            step=g.step,
            measured_ms=g.measured_us / 1e3,
            replayed_ms=row[1] / 1e3,
            ideal_ms=row[2] / 1e3,
            error=error,
            certain=error <= UNCERTAIN,
        )
        for row, g, error in zip(table, graphs, errors, strict=True)
    ]


def _apart(graphs: Sequence[StepGraph]) -> list[int]:
    """The ranks that get variants of their own: every rank, or at many ranks those whose work
    is the furthest from the mean (a slow rank, a rank of a heavy stage)."""
    ranks = graphs[0].ranks
    if len(ranks) <= MAX_RANKS_APART:
        return list(ranks)
    totals = np.mean([g.totals.sum(axis=1) for g in graphs], axis=0)
    furthest = np.argsort(-np.abs(totals - totals.mean()), kind="stable")[:MAX_RANKS_APART]
    return sorted(ranks[row] for row in furthest)


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
    coordinates: dict[tuple[str, int], list[int]] = {}  # one pass: 4096 ranks have 80 coordinates
    for rank, where in mesh.items():
        for coordinate in where.items():
            coordinates.setdefault(coordinate, []).extend([rows[rank]] if rank in rows else [])
    for (dim, index), chosen in sorted(coordinates.items()):
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
