"""A slow node, not only a slow rank: the run map's slow steps, by node.

On a real cluster the usual straggler is a node (a throttled GPU, a bad link, a noisy
neighbour): all or most of its ranks are slow in the same steps, while the other nodes' are
not. A node is slow in a step when at least :data:`MOST` of its ranks are (the run map's slow
steps, :func:`profiling.analysis.run.run_map.slow_mask`), and fewer than :data:`ELSEWHERE` of the
other nodes' ranks are (else the job, not a node, was slow); for :data:`run_map.MIN_STEPS`
steps or more, as a slow rank. A node needs two ranks or more: with one, a slow rank and a slow
node cannot be told apart, and the rank is what the map names.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from profiling.analysis.run import run_map
from profiling.analysis.run.run_map import RunMap
from profiling.analysis.run.step_ratios import runs_of

MOST = 0.75
ELSEWHERE = 1 / 3


@dataclasses.dataclass(frozen=True)
class SlowNode:
    """Steps ``first`` to ``last`` in which ``node`` was slow: ``slow_ranks`` of its ``ranks``
    were, by a median of ``excess_ms`` (``ratio`` times the other ranks' median)."""

    node: str
    ranks: list[int]
    slow_ranks: list[int]
    first: int
    last: int
    slow_steps: int
    excess_ms: float
    ratio: float


def slow_nodes(run: RunMap) -> list[SlowNode]:
    """Every node persistently slow, in the order of its first rank, then by step."""
    names = list(dict.fromkeys(run.nodes))
    if len(names) < 2:
        return []  # one node: no other node to be slower than
    slow = run_map.slow_mask(run)
    index_of = {name: index for index, name in enumerate(names)}
    code = np.array([index_of[name] for name in run.nodes])
    # node x column: how many of its ranks are slow (one pass over the map, not one per node)
    order = np.argsort(code, kind="stable")
    starts = np.searchsorted(code[order], np.arange(len(names)))
    by_node = np.add.reduceat(slow[order], starts, axis=0, dtype=np.int32)
    everyone = by_node.sum(axis=0)
    found = []
    for index, name in enumerate(names):
        rows = np.flatnonzero(code == index)
        if len(rows) < 2:
            continue
        mine = by_node[index] >= MOST * len(rows)
        others = (everyone - by_node[index]) < ELSEWHERE * (len(run.nodes) - len(rows))
        node_slow = mine & others
        for start, end in runs_of(node_slow, run_map.MAX_GAP):
            columns = np.flatnonzero(node_slow[start : end + 1]) + start
            slow_steps = int(run.width[columns].sum())
            if slow_steps < run_map.MIN_STEPS:
                continue
            slow_rows = rows[slow[np.ix_(rows, columns)].mean(axis=1) >= 0.5]
            found.append(
                SlowNode(
                    node=name,
                    ranks=[int(r) for r in run.ranks[rows]],
                    slow_ranks=[int(r) for r in run.ranks[slow_rows]],
                    first=int(run.first[start]),
                    last=run.last_of(end),
                    slow_steps=slow_steps,
                    excess_ms=float(np.nanmedian(run.excess_ms(np.ix_(slow_rows, columns)))),
                    ratio=float(np.nanmedian(run.ratio[np.ix_(slow_rows, columns)])),
                )
            )
    return found
