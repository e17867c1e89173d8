"""``compare.json``, typed: two jobs part by part (``python -m jobs.commands.compare``), written
through :mod:`profiling.schema.files`."""

from __future__ import annotations

import msgspec

from profiling.schema.files import Versioned


class SideBySide(msgspec.Struct, kw_only=True):
    """One measure in both jobs: mean ms per step, and whether they differ beyond the noise."""

    a_ms: float
    b_ms: float
    diff_ms: float  # b - a
    diff_pct: float | None  # against a; None where a is 0
    noise_ms: float  # the larger step-to-step standard deviation of the two
    beyond_noise: bool  # |diff| > max(2 × noise, 1 % of a, 1 µs)


class RankComparison(msgspec.Struct, kw_only=True):
    rank: int
    step: SideBySide
    parts: dict[str, SideBySide]  # the step's breakdown, where both jobs ran on the same device


class Comparison(Versioned):
    a: str  # job A's folder: the one compared against
    b: str
    generated_at: str
    ranks: list[RankComparison]
    ranks_only_in_a: list[int]
    ranks_only_in_b: list[int]
    differences: list[str]  # besides timings: world size, device, workload, schedule
    # what the rows say as a whole (made from them: profiling.compare)
    step_a_ms: float = 0.0
    step_b_ms: float = 0.0
    step_diff_pct: float = 0.0
    ranks_with_changed_step: int = 0
    parts_changed: list[str] = []
    parts_unchanged: list[str] = []
    verdict: str = ""  # the first line, for people
