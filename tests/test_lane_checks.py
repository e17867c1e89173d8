"""A lane read back from its cache is checked before the critical path walks it."""

from __future__ import annotations

import numpy as np
import pytest

from profiling.analysis.per_trace.lane_checks import lane_problem
from profiling.analysis.per_trace.lanes import KINDS, PHASES, StepLane


def _lane(kinds: list[int], phases: list[int], names: list[int]) -> StepLane:
    starts = np.arange(len(kinds), dtype=np.float64) * 10.0
    return StepLane(
        step=1,
        start_us=0.0,
        end_us=10.0 * len(kinds),
        starts=starts.tobytes(),
        ends=(starts + 5.0).tobytes(),
        kinds=np.array(kinds, dtype=np.int8).tobytes(),
        names=np.array(names, dtype=np.int32).tobytes(),
        phases=np.array(phases, dtype=np.int8).tobytes(),
    )


def test_a_lane_of_every_kind_and_phase_and_none_said_is_one() -> None:
    kinds = list(range(len(KINDS)))
    phases = [k % (len(PHASES) + 1) - 1 for k in kinds]  # -1 (none said), then each phase
    assert lane_problem(_lane(kinds, phases, [0] * len(kinds)), names=1) is None
    assert lane_problem(_lane([0, 0], [-1, len(PHASES) - 1], [0, 0]), names=1) is None


@pytest.mark.parametrize(
    ("kinds", "phases", "names", "problem"),
    [
        ([0, -1], [0, 0], [0, 0], "names a kind or phase there is none of"),
        ([0, len(KINDS)], [0, 0], [0, 0], "names a kind or phase there is none of"),
        ([0, 0], [0, -2], [0, 0], "names a kind or phase there is none of"),
        ([0, 0], [0, len(PHASES)], [0, 0], "names a kind or phase there is none of"),
        ([0, 0], [0, 0], [0, -1], "names an operator there is none of"),
        ([0, 0], [0, 0], [0, 2], "names an operator there is none of"),
    ],
)
def test_an_index_out_of_range_either_way_is_no_lane(
    kinds: list[int], phases: list[int], names: list[int], problem: str
) -> None:
    assert lane_problem(_lane(kinds, phases, names), names=2) == problem
