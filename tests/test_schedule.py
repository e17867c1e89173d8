"""The schedule: which windows a run records, and what the profiler does at each step (the
windows' actions, which the profiler runs), against torch.profiler.schedule."""

import re

import pytest
from torch.profiler import ProfilerAction, schedule

from jobs.commands.submit import build_parser
from profiling.recording.config import ProfilerConfig
from profiling.recording.profiler import scheduled_windows
from profiling.recording.schedule import ScheduleConfig, ScheduleError

IDLE, WARMUP, RECORD = ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD
SAVE = ProfilerAction.RECORD_AND_SAVE


def actions(config: ScheduleConfig, steps: int, at: range, start: int = 0) -> list[ProfilerAction]:
    """What the profiler does at each step of ``at``, in a run of ``steps`` resumed at ``start``."""
    windows = scheduled_windows(ProfilerConfig(schedule=config), steps, start)

    def action(step: int) -> ProfilerAction:
        return next((w.action(step) for w in windows if w.action(step) is not IDLE), IDLE)

    return [action(step) for step in at]


def test_tutorial_schedule_records_steps_15_to_17() -> None:
    config = ScheduleConfig()
    assert config.windows(100) == [(15, 17)]
    assert actions(config, 100, range(9, 19)) == [IDLE, *[WARMUP] * 5, RECORD, RECORD, SAVE, IDLE]


@pytest.mark.filterwarnings("ignore:Profiler won.t be using warmup")
@pytest.mark.parametrize(
    ("wait", "warmup", "active", "repeat"), [(10, 5, 3, 1), (2, 1, 2, 3), (0, 1, 1, 2), (3, 0, 4, 1)]
)
def test_same_actions_as_torch_schedule_while_windows_fit(
    wait: int, warmup: int, active: int, repeat: int
) -> None:
    config = ScheduleConfig(wait=wait, warmup=warmup, active=active, repeat=repeat)
    steps = config.cycle * repeat
    reference = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
    assert actions(config, steps, range(steps + 5)) == [reference(s) for s in range(steps + 5)]


def test_repeat_zero_keeps_only_windows_that_finish() -> None:
    config = ScheduleConfig(wait=1, warmup=1, active=2, repeat=0)
    assert config.windows(10) == [(2, 3), (6, 7)]  # the third cycle (8-11) would end past step 9
    assert actions(config, 10, range(8, 11)) == [IDLE, IDLE, IDLE]


def test_too_few_steps_record_nothing() -> None:
    with pytest.raises(ScheduleError) as error:
        ScheduleConfig().check_fits(15)
    assert re.search(
        r"--steps 15 is too short.*needs 18 steps.*would record 0.*--steps 18",
        build_parser().describe(error.value),
    )


def test_too_few_steps_for_every_window() -> None:
    with pytest.raises(ScheduleError, match=r"needs 36 steps to record 2 windows and would record 1"):
        ScheduleConfig(repeat=2).check_fits(20)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"active": 0}, "--active 0 must be an integer >= 1"),
        ({"wait": -1}, "--schedule-wait -1"),
        ({"repeat": -2}, "--repeat -2"),
    ],
)
def test_invalid_schedule(kwargs: dict, message: str) -> None:
    with pytest.raises(ScheduleError) as error:
        ScheduleConfig(**kwargs)
    assert re.search(message, build_parser().describe(error.value))


def test_resumed_run_skips_windows_that_began_recording_before_it() -> None:
    config = ScheduleConfig(wait=2, warmup=1, active=2, repeat=0)  # windows 3-4, 8-9, 13-14, ...
    assert config.windows(20, start=4) == [(8, 9), (13, 14), (18, 19)]
    assert actions(config, 20, range(3, 10), start=4) == [IDLE, IDLE, IDLE, IDLE, WARMUP, RECORD, SAVE]
    # resuming inside a warm-up keeps the window: a shorter warm-up, a complete recording
    assert config.windows(20, start=7) == [(8, 9), (13, 14), (18, 19)]
    assert actions(config, 20, range(7, 8), start=7) == [WARMUP]
