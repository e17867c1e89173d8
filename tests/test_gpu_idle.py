"""Why the GPU idles, and which GPU activity counts, against HTA on the real traces in
tests/data/gpu_traces: the streams' idle time by cause as ``get_idle_time_breakdown`` gives it,
and kernels whose launch the trace does not hold counted as HTA counts them."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from profiling.analysis.per_trace.breakdown import analyse
from profiling.analysis.per_trace.idle import CAUSES, idle_causes
from profiling.analysis.reading.trace_events import from_document
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from tests import trace_variants as tv
from tests.common import import_hta
from tests.test_gpu_traces import DATA, MICROSECOND_TRACES, TRACES, gpu_totals, load, rounded_as_hta_does

np = pytest.importorskip("numpy")


def hta_analyzer(folder: Path) -> Any:
    trace_analysis = import_hta()
    logging.disable(logging.WARNING)
    try:
        return trace_analysis.TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
    finally:
        logging.disable(logging.NOTSET)


def hta_idle(analyzer: Any) -> dict[str, float]:
    (rank,) = analyzer.t.traces
    frame, _ = analyzer.get_idle_time_breakdown(ranks=[rank], visualize=False)
    found = frame.groupby("idle_category").idle_time.sum().to_dict()
    return {cause: float(found.get(cause, 0.0)) for cause in CAUSES}


def hta_temporal(analyzer: Any) -> dict[str, float]:
    (row,) = analyzer.get_temporal_breakdown(visualize=False).to_dict("records")
    return {
        "busy": row["kernel_time(us)"] - row["idle_time(us)"],
        "idle": row["idle_time(us)"],
        "compute": row["compute_time(us)"],
    }


def as_hta_reads_it(name: str, trace: dict[str, Any]) -> dict[str, Any]:
    """HTA keeps whole µs (tests.test_gpu_traces): the trace as HTA sees it, for exact figures."""
    return trace if name in MICROSECOND_TRACES else rounded_as_hta_does(trace)


@pytest.mark.parametrize("name", TRACES)
def test_idle_causes_match_htas_idle_time_breakdown(name: str, tmp_path: Path) -> None:
    shutil.copy(DATA / TRACES[name], tmp_path)
    hta = hta_idle(hta_analyzer(tmp_path))
    ours = analyse(from_document(as_hta_reads_it(name, load(name)))).idle
    assert ours is not None and sum(hta.values()) > 0
    for cause in CAUSES:
        assert ours.by_cause_us()[cause] == pytest.approx(hta[cause], rel=0.01, abs=1.0), cause


def test_each_gap_has_one_cause() -> None:
    # stream 1: a kernel queued in time after a 5 µs gap (kernel wait), one launched after its
    # predecessor ended (host wait), one queued in time that started 100 µs late (other);
    # stream 2: one kernel, no gap; a kernel whose launch the trace lacks is never a host wait
    start = np.array([0.0, 15.0, 60.0, 200.0, 0.0, 300.0])
    end = np.array([10.0, 20.0, 100.0, 210.0, 50.0, 310.0])
    stream = np.array([1, 1, 1, 1, 2, 1])
    launched = np.array([-5.0, 1.0, 40.0, 50.0, -1.0, np.nan])
    causes = idle_causes(start, end, stream, launched)
    assert causes.by_cause_us() == {"host_wait": 40.0, "kernel_wait": 5.0, "other": 100.0 + 90.0}
    assert (causes.gaps, causes.streams) == ((1, 1, 2), 2)


@pytest.mark.parametrize("steps", ["one", "several"])
def test_kernels_launched_before_the_recording_count_as_hta_counts_them(steps: str, tmp_path: Path) -> None:
    """In a trace of one step HTA counts every kernel; in one of several, those whose launch the
    trace holds. Ours: the same, so span, busy, idle and compute agree with HTA's."""
    trace = load("nccl_data")
    if steps == "one":
        trace = tv.one_step(trace, 5)
    trace = tv.launched_before_the_recording(trace, 0.3)
    (tmp_path / "hta").mkdir()
    (tmp_path / "hta" / "rank0.json").write_text(json.dumps(trace))
    analyzer = hta_analyzer(tmp_path / "hta")
    as_hta = as_hta_reads_it("nccl_data", trace)
    analysis = analyse(from_document(as_hta))
    assert analysis.unlaunched > 100
    ours, hta = gpu_totals(as_hta), hta_temporal(analyzer)
    for figure in ("busy", "idle", "compute"):
        assert ours[figure] == pytest.approx(hta[figure], rel=0.01), figure
    idle, hta_causes = analysis.idle.by_cause_us(), hta_idle(analyzer)
    assert sum(idle.values()) == pytest.approx(sum(hta_causes.values()), rel=0.01)
    if steps == "several":  # HTA left the kernels without a launch out: so did we
        for cause, value in hta_causes.items():
            assert idle[cause] == pytest.approx(value, rel=0.01, abs=1.0), cause
    else:  # HTA takes the time of its frame's first event as their launch (docs/report.md): a
        # host wait wherever that event is later than the kernel before; the trace cannot say so
        assert hta_causes["host_wait"] > idle["host_wait"]


def test_the_report_says_how_many_kernels_had_no_launch_and_why_the_gpu_idled(tmp_path: Path) -> None:
    traces = [
        tv.as_rank(tv.launched_before_the_recording(tv.one_step(load("nccl_data"), 5), 0.3), r, 2)
        for r in (0, 1)
    ]
    folder = tv.write(tmp_path / "job", traces)
    report = build_report(folder, ReportSettings(plot=False, merged_trace=False))
    rank = report.ranks[0]
    assert rank.gpu.unlaunched > 100
    causes = rank.gpu.idle_causes_ms
    assert set(causes) == set(CAUSES) and causes["host_wait"] > 0
    markdown = (folder / "meta" / "report.md").read_text()
    assert "Why the GPU idles" in markdown and "host wait" in markdown
    assert f"rank 0: {rank.gpu.unlaunched}" in markdown and "launched before the recording" in markdown
