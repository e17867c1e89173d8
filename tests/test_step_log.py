"""Every rank's step log (profiling/folder/step_log.py, profiling/recording/step_timing.py): what
it keeps, how big it gets, what a reader sees while it is written or after a kill."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import numpy as np
import pytest

import profiling.recording.step_timing
from profiling.folder import step_log
from profiling.folder.layout import JobFolder
from profiling.folder.step_log import (
    BUCKET_STEPS,
    EXACT_STEPS,
    HEADER_BYTES,
    StepLogError,
    StepLogHeader,
    StepLogWriter,
    read_step_log,
)
from profiling.recording.step_timing import StepTiming

# the bound docs/report.md and the module state for 100 000 steps
BOUND_100K = HEADER_BYTES + EXACT_STEPS * 20 + (100_000 - EXACT_STEPS) // BUCKET_STEPS * 56


def header(rank: int = 0, **changes: object) -> StepLogHeader:
    fields = {"rank": rank, "world_size": 4, "restart": 0, "node": "node1", "gpu": False, **changes}
    return StepLogHeader(**fields)  # type: ignore[arg-type]


def test_exact_rows_then_buckets_of_min_median_max(tmp_path: Path) -> None:
    path = tmp_path / "rank0.steps"
    writer = StepLogWriter(path, header(exact_steps=5, bucket_steps=4))
    for step in range(15):
        writer.add(step, wall_ms=100.0 + step, cpu_ms=50.0 + step, mem_mib=1000.0 + 10 * step)
    writer.close()
    log = read_step_log(path)
    assert log.header == header(exact_steps=5, bucket_steps=4)
    assert log.first.tolist() == [0, 1, 2, 3, 4, 5, 9, 13]
    assert log.steps.tolist() == [1, 1, 1, 1, 1, 4, 4, 2]  # the last bucket partial, written at close
    assert log.median["wall"].tolist() == [100, 101, 102, 103, 104, 106.5, 110.5, 113.5]
    assert (log.low["cpu"][5], log.high["cpu"][5]) == (55, 58)
    assert np.isnan(log.median["gpu"]).all()
    assert (log.low["mem"][5], log.median["mem"][5], log.high["mem"][5]) == (1050, 1065, 1080)
    assert log.last_step == 14


def test_a_log_of_the_first_format_reads_without_memory(tmp_path: Path) -> None:
    """Logs written before ``mem`` (SLPSTEP1: 16-byte rows, 44-byte buckets) stay readable."""
    old = header(exact_steps=2, bucket_steps=2, memory="")
    exact = np.array([(0, 10.0, 5.0, np.nan), (1, 11.0, 6.0, np.nan)], dtype=step_log._EXACT_1)
    bucket = np.zeros(1, dtype=step_log._BUCKET_1)
    bucket["first"], bucket["steps"], bucket["cpu"] = 2, 2, (7.0, 7.5, 8.0)
    head = bytearray(old.encode())
    head[:8] = b"SLPSTEP1"
    path = tmp_path / "rank0.steps"
    path.write_bytes(bytes(head) + exact.tobytes() + bucket.tobytes())
    log = read_step_log(path)
    assert log.header == old and log.first.tolist() == [0, 1, 2] and log.median["cpu"].tolist() == [5, 6, 7.5]
    assert np.isnan(log.median["mem"]).all() and len(log.high["mem"]) == 3


def test_each_step_records_the_resident_memory_at_its_end(tmp_path: Path) -> None:
    timing = StepTiming.open(tmp_path / "rank0.steps", header())
    held = []
    for step in range(4):
        held.append(np.ones(64 * 2**20 // 8))  # 64 MiB, touched: resident
        timing.after_step(step)
    timing.close()
    mem = read_step_log(tmp_path / "rank0.steps").median["mem"]
    assert np.diff(mem) == pytest.approx([64, 64, 64], abs=4), mem
    steps, mib = timing.memory_series()
    assert steps == [0, 1, 2, 3] and mib == pytest.approx(mem.tolist())


def test_a_reader_sees_the_rows_of_every_flush_and_none_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "rank3.steps"
    writer = StepLogWriter(path, header(rank=3))
    for step in range(7):
        writer.add(step, 10.0, 5.0)
    assert len(read_step_log(path)) == 0  # nothing flushed yet: the header alone
    writer.flush()
    assert read_step_log(path).last_step == 6
    writer.add(7, 10.0, 5.0)  # after the last flush: lost if the job is killed now
    # a kill in the middle of a write leaves part of a row: it is left out
    with open(path, "ab") as handle:
        handle.write(b"\x01\x02\x03")
    log = read_step_log(path)
    assert (len(log), log.last_step) == (7, 6)


def test_a_file_that_is_not_a_step_log_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "rank0.steps"
    path.write_bytes(b'{"traceEvents": []}')
    with pytest.raises(StepLogError, match=r"rank0.steps is not a step log \(no SLPSTEP2 header\)"):
        read_step_log(path)


def test_100_000_steps_stay_under_the_stated_bound_at_no_measurable_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a fast fake loop: the hook as the profiler calls it, 100 000 times, flushing as it would
    monkeypatch.setattr(profiling.recording.step_timing, "FLUSH_S", 0.05)
    path = JobFolder(tmp_path, "9").step_log(5)
    timing = StepTiming.open(path, header(rank=5, world_size=8))
    started = time.process_time()  # CPU time: a neighbour on the machine does not count in it
    for step in range(100_000):
        timing.after_step(step)
    per_step_us = (time.process_time() - started) / 100_000 * 1e6
    timing.close()
    assert path.stat().st_size <= BOUND_100K == 250_496
    log = read_step_log(path)
    assert log.last_step == 99_999 and len(log) == EXACT_STEPS + 900
    assert timing.writer.flushes > 1 and msgspec.to_builtins(timing.manifest_record()) == {
        "file": "rank5.steps", "steps": 100_000, "rows": EXACT_STEPS + 900, "gpu": False, "memory": "rss",
    }  # fmt: skip
    # two clock reads, one of the memory, and list appends: against 130 ms steps, < 0.01 %
    # (the wall-clock figure, 4 µs, is tests/bench/bench_step_log.py's)
    assert per_step_us < 15, f"{per_step_us:.1f} µs per step"


def test_the_hook_times_wall_and_the_threads_cpu_apart(tmp_path: Path) -> None:
    timing = StepTiming.open(tmp_path / "rank0.steps", header())
    time.sleep(0.05)  # wall time, no CPU
    timing.after_step(0)
    done = time.thread_time() + 0.05
    while time.thread_time() < done:  # CPU time
        pass
    timing.after_step(1)
    timing.close()
    log = read_step_log(tmp_path / "rank0.steps")
    wall, cpu = log.median["wall"], log.median["cpu"]
    assert wall[0] >= 50 and cpu[0] < 20
    assert cpu[1] >= 50 and wall[1] >= cpu[1]  # a thread's CPU time never passes the wall time
    # the one clock of the rank's steps: the manifest's step times and the slowest rank read it
    assert timing.step_seconds == pytest.approx((wall / 1e3).tolist(), rel=1e-3)
    assert timing.last_cpu_ms == pytest.approx(cpu[1], rel=1e-3)


def test_each_attempt_has_its_own_log(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "4")
    assert folder.step_log(2).name == "rank2.steps"
    assert folder.step_log(2, 1).name == "rank2.restart1.steps"
    for restart in (0, 1):
        StepLogWriter(folder.step_log(2, restart), header(rank=2, restart=restart)).close()
    assert [p.name for p in folder.step_logs()] == ["rank2.restart1.steps", "rank2.steps"]
    assert JobFolder.of_traces(folder.attempt(1)) == JobFolder.of_traces(folder.path) == folder
