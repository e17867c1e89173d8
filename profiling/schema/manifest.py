"""``meta/manifest.json``, typed: what a job folder holds and how it was made, written by rank 0
when an attempt ends (:mod:`profiling.folder.manifest` assembles it) and read by ``list``, the
job's state, the report, ``compare`` and the hang verdict.

An attempt that failed or was preempted writes the job's facts and its attempts alone: every
field past ``trace_files`` has a default, as such a manifest lacks it.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from profiling.schema.files import NonNegative, Versioned


class Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A part of the manifest: what is unset is left out of the file."""


class StepTimeSummary(Record):
    """One rank's step times (s); with recorded windows, split by what the profiler was doing."""

    steps: NonNegative
    mean_s: float | None = None
    median_s: float | None = None
    p90_s: float | None = None  # the 90th percentile (a job's history compares it)
    min_s: float | None = None
    max_s: float | None = None
    first_s: float | None = None
    recorded_median_s: float | None = None
    after_window_mean_s: float | None = None  # the step after a window: its trace's writing
    unrecorded_median_s: float | None = None


class WindowRecord(Record):
    first: int
    last: int
    reason: str  # "schedule", "slowest", "capture <id>"
    file: str


class DtypeChoice(Record):
    chosen: str  # bf16, fp16, fp32
    why: str


class StepLogRecord(Record):
    file: str
    steps: NonNegative
    rows: NonNegative
    gpu: bool
    memory: str  # "cuda", "rss" or "" (none)


class OwnAnalysis(Record):
    """What a rank made of its own traces before the manifest's gather."""

    records: list[str]
    seconds: float
    outcome: str  # "written", "failed: ...", "unfinished after ..."


class RankRecord(Record):
    """One rank: who it was, where it ran, what it recorded and how long its steps took."""

    rank: NonNegative
    local_rank: NonNegative
    node_rank: NonNegative
    node: str
    hostname: str
    device: str
    threads: int
    launcher: str
    profiled: bool
    trace_files: list[str]
    windows: list[WindowRecord]
    step_time: StepTimeSummary
    trace_export_s: float
    peak_rss_mib: float
    started_at: str
    dtype: DtypeChoice | None = None
    about: dict[str, Any] = {}  # what a loop of the user's own adds (ProfiledRun's ``about``)
    step_log: StepLogRecord | None = None
    analysis: OwnAnalysis | None = None


class AttemptRecord(Record):
    """One attempt (one run of the job, SLURM_RESTART_COUNT=k): what it ran and what it wrote."""

    restart_count: NonNegative
    folder: str
    resumed_from_step: NonNegative
    next_step: Annotated[int, msgspec.Meta(ge=-1)]  # -1: a failed attempt, nothing to resume from
    outcome: str  # "completed", "preempted" or "failed"
    trace_files: list[str]
    started_at: str
    ended_at: str
    error: str | None = None


class Schedule(Record):
    wait: NonNegative
    warmup: NonNegative
    active: NonNegative
    repeat: NonNegative


class SlowestChoice(Record):
    """One window's slowest rank, chosen while the job ran (``--profile-ranks slowest``)."""

    first: int
    last: int
    rank: NonNegative
    compute_ms: float  # its CPU time per step before the window
    median_ms: float  # the ranks' median
    over_median_pct: float


class CaptureTrigger(Record):
    """Why ``--auto-capture`` asked for a capture: a rank the live step logs showed slower than its
    peers, persistently (:mod:`jobs.runtime.auto_capture`)."""

    rank: NonNegative  # the suspect
    ratio: float  # its median CPU time per step over its peers' median, in its slow steps
    first: int  # the steps it was seen slow in, before the capture was asked for
    last: int
    slow_steps: NonNegative
    slow_above: float  # the ratio above which a step was slow (the run map's threshold then)
    noise: float  # the run's step-to-step noise of a ratio then
    reference: NonNegative | None  # a typical rank recorded beside it (of its stage, in a pipeline)
    why: str  # the decision in one sentence, as the rank's log says it
    neighbours: list[int] = []  # its pipeline neighbours, recorded too


class CaptureRecord(Record):
    """One live capture (``python -m jobs.commands.capture``, or ``--auto-capture``): the steps and
    ranks agreed on."""

    id: int
    requested_at: str
    first: int
    last: int
    ranks: list[int]
    within_run: bool  # its last step before the run's end
    trigger: CaptureTrigger | None = None  # asked for by --auto-capture: why; none: by a person


class AutoCaptureRecord(Record):
    """``--auto-capture``'s rule and bounds, as the job ran with them
    (:class:`profiling.recording.config.AutoCaptureConfig`)."""

    max_captures: NonNegative
    cooldown_s: float
    max_bytes: NonNegative
    active: NonNegative
    look_every_s: float
    min_excess: float
    noise_sigmas: float
    min_steps: NonNegative
    min_ratio: float  # a capture's suspect is at least this much slower (the map's stretches: any)


class ProfilerRecord(msgspec.Struct, kw_only=True):
    """The profiler's settings beside its schedule, each written
    (:meth:`profiling.recording.config.ProfilerConfig.record`)."""

    ranks: str  # --profile-ranks, as given
    record_shapes: bool
    with_stack: bool
    gzip: bool
    profile_memory: bool
    memory_history: NonNegative
    auto_capture: AutoCaptureRecord | None = None  # --auto-capture's bounds; none: not asked


class JobFacts(Versioned, kw_only=True):
    """What the manifest says of the job as a whole, known from its start: written with each
    attempt's record, the first of the manifest's fields."""

    job_id: str
    launcher: str
    nodes: NonNegative
    master: str
    backend: str
    restart_count: NonNegative | None = None
    job_name: str | None = None  # SLURM's; null outside SLURM
    user: str | None = None


class Manifest(JobFacts, kw_only=True):
    attempts: list[AttemptRecord]
    trace_files: list[str]
    world_size: NonNegative | None = None
    hostnames: list[str] = []
    profiled_ranks: list[int] = []
    schedule: Schedule | None = None
    profiler: ProfilerRecord | None = None
    workload: dict[str, Any] = {}  # what the loop ran, and its settings (``steps``, ...)
    versions: dict[str, str] = {}
    started_at: str | None = None
    ended_at: str | None = None
    ranks: list[RankRecord] = []
    # what the loop's hooks add: the slowest rank's choices, live captures, rank 0's step log
    slowest: list[SlowestChoice] | None = None
    captures: list[CaptureRecord] | None = None
    step_log: list[StepLogRecord] | None = None

    @property
    def workload_steps(self) -> int | None:
        """The steps the job was asked to run, where its workload says (a positive int)."""
        steps = self.workload.get("steps")
        return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None

    @property
    def nodes_by_rank(self) -> dict[int, str]:
        return {record.rank: record.node for record in self.ranks if record.node}
