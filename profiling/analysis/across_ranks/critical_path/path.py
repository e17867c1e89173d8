"""``report.json``'s ``critical_path``: every recorded step walked across ranks (:mod:`.walk`)
from the lanes in the traces' records, on the clocks the report aligned, and summed into what
limits the step and what fixing it would gain."""

from __future__ import annotations

import collections
import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from profiling.analysis.across_ranks.critical_path.graph import step_graphs
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
from profiling.analysis.reading.collectives import is_sequenced, transfer_of
from profiling.schema.model_path import CriticalPath, PathSegment, PathStep, RankKind, UndecidedStep, WhatIf
from profiling.schema.model_replay import Replay
from slurm.common.mesh import stages_of

Totals = dict[tuple[int, str], collections.Counter]  # (rank, kind) -> op -> time on the path (µs)
SEGMENT_STEPS = 8  # the steps whose segments report.json lists: the first followed
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
    step's ideal trace. ``jobs``: the processes the graphs are made in, at many ranks.
    """
    stage_of = stages_of(mesh or {})
    remade = [] if remade is None else remade
    held = RankLanes(per_rank, remade)
    numbers = sorted({step for found in held.steps.values() for step in found})
    if not numbers:
        return None
    labels = _labels(per_rank)
    on_gpu = frozenset(r for r, traces in per_rank.items() if any(t.record.device == "gpu" for t in traces))
    paths: list[StepPath] = []
    undecided: list[UndecidedStep] = []
    # the path's time by (rank, kind), then op: summed as each step is walked, its segments kept
    # for the first steps only (a 1 GiB trace's 216 steps held 1M segments: 0.7 GB)
    totals: Totals = collections.defaultdict(collections.Counter)
    grouped = bool(members) or any(transfer_of(str(key[1])) for key in anchor_steps)
    keys_of = _keys_by_step(anchor_steps)
    walked_steps: list[tuple[int, dict[int, RankStep], list[Meeting]]] = []
    for step in numbers:
        ranks = {rank: found.get(step) for rank, found in held.steps.items()}
        meetings = _step_meetings(grouped, ranks, spans, keys_of.get(step, []), labels, members, on_gpu)
        walked = step_path(step, ranks, meetings, stage_of)
        if isinstance(walked, Undecided):
            undecided.append(UndecidedStep(step=walked.step, why=walked.why))
            continue
        walked_steps.append((step, {r: found for r, found in ranks.items() if found is not None}, meetings))
        for segment in walked.segments:
            # µs as a Counter's counts: its stub says int, most_common sorts floats as well
            totals[(segment.rank, segment.kind)][segment.name] += segment.end - segment.start  # type: ignore[assignment]
        paths.append(walked if len(paths) < SEGMENT_STEPS else dataclasses.replace(walked, segments=[]))
        held.forget_step(step)
    late = straggler if straggler is not None else _leading(paths)
    step_ms = statistics.fmean(p.duration / 1e3 for p in paths) if paths else 0.0
    if noise_ms is None and len(paths) > 1:
        noise_ms = statistics.stdev(p.duration / 1e3 for p in paths)
    return CriticalPath(
        steps=[_step(p, late) for p in paths],
        segments_for=[p.step for p in paths[:SEGMENT_STEPS]],
        by_rank_kind=_by_rank_kind(totals, len(paths)),
        what_if=_what_if(paths, totals, step_ms, late),
        undecided=undecided,
        step_ms=step_ms,
        noise_ms=noise_ms,
        replay=_replayed(walked_steps, held, undecided, mesh, ideal_sink, jobs),
    )


def _replayed(
    walked: list[tuple[int, dict[int, RankStep], list[Meeting]]],
    held: RankLanes,
    undecided: list[UndecidedStep],
    mesh: Mapping[int, Mapping[str, int]] | None,
    ideal_sink: Callable[[dict[str, Any]], object] | None,
    jobs: int,
) -> Replay | None:
    """The walked steps replayed, on graphs made a rank at a time after the walk (the few
    ranks' lanes it loaded let go)."""
    graphs = step_graphs(walked, held.forget_rank, jobs, held.remade)
    not_replayed = [
        UndecidedStep(step=step, why=graph)
        for (step, *_), graph in zip(walked, graphs, strict=True)
        if isinstance(graph, str)
    ]
    return replayed(
        [g for g in graphs if not isinstance(g, str)], [*undecided, *not_replayed], mesh, ideal_sink, jobs
    )


def _step_meetings(
    grouped: bool,
    ranks: Mapping[int, RankStep | None],
    spans: Mapping[int, Mapping[Key, tuple[float, float]] | None],
    keys: Sequence[Key],
    labels: Mapping[Key, str],
    members: Mapping[Key, frozenset[int]] | None,
    on_gpu: frozenset[int],
) -> list[Meeting]:
    """A step's meetings: by group and transfer where the job has groups or sends, else every
    rank at every collective."""
    if grouped:
        return _group_meetings(ranks, spans, keys, labels, members, on_gpu)
    return _meetings(ranks, spans, keys, labels)


def _keys_by_step(anchor_steps: Mapping[Key, int]) -> dict[int, list[Key]]:
    """Each step's collectives, in one pass (not steps x collectives: 44 x 34 000 on AR)."""
    found: dict[int, list[Key]] = {}
    for key, anchored in anchor_steps.items():
        found.setdefault(anchored, []).append(key)
    return found


def _labels(per_rank: Mapping[int, list[Aligned]]) -> dict[Key, str]:
    """Each collective's label, by the key the spans have (the first rank's index, or its own)."""
    first = min(per_rank)
    return {
        (t.trace.first_step, instance.key if is_sequenced(instance) else index): instance.label
        for rank, traces in per_rank.items()
        for t in traces
        for index, instance in enumerate(t.record.instances)
        if rank == first or is_sequenced(instance)
    }


def _meetings(
    ranks: Mapping[int, RankStep | None],
    spans: Mapping[int, Mapping[Key, tuple[float, float]] | None],
    keys: Sequence[Key],
    labels: Mapping[Key, str],
) -> list[Meeting]:
    """The collectives of a step (``keys``) that every rank reached, in the order they began."""
    found = [spans.get(rank) for rank in ranks]
    if any(s is None for s in found) or not found:
        return []
    shared = [key for key in keys if all(key in s for s in found if s is not None)]
    meetings = [
        Meeting(
            labels.get(key, "collective"),
            arrivals={rank: spans[rank][key][0] for rank in ranks},  # type: ignore[index]
            ends={rank: spans[rank][key][1] for rank in ranks},  # type: ignore[index]
        )
        for key in shared
    ]
    return sorted(meetings, key=lambda m: min(m.arrivals.values()))


def _group_meetings(
    ranks: Mapping[int, RankStep | None],
    spans: Mapping[int, Mapping[Key, tuple[float, float]] | None],
    keys: Sequence[Key],
    labels: Mapping[Key, str],
    members: Mapping[Key, frozenset[int]] | None,
    on_gpu: frozenset[int] = frozenset(),
) -> list[Meeting]:
    """The collectives of a step (``keys``) that every member of their group reached, among its members,
    and its transfers: a receive cannot end before its send began, so it meets the sender at
    the send (the sender leaves without waiting: only the receiver ends there). Ordered by
    their earliest end: the walk passes a meeting only for one that ended before it, and in a
    job of many groups the order they began in is not that."""
    found = {rank: spans.get(rank) or {} for rank in ranks}
    if any(spans.get(rank) is None for rank in ranks):
        return []
    meetings = []
    for key in keys:
        transfer = transfer_of(str(key[1]))
        if transfer is not None:
            sender, receiver = transfer
            if key in found.get(sender, {}) and key in found.get(receiver, {}):
                arrivals = {sender: found[sender][key][0], receiver: found[receiver][key][0]}
                ends = {receiver: found[receiver][key][1]}
                rendezvous = sender not in on_gpu
                sent = {sender: found[sender][key][1]} if rendezvous else {}
                meetings.append(Meeting(labels.get(key, "transfer"), arrivals, ends, rendezvous, sent))
            continue
        group = (members or {}).get(key)
        expected = list(ranks) if group is None else [rank for rank in sorted(group) if rank in ranks]
        if len(expected) < 2 or not all(key in found[rank] for rank in expected):
            continue
        meetings.append(
            Meeting(
                labels.get(key, "collective"),
                arrivals={rank: found[rank][key][0] for rank in expected},
                ends={rank: found[rank][key][1] for rank in expected},
            )
        )
    return sorted(meetings, key=lambda m: min(m.ends.values()))


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
