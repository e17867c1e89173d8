"""A rank's memory growing step after step (profiling/analysis/run/memory_growth.py): named where it
is a line to the end of the log, not where a run's memory steps up once, rises while it warms
up, or bumps in the profiler's window."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from profiling.analysis.run import run_logs
from profiling.analysis.run.memory_growth import Growth, combine_memory, growth, reduce_series, series_growth
from profiling.folder.layout import JobFolder
from profiling.folder.step_log import StepLogHeader, StepLogWriter, read_step_log


def flat_run(steps: int = 200, level: float = 500.0) -> np.ndarray:
    """A healthy run: warming up in 3 steps, then flat with a little noise (the same each time)."""
    mem = level + np.random.default_rng(7).normal(0, 5, steps)
    mem[:3] = [level * 0.6, level * 0.9, level * 0.96]
    return mem


def found(mem: np.ndarray) -> Growth | None:
    return series_growth(list(range(len(mem))), mem.tolist())


@pytest.mark.parametrize(
    "shape",
    ["flat", "a step up", "the profiler's window", "a slow rise of 0.2 MiB a step", "warming up in 30 steps"],
)
def test_a_healthy_run_is_not_named(shape: str) -> None:
    mem = flat_run()
    if shape == "a step up":
        mem[100:] += 2000  # a bigger batch, a second model: once, not a line
    elif shape == "the profiler's window":
        mem[10:18] += 500
    elif shape == "a slow rise of 0.2 MiB a step":
        mem += 0.2 * np.arange(len(mem))  # 40 MiB in all: below what is worth saying
    elif shape == "warming up in 30 steps":
        mem[:30] = np.linspace(200, 500, 30) + np.random.default_rng(8).normal(0, 5, 30)
    assert found(mem) is None


@pytest.mark.parametrize(("since", "rate"), [(1, 64.0), (120, 38.0), (60, 2.0)])
def test_a_leak_is_named_from_its_start_with_its_rate(since: int, rate: float) -> None:
    mem = flat_run()
    mem[since:] += rate * np.arange(len(mem) - since)
    leak = found(mem)
    # where the break is, to within the steps the noise (5 MiB) takes to rise: more at 2 MiB a step
    assert leak is not None and abs(leak.since_step - since) <= max(2, 10 / rate), leak
    assert leak.mib_per_step == pytest.approx(rate, rel=0.05) and leak.last_step == 199
    assert leak.to_mib - leak.from_mib == pytest.approx(rate * (199 - leak.since_step), rel=0.05)
    assert re.match(rf"rank 3: \+{rate:.0f}(\.0)? MiB a step since step {leak.since_step} \(", leak.line(3))


def test_too_few_steps_say_nothing() -> None:
    assert found(500 + 64.0 * np.arange(7)) is None
    assert found(500 + 64.0 * np.arange(8)) is not None


def test_a_long_log_of_buckets_is_read_by_its_steps_not_its_rows() -> None:
    """10 000 exact rows then buckets of 100: the leak in the second half of 100 000 steps is in
    the buckets, a few percent of the rows."""
    first = np.concatenate([np.arange(10_000), 10_000 + 100 * np.arange(900)])
    steps = np.concatenate([np.ones(10_000), np.full(900, 100)]).astype(np.int64)
    mem = 30_000 + np.random.default_rng(7).normal(0, 1, len(first)) + 0.01 * np.maximum(first - 50_000, 0)
    series = reduce_series(first, steps, mem)
    assert len(series.peak) <= 256 and series.first[0] == 0 and series.last[-1] == 99_999
    leak = growth(series)
    assert leak is not None and abs(leak.since_step - 50_000) <= 800 and leak.phrase().startswith("+10 KiB")


def write_log(folder: JobFolder, rank: int, mem: np.ndarray, restart: int = 0, start: int = 0) -> Path:
    path = folder.step_log(rank, restart)
    header = StepLogHeader(rank=rank, world_size=4, restart=restart, node=f"node{rank // 2}", gpu=False)
    writer = StepLogWriter(path, header)
    for step, mib in enumerate(mem, start=start):
        writer.add(step, 100.0, 50.0, mem_mib=float(mib))
    writer.close()
    return path


def test_the_run_map_names_the_rank_that_leaks_and_keeps_every_ranks_memory(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "5")
    for rank in range(4):
        mem = flat_run(120, 1000.0 + rank)
        if rank == 2:
            mem[40:] += 16 * np.arange(80)
        write_log(folder, rank, mem)
    found_run = run_logs.read_run(folder.path)
    assert found_run is not None
    memory = found_run[0].memory
    assert memory is not None and memory.kind == "rss" and memory.peak.shape == (4, 120)
    assert [g is not None for g in memory.growth] == [False, False, True, False]
    assert memory.growth[2].since_step == pytest.approx(40, abs=2)  # type: ignore[union-attr]
    assert memory.peak[2, -1] - memory.peak[0, -1] == pytest.approx(16 * 79, abs=30)


def test_a_rank_requeued_apart_is_laid_on_the_run_and_old_logs_have_no_memory(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "6")
    write_log(folder, 0, flat_run(100))
    write_log(folder, 1, flat_run(60))  # its first attempt, then resumed at step 50
    write_log(folder, 1, flat_run(50) + 16 * np.arange(50), restart=1, start=50)
    run = run_logs.combine_logs([read_step_log(p) for p in folder.step_logs()])
    assert run is not None and run.memory is not None and run.memory.peak.shape[0] == 2
    assert run.memory.growth[0] is None and run.memory.growth[1] is not None
    assert combine_memory(["", ""], [None, None]) is None
