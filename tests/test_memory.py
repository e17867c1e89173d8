"""Each step's peak memory from the allocator's [memory] instants, per device, with the op
running at the peak; read alike by both readers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiling.analysis.per_trace.memory import StepMemory, step_memory
from profiling.analysis.reading.trace_events import from_document
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from tests.synthetic import cpu_job, write_job, x


def allocated(ts: float, total: int, device: int = -1, reserved: int = 0) -> dict[str, Any]:
    """An allocator's instant: its totals after an allocation at ``ts``."""
    args = {
        "Total Allocated": total,
        "Total Reserved": reserved,
        "Bytes": 1,
        "Device Id": device,
        "Device Type": 0,
    }
    event = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 100, "tid": 1}
    return {**event, "ts": ts, "args": args}


def test_each_steps_peak_per_device_and_the_op_running_then() -> None:
    trace = {
        "traceEvents": [
            x("ProfilerStep#1", 0, 100, cat="user_annotation"),
            x("aten::conv2d", 10, 30),
            x("aten::empty", 12, 1),  # the allocation itself: its caller is named
            x("aten::mm", 50, 20),
            allocated(12.5, 300),
            allocated(55, 500),
            allocated(60, 200),
            allocated(61, 7_000, device=0, reserved=8_000),
            x("ProfilerStep#2", 100, 100, cat="user_annotation"),
            x("aten::conv2d", 110, 30),
            allocated(112, 900),
            allocated(300, 5_000),  # after the steps: none of theirs
            {"ph": "i", "name": "other", "ts": 20, "args": {"Total Allocated": 10**9}},  # not the allocator's
        ]
    }
    events = from_document(trace)
    assert list(events.memory_allocated) == [300, 500, 200, 7_000, 900, 5_000]
    assert step_memory(events, [(1, 0.0, 100.0), (2, 100.0, 200.0)]) == [
        StepMemory(step=1, device="cpu", peak_allocated=500, peak_reserved=None, peak_op="aten::mm"),
        StepMemory(step=2, device="cpu", peak_allocated=900, peak_reserved=None, peak_op="aten::conv2d"),
        StepMemory(step=1, device="cuda:0", peak_allocated=7_000, peak_reserved=8_000, peak_op="aten::mm"),
    ]


def test_the_report_keeps_each_ranks_peak_and_says_where_none_was_recorded(tmp_path: Path) -> None:
    traces = cpu_job(steps=3)
    traces[1]["traceEvents"] += [allocated(-1000 + 7 + 200 + 45, 4 << 20)]  # rank 1, step 11
    report = build_report(
        write_job(tmp_path / "job", traces, steps=3), ReportSettings(plot=False, merged_trace=False)
    )
    assert report.ranks[0].memory is None
    memory = report.ranks[1].memory
    assert memory is not None
    assert (memory.device, memory.peak_allocated_bytes, memory.peak_step, memory.peak_op) == (
        "cpu",
        4 << 20,
        11,
        "autograd::engine::evaluate_function: ConvolutionBackward0",
    )
    assert memory.steps_peak_bytes == [None, 4 << 20, None]
