"""``--profile-ranks ...,slowest``: before each window, the slowest rank joins the recording.

Every rank times its own work: the CPU time of its training thread per step, as its step log
(:class:`profiling.recording.step_timing.StepTiming`, the hook before this one) read it
(waiting in a collective takes none, so a rank slowed on the CPU side shows, and one that
waits does not).
At the end of the schedule's wait phase before each window, the ranks share their mean over
the steps since the previous window (one small all-gather, at the same step on every rank);
the rank with the most joins that window's recording, unless it records anyway. Each choice,
with the times behind it, goes to the manifest.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from profiling.recording.profiler import StepProfiler, Window
from profiling.recording.step_timing import StepTiming
from profiling.schema.manifest import SlowestChoice


class SlowestRank:
    """A step hook (see :class:`profiling.recording.profiler.StepHook`)."""

    manifest_key = "slowest"

    def __init__(
        self,
        *,
        rank: int,
        recording: bool,
        windows: Sequence[Window],
        gather: Callable[[float], list[float]],
        timing: StepTiming,
    ) -> None:
        self.rank, self.recording = rank, recording
        self._by_start = {window.start: window for window in windows}
        self._gather = gather  # this rank's mean -> every rank's, in rank order (a collective)
        self._timing = timing  # called before this hook, each step
        self._spent, self._steps = 0.0, 0
        self.choices: list[SlowestChoice] = []

    def manifest_section(self) -> list[SlowestChoice]:
        """Each window's choice: the rank, its compute per step, the median and how far above."""
        return list(self.choices)

    def after_step(self, step: int, profiler: StepProfiler) -> None:
        self._spent, self._steps = self._spent + self._timing.last_cpu_ms / 1e3, self._steps + 1
        window = self._by_start.get(step + 1)  # its warm-up starts next step: choose now
        if window is None:
            return
        means = self._gather(self._spent / self._steps)
        self._spent, self._steps = 0.0, 0
        slowest = max(range(len(means)), key=lambda rank: means[rank])
        median = statistics.median(means)
        self.choices.append(
            SlowestChoice(
                first=window.first,
                last=window.last,
                rank=slowest,
                compute_ms=means[slowest] * 1e3,
                median_ms=median * 1e3,
                over_median_pct=100 * (means[slowest] - median) / median if median else 0.0,
            )
        )
        if slowest == self.rank and not self.recording:
            profiler.add(Window(window.first, window.last, window.warmup, "slowest"))
