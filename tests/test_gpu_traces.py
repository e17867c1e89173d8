"""The report on real GPU traces recorded by others (tests/data/gpu_traces/, see its README):
per-step GPU accounting against HTA, clock alignment that holds, AMD traces, one-rank jobs."""

from __future__ import annotations

import copy
import gzip
import json
import logging
import math
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from profiling.analysis.across_ranks.merge import ALWAYS
from profiling.analysis.clocks.alignment import align
from profiling.analysis.per_trace.breakdown import GPU_PARTS, analyse
from profiling.analysis.reading.instances import instances
from profiling.analysis.reading.trace_events import from_document, read
from profiling.folder.layout import meta_of
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from tests.common import import_hta

DATA = Path(__file__).parent / "data" / "gpu_traces"
TRACES = {
    "trace_filter_0": "trace_filter_sampled_rank-0.json.gz",
    "trace_filter_1": "trace_filter_sampled_rank-1.json.gz",
    "nccl_data": "nccl_data.json.gz",
    "trace_diff": "trace_diff_test.json.gz",
    "ns_resolution": "ns_resolution_rank-0.json.gz",
    "amd": "amd_mi250_minitoy.json.gz",
}
# µs timestamps: HTA sees them as they are. The others have nanosecond fractions.
MICROSECOND_TRACES = ("trace_filter_0", "trace_filter_1", "trace_diff")


def load(name: str) -> dict[str, Any]:
    with gzip.open(DATA / TRACES[name]) as handle:
        return json.load(handle)


def rounded_as_hta_does(trace: dict[str, Any]) -> dict[str, Any]:
    """HTA 0.5 keeps whole µs: an event's start rounded up and its end down (seen in its frames)."""
    trace = copy.deepcopy(trace)
    for event in trace["traceEvents"]:
        if "ts" in event and "dur" in event:
            end = math.floor(event["ts"] + event["dur"])
            event["ts"] = math.ceil(event["ts"])
            event["dur"] = end - event["ts"]
    return trace


def gpu_totals(trace: dict[str, Any]) -> dict[str, float]:
    analysis = analyse(from_document(trace))
    return {
        "busy": sum(s.gpu.busy_us for s in analysis.steps),
        "idle": sum(s.parts_us["idle"] for s in analysis.steps),
        "compute": sum(s.parts_us["compute"] for s in analysis.steps),
    }


@pytest.fixture(scope="module")
def hta_figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, float]]:
    """HTA's temporal breakdown of each trace, every step included, as HTA computes it."""
    trace_analysis = import_hta()
    logging.disable(logging.WARNING)
    figures = {}
    try:
        for name, file_name in TRACES.items():
            folder = tmp_path_factory.mktemp(name)
            shutil.copy(DATA / file_name, folder / file_name)
            analyzer = trace_analysis.TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
            (row,) = analyzer.get_temporal_breakdown(visualize=False).to_dict("records")
            figures[name] = {
                "busy": row["kernel_time(us)"] - row["idle_time(us)"],
                "idle": row["idle_time(us)"],
                "compute": row["compute_time(us)"],
            }
    finally:
        logging.disable(logging.NOTSET)
    return figures


@pytest.mark.parametrize("name", TRACES)
def test_no_negative_time_and_parts_add_up_to_the_gpu_span(name: str) -> None:
    analysis = analyse(read(DATA / TRACES[name]))
    assert analysis.device == "gpu" and analysis.steps
    for step in analysis.steps:
        assert set(step.parts_us) == set(GPU_PARTS)
        assert all(value >= 0 for value in step.parts_us.values()), step.parts_us
        assert step.gpu.duration_us >= 0 and step.gpu.busy_us >= 0
        assert sum(step.parts_us.values()) == pytest.approx(step.gpu.duration_us, rel=0.01, abs=1e-6)
        assert step.gpu.busy_us == pytest.approx(step.gpu.duration_us - step.parts_us["idle"], abs=1e-6)
        assert sum(step.gpu.compute_by_phase_us.values()) == pytest.approx(step.parts_us["compute"], abs=1e-6)
        assert step.gpu.communication_overlapped_us <= step.collectives_us + 1e-6


def test_a_step_is_not_only_the_kernels_inside_its_cpu_span() -> None:
    # ns_resolution: the kernels a step launches run ~60 ms past the end of its CPU span
    (first, *_) = analyse(read(DATA / TRACES["ns_resolution"])).steps
    assert first.duration_us < first.gpu.busy_us  # CPU span 35 ms, GPU busy 94 ms
    assert first.parts_us["idle"] >= 0
    assert sum(first.parts_us.values()) == pytest.approx(first.gpu.duration_us)


@pytest.mark.parametrize("name", MICROSECOND_TRACES)
def test_busy_idle_and_compute_match_hta_on_microsecond_traces(name: str, hta_figures: dict) -> None:
    ours = gpu_totals(load(name))
    for figure in ("busy", "idle", "compute"):
        assert ours[figure] == pytest.approx(hta_figures[name][figure], rel=0.01), figure


@pytest.mark.parametrize("name", ["nccl_data", "ns_resolution", "amd"])
def test_same_definitions_as_hta_on_nanosecond_traces(name: str, hta_figures: dict) -> None:
    # HTA keeps whole µs, shrinking every activity by up to 2 µs; on HTA's own rounding of the
    # trace our figures are HTA's. On the trace as recorded we keep the nanoseconds (and so
    # differ from HTA: on ns_resolution, idle 7.6 ms against HTA's 12.1 ms).
    rounded = gpu_totals(rounded_as_hta_does(load(name)))
    for figure in ("busy", "idle", "compute"):
        assert rounded[figure] == pytest.approx(hta_figures[name][figure], rel=0.01), figure
    exact = gpu_totals(load(name))
    assert exact["busy"] > hta_figures[name]["busy"]


def test_memcpy_and_memset_count_as_memory_not_compute() -> None:
    step = analyse(read(DATA / TRACES["nccl_data"])).steps[0]
    assert step.parts_us["memory"] > 0  # 960 memcpy, 114 memset in the trace
    trace = load("nccl_data")
    for event in trace["traceEvents"]:
        if event.get("cat") in ("gpu_memcpy", "gpu_memset"):
            event["name"] = "void some_compute_kernel<float>(float*)"
    as_compute = analyse(from_document(trace)).steps[0]
    assert as_compute.parts_us["memory"] == 0
    assert as_compute.parts_us["compute"] > step.parts_us["compute"]


def test_communication_exposed_and_overlapped() -> None:
    steps = analyse(read(DATA / TRACES["trace_diff"])).steps
    for step in steps:
        # exposed + overlapped is all the time NCCL ran in the step
        exposed, overlapped = step.parts_us["communication"], step.gpu.communication_overlapped_us
        assert exposed > 0 and overlapped > 0
        assert exposed + overlapped == pytest.approx(step.collectives_us, abs=1e-6)


def test_amd_hip_trace() -> None:
    analysis = analyse(read(DATA / TRACES["amd"]), rank_from_name=3)
    assert analysis.rank == 3 and analysis.device == "gpu"
    assert analysis.warnings == ("the trace has no distributedInfo: rank 3 is taken from its file name",)
    first = analysis.steps[0]
    assert first.gpu.activities == 16  # 14 kernels and 2 memcpys, launched by hipLaunchKernel & co.
    assert first.parts_us["compute"] > 0 and first.parts_us["memory"] > 0


def test_amd_trace_in_a_job_folder_gets_its_rank_from_the_name(tmp_path: Path) -> None:
    shutil.copy(DATA / TRACES["amd"], tmp_path / "rank0_iter1_2.json.gz")
    report = build_report(tmp_path, ReportSettings(plot=False))
    assert report.ranks[0].rank == 0 and report.ranks[0].device == "gpu"
    assert report.warnings == ["rank 0: the trace has no distributedInfo: rank 0 is taken from its file name"]
    assert (
        "Warning: rank 0: the trace has no distributedInfo" in (meta_of(tmp_path) / "report.md").read_text()
    )


def test_one_rank_has_no_straggler_line(tmp_path: Path) -> None:
    shutil.copy(DATA / TRACES["ns_resolution"], tmp_path / "rank0_iter101_105.json.gz")
    report = build_report(tmp_path, ReportSettings(merged_trace=False, plot=False))
    assert report.straggler is None
    title, *body = (meta_of(tmp_path) / "report.md").read_text().splitlines()
    assert not [line for line in body if "straggler" in line.lower()]
    assert "| 0 | " in "\n".join(body)


def test_recovers_a_known_clock_offset_within_50_us() -> None:
    trace = load("nccl_data")
    moved = copy.deepcopy(trace)
    jitter = random.Random(7)
    for event in moved["traceEvents"]:
        if "ts" in event:
            event["ts"] += 3_700.0 + jitter.uniform(-25.0, 25.0)
    reference, other = analyse(from_document(trace)), analyse(from_document(moved))
    clock = align(
        instances(reference.collectives), instances(other.collectives), prior_us=0.0, step_us=220_000.0
    )
    assert clock.method == "matched collectives"
    assert clock.shift_us == pytest.approx(-3_700.0, abs=50.0)
    assert clock.pairs >= 10 and clock.residual_us < 50.0


def test_without_a_reliable_pairing_the_base_time_is_kept() -> None:
    found = instances(analyse(read(DATA / TRACES["nccl_data"])).collectives)
    lonely = [i for i in found if i.symmetric][:2]  # two all-reduces: too few to trust
    clock = align(found, lonely, prior_us=1234.0, step_us=220_000.0)
    assert (clock.method, clock.shift_us, clock.pairs, clock.matched) == ("base time", 1234.0, 0, {})
    assert clock.note == (
        "clocks could not be aligned: "
        "only 2 of 2 all-reduce-like collectives could be paired (at least 3 needed)"
    )
    broadcasts_only = [i for i in found if not i.symmetric]
    clock = align(found, broadcasts_only, prior_us=0.0, step_us=220_000.0)
    assert (clock.method, clock.note) == ("base time", "no all-reduce-like collective in one of the traces")


def test_real_pair_from_a_thinned_trace_is_not_misaligned(tmp_path: Path) -> None:
    # rank 0's first all-to-all kernel is not in rank 1's file: pairing by position would shift
    # rank 1 by -62.8 ms although the raw clocks agree to within 0.3 ms
    for rank in (0, 1):
        shutil.copy(DATA / TRACES[f"trace_filter_{rank}"], tmp_path / f"rank{rank}_iter551_552.json.gz")
    report = build_report(tmp_path, ReportSettings(plot=False, merged_json=True))
    clock = report.ranks[1].clock
    assert clock.method == "matched collectives" and abs(clock.shift_us) < 1000
    with gzip.open(meta_of(tmp_path) / "merged_trace.json.gz") as handle:
        merged = json.load(handle)
    ends = {
        pid: sorted(
            e["ts"] + e["dur"]
            for e in merged["traceEvents"]
            if e.get("pid") == pid and "ncclKernel" in e.get("name", "")
        )
        for pid in (0, 1)
    }
    # every collective paired by the alignment ends within 1 ms of its twin
    reference, other = (analyse(read(tmp_path / f"rank{r}_iter551_552.json.gz")) for r in (0, 1))
    theirs, mine = instances(reference.collectives), instances(other.collectives)
    clock_obj = align(theirs, mine, prior_us=0.0, step_us=600_000.0)
    for i, j in clock_obj.matched.items():
        if theirs[i].symmetric:
            assert abs((mine[j].end + clock.shift_us) - theirs[i].end) < 1000
    assert len(ends[0]) == len(ends[1]) == 10
    assert report.ranks[1].clock.pairs >= 3
    markdown = (meta_of(tmp_path) / "report.md").read_text()
    assert "| 1 | matched collectives |" in markdown


@pytest.mark.parametrize("budget_mb", [8.0, 4.0, 1.0])
def test_merged_trace_keeps_within_budget_on_kernel_heavy_traces(tmp_path: Path, budget_mb: float) -> None:
    # a kernel's args are several times a CPU operator's: sizing levels by the mean event let
    # the kept GPU kernels overrun the budget (10.1 MB written for 8 MB)
    trace = load("nccl_data")
    for rank in range(4):
        trace["distributedInfo"] = {**trace["distributedInfo"], "rank": rank, "world_size": 4}
        (tmp_path / f"rank{rank}_iter1_2.json").write_text(json.dumps(trace))
    merge = build_report(
        tmp_path, ReportSettings(plot=False, merged_json=True, merge_budget_mb=budget_mb)
    ).merge
    with gzip.open(meta_of(tmp_path) / "merged_trace.json.gz") as handle:
        written = len(handle.read())
    assert written == merge.bytes and merge.events_dropped > 0
    markdown = (meta_of(tmp_path) / "report.md").read_text()
    if budget_mb >= 4.0:
        assert written <= budget_mb * 1e6 and "still over it" not in markdown
    else:  # steps, collectives and top-level operators alone are 2.1 MB: kept, and said
        assert merge.max_cpu_depth == ALWAYS and "still over it" in markdown
