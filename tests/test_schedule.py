import re

import pytest
from torch.profiler import ProfilerAction, schedule

from jobs.options import describe
from profiling.recording.schedule import Phase, ScheduleConfig, ScheduleError

TORCH = {
    ProfilerAction.NONE: Phase.IDLE,
    ProfilerAction.WARMUP: Phase.WARMUP,
    ProfilerAction.RECORD: Phase.RECORD,
    ProfilerAction.RECORD_AND_SAVE: Phase.RECORD_AND_SAVE,
}


def test_tutorial_schedule_records_steps_15_to_17() -> None:
    config = ScheduleConfig()
    assert config.windows(100) == [(15, 17)]
    assert [config.phase(s, 100) for s in (9, 10, 14, 15, 16, 17, 18)] == [
        Phase.IDLE,
        Phase.WARMUP,
        Phase.WARMUP,
        Phase.RECORD,
        Phase.RECORD,
        Phase.RECORD_AND_SAVE,
        Phase.IDLE,
    ]


@pytest.mark.filterwarnings("ignore:Profiler won.t be using warmup")
@pytest.mark.parametrize(
    ("wait", "warmup", "active", "repeat"), [(10, 5, 3, 1), (2, 1, 2, 3), (0, 1, 1, 2), (3, 0, 4, 1)]
)
def test_same_phases_as_torch_schedule_while_windows_fit(
    wait: int, warmup: int, active: int, repeat: int
) -> None:
    config = ScheduleConfig(wait=wait, warmup=warmup, active=active, repeat=repeat)
    steps = config.cycle * repeat
    reference = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
    assert [config.phase(s, steps) for s in range(steps + 5)] == [
        TORCH[reference(s)] for s in range(steps + 5)
    ]


def test_repeat_zero_keeps_only_windows_that_finish() -> None:
    config = ScheduleConfig(wait=1, warmup=1, active=2, repeat=0)
    assert config.windows(10) == [(2, 3), (6, 7)]  # the third cycle (8-11) would end past step 9
    assert config.phase(10, 10) is Phase.IDLE
    assert all(config.phase(s, 10) is Phase.IDLE for s in (8, 9))


def test_too_few_steps_record_nothing() -> None:
    with pytest.raises(ScheduleError) as error:
        ScheduleConfig().check_fits(15)
    assert re.search(
        r"--steps 15 is too short.*needs 18 steps.*would record 0.*--steps 18", describe(error.value)
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
    assert re.search(message, describe(error.value))


def test_resumed_run_skips_windows_that_began_recording_before_it() -> None:
    config = ScheduleConfig(wait=2, warmup=1, active=2, repeat=0)  # windows 3-4, 8-9, 13-14, ...
    assert config.windows(20, start=4) == [(8, 9), (13, 14), (18, 19)]
    assert [config.phase(s, 20, start=4) for s in (3, 4, 7, 8, 9)] == [
        Phase.IDLE,
        Phase.IDLE,
        Phase.WARMUP,
        Phase.RECORD,
        Phase.RECORD_AND_SAVE,
    ]
    # resuming inside a warm-up keeps the window: a shorter warm-up, a complete recording
    assert config.windows(20, start=7) == [(8, 9), (13, 14), (18, 19)]
    assert config.phase(7, 20, start=7) is Phase.WARMUP
