"""The toolkit around a training loop, yours or its own: ``ProfiledRun``.

    from jobs.profiled_run import ProfiledRun

    with ProfiledRun(profile_ranks="0,3", traces_root="/shared/traces") as run:
        for batch in loader:
            ...                     # your step: forward, backward, optimizer
            run.step()              # the step has ended

It takes the rank from the environment (SLURM's variables, torchrun's, or one process), uses
the process group you made (it never makes one; make it before entering), and writes the job
folder a submitted job writes, ``<root>/<job id>/`` (SLURM's job id, else torchrun's run id):
the chosen ranks' traces, every rank's step log, ``meta/running.json`` while it runs, the
manifest and the report when it ends. Live capture (``python -m jobs.commands.capture``) and
``profile_ranks="0,slowest"`` work as under ``submit.py``; ``jobs.list``, ``jobs.commands.hang`` and the
report read the folder. A rank that records nothing runs your loop with a counter and a step
log around it. ``submit.py``'s own task runs its loop in one (:mod:`jobs.run_task`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec
import torch
import torch.distributed as dist

from jobs.runtime import oom
from jobs.runtime.group import JobGroup
from jobs.runtime.live_metrics import Sinks
from jobs.runtime.metrics_publisher import MetricsPublisher
from jobs.runtime.output import say
from jobs.runtime.records import Attempt, gather_and_write_manifest, rank_record, write_running
from jobs.runtime.report_step import analyse_own_traces, report_on
from jobs.runtime.shared_folder import check_shared_folder
from jobs.runtime.watchdog import Watchdog
from jobs.spec import TaskConfig
from profiling.folder.layout import JobFolder
from profiling.folder.step_log import StepLogHeader
from profiling.ranks import DEFAULT_RANKS, RankSelection
from profiling.recording.capture import CaptureWatcher
from profiling.recording.config import AutoCaptureConfig, ProfilerConfig
from profiling.recording.profiler import StepHook, StepProfiler, scheduled_windows
from profiling.recording.schedule import ScheduleConfig
from profiling.recording.slowest import SlowestRank
from profiling.recording.step_timing import StepTiming
from profiling.report import hang
from profiling.schema.manifest import RankRecord
from slurm.common.clock import utc_now
from slurm.common.errors import SettingError
from slurm.common.mesh import Dims
from slurm.common.traces_root import traces_root as resolved_traces_root
from slurm.identity import DistributedIdentity, from_environment

_LOG = logging.getLogger(__name__)

OPEN_ENDED = 2**31 - 1  # the steps of a loop that did not say how many it runs
# the keyword that sets a field, where it is not the field's name, for errors the configs raise
_KEYWORDS = {"ranks": "profile_ranks"}


class RunError(RuntimeError):
    """A run the toolkit cannot profile as it is set up; the message says what to change."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What a :class:`ProfiledRun` records, where, and how long it waits for the other ranks."""

    profiler: ProfilerConfig
    traces_root: Path
    steps: int = OPEN_ENDED  # the loop's steps, where known: windows past them are not recorded
    dist_timeout_s: float = (
        TaskConfig.dist_timeout_s
    )  # how long a rank may wait for the others to start and end
    # the watchdog ends a rank with no step for dist_timeout_s plus a grace: the toolkit's task, where
    # nothing else would end it under submitit's local executor; a loop of your own is only dumped
    end_stuck_rank: bool = False
    report: bool = True  # rank 0 writes the cross-rank report when the run ends
    workload: dict[str, Any] = dataclasses.field(default_factory=lambda: {"name": "your own loop"})
    about: dict[str, Any] = dataclasses.field(default_factory=dict)  # each rank's record adds it
    metrics: Sinks = Sinks()  # live metrics for Prometheus: none unless asked
    layout: Dims | None = None  # the job's parallel dimensions, where it has some (the metrics' labels)


class ProfiledRun:
    """A context manager around a training loop; :meth:`step` at the end of every step."""

    def __init__(
        self,
        *,
        profile_ranks: str = DEFAULT_RANKS,
        traces_root: str | os.PathLike[str] | None = None,
        steps: int | None = None,
        wait: int = ScheduleConfig.wait,
        warmup: int = ScheduleConfig.warmup,
        active: int = ScheduleConfig.active,
        repeat: int = ScheduleConfig.repeat,
        gzip: bool = ProfilerConfig.gzip,
        report: bool = TaskConfig.report,
        dist_timeout_s: float = TaskConfig.dist_timeout_s,
        auto_capture: bool = AutoCaptureConfig.enabled,
    ) -> None:
        """As ``submit.py``'s options: ``profile_ranks`` is ``--profile-ranks``, ``wait``,
        ``warmup``, ``active`` and ``repeat`` the schedule, ``traces_root`` ``--traces-root``
        (default: ``$TRACES_ROOT`` or ``./traces``), ``auto_capture`` ``--auto-capture``;
        ``steps``: how many steps the loop runs, where known."""
        if repeat == 0 and steps is None:
            raise RunError(
                "repeat=0 records until the last step, and the loop did not say it. HINT: pass steps=N"
            )
        try:
            profiler = ProfilerConfig(
                ranks=RankSelection.parse(profile_ranks),
                schedule=ScheduleConfig(wait=wait, warmup=warmup, active=active, repeat=repeat),
                gzip=gzip,
                auto_capture=AutoCaptureConfig(enabled=auto_capture),
            )
            if steps is not None:
                profiler.schedule.check_fits(steps)
        except SettingError as error:
            raise RunError(error.naming(_KEYWORDS)) from None
        root = resolved_traces_root(traces_root)
        self.settings = RunSettings(
            profiler=profiler,
            traces_root=root,
            steps=steps or OPEN_ENDED,
            dist_timeout_s=dist_timeout_s,
            report=report,
        )
        self.identity: DistributedIdentity | None = None  # from the environment, on entering
        self.start_step = 0

    @classmethod
    def of(cls, settings: RunSettings, identity: DistributedIdentity, *, start_step: int = 0) -> ProfiledRun:
        """A run set up by the toolkit's own task, which knows its identity and where it resumes."""
        run = cls.__new__(cls)
        run.settings, run.identity, run.start_step = settings, identity, start_step
        return run

    # --- entering: who we are, the folder, the profiler ---------------------------------------

    def __enter__(self) -> ProfiledRun:
        identity = self.identity = self.identity or from_environment()
        self.group = _joined_group(identity)
        selection = self.settings.profiler.ranks
        self.profiled = identity.rank in selection.resolve(identity.world_size)
        self.attempt = Attempt(
            identity=identity,
            folder=JobFolder(self.settings.traces_root, identity.job_id),
            profiler=self.settings.profiler,
            workload=self.settings.workload,
            backend=self.group.backend,
            started_at=utc_now(),
            start_step=self.start_step,
        )
        check_shared_folder(self.attempt.identity, self.attempt.folder, self.group)
        if identity.is_main:
            write_running(self.attempt)
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.cuda else torch.device("cpu")
        self.memory = oom.watch_memory(self.device, self.settings.profiler.memory_history)
        self.timing = StepTiming.open(
            self.attempt.folder.step_log(identity.rank, identity.restart_count),
            StepLogHeader(
                rank=identity.rank,
                world_size=identity.world_size,
                restart=identity.restart_count,
                node=identity.node_name or socket.gethostname(),
                gpu=self.cuda,
                memory="cuda" if self.cuda else "rss",
            ),
            cuda=self.cuda,
            flush_s=self._live_s,
        )
        self.profiler, self.hooks = self._profiler()
        settings = self.settings
        self.publisher = MetricsPublisher.start(
            identity, self.attempt.folder, settings.metrics, settings.layout, settings.profiler.auto_capture
        )
        self.watchdog = Watchdog.for_timeout(
            identity, self.attempt.folder, settings.dist_timeout_s, settings.end_stuck_rank, settings.layout
        )
        self.profiler.__enter__()
        self.next_step = self.start_step
        self.watchdog.__enter__()
        self.watchdog.progress(self.next_step)
        self._ended = False
        self._recording = True
        return self

    @property
    def trace_dir(self) -> Path:
        return self.attempt.trace_dir

    @property
    def _live_s(self) -> float | None:
        """How often the step log is flushed and requests looked for where read live; None: as usual."""
        auto_capture = self.settings.profiler.auto_capture
        return auto_capture.look_every_s if auto_capture.enabled else None

    def step(self) -> None:
        """The step has ended: the profiler's schedule moves on, the step log keeps its time."""
        self.profiler.step()
        self.next_step += 1
        self.watchdog.progress(self.next_step)

    # --- leaving: the manifest and the report --------------------------------------------------

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop_recording(kind, error, tb)
        if self._ended:
            return
        if kind is not None:
            if isinstance(error, Exception):
                self._on_failure(error)
            return
        self.finish(analyse=self.settings.report)
        if self.settings.report and self.attempt.identity.is_main:
            report_on(self.trace_dir, say)

    def finish(self, *, analyse: bool = False) -> RankRecord:
        """Every rank's record to rank 0's manifest; returns this rank's. ``analyse``: each rank
        first reads its own traces into their analysis records, where they were written, so
        that the report only combines (bounded by half the timeout: the ranks then meet)."""
        self._ended = True
        # every trace and step-log row on disk before the records meet: rank 0's report reads them
        self._stop_recording(None, None, None)
        record = rank_record(
            self.attempt,
            self.profiler,
            self.timing,
            device=str(self.device),
            threads=torch.get_num_threads(),
            profiled=self.profiled,
            about=self.settings.about,
        )
        record = msgspec.structs.replace(record, step_log=self.timing.manifest_record())
        if analyse and self.profiler.trace_files:
            identity = self.attempt.identity
            reader = (
                f"rank {identity.rank} on {identity.node_name or socket.gethostname()} (pid {os.getpid()})"
            )
            analysis = analyse_own_traces(
                self.profiler.trace_files, reader=reader, limit_s=self.settings.dist_timeout_s / 2
            )
            record = msgspec.structs.replace(record, analysis=analysis)
        gather_and_write_manifest(self.attempt, self.group, record, self.next_step, self.hooks)
        return record

    def _stop_recording(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._recording:
            self._recording = False
            self.watchdog.__exit__(kind, error, tb)
            self.profiler.__exit__(kind, error, tb)
            self.timing.close(failed=kind is not None)
            self.publisher.stop()  # after the last rows are on disk: its last push has them

    def _on_failure(self, error: Exception) -> None:
        """The run failed: rank 0 lists the attempt so. A rank out of memory writes what it held
        (meta/oom/). After a collective timed out, every rank says where it was, and rank 0
        prints why the job hung (a batch job has no ``--wait`` to)."""
        why = f"{type(error).__name__}: {error}"
        if oom.is_out_of_memory(error):
            series = oom.MemorySeries(*self.timing.memory_series())
            why = oom.dump_out_of_memory(
                self.attempt.folder, self.attempt.identity.rank, self.next_step, error, self.memory, series
            )
            _LOG.error(why)
        if self.attempt.identity.is_main:
            self.attempt.ended("failed", -1, why)
        if not (isinstance(error, dist.DistError) or "timed out" in str(error).lower()):
            return
        first_line = next(iter(str(error).strip().splitlines()), "")
        self.watchdog.dump(f"{type(error).__name__}: {first_line}", error)
        # the ranks' first dumps, at half the timeout, are there by now
        verdict = hang.verdict_lines(self.attempt.folder) if self.attempt.identity.is_main else None
        if verdict:
            _LOG.warning("\n".join(verdict))

    def preempted(self, next_step: int) -> None:
        """The run stops here to be requeued: rank 0 lists this attempt so, and no manifest follows.
        The watchdog stops too: the ranks now wait, on purpose, to be ended by the requeue."""
        self._ended = True
        self.watchdog.__exit__(None, None, None)
        if self.attempt.identity.is_main:
            self.attempt.ended("preempted", next_step)

    def _profiler(self) -> tuple[StepProfiler, list[StepHook]]:
        """This rank's profiler with its hooks: the step log first (its clocks read before the
        others' work), then those that add windows while the job runs."""
        identity, settings = self.attempt.identity, self.settings
        schedule = scheduled_windows(settings.profiler, settings.steps, self.start_step)
        hooks: list[StepHook] = [
            CaptureWatcher(
                self.attempt.folder,
                rank=identity.rank,
                world_size=identity.world_size,
                agree=self.group.agree,
                schedule_windows=schedule,
                log=say,
                poll_s=self._live_s,
            )
        ]
        if settings.profiler.ranks.slowest:
            hooks.append(
                SlowestRank(
                    rank=identity.rank,
                    recording=self.profiled,
                    windows=schedule,
                    gather=self.group.all_gather,
                    timing=self.timing,
                )
            )
        profiler = StepProfiler(
            settings.profiler,
            rank=identity.rank,
            steps=settings.steps,
            trace_dir=self.trace_dir,
            cuda=self.cuda,
            start_step=self.start_step,
            scheduled=self.profiled,
            hooks=[self.timing, *hooks],
        )
        return profiler, hooks  # the job-wide ones, for the manifest (the step log is per rank)


def _joined_group(identity: DistributedIdentity) -> JobGroup:
    group = JobGroup.current()
    if group.world_size != identity.world_size:
        joined = f"has joined a group of {group.world_size}" if group.store else "has joined no process group"
        raise RunError(
            f"the environment says {identity.world_size} ranks ({identity.launcher}), but this process "
            f"{joined}. "
            "HINT: call torch.distributed.init_process_group() before entering ProfiledRun; it uses "
            "your group and never makes one"
        )
    return group
