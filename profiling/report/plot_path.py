"""``report.png``'s critical path row: the path of a few steps, a strip per step coloured by
kind and labelled by rank, and the path's time by rank and kind (:mod:`.critical`)."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from profiling.analysis.across_ranks import PATH_KINDS
from profiling.schema.model_path import CriticalPath, PathStep

SHOWN_STEPS = 4
SHOWN_RANKS = 8
COLOURS = {
    "compute": "tab:blue",
    "communication": "tab:red",
    "memory": "tab:purple",
    "host": "tab:orange",
    "other": "0.7",
    "bubble": "tab:cyan",
}
_PIXELS = 2000  # more than the strip is wide
_LABEL_SHARE = 0.06  # a run of one rank this share of the step or more is labelled with it


def drawn(path: CriticalPath) -> CriticalPath:
    """What of the path the picture shows (sent to the plot's process, fingerprinted)."""
    return msgspec.structs.replace(path, steps=_listed(path))


def _listed(path: CriticalPath) -> list[PathStep]:
    """The first steps whose segments report.json lists: a strip each."""
    return [step for step in path.steps if step.segments][:SHOWN_STEPS]


def strips(axes: Any, path: CriticalPath) -> None:
    """The first steps' paths, one strip each, time from the step's start (ms)."""
    steps = _listed(path)
    for row, step in enumerate(steps):
        origin = step.segments[0].start_us
        shortest = step.ms * 1e3 / _PIXELS  # narrower is not drawn: a dense step has thousands
        for kind in _kinds(path):  # one call a kind
            mine = [s for s in step.segments if s.kind == kind and s.end_us - s.start_us >= shortest]
            if mine:
                spans = [((s.start_us - origin) / 1e3, (s.end_us - s.start_us) / 1e3) for s in mine]
                axes.broken_barh(spans, (row - 0.3, 0.6), color=COLOURS[kind])
        for rank, first, last in _runs(step.segments):
            if (last - first) / 1e3 >= _LABEL_SHARE * step.ms:
                centre = ((first + last) / 2 - origin) / 1e3
                axes.text(
                    centre, row, f"rank {rank}", ha="center", va="center", fontsize="small", color="white"
                )
    axes.set_yticks(range(len(steps)), [f"step {s.step}" for s in steps])
    axes.invert_yaxis()
    axes.set(title="Critical path: what set each step's length", xlabel="ms from the step's start")
    handles = [axes.bar(0, 0, color=COLOURS[kind], label=kind) for kind in _kinds(path)]
    axes.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def shares(axes: Any, path: CriticalPath) -> None:
    """Time on the path per step, by rank (the ranks with the most) and kind."""
    per_rank: dict[int, dict[str, float]] = {}
    for row in path.by_rank_kind:
        per_rank.setdefault(row.rank, {})[row.kind] = row.ms_per_step
    ranks = sorted(per_rank, key=lambda rank: -sum(per_rank[rank].values()))[:SHOWN_RANKS]
    labels = [str(rank) for rank in ranks]
    bottom = np.zeros(len(ranks))
    for kind in _kinds(path):
        values = np.array([per_rank[rank].get(kind, 0.0) for rank in ranks])
        axes.bar(labels, values, bottom=bottom, color=COLOURS[kind], label=kind)
        bottom += values
    axes.set(title="Critical path by rank and kind", xlabel="rank", ylabel="ms per step on the path")


def _kinds(path: CriticalPath) -> list[str]:
    """The path's kinds; the bubble only where a pipeline made one."""
    bubble = any(row.kind == "bubble" for row in path.by_rank_kind)
    return [kind for kind in PATH_KINDS if kind != "bubble" or bubble]


def _runs(segments: list[Any]) -> list[tuple[int, float, float]]:
    """Neighbouring segments of one rank: (rank, start, end)."""
    runs: list[tuple[int, float, float]] = []
    for segment in segments:
        if runs and runs[-1][0] == segment.rank:
            runs[-1] = (segment.rank, runs[-1][1], segment.end_us)
        else:
            runs.append((segment.rank, segment.start_us, segment.end_us))
    return runs
