"""``meta/summary.json``, typed: one job in a line of its history, written beside report.json
by every report of a job folder (:mod:`profiling.history.summary`) and read back by
``slurm-profile history`` and by the next jobs' reports (:mod:`profiling.history.jobs`); and
report.json's ``baseline`` (:class:`Baseline`), the job against the last jobs of its config.

One small file a job, written atomically, and no shared file: on NFS, where many jobs end at
once, no writer waits for a lock and no reader sees half a file.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any

import msgspec

from profiling.schema.files import Versioned
from profiling.schema.model_ranks import NonNegFloat, NonNegInt, Part, about

# the bounds of what a job can be: a number past them is damage, refused on reading, never written
MAX_MS = 1e9  # a step of 11 days
MAX_RANK = (1 << 31) - 1  # torch.distributed's ranks are 32-bit
MAX_RATIO = 1e6  # S, MFU
MAX_MEMORY_MIB = 1e12
MIN_STEP_MS = 1e-3  # a step under a microsecond is no step
Milliseconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_MS)]
StepMs = Annotated[float, msgspec.Meta(ge=MIN_STEP_MS, le=MAX_MS)]
Rank = Annotated[int, msgspec.Meta(ge=0, le=MAX_RANK)]
Ratio = Annotated[float, msgspec.Meta(ge=0, le=MAX_RATIO)]


class JobSummary(Versioned, kw_only=True):
    job_id: Annotated[str, about("the job's id, as squeue shows it")]
    name: Annotated[str | None, about("its SLURM job name; null outside SLURM")] = None
    user: Annotated[str | None, about("who ran it")] = None
    ended_at: Annotated[str, about("when its last attempt ended (UTC, ISO 8601): the history's order")]
    nodes: Annotated[list[str], about("the nodes it ran on")] = msgspec.field(default_factory=list)
    workload: Annotated[str, about("what its loop ran (the workload's name)")]
    config: Annotated[
        dict[str, Any], about("what decides its step: the workload's settings, ranks, nodes, backend")
    ] = msgspec.field(default_factory=dict)
    fingerprint: Annotated[str, about("a hash of config: jobs that share it are compared")]
    ranks: Annotated[Rank, about("its world size")]
    mesh: Annotated[
        dict[str, NonNegInt], about("its parallel dimensions and sizes; empty: one flat group")
    ] = msgspec.field(default_factory=dict)
    step_median_ms: Annotated[
        StepMs | None, about("its step, the median over ranks of each rank's median (wall)")
    ] = None
    step_p90_ms: Annotated[StepMs | None, about("the same of each rank's 90th percentile")] = None
    noise_ms: Annotated[
        Milliseconds | None, about("its step-to-step noise: a change below it is no regression")
    ] = None
    verdict: Annotated[str | None, about("the straggler verdict: straggler, none or undetermined")] = None
    straggler: Annotated[Rank | None, about("the straggler's rank, where the verdict names one")] = None
    slow_nodes: Annotated[
        list[str], about("nodes named slow: the run's slow nodes and the straggler's node")
    ] = msgspec.field(default_factory=list)
    slowdown: Annotated[Ratio | None, about("S, from the replay (critical_path.replay)")] = None
    mfu: Annotated[Ratio | None, about("the ranks' median model FLOPs utilisation")] = None
    peak_memory_mib: Annotated[
        Annotated[float, msgspec.Meta(ge=0, le=MAX_MEMORY_MIB)] | None,
        about("the most any rank held (MiB): its GPU's peak allocated, else its process's peak resident"),
    ] = None
    oom: Annotated[bool, about("a rank ran out of memory")] = False

    def __post_init__(self) -> None:
        # what a type cannot say, said once: here, where the file is read and where it is made
        if not self.job_id or len(self.job_id) > 256 or not self.job_id.isprintable():
            raise ValueError(f"job_id {self.job_id[:40]!r}: 1 to 256 printable characters")
        try:
            datetime.datetime.fromisoformat(self.ended_at)
        except ValueError:
            raise ValueError(f"ended_at {self.ended_at[:40]!r} is not an ISO 8601 time") from None
        if self.straggler is not None and self.ranks and self.straggler >= self.ranks:
            raise ValueError(f"straggler {self.straggler} is no rank of {self.ranks}")


class Baseline(Part):
    jobs: Annotated[list[str], about("the jobs of this config before it, the newest first (at most 5)")]
    median_ms: Annotated[
        NonNegFloat | None, about("their median step; null: no job of this config before it")
    ]
    change: Annotated[float | None, about("this job's step / median_ms - 1 (0.12: 12 % slower)")]
    regression: Annotated[
        bool, about("slower by more than 5 % and by more than its noise, against a full baseline of 5 jobs")
    ]
    fingerprint: Annotated[str, about("the config's fingerprint (meta/summary.json)")]
    line: Annotated[str, about("what report.md says of it")]
