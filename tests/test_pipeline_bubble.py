"""The pipeline's bubble on the critical path: an equal 1F1B pipeline, made span by span as
its schedule runs, whose path and bubble the textbook gives (the step: m + p - 1 microbatches'
forward and backward; p - 1 of them the bubble)."""

from __future__ import annotations

import pytest

from profiling.analysis.across_ranks.critical_path.walk import StepPath, step_path
from tests.step_graphs import one_f_one_b


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
