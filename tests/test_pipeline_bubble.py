"""The pipeline's bubble on the critical path: an equal 1F1B pipeline, made span by span as
its schedule runs, whose path and bubble the textbook gives (the step: m + p - 1 microbatches'
forward and backward; p - 1 of them the bubble)."""

from __future__ import annotations

import numpy as np
import pytest

from profiling.analysis.across_ranks.critical_path import Meeting, RankStep, StepPath, step_path
from profiling.analysis.per_trace.lanes import KINDS, PHASES, Lane


def one_f_one_b(
    stages: int, microbatches: int, forward: float, backward: float
) -> tuple[dict[int, RankStep], list[Meeting]]:
    """A rank a stage, running 1F1B (stage s: ``stages - 1 - s`` forwards first, then one
    forward and one backward in turn, then the backwards left); a transfer takes no time, each
    receive waits where its input is not there yet. Returns each rank's step, its lane (the work
    with its phase, the waits in a receive) and, as ``meetings``, each receive with its send."""
    order = []
    for s in range(stages):
        warm = min(stages - 1 - s, microbatches)
        mine = [("F", i) for i in range(warm)]
        for i in range(microbatches - warm):
            mine += [("F", warm + i), ("B", i)]
        order.append(mine + [("B", i) for i in range(microbatches - warm, microbatches)])
    done: dict[tuple[int, str, int], float] = {}
    free, spans = [0.0] * stages, [[] for _ in range(stages)]
    meetings: list[Meeting] = []
    pending = [list(o) for o in order]
    while any(pending):
        for s in range(stages):
            while pending[s]:
                what, i = pending[s][0]
                source = (
                    (s - 1, "F", i) if what == "F" else ((s + 1, "B", i) if s < stages - 1 else (s, "F", i))
                )
                if what == "F" and s == 0:
                    ready = 0.0
                elif source not in done:
                    break
                else:
                    ready = done[source]
                if ready > free[s]:  # waits in the receive
                    spans[s].append((free[s], ready, "communication", f"recv {what}{i}", -1))
                if source[0] != s and (what != "F" or s > 0):
                    meetings.append(
                        Meeting(f"p2p {what}{i} to {s}", {source[0]: ready, s: free[s]}, {s: ready})
                    )
                start = max(free[s], ready)
                length = forward if what == "F" else backward
                spans[s].append(
                    (
                        start,
                        start + length,
                        "compute",
                        f"{what}{i}",
                        PHASES.index("forward" if what == "F" else "backward"),
                    )
                )
                free[s] = done[(s, what, i)] = start + length
                pending[s].pop(0)
    ranks = {}
    for s in range(stages):
        text = [name for *_, name, _ in spans[s]]
        built = Lane(
            np.array([a for a, *_ in spans[s]]), np.array([b for _, b, *_ in spans[s]]),
            np.array([KINDS.index(k) for _, _, k, _, _ in spans[s]], dtype=np.int8),
            np.arange(len(text), dtype=np.int32), np.array([p for *_, p in spans[s]], dtype=np.int8), text,
        )  # fmt: skip
        ranks[s] = RankStep(s, 0.0, free[s], built)
    return ranks, sorted(meetings, key=lambda m: min(m.ends.values()))


@pytest.mark.parametrize(("stages", "microbatches"), [(4, 4), (4, 8), (2, 6)])
def test_a_pipelines_bubble_is_on_the_path_as_the_textbook_has_it(stages: int, microbatches: int) -> None:
    """An equal 1F1B pipeline: its step is m + p - 1 microbatches' forward and backward; the
    path runs them all, through every stage, and p - 1 of them are the bubble: the work of the
    other stages while the last one waits for them to fill the pipeline and drain it."""
    ranks, meetings = one_f_one_b(stages, microbatches, forward=10.0, backward=20.0)
    found = step_path(5, ranks, meetings, stage_of={s: s for s in range(stages)})
    assert isinstance(found, StepPath)
    assert found.duration == pytest.approx((microbatches + stages - 1) * 30.0)
    assert sum(s.duration for s in found.segments) == pytest.approx(found.duration)
    assert {s.rank for s in found.segments} == set(range(stages))  # through every stage
    bubble = [s for s in found.segments if s.kind == "bubble"]
    assert found.gains_us["bubble"] == pytest.approx((stages - 1) * 30.0)
    assert {s.rank for s in bubble} == set(range(stages - 1))  # the last stage's wait, filled by the others
    assert sum(s.duration for s in found.segments if s.rank == stages - 1) == pytest.approx(
        microbatches * 30.0
    )
    # without stages, no bubble: the same path, its work compute
    plain = step_path(5, ranks, meetings)
    assert isinstance(plain, StepPath) and "bubble" not in plain.gains_us
    assert [s[:4] for s in plain.segments] == [
        (s.rank, "compute" if s.kind == "bubble" else s.kind, s.start, s.end) for s in found.segments
    ]
