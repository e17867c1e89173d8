"""Why a job hung, from its ranks' dumps (``python -m jobs.hang``, ``submit.py --wait``, and the
ranks themselves on their way out).

Every rank of a job watches its own progress (:mod:`jobs.runtime.watchdog`). A rank that makes no
progress for half of ``--dist-timeout`` writes ``meta/hang/rank<r>.json``: its step, its node,
the Python stack of every thread, and torch's flight recorder (the last collectives it
queued, with their sequence ids, operations, sizes and process group); a rank whose collective
times out writes it again on its way out. This module turns those files into a verdict:

- per process group, the highest collective sequence id any rank queued; a rank that never
  queued it is the one the others waited for ("never reached");
- that rank's step, node and the line its main thread was stuck on (the innermost frame).

``hang.json`` and ``hang.md`` go to ``meta/hang/``; the verdict is two or three lines.
"""

from __future__ import annotations

import json
from typing import Any

from profiling.folder.layout import JobFolder
from profiling.folder.manifest import manifest_or_none
from profiling.ranks import format_ranks
from slurm.basics import write_json_atomically, write_text_atomically


class HangError(ValueError):
    """A folder with nothing to say about a hang."""


def read_dumps(folder: JobFolder) -> dict[int, dict[str, Any]]:
    dumps = {}
    for path in folder.hang_dumps():
        try:
            dump = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a dump cut short by the kill: the other ranks' still tell
        dumps[int(dump["rank"])] = dump
    return dumps


def analyse_dumps(dumps: dict[int, dict[str, Any]], world_size: int | None = None) -> dict[str, Any]:
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
        for entry in (dump.get("flight_recorder") or {}).get("entries", []):
            if entry.get("is_p2p"):
                continue
            group, seq = _group_name(entry), int(entry["collective_seq_id"])
            reached.setdefault(group, {})
            reached[group][rank] = max(reached[group].get(rank, 0), seq)
            entries.setdefault(group, {})[seq] = entry
    missed = []
    for group, seqs in sorted(reached.items()):
        lowest = min(seqs.get(rank, 0) for rank in dumps)
        if lowest == max(seqs.values()):
            continue
        entry = entries[group].get(lowest + 1, {})
        missed += [
            {
                "rank": rank,
                "process_group": group,
                "collective_seq_id": lowest + 1,
                "op": entry.get("profiling_name"),
                "input_sizes": entry.get("input_sizes"),
                "waiting_ranks": sorted(r for r in dumps if seqs.get(r, 0) > lowest),
            }
            for rank in sorted(dumps)
            if seqs.get(rank, 0) == lowest
        ]
    culprits = sorted({m["rank"] for m in missed})
    if not culprits:  # no flight recorder, or every rank queued the same: the least advanced rank
        steps = {rank: dump.get("step") or 0 for rank, dump in dumps.items()}
        if len(set(steps.values())) > 1:
            culprits = [min(steps, key=lambda rank: (steps[rank], rank))]
    ranks = {
        str(rank): {
            "node": dump.get("node"),
            "step": dump.get("step"),
            "reason": dump.get("reason"),
            "stuck_at": stuck_at(dump),
        }
        for rank, dump in sorted(dumps.items())
    }
    silent = sorted(set(range(world_size)) - set(dumps))
    return {
        "culprits": culprits,
        "missed": missed,
        "ranks": ranks,
        "ranks_without_dump": silent,
        "verdict": _verdict(culprits, missed, ranks, silent),
    }


def stuck_at(dump: dict[str, Any]) -> str | None:
    """The innermost frame of the main thread's stack: ``file:line in function: code``."""
    frames = (dump.get("stacks") or {}).get("MainThread") or []
    return frames[-1] if frames else None


def _group_name(entry: dict[str, Any]) -> str:
    group = entry.get("process_group")
    return " ".join(str(part) for part in group) if isinstance(group, list | tuple) else str(group)


def _verdict(culprits: list[int], missed: list[dict], ranks: dict[str, dict], silent: list[int]) -> list[str]:
    if not culprits:
        return [
            "hang: no rank stands out (every rank reached the same collective); see the stacks in meta/hang/"
        ]
    lines = []
    for rank in culprits:
        info = ranks[str(rank)]
        what = next((m for m in missed if m["rank"] == rank), None)
        collective = "was the least advanced"
        if what:
            collective = (
                f"never reached {what['op']} #{what['collective_seq_id']} "
                f"(process group {what['process_group']}, sizes {what['input_sizes']}; "
                f"rank(s) {format_ranks(what['waiting_ranks'])} waited for it)"
            )
        lines.append(f"hang: rank {rank} on {info['node']} {collective} at step {info['step']}")
        if info["stuck_at"]:
            lines.append(f"  rank {rank} was stuck at {info['stuck_at']}")
    if silent:
        lines.append(f"  no dump from rank(s) {format_ranks(silent)} (ended before writing one)")
    return lines


def hang_markdown(verdict: dict[str, Any], dumps: dict[int, dict[str, Any]]) -> str:
    lines = [
        "# Hang",
        "",
        *verdict["verdict"],
        "",
        "| rank | node | step | reason | stuck at |",
        "|---:|---|---:|---|---|",
    ]
    for rank, info in verdict["ranks"].items():
        lines.append(
            f"| {rank} | {info['node']} | {info['step']} | {info['reason']} | `{info['stuck_at']}` |"
        )
    for rank, dump in sorted(dumps.items()):
        lines += ["", f"## Rank {rank}", ""]
        for thread, frames in (dump.get("stacks") or {}).items():
            lines += [f"Thread `{thread}`:", "", "```", *frames, "```", ""]
    return "\n".join(lines)


def explain(folder: JobFolder) -> dict[str, Any]:
    """Analyse the job's dumps and write ``hang.json`` and ``hang.md``; returns the verdict."""
    dumps = read_dumps(folder)
    manifest = manifest_or_none(folder)
    verdict = analyse_dumps(dumps, manifest.world_size if manifest else None)
    write_json_atomically(folder.hang_verdict, verdict)
    write_text_atomically(folder.hang_markdown, hang_markdown(verdict, dumps))
    return verdict


def verdict_lines(folder: JobFolder) -> list[str] | None:
    """The verdict from the job's latest dumps (``hang.json`` and ``hang.md`` rewritten), or None
    where no rank left one or none can be read."""
    if not folder.hang_dumps():
        return None
    try:
        return explain(folder)["verdict"]
    except (HangError, OSError, ValueError):
        return None
