"""The per-rank profiler on the CPU: windows, trace names and ProfilerStep numbers, resumes,
windows added while running, and traces written off the training thread."""

from __future__ import annotations

from pathlib import Path

import torch

from profiling.folder.traces import list_traces
from profiling.recording.config import ProfilerConfig
from profiling.recording.profiler import StepProfiler, Window
from profiling.recording.schedule import ScheduleConfig
from tests.common import load_trace, profiler_steps

CONFIG = ProfilerConfig(schedule=ScheduleConfig(wait=1, warmup=1, active=2, repeat=0), with_stack=False)


def run_steps(profiler: StepProfiler, first: int, last: int) -> None:
    model = torch.nn.Linear(8, 8)
    with profiler:
        for _ in range(first, last):
            model(torch.randn(4, 8)).sum().backward()
            profiler.step()


def test_windows_are_named_by_the_steps_they_hold(tmp_path: Path) -> None:
    profiler = StepProfiler(CONFIG, rank=3, steps=12, trace_dir=tmp_path)
    run_steps(profiler, 0, 12)
    # cycles of 4 steps: windows 2-3, 6-7, 10-11
    assert [t.path.name for t in list_traces(tmp_path)] == [  # by rank, then step
        "rank3_iter2_3.json",
        "rank3_iter6_7.json",
        "rank3_iter10_11.json",
    ]
    assert profiler.windows == [(2, 3), (6, 7), (10, 11)]
    for trace in list_traces(tmp_path):
        assert profiler_steps(load_trace(trace.path)) == [trace.first_step, trace.last_step]
    assert profiler.export_seconds > 0


def test_resumed_run_numbers_steps_globally(tmp_path: Path) -> None:
    # resumed at step 7 (after a preemption): window 6-7 began before it and is skipped
    profiler = StepProfiler(CONFIG, rank=0, steps=16, trace_dir=tmp_path, start_step=7)
    run_steps(profiler, 7, 16)
    assert profiler.windows == [(10, 11), (14, 15)]
    names = sorted(t.path.name for t in list_traces(tmp_path))
    assert names == ["rank0_iter10_11.json", "rank0_iter14_15.json"]
    assert profiler_steps(load_trace(tmp_path / "rank0_iter14_15.json")) == [14, 15]


class AddAfterStep4:
    """A step hook, as the capture watcher and the slowest-rank pick are."""

    def after_step(self, step: int, profiler: StepProfiler) -> None:
        if step == 4:  # step 4 ended: steps 7-9 after one warm-up step (6)
            assert profiler.add(Window(7, 9, 1, "capture 1"))
            assert not profiler.add(Window(8, 10, 1, "capture 2"))  # overlaps
            assert not profiler.add(Window(4, 5, 0, "capture 3"))  # too late to begin
            assert profiler.add(Window(5, 5, 0, "capture 4"))  # the next step is still to come
            assert not profiler.add(Window(11, 12, 1, "capture 5"))  # past the run


def test_an_unscheduled_rank_records_nothing_until_a_window_is_added(tmp_path: Path) -> None:
    profiler = StepProfiler(
        CONFIG, rank=1, steps=12, trace_dir=tmp_path, scheduled=False, hooks=[AddAfterStep4()]
    )
    run_steps(profiler, 0, 12)
    assert [t.path.name for t in list_traces(tmp_path)] == ["rank1_iter5_5.json", "rank1_iter7_9.json"]
    assert profiler_steps(load_trace(tmp_path / "rank1_iter7_9.json")) == [7, 8, 9]
    assert [(w.first, w.last, w.reason) for w, _ in profiler.recorded] == [
        (5, 5, "capture 4"),
        (7, 9, "capture 1"),
    ]


def test_a_window_cut_short_writes_no_trace(tmp_path: Path) -> None:
    profiler = StepProfiler(CONFIG, rank=0, steps=12, trace_dir=tmp_path)
    run_steps(profiler, 0, 3)  # stopped (preempted) inside window 2-3
    assert profiler.recorded == [] and not list_traces(tmp_path)
