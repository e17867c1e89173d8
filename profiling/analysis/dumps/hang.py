"""Why a job hung, from its ranks' dumps (``python -m jobs.commands.hang``, ``submit.py --wait``, and the
ranks themselves on their way out).

Every rank of a job watches its own progress (:mod:`jobs.runtime.watchdog`). A rank that makes no
progress for half of ``--dist-timeout`` writes ``meta/hang/rank<r>.json``: its step, its node,
the Python stack of every thread, and torch's flight recorder (the last collectives it
queued, with their sequence ids, operations, sizes and process group); a rank whose collective
times out writes it again on its way out. This module turns those files into a verdict:

- per process group, among the group's own ranks (torch's ``pg_config``, else the ranks whose
  recorder has the group), the highest collective sequence id any rank queued; a rank that
  never queued it is the one the others waited for ("never reached");
- the group in the job's terms, where the dumps carry its ``--parallel`` layout: the dimension
  it spans and its coordinates in the others ("the dp group at pp 1 (ranks 2-3)");
- that rank's step, node and the line its main thread was stuck on (the innermost frame).

The verdict (:class:`~profiling.schema.dumps.HangVerdict`) is two or three lines; the report
writes it as ``hang.json`` and ``hang.md`` in ``meta/hang/`` (:mod:`profiling.report.hang`).
"""

from __future__ import annotations

from typing import Any

from profiling.folder.layout import JobFolder
from profiling.ranks import format_ranks
from profiling.schema.dumps import HangDump, HangVerdict, HungRank, MissedCollective
from profiling.schema.files import FileRefused, read_file
from slurm.common.mesh import Dims, coordinates, layout_size


class HangError(ValueError):
    """A folder with nothing to say about a hang."""


def read_dumps(folder: JobFolder) -> tuple[dict[int, HangDump], list[str]]:
    """Every rank's hang dump by rank, and a line for each that does not read (a dump cut
    short by the kill: the other ranks' still tell)."""
    dumps, refused = {}, []
    for path in folder.hang_dumps():
        try:
            dump = read_file(path, HangDump)
        except (FileRefused, FileNotFoundError) as error:
            refused.append(str(error))
            continue
        dumps[dump.rank] = dump
    return dumps, refused


def analyse_dumps(dumps: dict[int, HangDump], world_size: int | None = None) -> HangVerdict:
    """The verdict (``hang.json``'s content) from every rank's dump.

    Per process group, each rank's highest queued sequence id: collectives are queued in the
    same order everywhere, so the ranks at the lowest one stopped first and the others waited
    for them. Ranks that merely waited may stop at different later ids (a broadcast can
    finish on the sender before the receivers arrive), so only the lowest counts.
    """
    if not dumps:
        raise HangError("no rank left a hang dump (meta/hang/rank<r>.json)")
    world_size = world_size or max(dumps) + 1
    reached: dict[str, dict[int, int]] = {}  # process group -> rank -> highest sequence id queued
    entries: dict[str, dict[int, dict[str, Any]]] = {}  # process group -> sequence id -> entry
    for rank, dump in dumps.items():
        for entry in _entries(dump):
            group, seq = _group_name(entry), entry["collective_seq_id"]
            reached.setdefault(group, {})
            reached[group][rank] = max(reached[group].get(rank, 0), seq)
            entries.setdefault(group, {})[seq] = entry
    members = _members(dumps, reached)
    layout = next((tuple(d.layout) for d in dumps.values() if d.layout), None)
    missed = []
    for group, seqs in sorted(reached.items()):
        present = [rank for rank in sorted(members[group]) if rank in dumps]  # without a dump: silent
        lowest = min(seqs.get(rank, 0) for rank in present)
        if lowest == max(seqs.values()):
            continue
        entry = entries[group].get(lowest + 1, {})
        missed += [
            MissedCollective(
                rank=rank,
                process_group=group,
                collective_seq_id=lowest + 1,
                op=entry.get("profiling_name"),
                input_sizes=entry.get("input_sizes"),
                waiting_ranks=[r for r in present if seqs.get(r, 0) > lowest],
                group_ranks=sorted(members[group]),
                group=group_in_words(sorted(members[group]), layout, world_size),
            )
            for rank in present
            if seqs.get(rank, 0) == lowest
        ]
    culprits = sorted({m.rank for m in missed})
    if not culprits:  # no flight recorder, or every rank queued the same: the least advanced rank
        steps = {rank: dump.step or 0 for rank, dump in dumps.items()}
        if len(set(steps.values())) > 1:
            culprits = [min(steps, key=lambda rank: (steps[rank], rank))]
    ranks = {
        rank: HungRank(node=dump.node, step=dump.step, reason=dump.reason, stuck_at=stuck_at(dump))
        for rank, dump in sorted(dumps.items())
    }
    silent = sorted(set(range(world_size)) - set(dumps))
    return HangVerdict(
        culprits=culprits,
        missed=missed,
        ranks=ranks,
        ranks_without_dump=silent,
        verdict=_verdict(culprits, missed, ranks, silent),
    )


def _members(dumps: dict[int, HangDump], reached: dict[str, dict[int, int]]) -> dict[str, set[int]]:
    """Each process group's ranks: as torch's ``pg_config`` lists them, else the ranks whose
    recorder holds the group (a subgroup's collectives are its own ranks' alone)."""
    members = {group: set(seqs) for group, seqs in reached.items()}
    for dump in dumps.values():
        config = (dump.flight_recorder or {}).get("pg_config")
        for name, about in config.items() if isinstance(config, dict) else ():
            ranks = _rank_list(about.get("ranks") if isinstance(about, dict) else None)
            for group in members:
                if ranks and group.split(" ", 1)[0] == name:
                    members[group] = set(ranks)
    return members


def _rank_list(text: object) -> list[int] | None:
    """``pg_config``'s ``"[0, 2]"`` as ranks; None for anything else."""
    if not isinstance(text, str) or not text.startswith("[") or not text.endswith("]"):
        return None
    parts = [part.strip() for part in text[1:-1].split(",") if part.strip()]
    return [int(part) for part in parts] if parts and all(p.isdigit() for p in parts) else None


def group_in_words(ranks: list[int], layout: Dims | None, world_size: int) -> str:
    """A process group in the job's terms: the mesh dimensions its ranks span and their place in
    the others ("the dp group at pp 1"), where the layout makes the world; else "the group of
    ranks 2-3"."""
    if len(ranks) == world_size:
        return "the whole job"
    if not layout or layout_size(layout) != world_size or not ranks or max(ranks) >= world_size:
        return f"the group of ranks {format_ranks(ranks)}"
    places = [coordinates(rank, layout) for rank in ranks]
    spans = [name for name, _ in layout if len({p[name] for p in places}) > 1]
    fixed = [f"{name} {places[0][name]}" for name, _ in layout if name not in spans]
    where = f" at {', '.join(fixed)}" if fixed else ""
    return f"the {'+'.join(spans) or 'one-rank'} group{where}"


def stuck_at(dump: HangDump) -> str | None:
    """The innermost frame of the main thread's stack: ``file:line in function: code``."""
    frames = dump.stacks.get("MainThread") or []
    return frames[-1] if frames else None


def _entries(dump: HangDump) -> list[dict[str, Any]]:
    """The flight recorder's collectives (not its sends and receives) with a sequence id."""
    found = (dump.flight_recorder or {}).get("entries")
    return [
        entry
        for entry in (found if isinstance(found, list) else [])
        if isinstance(entry, dict)
        and not entry.get("is_p2p")
        and isinstance(entry.get("collective_seq_id"), int)
        and not isinstance(entry.get("collective_seq_id"), bool)
    ]


def _group_name(entry: dict[str, Any]) -> str:
    group = entry.get("process_group")
    return " ".join(str(part) for part in group) if isinstance(group, list | tuple) else str(group)


def _verdict(
    culprits: list[int], missed: list[MissedCollective], ranks: dict[int, HungRank], silent: list[int]
) -> list[str]:
    if not culprits:
        return [
            "hang: no rank stands out (every rank reached the same collective); see the stacks in meta/hang/"
        ]
    lines = []
    for rank in culprits:
        info = ranks[rank]
        # the smallest group it held up: where the job stopped (the whole job's waits follow from it)
        what = min((m for m in missed if m.rank == rank), key=lambda m: len(m.group_ranks), default=None)
        collective = "was the least advanced"
        if what:
            collective = (
                f"never reached {what.op} #{what.collective_seq_id} of {what.group or what.process_group} "
                f"(ranks {format_ranks(what.group_ranks)}, process group {what.process_group}, sizes "
                f"{what.input_sizes}; rank(s) {format_ranks(what.waiting_ranks)} waited for it)"
            )
        lines.append(f"hang: rank {rank} on {info.node} {collective} at step {info.step}")
        if info.stuck_at:
            lines.append(f"  rank {rank} was stuck at {info.stuck_at}")
    if silent:
        lines.append(f"  no dump from rank(s) {format_ranks(silent)} (ended before writing one)")
    return lines
