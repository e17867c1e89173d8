"""The groups of collectives a trace does not name, inferred across ranks where that is sure.

gloo's traces recorded without the toolkit's labels name no collective's group
(``gloo:all_reduce`` with its input shapes alone), yet their ``pg_config`` may list several
groups. A collective's *peers* are the ranks whose trace of the same window holds as many
collectives of the same operation and shapes: where they are exactly the traced members of one
of the rank's groups, and of no other, that is its group, and the collective is numbered within
it (its place among that group's collectives of that operation and shapes). Where every traced
rank is a peer, or two groups fit, or the peers are no group at all, nothing is inferred: the
collective stays one flat group's, and the rank's warnings say which views that leaves without
groups. Traces whose collectives name their group, and traces of one group (or of the default
group alone), are left as they are.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

import msgspec

from profiling.analysis.per_trace.groups import Group
from profiling.analysis.per_trace.record import TraceRecord
from profiling.analysis.reading.collectives import SEQUENCED, Instance, is_sequenced, sequence_key
from profiling.folder.traces import TraceFile

_SHOWN = 3  # collectives named in a line
DEFAULT_GROUP = "default_pg"  # torch's description of the default group


def inferred_groups(traces: Sequence[TraceFile], records: Sequence[TraceRecord]) -> list[TraceRecord]:
    """``records``, those of ranks in several groups whose collectives name none with the groups
    inferred (see the module docstring) and a line for what could not be."""
    candidates = [
        index
        for index, record in enumerate(records)
        # groups other than the whole job's (a default group whose list is not every rank's is
        # a trace copied from a smaller job: no group of its own)
        if any(g.description != DEFAULT_GROUP for g in record.groups)
        and record.instances
        and not any(i.group is not None or is_sequenced(i) for i in record.instances)
    ]
    if not candidates:
        return list(records)
    counts: dict[int, dict[int, collections.Counter[str]]] = {}  # window -> rank -> key -> count
    for trace, record in zip(traces, records, strict=True):
        counts.setdefault(trace.first_step, {})[record.rank] = collections.Counter(
            i.key for i in record.instances
        )
    found = list(records)
    for index in candidates:
        found[index] = _inferred(records[index], counts[traces[index].first_step])
    return found


def _inferred(record: TraceRecord, window: dict[int, collections.Counter[str]]) -> TraceRecord:
    traced = frozenset(window)
    mine = window[record.rank]
    groups: dict[str, Group | None] = {}  # key -> its group, None where it cannot be told
    for key, count in mine.items():
        peers = frozenset(rank for rank, theirs in window.items() if theirs.get(key) == count)
        fitting = [g for g in record.groups if frozenset(g.ranks) & traced == peers]
        groups[key] = fitting[0] if len(fitting) == 1 and peers != traced else None
    numbered: collections.Counter[str] = collections.Counter()
    instances: list[Instance] = []
    for instance in record.instances:
        group = groups[instance.key]
        if group is None:
            instances.append(instance)
            continue
        name = f"{group.name} {instance.key}"
        key = sequence_key(SEQUENCED, name, numbered[name])
        instances.append(dataclasses.replace(instance, key=key, group=group.ranks))
        numbered[name] += 1
    unknown = [key for key, group in groups.items() if group is None]
    lines = list(record.warnings)
    if unknown:
        shown = ", ".join(_label(record, key) for key in unknown[:_SHOWN])
        more = f" and {len(unknown) - _SHOWN} more" if len(unknown) > _SHOWN else ""
        names = ", ".join(g.description for g in record.groups)
        lines.append(
            f"the group of {len(unknown)} kind(s) of its collectives cannot be told ({shown}{more}): the "
            f"trace names none (gloo, without the toolkit's labels) and their peers fit no one of its "
            f"groups ({names}); they count as the whole job's, and the views that need groups (clocks "
            "beyond its node, the straggler, waiting and critical path per group) have none for them"
        )
    return msgspec.structs.replace(record, instances=instances, warnings=lines)


def _label(record: TraceRecord, key: str) -> str:
    return next((f"'{i.label}'" for i in record.instances if i.key == key), key)
