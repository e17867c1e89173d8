"""The profiler's wait/warmup/active/repeat schedule, as plain arithmetic (no torch): which
windows of steps a run records; :func:`profiling.recording.profiler.scheduled_windows` turns
them into the profiler's windows and their per-step actions.

The semantics are torch.profiler.schedule's: each cycle is ``wait`` idle steps, ``warmup``
steps, then ``active`` recorded steps; ``repeat`` cycles (0: until the run ends). Two things
differ on purpose, so that every trace holds exactly ``active`` steps and its name is right:
a window that would not finish before the last step is dropped, and a run resumed at step
``start`` (after a preemption) skips windows that began recording before it.
"""

from __future__ import annotations

import dataclasses

from slurm.common.errors import SettingError
from slurm.common.settings import check_fields, integer_at_least, setting

MAX_WINDOWS = 10_000


class ScheduleError(SettingError):
    """A schedule that is invalid or records nothing within the run."""


_GROUP = "profiler"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScheduleConfig:
    # --wait is taken: it waits for the job, as sbatch --wait does
    wait: int = setting(
        10, flag="--schedule-wait", help="steps skipped before warm-up", group=_GROUP, metavar="N",
        check=integer_at_least(0),
    )  # fmt: skip
    warmup: int = setting(
        5, flag="--warmup", help="steps recorded and thrown away", group=_GROUP, metavar="N",
        check=integer_at_least(0),
    )  # fmt: skip
    active: int = setting(
        3, flag="--active", help="recorded steps per window", group=_GROUP, metavar="N",
        check=integer_at_least(1),
    )  # fmt: skip
    repeat: int = setting(
        1, flag="--repeat", help="windows, 0 = until the end", group=_GROUP, metavar="N",
        check=integer_at_least(0),
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self, ScheduleError)

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.active

    def windows(self, steps: int, start: int = 0) -> list[tuple[int, int]]:
        """The (first, last) step of every window recorded in a run of ``steps`` steps."""
        first_active = self.wait + self.warmup
        every = [
            (c * self.cycle + first_active, (c + 1) * self.cycle - 1) for c in range(self._cycles(steps))
        ]
        return [(first, last) for first, last in every if first >= start]

    def check_fits(self, steps: int) -> None:
        """Refuse a run that would not record every window the schedule asks for, or that
        would record more windows than anyone can read (a file per window and rank)."""
        if self._cycles(steps) > MAX_WINDOWS:
            raise ScheduleError(
                f"the schedule (wait {self.wait}, warmup {self.warmup}, active {self.active}, repeat "
                f"{self.repeat}) would record {self._cycles(steps)} windows in {{steps}} {steps}, a trace "
                f"file per window and rank. HINT: use {{repeat}} {MAX_WINDOWS} or fewer"
            )
        needed = self.cycle * max(self.repeat, 1)
        if steps < needed:
            asked = f"{self.repeat} windows" if self.repeat > 1 else "a window"
            recorded = len(self.windows(steps))
            raise ScheduleError(
                f"{{steps}} {steps} is too short: the schedule (wait {self.wait}, warmup {self.warmup}, "
                f"active {self.active}, repeat {self.repeat}) needs {needed} steps to record {asked} "
                f"and would record {recorded}. HINT: use {{steps}} {needed} or more, or a shorter schedule"
            )

    def _cycles(self, steps: int) -> int:
        """How many whole cycles fit in the run (and the schedule asks for)."""
        cycles = steps // self.cycle
        return min(cycles, self.repeat) if self.repeat else cycles
