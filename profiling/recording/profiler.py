"""The per-rank profiler: records windows of steps into Chrome traces, one window at a time.

A *window* is a run of steps to record: the schedule's (on the ranks ``--profile-ranks``
selects), the slowest rank's (``--profile-ranks slowest``, chosen before each window, see
:class:`SlowestRank`), or a live capture (``python -m jobs.commands.capture``, see
:mod:`profiling.recording.capture`). Each window gets a ``torch.profiler.profile`` of its own, started
for its warm-up and stopped once its trace is written, so between windows a step costs a
counter and a comparison: a rank with nothing to record runs the plain loop.

Closing a window costs the step after it torch's own post-processing (in DDP every rank
waits for that step); writing the trace (export, gzip, fsync, rename) does not add to it: a
writer thread does it while training goes on (compression and file I/O release the GIL), and
:meth:`StepProfiler.flush` waits for it before the rank reports its files.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from torch.profiler import ProfilerAction, ProfilerActivity, profile

from profiling.folder.traces import export_trace, trace_file_name
from profiling.recording.config import ProfilerConfig
from profiling.recording.group_labels import GroupLabels, needs_labels
from profiling.schema.manifest import WindowRecord


@dataclasses.dataclass(frozen=True)
class Window:
    """Steps ``first`` to ``last`` recorded, after ``warmup`` steps of warm-up."""

    first: int
    last: int
    warmup: int
    reason: str  # "schedule", "slowest", "capture <id>"

    @property
    def start(self) -> int:
        return self.first - self.warmup

    def action(self, step: int) -> ProfilerAction:
        if not self.start <= step <= self.last:
            return ProfilerAction.NONE
        if step < self.first:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if step < self.last else ProfilerAction.RECORD_AND_SAVE

    def overlaps(self, other: Window) -> bool:
        return self.start <= other.last and other.start <= self.last


def scheduled_windows(config: ProfilerConfig, steps: int, start_step: int = 0) -> list[Window]:
    """The schedule's windows of a run of ``steps`` resumed at ``start_step`` (a warm-up that
    began before the resume is shortened, the window kept)."""
    return [
        Window(first, last, min(config.schedule.warmup, first - start_step), "schedule")
        for first, last in config.schedule.windows(steps, start_step)
    ]


class StepHook(Protocol):
    """Called after every step, before the profiler moves on (may add windows); what it did goes
    to the manifest under its ``manifest_key``."""

    manifest_key: str

    def after_step(self, step: int, profiler: StepProfiler) -> None: ...

    def manifest_section(self) -> list[Any]: ...  # each item a JSON object, or a Struct of one


class StepProfiler:
    """torch.profiler over this rank's windows, writing one trace per window into ``trace_dir``."""

    def __init__(
        self,
        config: ProfilerConfig,
        *,
        rank: int,
        steps: int,
        trace_dir: Path,
        cuda: bool = False,
        start_step: int = 0,
        scheduled: bool = True,
        hooks: Sequence[StepHook] = (),
    ) -> None:
        self.config, self.rank, self.steps, self.trace_dir = config, rank, steps, trace_dir
        self.activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self.recorded: list[tuple[Window, Path]] = []  # written, or being written until flush()
        self.export_seconds = 0.0  # spent writing traces, off the training thread
        self.hooks = list(hooks)
        self._step = start_step  # the step running now
        self._pending: list[Window] = []
        self._current: tuple[Window, profile] | None = None
        self._labels: GroupLabels | None = None  # while a window of a job of many groups records
        self._writer: ThreadPoolExecutor | None = None
        self._writing: list[Future] = []
        if scheduled:
            for window in scheduled_windows(config, steps, start_step):
                self.add(window)

    @property
    def trace_files(self) -> list[Path]:
        return [path for _, path in self.recorded]

    @property
    def windows(self) -> list[tuple[int, int]]:
        return [(window.first, window.last) for window, _ in self.recorded]

    def add(self, window: Window) -> bool:
        """Record ``window`` too; False if its warm-up should have begun already, it ends past
        the run, or it overlaps a window already planned (one profiler at a time)."""
        planned = [self._current[0]] if self._current is not None else []
        if window.start < self._step or window.last >= self.steps:
            return False
        if any(window.overlaps(other) for other in [*planned, *self._pending]):
            return False
        self._pending = sorted([*self._pending, window], key=lambda w: w.start)
        return True

    def __enter__(self) -> StepProfiler:
        self._begin_if_due()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._current is not None:  # stopped inside a window (preemption, a failure): no trace
            window, prof = self._current
            self._current = None  # torch saves what it has on exit: _recorded drops it
            self._stop_labels()
            prof.__exit__(exc_type, exc, tb)
        self.flush()

    def step(self) -> None:
        """Step ``self._step`` ended."""
        ended = self._step
        self._step += 1
        for hook in self.hooks:
            hook.after_step(ended, self)
        if self._current is not None:
            window, prof = self._current
            prof.step()  # after the window's last step this calls _recorded
            if ended >= window.last:
                self._stop_labels()
                prof.__exit__(None, None, None)
                self._current = None
        self._begin_if_due()

    def flush(self) -> None:
        """Wait until every recorded trace is written (and raise if one could not be)."""
        while self._writing:
            self._writing.pop(0).result()
        if self._writer is not None:
            self._writer.shutdown()
            self._writer = None

    def _begin_if_due(self) -> None:
        self._pending = [w for w in self._pending if w.start >= self._step]  # a missed start: dropped
        if self._current is not None or not self._pending or self._pending[0].start != self._step:
            return
        window = self._pending.pop(0)
        prof = profile(
            activities=self.activities,
            schedule=window.action,
            on_trace_ready=lambda finished: self._recorded(window, finished),
            record_shapes=self.config.record_shapes,
            profile_memory=self.config.profile_memory,
            with_stack=self.config.with_stack,
        )
        # Number profiler steps like the run's steps, so the trace holds ProfilerStep#<step>.
        # torch.profiler has no argument for it; these are what its __init__ derives from step 0.
        prof.step_num = self._step
        prof.current_action = prof._prev_schedule_action = window.action(self._step)
        prof.__enter__()
        self._current = (window, prof)
        if needs_labels():  # gloo names no collective's group: the labels do (group_labels)
            self._labels = GroupLabels()
            self._labels.__enter__()

    def _stop_labels(self) -> None:
        if self._labels is not None:
            labels, self._labels = self._labels, None
            labels.__exit__(None, None, None)

    def _recorded(self, window: Window, prof: profile) -> None:
        if self._current is None or self._current[0] is not window:
            return  # a window cut short: half a window is no trace
        path = self.trace_dir / trace_file_name(
            self.rank, window.first, window.last, gzipped=self.config.gzip
        )
        self.recorded.append((window, path))
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-writer")
        self._writing.append(self._writer.submit(self._export, prof, path))

    def _export(self, prof: profile, path: Path) -> None:
        started = time.perf_counter()
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        export_trace(prof.export_chrome_trace, path)
        self.export_seconds += time.perf_counter() - started


def windows_record(recorded: Sequence[tuple[Window, Path]]) -> list[WindowRecord]:
    """What the manifest lists of a rank's windows."""
    return [WindowRecord(first=w.first, last=w.last, reason=w.reason, file=p.name) for w, p in recorded]
