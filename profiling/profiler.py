"""The per-rank profiler: torch.profiler on selected ranks, a no-op everywhere else.

Both kinds are context managers with a ``step()`` method that the training loop calls after
every step. A rank that is not selected gets :class:`NoProfiler`, whose ``step`` does nothing,
so it runs exactly the plain loop.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import Protocol

from torch.profiler import ProfilerAction, ProfilerActivity, profile

from profiling.config import ProfilerConfig
from profiling.schedule import Phase
from profiling.traces import export_trace, trace_file_name

_ACTIONS = {
    Phase.IDLE: ProfilerAction.NONE,
    Phase.WARMUP: ProfilerAction.WARMUP,
    Phase.RECORD: ProfilerAction.RECORD,
    Phase.RECORD_AND_SAVE: ProfilerAction.RECORD_AND_SAVE,
}


class StepProfiler(Protocol):
    trace_files: list[Path]
    windows: list[tuple[int, int]]  # (first, last) step of each trace written
    export_seconds: float  # time spent writing traces

    def __enter__(self) -> StepProfiler: ...

    def __exit__(self, *exc: object) -> None: ...

    def step(self) -> None: ...


class NoProfiler:
    """For ranks that are not profiled: costs one empty method call per step."""

    def __init__(self) -> None:
        self.trace_files: list[Path] = []
        self.windows: list[tuple[int, int]] = []
        self.export_seconds = 0.0

    def __enter__(self) -> NoProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def step(self) -> None:
        pass


class RankProfiler:
    """torch.profiler for one rank, writing one trace per recorded window into ``trace_dir``."""

    def __init__(
        self,
        config: ProfilerConfig,
        *,
        rank: int,
        steps: int,
        trace_dir: Path,
        cuda: bool,
        start_step: int = 0,
    ) -> None:
        self.trace_files: list[Path] = []
        self.windows: list[tuple[int, int]] = []
        self.export_seconds = 0.0
        self._config = config
        self._rank = rank
        self._steps = steps
        self._start = start_step
        self._trace_dir = trace_dir
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self._profile = profile(
            activities=activities,
            schedule=self._action,
            on_trace_ready=self._write_trace,
            record_shapes=config.record_shapes,
            with_stack=config.with_stack,
        )
        if start_step:
            # Number profiler steps like the run's steps, so that a resumed run's traces hold
            # ProfilerStep#<global step> and the schedule sees global steps. torch.profiler has
            # no argument for this; these are the attributes its __init__ derives from step 0.
            action = self._action(start_step)
            self._profile.step_num = start_step
            self._profile.current_action = action
            self._profile._prev_schedule_action = action

    def _action(self, step: int) -> ProfilerAction:
        return _ACTIONS[self._config.schedule.phase(step, self._steps, self._start)]

    def _write_trace(self, prof: profile) -> None:
        # on_trace_ready runs inside prof.step() *after* the last recorded step, when
        # step_num already counts it: the window is the ``active`` steps before step_num.
        # (The tutorial named it step_num - 2 .. step_num, one step late.)
        last = prof.step_num - 1
        if self._config.schedule.phase(last, self._steps, self._start) is not Phase.RECORD_AND_SAVE:
            return  # the run stopped inside a window (preemption): half a window is no trace
        first = last - self._config.schedule.active + 1
        name = trace_file_name(self._rank, first, last, gzipped=self._config.gzip)
        path = self._trace_dir / name
        started = time.perf_counter()
        self._trace_dir.mkdir(parents=True, exist_ok=True)
        export_trace(prof.export_chrome_trace, path)
        self.export_seconds += time.perf_counter() - started
        self.trace_files.append(path)
        self.windows.append((first, last))

    def __enter__(self) -> RankProfiler:
        self._profile.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._profile.__exit__(exc_type, exc, tb)

    def step(self) -> None:
        self._profile.step()


def profiler_for_rank(
    config: ProfilerConfig,
    *,
    profiled: bool,
    rank: int,
    steps: int,
    trace_dir: Path,
    cuda: bool = False,
    start_step: int = 0,
) -> StepProfiler:
    """A :class:`RankProfiler` (recording CUDA activity too if ``cuda``) if this rank is
    ``profiled`` and has a window left, else a no-op."""
    if not profiled or not config.schedule.windows(steps, start_step):
        return NoProfiler()
    return RankProfiler(config, rank=rank, steps=steps, trace_dir=trace_dir, cuda=cuda, start_step=start_step)
