"""What the profiler records, and on which ranks. Torch-free, so the submit path can validate it."""

from __future__ import annotations

import dataclasses

from profiling.ranks import DEFAULT_RANKS, RankSelection
from profiling.recording.schedule import ScheduleConfig
from profiling.schema.manifest import ProfilerRecord, Schedule
from slurm.common.errors import SettingError
from slurm.common.settings import at_least, check_fields, section, setting

GiB = 2**30


@dataclasses.dataclass(frozen=True, kw_only=True)
class AutoCaptureConfig:
    """``--auto-capture``: record a rank the live step logs show slow, while it is slow, with a
    typical rank beside it (:mod:`jobs.runtime.auto_capture`; docs/auto-capture.md), within these
    bounds."""

    enabled: bool = setting(
        False,
        flag="--auto-capture",
        help="while the job runs, record a few steps of a rank that turns persistently slower than its "
        "peers, with a typical rank (and its pipeline neighbours) beside it; bounded (docs/auto-capture.md)",
        group="profiler",
    )
    max_captures: int = setting(
        3,
        flag="--auto-capture-max",
        help="the most captures --auto-capture takes in a job",
        group="profiler",
        metavar="N",
        parse=int,
        check=at_least(1),
    )
    # no new capture sooner than this after the last one was asked for: a rank slow for an hour
    # is one finding, not twenty
    cooldown_s: float = 300.0
    # bytes of captured traces in the job folder past which no capture is asked for: the written
    # ones plus the next one's estimate (its ranks times its steps times the largest captured
    # trace's bytes per step) must stay below it
    max_bytes: int = 2 * GiB
    active: int = 3  # steps a capture records, as `jobs.commands.capture`'s default
    # how often rank 0's node reads the step logs and the ranks flush them and look for requests
    # under --auto-capture: a second, against 5 s and 2 s without (a capture then starts about 10
    # s after the rank turned slow, not 20)
    look_every_s: float = 1.0

    def __post_init__(self) -> None:
        check_fields(self, SettingError)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProfilerConfig:
    ranks: RankSelection = setting(
        default_factory=lambda: RankSelection.parse(DEFAULT_RANKS),
        flag="--profile-ranks",
        help="ranks that record: 'all', 'none', '0,3', '0-3,8', '0,slowest'; every rank keeps its step "
        "times anyway (meta/steps/)",
        group="profiler",
        metavar="SPEC",
        parse=RankSelection.parse,
    )
    schedule: ScheduleConfig = section(ScheduleConfig)
    record_shapes: bool = True
    with_stack: bool = setting(
        True,
        flag="--no-stack",
        help="record no Python frames: traces a fraction of the size where the step is mostly Python "
        "(FSDP, pipelining: 77 MB a rank for 3 steps of --parallel dp=2,pp=2 with them); the report "
        "then names operators, not frames",
        group="profiler",
    )
    gzip: bool = setting(
        False, flag="--gzip-traces", help="write rank<r>_iter<a>_<b>.json.gz", group="profiler"
    )
    profile_memory: bool = setting(
        True,
        flag="--no-profile-memory",
        help="record no allocator events: no peak memory per step in the report",
        group="profiler",
    )
    memory_history: int = setting(
        0,
        flag="--memory-history",
        help="CUDA: keep the allocator's last N allocations; a rank out of memory dumps them to "
        "meta/oom/ for pytorch.org/memory_viz",
        group="profiler",
        parse=int,
        metavar="N",
        check=at_least(0),
    )
    auto_capture: AutoCaptureConfig = section(AutoCaptureConfig)

    def __post_init__(self) -> None:
        check_fields(self, SettingError)  # --memory-history -1 was taken before
        if not isinstance(self.ranks, RankSelection):
            raise TypeError(
                f"ranks must be a RankSelection, got {self.ranks!r}; use RankSelection.parse('0,3')"
            )
        if self.ranks.slowest and self.schedule.wait == 0:
            # the slowest rank is chosen from the steps before a window's warm-up: with no wait,
            # the first window has none
            raise SettingError(
                f"{{ranks}} {self.ranks.text!r} asks for the slowest rank, which is timed over the "
                "steps before each window, and {wait} is 0: the first window would start before any "
                "step was timed. HINT: use {wait} 1 or more (default 10)"
            )

    def schedule_record(self) -> Schedule:
        """The schedule, as the manifest keeps it."""
        return Schedule(**dataclasses.asdict(self.schedule))

    def record(self) -> ProfilerRecord:
        """What was recorded on which ranks, as the manifest keeps it beside the schedule."""
        return ProfilerRecord(
            ranks=str(self.ranks),
            record_shapes=self.record_shapes,
            with_stack=self.with_stack,
            gzip=self.gzip,
            profile_memory=self.profile_memory,
            memory_history=self.memory_history,
        )
