"""The ideal step as a trace (``meta/ideal_trace.json.gz``): each rank's step replayed as
measured and replayed ideal, side by side on one clock, so that a user who doubts S can open it
in Perfetto and see where the ideal gains. The paper's tool writes such an ideal timeline.

Each rank has two rows (processes): its step replayed with its work as measured, and ideal.
On each, the rank's work between two of its events, kind by kind (forward, backward, host...),
then the time it waited at the event (a collective, a send, a receive) for the others. Times
are µs from the step's first rank's start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from profiling.analysis.across_ranks.critical_path.graph import StepGraph
from profiling.analysis.across_ranks.critical_path.rank_events import WORK_KINDS
from profiling.analysis.across_ranks.critical_path.replay import Variants, replay, scales
from profiling.analysis.across_ranks.critical_path.waves import BLOCK
from profiling.analysis.per_trace.lanes import EPSILON_US

MAX_RANKS = 64  # the ranks drawn: a trace of thousands of rows helps nobody


def ideal_trace(
    graph: StepGraph,
    variants: Variants,
    names: Sequence[str],
    stage_of: Mapping[int, int] | None = None,
    shown: Sequence[int] | None = None,
) -> dict[str, Any] | None:
    """A Chrome trace of ``graph``'s step in each of ``variants`` (named by ``names``), for the
    ``shown`` ranks (every rank, up to :data:`MAX_RANKS`); None where the step cannot be replayed."""
    found = replay(graph, variants, stage_of, timed=True)
    if isinstance(found, str) or found.reached is None or found.left is None:
        return None
    scale = scales(graph, variants, stage_of)
    origin = float(np.min(graph.starts))
    rows = [row for row, rank in enumerate(graph.ranks) if shown is None or rank in shown][:MAX_RANKS]
    events: list[dict[str, Any]] = []
    for order, row in enumerate(rows):
        rank = graph.ranks[row]
        for v, name in enumerate(names):
            pid = order * len(names) + v
            events.append(_meta(pid, "process_name", f"rank {rank}: {name}"))
            events.append(_meta(pid, "process_sort_index", pid))
            at = float(graph.starts[row])
            for index, (event, meeting, _) in enumerate(graph.events[row]):
                events += _work(pid, at - origin, graph.work[row][index] * scale[v, row])
                reached, left = float(found.reached[row][index, v]), float(found.left[row][index, v])
                if event == BLOCK and left - reached > EPSILON_US:
                    events.append(
                        _span(pid, f"waits: {graph.kinds[meeting]}", "wait", reached - origin, left - reached)
                    )
                at = left
            events += _work(pid, at - origin, graph.work[row][-1] * scale[v, row])
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"step": graph.step, "about": __doc__.split("\n\n")[0].replace("\n", " ")},
    }


def _work(pid: int, at: float, amounts: np.ndarray) -> list[dict[str, Any]]:
    """The work between two events, kind after kind."""
    found = []
    for kind, amount in zip(WORK_KINDS, amounts.tolist(), strict=True):
        if amount > EPSILON_US:
            found.append(_span(pid, kind, "work", at, amount))
            at += amount
    return found


def _span(pid: int, name: str, category: str, start: float, duration: float) -> dict[str, Any]:
    return {
        "ph": "X",
        "pid": pid,
        "tid": 0,
        "name": name,
        "cat": category,
        "ts": round(start, 3),
        "dur": round(duration, 3),
    }


def _meta(pid: int, name: str, value: object) -> dict[str, Any]:
    key = "sort_index" if name == "process_sort_index" else "name"
    return {"ph": "M", "pid": pid, "tid": 0, "name": name, "args": {key: value}}
