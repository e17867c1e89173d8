"""``report.json``'s ``critical_path``: every recorded step walked across ranks (:mod:`.walk`)
from the lanes in the traces' records, on the clocks the report aligned, and summed into what
limits the step and what fixing it would gain."""

from __future__ import annotations

import collections
import dataclasses
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from profiling.analysis.across_ranks.critical_path.ahead import GraphsAhead
from profiling.analysis.across_ranks.critical_path.graph import step_graphs
from profiling.analysis.across_ranks.critical_path.meetings import walk_inputs
from profiling.analysis.across_ranks.critical_path.meetings import walked as walked_step
from profiling.analysis.across_ranks.critical_path.rank_lanes import RankLanes
from profiling.analysis.across_ranks.critical_path.walk import (
    WHAT_IF,
    Key,
    Meeting,
    RankStep,
    StepPath,
    Undecided,
    step_path,
)
from profiling.analysis.across_ranks.critical_path.what_if import replayed
from profiling.analysis.clocks.rank_clocks import Aligned
from profiling.schema.model_path import CriticalPath, PathSegment, PathStep, RankKind, UndecidedStep, WhatIf
from profiling.schema.model_replay import Replay
from slurm.common.mesh import stages_of

Totals = dict[tuple[int, str], collections.Counter]  # (rank, kind) -> op -> time on the path (µs)
SEGMENT_STEPS = 8  # the steps whose segments report.json lists: the first followed, at most
# this many, and no more segments than this in all, the first step's always: a dense step has
# 9000, each 300 bytes of report.json and of report.html (8 such steps were 0.5 s of the report)
SEGMENT_BUDGET = 20_000
# the kind of segment each gain is made of, to name where it is
_GAIN_KIND = {"straggler": None, "overlap": "communication", "host": "host", "bubble": "bubble"}


def critical_path(
    per_rank: Mapping[int, list[Aligned]],
    spans: Mapping[int, Mapping[Key, tuple[float, float]] | None],
    anchor_steps: Mapping[Key, int],
    noise_ms: float | None,
    straggler: int | None = None,
    remade: list[str] | None = None,
    members: Mapping[Key, frozenset[int]] | None = None,
    mesh: Mapping[int, Mapping[str, int]] | None = None,
    ideal_sink: Callable[[dict[str, Any]], object] | None = None,
    jobs: int = 1,
    ahead: GraphsAhead | None = None,
) -> CriticalPath | None:
    """The path of every step a rank recorded; None where no trace has lanes (none recorded).

    The ``straggler`` gain is one rank's: the others' wait for the rank the straggler verdict
    names (else for the one that led most). In any job the last arrival at a collective leads
    the next by a little, by chance, and now one rank, now another: summed over every rank,
    those leads made a balanced 2-rank job's gain 8-12 ms a step, and a job with one rank
    slowed by 80 ms gain 94-107 ms where the slowdown cost 84-89 (2026-12-03). A lanes file
    the walk finds damaged is made again from its trace; ``remade`` hears a line for each.

    ``members``: the ranks of each collective whose group is not the whole job; where there are
    any, or sends and receives, the walk meets each group's collectives among its members, and
    each receive with its send. ``mesh``: each rank's coordinates, where the job has a layout:
    a pipeline's bubble is told apart (:func:`~.critical_path.step_path`), and the replay
    attributes the slowdown to each coordinate. Every followed step is also replayed on its
    graph (:mod:`.what_if`): ``critical_path.replay``; ``ideal_sink`` is given its first
    step's ideal trace. ``jobs``: the processes the graphs are made in, at many ranks;
    ``ahead``: the graphs begun before the walk (:mod:`.ahead`), joined for the steps walked.
    """
    stage_of = stages_of(mesh or {})
    remade = [] if remade is None else remade
    held, steps = walk_inputs(per_rank, spans, anchor_steps, members, remade)
    if not steps:
        return None
    paths: list[StepPath] = []
    undecided: list[UndecidedStep] = []
    # the path's time by (rank, kind), then op: summed as each step is walked, its segments kept
    # for the first steps only (a 1 GiB trace's 216 steps held 1M segments: 0.7 GB)
    totals: Totals = collections.defaultdict(collections.Counter)
    walked_steps: list[tuple[int, dict[int, RankStep], list[Meeting]]] = []
    listed: list[int] = []  # the steps whose segments are kept
    listing, budget = True, SEGMENT_BUDGET
    for step, ranks, meetings in steps:
        walked = step_path(step, ranks, meetings, stage_of)
        if isinstance(walked, Undecided):
            undecided.append(UndecidedStep(step=walked.step, why=walked.why))
            continue
        walked_steps.append(walked_step((step, ranks, meetings)))
        for segment in walked.segments:
            # µs as a Counter's counts: its stub says int, most_common sorts floats as well
            totals[(segment.rank, segment.kind)][segment.name] += segment.end - segment.start  # type: ignore[assignment]
        budget -= len(walked.segments)
        listing = listing and len(listed) < SEGMENT_STEPS and (budget >= 0 or not listed)
        listed += [step] if listing else []
        paths.append(walked if listing else dataclasses.replace(walked, segments=[]))
        held.forget_step(step)
    late = straggler if straggler is not None else _leading(paths)
    step_ms = statistics.fmean(p.duration / 1e3 for p in paths) if paths else 0.0
    if noise_ms is None and len(paths) > 1:
        noise_ms = statistics.stdev(p.duration / 1e3 for p in paths)
    return CriticalPath(
        steps=[_step(p, late) for p in paths],
        segments_for=listed,
        by_rank_kind=_by_rank_kind(totals, len(paths)),
        what_if=_what_if(paths, totals, step_ms, late),
        undecided=undecided,
        step_ms=step_ms,
        noise_ms=noise_ms,
        replay=_replayed(walked_steps, held, undecided, mesh, ideal_sink, jobs, ahead),
    )


def _replayed(
    walked: list[tuple[int, dict[int, RankStep], list[Meeting]]],
    held: RankLanes,
    undecided: list[UndecidedStep],
    mesh: Mapping[int, Mapping[str, int]] | None,
    ideal_sink: Callable[[dict[str, Any]], object] | None,
    jobs: int,
    ahead: GraphsAhead | None,
) -> Replay | None:
    """The walked steps replayed, on graphs made a rank at a time after the walk (the few
    ranks' lanes it loaded let go), or joined where begun ahead."""
    if ahead is not None:
        graphs = ahead.graphs(walked, held.forget_rank, held.remade)
    else:
        graphs = step_graphs(walked, held.forget_rank, jobs, held.remade)
    not_replayed = [
        UndecidedStep(step=step, why=graph)
        for (step, *_), graph in zip(walked, graphs, strict=True)
        if isinstance(graph, str)
    ]
    return replayed(
        [g for g in graphs if not isinstance(g, str)], [*undecided, *not_replayed], mesh, ideal_sink, jobs
    )


def _gains_us(path: StepPath, late: int | None) -> dict[str, float]:
    """The path's gains, the straggler's that of the ``late`` rank alone."""
    return {"straggler": path.straggler_us(late), **path.gains_us}


def _leading(paths: list[StepPath]) -> int | None:
    """The rank whose leads at the path's collectives add up to the most."""
    leads: dict[int, float] = collections.defaultdict(float)
    for path in paths:
        for (rank, _), lead in path.leads_us.items():
            leads[rank] += lead
    return max(leads.items(), key=lambda item: item[1])[0] if leads else None  # the first of equals


def _step(path: StepPath, late: int | None) -> PathStep:
    return PathStep(
        step=path.step,
        ms=path.duration / 1e3,
        ending_rank=path.ending_rank,
        segments=[
            PathSegment(rank=s.rank, kind=s.kind, start_us=s.start, end_us=s.end, name=s.name, phase=s.phase)
            for s in path.segments
        ],
        gains_ms={what: gain / 1e3 for what, gain in _gains_us(path, late).items()},
    )


def _by_rank_kind(totals: Totals, steps: int) -> list[RankKind]:
    time_of = collections.Counter({key: sum(names.values()) for key, names in totals.items()})
    total = sum(time_of.values()) or 1.0
    return [
        RankKind(
            rank=rank,
            kind=kind,
            ms_per_step=us / 1e3 / steps,
            share=us / total,
            name=totals[(rank, kind)].most_common(1)[0][0],
        )
        for (rank, kind), us in time_of.most_common()
    ]


def _what_if(paths: list[StepPath], totals: Totals, step_ms: float, late: int | None) -> list[WhatIf]:
    if not paths:
        return []
    gains = [_gains_us(p, late) for p in paths]
    found = []
    for what, assumption in WHAT_IF.items():
        if not any(what in gained for gained in gains):
            continue  # a job without a pipeline has no bubble
        gain_ms = statistics.fmean(gained.get(what, 0.0) for gained in gains) / 1e3
        rank, name = _where(paths, totals, what, late)
        found.append(
            WhatIf(
                what=what,
                gain_ms=gain_ms,
                share=gain_ms / step_ms if step_ms else 0.0,
                assumption=assumption,
                rank=rank,
                name=name,
            )
        )
    return sorted(found, key=lambda w: -w.gain_ms)


def _where(
    paths: list[StepPath], totals: Totals, what: str, late: int | None
) -> tuple[int | None, str | None]:
    """The rank and op most of a gain is on: for ``straggler``, the ``late`` rank and the
    collective where it held the others most."""
    kind = _GAIN_KIND[what]
    time_of: collections.Counter[tuple[int, str]] = collections.Counter()
    if kind is None:
        for path in paths:
            time_of.update({key: lead for key, lead in path.leads_us.items() if key[0] == late})
    for (rank, segment_kind), names in totals.items():
        if segment_kind == kind:
            time_of.update({(rank, name): us for name, us in names.items()})
    if not time_of:
        return None, None
    (rank, name), _ = time_of.most_common(1)[0]
    return rank, name
