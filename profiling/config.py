"""What the profiler records, and on which ranks. Torch-free, so the submit path can validate it."""

from __future__ import annotations

import dataclasses

from profiling.ranks import RankSelection
from profiling.schedule import ScheduleConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProfilerConfig:
    ranks: RankSelection = dataclasses.field(default_factory=lambda: RankSelection.parse("0"))
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    record_shapes: bool = True
    with_stack: bool = True
    gzip: bool = False  # write rank<r>_iter<a>_<b>.json.gz instead of .json

    def __post_init__(self) -> None:
        if not isinstance(self.ranks, RankSelection):
            raise TypeError(
                f"ranks must be a RankSelection, got {self.ranks!r}; use RankSelection.parse('0,3')"
            )
