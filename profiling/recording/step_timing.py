"""Every rank times every step of the run into its step log (:mod:`profiling.folder.step_log`).

A step hook (see :class:`profiling.recording.profiler.StepHook`) on every rank, recording or
not, and the rank's one clock of its steps: the manifest's step times and the slowest-rank
choice read it too. Per step it reads two clocks (wall, the training thread's CPU time) and,
where CUDA runs, records one CUDA event; an event is read once the GPU has passed it
(``query``, a step or two later), never waited for, so the loop does not synchronise with the
GPU. It reads the step's memory too: where CUDA runs, the allocator's peak since the last step
(then resets it: a host-side counter, no synchronisation); elsewhere the resident memory, one
``pread`` of ``/proc/self/statm``. Rows reach the file every :data:`FLUSH_S` seconds: a killed
job keeps what it had at the last flush.
"""

from __future__ import annotations

import array
import collections
import math
import time
from pathlib import Path
from typing import Any

from profiling.folder.step_log import StepLogHeader, StepLogWriter
from profiling.recording.process_memory import ResidentMemory
from profiling.recording.profiler import StepProfiler
from profiling.schema.manifest import StepLogRecord

FLUSH_S = 5.0
# steps whose GPU time is still unknown; past that, the oldest is written without it (the GPU
# is that far behind: waiting for it would be the synchronisation this avoids)
MAX_PENDING = 64


class StepTiming:
    """Construct it just before the first step; :meth:`close` after the last (or a failure)."""

    manifest_key = "step_log"  # in each rank's record: see manifest_record

    def __init__(self, writer: StepLogWriter, *, cuda: bool = False, flush_s: float | None = None) -> None:
        self.writer = writer
        self._flush_s = FLUSH_S if flush_s is None else flush_s  # sooner where read live (--auto-capture)
        self._event = _cuda_event if cuda else None
        self._resident = None if cuda else ResidentMemory()
        self._memory = _cuda_peak_mib if self._resident is None else self._resident.mib
        self._pending: collections.deque[tuple[int, float, float, float, Any, Any]] = collections.deque()
        self._wall, self._cpu = time.perf_counter(), time.thread_time()
        self._mark = self._event() if self._event else None
        self._flushed = self._wall
        self._closed = False
        self.last_cpu_ms = 0.0  # the training thread's CPU time in the last step
        # each step's time, for the manifest: the GPU's from event to event where CUDA runs
        # (the wall time of the steps it ran), else the host's wall time; 8 bytes a step
        self._seconds = array.array("d")
        # each step's memory (MiB) and its step: an out-of-memory dump tells its growth
        self._memory_steps, self._memory_mib = array.array("i"), array.array("f")

    @classmethod
    def open(
        cls, path: Path, header: StepLogHeader, *, cuda: bool = False, flush_s: float | None = None
    ) -> StepTiming:
        return cls(StepLogWriter(path, header), cuda=cuda, flush_s=flush_s)

    def after_step(self, step: int, profiler: StepProfiler | None = None) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        wall_ms, cpu_ms = (wall - self._wall) * 1e3, (cpu - self._cpu) * 1e3
        self._wall, self._cpu, self.last_cpu_ms = wall, cpu, cpu_ms
        mib = self._memory()
        self._memory_steps.append(step)
        self._memory_mib.append(mib)
        if self._event is None:
            self.writer.add(step, wall_ms, cpu_ms, math.nan, mib)
            self._seconds.append(wall_ms / 1e3)
        else:
            mark = self._event()
            self._pending.append((step, wall_ms, cpu_ms, mib, self._mark, mark))
            self._mark = mark
            self._drain()
        if wall - self._flushed >= self._flush_s:
            self.writer.flush()
            self._flushed = wall

    def close(self, *, failed: bool = False) -> None:
        """Write what is left. After the last step, waiting for the GPU costs nothing; after a
        failure (a CUDA error, say) it is not waited for: steps it has not passed get no GPU time."""
        if self._closed:
            return
        self._closed = True
        self._drain(wait=not failed, final=True)
        self.writer.close()
        if self._resident is not None:
            self._resident.close()

    def memory_series(self) -> tuple[list[int], list[float]]:
        """Each step so far and its memory in MiB (the step log's ``mem``)."""
        return self._memory_steps.tolist(), self._memory_mib.tolist()

    @property
    def step_seconds(self) -> list[float]:
        """Each step's time so far (see ``_seconds``); after :meth:`close`, every step's."""
        return self._seconds.tolist()

    def manifest_section(self) -> list[StepLogRecord]:
        return [self.manifest_record()]

    def manifest_record(self) -> StepLogRecord:
        """What this rank's manifest record says of its step log."""
        writer = self.writer
        return StepLogRecord(
            file=writer.path.name,
            steps=writer.steps,
            rows=writer.rows,
            gpu=self._event is not None,
            memory=writer.header.memory,
        )

    def _drain(self, *, wait: bool = False, final: bool = False) -> None:
        pending = self._pending
        while pending:
            step, wall_ms, cpu_ms, mib, start, end = pending[0]
            if wait:
                end.synchronize()
            elif not end.query() and len(pending) <= MAX_PENDING and not final:
                return
            gpu_ms = start.elapsed_time(end) if end.query() else math.nan
            pending.popleft()
            self.writer.add(step, wall_ms, cpu_ms, gpu_ms, mib)
            self._seconds.append((wall_ms if math.isnan(gpu_ms) else gpu_ms) / 1e3)


def _cuda_peak_mib() -> float:
    import torch

    peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    return peak / 2**20


def _cuda_event() -> Any:
    import torch

    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event
