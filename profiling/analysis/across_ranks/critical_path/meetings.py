"""Each recorded step's meetings, as the walk (:mod:`.walk`) and the graphs (:mod:`.graph`)
take them: the collectives every member of their group reached, and each receive with its
send, from the ranks' spans on the first rank's clock; and every rank's steps, their lanes
loaded where reached (:class:`.rank_lanes.RankLanes`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from profiling.analysis.across_ranks.critical_path.rank_lanes import RankLanes
from profiling.analysis.across_ranks.critical_path.walk import Key, Meeting, RankStep
from profiling.analysis.clocks.rank_clocks import Aligned
from profiling.analysis.reading.collectives import is_sequenced, transfer_of

# a step, every rank's part of it (None where its clock is not on the first rank's), its meetings
StepInputs = tuple[int, dict[int, RankStep | None], list[Meeting]]


def walk_inputs(
    per_rank: Mapping[int, list[Aligned]],
    spans: Mapping[int, Mapping[Key, tuple[float, float]] | None],
    anchor_steps: Mapping[Key, int],
    members: Mapping[Key, frozenset[int]] | None,
    remade: list[str],
) -> tuple[RankLanes, list[StepInputs]]:
    """Every rank's recorded steps (``remade`` hears a line for each lanes file made again) and
    each step's meetings, by step: by group and transfer where the job has groups or sends,
    else every rank at every collective."""
    held = RankLanes(per_rank, remade)
    numbers = sorted({step for found in held.steps.values() for step in found})
    labels = _labels(per_rank) if numbers else {}
    on_gpu = frozenset(r for r, traces in per_rank.items() if any(t.record.device == "gpu" for t in traces))
    grouped = bool(members) or any(transfer_of(str(key[1])) for key in anchor_steps)
    keys_of = _keys_by_step(anchor_steps)
    steps: list[StepInputs] = []
    for step in numbers:
        ranks = {rank: found.get(step) for rank, found in held.steps.items()}
        meetings = _step_meetings(grouped, ranks, spans, keys_of.get(step, []), labels, members, on_gpu)
        steps.append((step, ranks, meetings))
    return held, steps


def walked(step: StepInputs) -> tuple[int, dict[int, RankStep], list[Meeting]]:
    """The step as its graph is made: the ranks whose clocks are on the first rank's only."""
    number, ranks, meetings = step
    return number, {rank: found for rank, found in ranks.items() if found is not None}, meetings


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
