"""The per-rank profiler on the CPU: trace names and ProfilerStep numbers, also after a resume."""

from __future__ import annotations

from pathlib import Path

import torch

from profiling.config import ProfilerConfig
from profiling.profiler import NoProfiler, RankProfiler, profiler_for_rank
from profiling.schedule import ScheduleConfig
from profiling.traces import list_traces
from tests.common import load_trace, profiler_steps

CONFIG = ProfilerConfig(schedule=ScheduleConfig(wait=1, warmup=1, active=2, repeat=0), with_stack=False)


def run_steps(profiler, first: int, last: int) -> None:
    model = torch.nn.Linear(8, 8)
    with profiler:
        for _ in range(first, last):
            model(torch.randn(4, 8)).sum().backward()
            profiler.step()


def test_windows_are_named_by_the_steps_they_hold(tmp_path: Path) -> None:
    profiler = profiler_for_rank(CONFIG, profiled=True, rank=3, steps=12, trace_dir=tmp_path)
    assert isinstance(profiler, RankProfiler)
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


def test_resumed_run_numbers_steps_globally(tmp_path: Path) -> None:
    # resumed at step 7 (after a preemption): window 6-7 began before it and is skipped
    profiler = profiler_for_rank(CONFIG, profiled=True, rank=0, steps=16, trace_dir=tmp_path, start_step=7)
    run_steps(profiler, 7, 16)
    assert profiler.windows == [(10, 11), (14, 15)]
    names = sorted(t.path.name for t in list_traces(tmp_path))
    assert names == ["rank0_iter10_11.json", "rank0_iter14_15.json"]
    assert profiler_steps(load_trace(tmp_path / "rank0_iter14_15.json")) == [14, 15]


def test_unselected_rank_or_no_window_left_gets_the_no_op(tmp_path: Path) -> None:
    assert isinstance(
        profiler_for_rank(CONFIG, profiled=False, rank=1, steps=12, trace_dir=tmp_path), NoProfiler
    )
    # a run resumed at step 11 of 12 has no whole window left
    assert isinstance(
        profiler_for_rank(CONFIG, profiled=True, rank=0, steps=12, trace_dir=tmp_path, start_step=11),
        NoProfiler,
    )
    assert not tmp_path.exists() or not list(tmp_path.iterdir())
