"""Live capture of a running job: each rank's watch for requests (their files:
:mod:`profiling.folder.requests`).

``python -m jobs.commands.capture`` writes ``meta/capture/request-<n>.json`` into the job folder. Each
rank looks for new requests at most every :data:`POLL_S` seconds (one stat of that folder), so
a step without a request costs a clock read. The first rank to see a request proposes the step
the capture starts at, far enough ahead that every rank has seen the request by then (they
look every couple of seconds), and past the schedule's windows; the process group's store
settles the race (the first proposal is the one every rank reads back), so every chosen rank
records the same steps. The agreed steps go to ``accepted-<n>.json`` for the requester.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence

from profiling.folder.layout import JobFolder
from profiling.folder.requests import CaptureRequest, read_requests, write_accepted
from profiling.recording.profiler import StepProfiler, Window
from profiling.schema.manifest import CaptureRecord

POLL_S = 2.0
CAPTURE_WARMUP = 1  # steps of profiler warm-up before a capture's first recorded step


class CaptureWatcher:
    """A step hook: turns capture requests into windows of this rank's profiler."""

    manifest_key = "captures"

    def __init__(
        self,
        folder: JobFolder,
        *,
        rank: int,
        world_size: int,
        agree: Callable[[str, int], int],
        schedule_windows: Sequence[Window],
        log: Callable[[str], None] = print,
        poll_s: float | None = None,
    ) -> None:
        self.folder, self.rank, self.world_size = folder, rank, world_size
        self._agree = agree  # (key, proposal) -> the proposal every rank settles on
        self._schedule = sorted(schedule_windows, key=lambda window: window.start)
        self._log = log
        self._poll_s = POLL_S if poll_s is None else poll_s  # sooner under --auto-capture
        self._last_poll = time.monotonic()
        self._seen_mtime: int | None = None
        self._handled: set[int] = set()
        self._step_ends: list[float] = []
        self.captures: list[CaptureRecord] = []

    def after_step(self, step: int, profiler: StepProfiler) -> None:
        now = time.monotonic()
        if len(self._step_ends) < 16:
            self._step_ends.append(now)
        if now - self._last_poll < self._poll_s:
            return
        self._last_poll = now
        try:
            mtime = os.stat(self.folder.capture).st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._seen_mtime:
            return
        self._seen_mtime = mtime
        for request in read_requests(self.folder):
            if request.id not in self._handled:
                self._handled.add(request.id)
                self._accept(request, step, profiler)

    def manifest_section(self) -> list[CaptureRecord]:
        """Each capture: its id, when it was asked for, the steps and ranks agreed on."""
        return list(self.captures)

    def _accept(self, request: CaptureRequest, step: int, profiler: StepProfiler) -> None:
        first = self._agree(f"capture/{request.id}", self._proposal(request, step))
        last = first + request.active - 1
        chosen = self.rank in request.selection().resolve(self.world_size)
        recorded = chosen and profiler.add(Window(first, last, CAPTURE_WARMUP, f"capture {request.id}"))
        if chosen and not recorded:
            self._log(
                f"capture {request.id}: rank {self.rank} cannot record steps {first}-{last} (past the end?)"
            )
        elif chosen and request.trigger is not None:
            self._log(
                f"capture {request.id}: rank {self.rank} records steps {first}-{last}, asked for by "
                f"--auto-capture: {request.trigger.why}"
            )
        record = CaptureRecord(
            id=request.id,
            requested_at=request.requested_at,
            first=first,
            last=last,
            ranks=sorted(request.selection().resolve(self.world_size)),
            within_run=last < profiler.steps,
            trigger=request.trigger,
        )
        self.captures.append(record)
        if self.rank == min(record.ranks, default=0):
            write_accepted(self.folder, request.id, record)

    def _proposal(self, request: CaptureRequest, step: int) -> int:
        """A first step every rank will have seen the request before: two looks away, and more."""
        gaps = [b - a for a, b in zip(self._step_ends, self._step_ends[1:], strict=False)]
        step_s = statistics.median(gaps) if gaps else 1.0
        first = step + 2 + math.ceil(2 * self._poll_s / max(step_s, 1e-3))
        for window in self._schedule:  # scheduled windows, warm-up included, come first
            if Window(first, first + request.active - 1, CAPTURE_WARMUP, "capture").overlaps(window):
                first = window.last + 1 + CAPTURE_WARMUP
        return first
