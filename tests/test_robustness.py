"""Every kind of damaged input the report reads back, each as a small case through the whole
report: it is written, the bad input is named in one line, and report.json holds no value the
hardware cannot produce (tests/robust_job.py has the job and the checks)."""

from __future__ import annotations

import gzip
import json
import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from profiling.analysis.per_trace import efficiency
from profiling.analysis.per_trace.idle import idle_causes
from profiling.folder.layout import JobFolder, ReportFiles, analysis_record, lanes_record
from profiling.folder.step_log import EXACT, HEADER_BYTES
from profiling.folder.traces import list_traces
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from tests.browser import browser, open_page  # noqa: F401 (the fixture)
from tests.robust_job import copy_job, make_job, memory_instant, report_holds, said, traces, x
from tests.test_report_page import painted


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> JobFolder:
    return make_job(tmp_path_factory.mktemp("base"))


@pytest.fixture
def job(base: JobFolder, tmp_path: Path) -> JobFolder:
    return copy_job(base, tmp_path)


def _rewrite_trace(job: JobFolder, rank: int, change: Callable[[dict], None]) -> None:
    path = next(t.path for t in list_traces(job.path) if t.rank == rank)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        trace = json.load(handle)
    change(trace)
    with opener(path, "wt") as handle:
        json.dump(trace, handle)


def _events(name: str) -> Callable[[dict], list[dict]]:
    return lambda trace: [e for e in trace["traceEvents"] if e["name"].startswith(name)]


@pytest.mark.parametrize(
    ("dims", "line"),
    [
        ([[1e20, "x"], [1, 1]], r"1 operator\(s\) with shapes no tensor has"),
        ([[2**62, 2], [2, 2]], r"operator\(s\) with shapes no tensor has \(a dimension beyond 2\^40"),
        ([[int("9" * 400), 2], [2, 2]], None),  # past any integer JSON readers take: not counted
    ],
)
def test_shapes_no_tensor_has_are_left_out_of_the_flops(job: JobFolder, dims: list, line: str | None) -> None:
    _rewrite_trace(job, 0, lambda t: _events("aten::mm")(t)[0]["args"].update({"Input Dims": dims}))
    report = report_holds(job)
    assert report.ranks[0].flops is not None  # the other ops still count
    if line:
        assert re.search(rf"rank 0: .*{line}", said(report)), said(report)


def test_a_rate_beyond_any_device_leaves_the_flops_out_and_an_mfu_above_1_blames_the_peak(
    job: JobFolder,
) -> None:
    huge = [[1 << 20, 1 << 20], [1 << 20, 1 << 20]]  # 2^61 FLOPs in 20 µs
    _rewrite_trace(job, 1, lambda t: [e["args"].update({"Input Dims": huge}) for e in _events("aten::mm")(t)])
    report = report_holds(job)
    assert report.ranks[1].flops is None and report.ranks[0].flops is not None
    assert re.search(
        r"rank 1: its counted FLOPs make .* TFLOP/s, beyond twice any device's peak", said(report)
    )
    rate = report.ranks[0].flops.tflops_per_s  # a peak it passes by half: MFU 1.5
    given = build_report(job.path, ReportSettings(plot=False, merged_trace=False, peak_tflops=rate / 1.5))
    flops = given.ranks[0].flops
    assert flops is not None and flops.mfu is None
    assert "the peak or the steps' clock is wrong, not the FLOPs" in (flops.mfu_missing or "")


def test_a_step_numbered_past_2_31_is_left_out(job: JobFolder) -> None:
    def renumber(trace: dict) -> None:
        _events("ProfilerStep#")(trace)[-1]["name"] = "ProfilerStep#100000000000000000000"

    _rewrite_trace(job, 0, renumber)
    _rewrite_trace(job, 1, renumber)
    report = report_holds(job)
    assert report.ranks[0].steps == list(range(10, 17))  # the other 7 steps
    assert "1 step(s) numbered beyond 2^31 (ProfilerStep#100000000000000000000) left out" in said(report)


@pytest.mark.parametrize(
    "args",
    [
        {"Total Allocated": -1, "Total Reserved": 2 << 20, "Device Id": -1},
        {"Total Allocated": 1e300, "Total Reserved": 2 << 20, "Device Id": -1},
        {"Total Allocated": 3 << 20, "Total Reserved": 2 << 20, "Device Id": 0},  # a GPU, reserved below
    ],
)
def test_memory_no_device_has_is_unknown(job: JobFolder, args: dict) -> None:
    _rewrite_trace(
        job, 0, lambda t: t["traceEvents"].append(memory_instant(_events("aten::mm")(t)[0]["ts"], args))
    )
    report = report_holds(job)
    memory = report.ranks[0].memory
    assert memory is not None and memory.peak_allocated_bytes == 1 << 20  # the others' peak
    assert "1 allocator instant(s) no device can have" in said(report)


def test_durations_no_run_has_are_left_out(job: JobFolder) -> None:
    def damage(trace: dict) -> None:
        _events("aten::conv2d")(trace)[0]["dur"] = -5
        _events("aten::mm")(trace)[1]["dur"] = 1e300
        _events("gloo:all_reduce")(trace)[2]["args"]["In msg nelems"] = 2**62

    _rewrite_trace(job, 0, damage)
    report = report_holds(job)
    lines = said(report)
    assert "rank 0: 2 CPU event(s) of a negative, endless or not finite duration left out" in lines
    assert "1 collective(s) of a negative duration or more than 2^40 elements left out" in lines
    assert max(report.ranks[0].step_ms) < 1  # 0.2 ms steps, the endless op aside


IMPOSSIBLE = r"value\(s\) no step can have"


def _log_bytes(job: JobFolder, rank: int) -> bytearray:
    return bytearray(job.step_log(rank).read_bytes())


def _set_row(data: bytearray, row: int, **values: float) -> None:
    at = HEADER_BYTES + row * EXACT.itemsize
    record = np.frombuffer(bytes(data[at : at + EXACT.itemsize]), dtype=EXACT).copy()
    for name, value in values.items():
        record[name] = value
    data[at : at + EXACT.itemsize] = record.tobytes()


@pytest.mark.parametrize(
    ("damage", "line"),
    [
        (lambda d: _set_row(d, 5, step=2), r"rank1.steps: its rows from row 5 on are out of step order"),
        (lambda d: d.extend(bytes(range(20))), None),  # a partial row: the kill's, ignored
        (lambda d: d.extend(b"\x01\x00\x00\x80" * 14), r"rank1.steps: its rows from row 24 on .*damaged"),
        (
            lambda d: [_set_row(d, r, cpu=0.0) for r in range(20)],
            r"rank1.steps: 20 value\(s\) no step can have",
        ),
        (
            lambda d: _set_row(d, 3, cpu=-4.0, wall=1e30, mem=-1.0),
            r"rank1.steps: 3 value\(s\) no step can have",
        ),
        (
            lambda d: struct.pack_into("<i", d, 20, -1),
            r"rank1.steps: its header is damaged \(exact steps -1\)",
        ),
    ],
)
def test_a_damaged_step_log_is_named_and_the_run_still_drawn(
    job: JobFolder, damage: Callable[[bytearray], None], line: str | None
) -> None:
    data = _log_bytes(job, 1)
    damage(data)
    job.step_log(1).write_bytes(bytes(data))
    report = report_holds(job)
    assert report.run is not None and 0 in [r.rank for r in report.run.ranks]
    if line:
        assert re.search(line, said(report)), said(report)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("[1, 2]", "Expected `object`, got `array`"),
        ("null", "Expected `object`, got `null`"),
        ('{"job_id": "42", "workload": null}', "not a Manifest file: "),
        (b"\xff\xfe{}", "not JSON"),
    ],
)
def test_a_manifest_that_does_not_read_is_named_and_the_report_made_without_it(
    job: JobFolder, text: str | bytes, line: str
) -> None:
    (job.manifest.write_bytes if isinstance(text, bytes) else job.manifest.write_text)(text)
    report = report_holds(job)
    assert f"the manifest was not read: {job.manifest}: " in said(report) and line in said(report)
    assert report.run is not None and report.run.ends.expected_last_step is None


def test_a_manifest_of_impossible_steps_asks_for_none(job: JobFolder) -> None:
    document = json.loads(job.manifest.read_text())
    document["workload"]["steps"] = -5
    job.manifest.write_text(json.dumps(document))
    report = report_holds(job)
    assert report.run is not None and report.run.ends.expected_last_step is None


def test_an_oom_dump_that_does_not_read_is_named(job: JobFolder) -> None:
    dump = json.loads(job.oom_dump(1).read_text())
    job.oom_dump(1).write_text(json.dumps(dump | {"device": None}))
    report = report_holds(job)
    assert report.oom == [] and re.search(r"oom/rank1.json: not a OomDump file: .*\$.device", said(report))


def _lanes(job: JobFolder, rank: int) -> Path:
    trace = next(t for t in list_traces(job.path) if t.rank == rank)
    return lanes_record(trace.path, job.path)


@pytest.mark.parametrize(
    "damage",
    ["truncated", "empty", "garbage", "other rank's", "name index", "kind -1"],
)
def test_a_damaged_lanes_file_is_made_again_and_the_path_is_the_same(job: JobFolder, damage: str) -> None:
    fresh = report_holds(job)
    path = _lanes(job, 0)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(b"\x93\xa4junk" * 10)
    elif damage == "other rank's":
        path.write_bytes(_lanes(job, 1).read_bytes())
    else:
        lanes = msgspec.msgpack.decode(data)["lanes"]  # the file: {lanes, checksum}
        lane = lanes["steps"][0]  # a StepLane, array-like: step, start, end, starts, ends, kinds, names
        field, dtype = (6, np.int32) if damage == "name index" else (5, np.int8)
        codes = np.frombuffer(lane[field], dtype=dtype).copy()
        codes[0] = len(lanes["names"]) + 3 if field == 6 else -1
        lane[field] = codes.tobytes()
        body = msgspec.msgpack.encode(lanes)  # its checksum made anew: the lane's check must see it
        path.write_bytes(msgspec.msgpack.encode({"lanes": msgspec.Raw(body), "checksum": zlib.crc32(body)}))
    # the path kept beside report.json needs no lane (tests/test_warm_report.py): walked again
    ReportFiles.of(job.path).kept_path.unlink()
    again = report_holds(job)
    assert again.critical_path == fresh.critical_path
    assert re.search(rf"{re.escape(str(path))} was made again from its trace: ", said(again)), said(again)


def test_a_damaged_record_is_made_again_and_named(job: JobFolder) -> None:
    trace = next(t for t in list_traces(job.path) if t.rank == 1)
    record = analysis_record(trace.path, job.path)
    record.write_bytes(record.read_bytes()[:100])
    report = report_holds(job)
    assert f"{record} was made again from its trace: it does not read" in said(report)
    assert trace.name in report.reading.read_here


HOSTILE = ("<!--<script>", "</script><img src=x onerror=alert(1)>")


def hostile_job(root: Path) -> JobFolder:
    """Names a browser would take for markup: a host, an op, a node."""
    found = traces()
    found[0]["host_name"] = HOSTILE[0]
    found[1]["traceEvents"].append(x(HOSTILE[1], 5, 1))
    return make_job(root, found, nodes=HOSTILE)


def test_hostile_names_are_text_on_the_page(tmp_path: Path) -> None:
    job = hostile_job(tmp_path)
    page = ReportFiles.of(job.path).page.read_text()
    data = page[page.index('id="page-data">') : page.index("</script>", page.index('id="page-data">'))]
    assert "<" not in data.removeprefix('id="page-data">') and "\\u003c!--\\u003cscript" in data
    assert "<!--<script>" not in page and "<img src=x" not in page  # text, never markup


def test_overlapping_kernels_wait_no_negative_time() -> None:
    causes = idle_causes(
        start=np.array([0.0, 5.0, 40.0]),
        end=np.array([30.0, 10.0, 50.0]),
        stream=np.array([7, 7, 7]),
        launched_at=np.array([np.nan, np.nan, np.nan]),
    )
    assert causes.kernel_wait_us >= 0 and causes.other_us >= 0 and causes.total_us == 30.0


def test_kernels_without_device_properties_are_still_a_gpus() -> None:
    _, _, why = efficiency._peak(None, "bf16", None, gpu=True)
    assert why == "the trace names no GPU (it has kernels, no deviceProperties): pass --peak-tflops"


def test_a_page_of_hostile_names_opens_with_its_map_drawn(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    job = hostile_job(tmp_path)
    build_report(job.path, ReportSettings(merged_trace=False, jobs=1))  # with run.png: the map is drawn
    assert open_page(browser, ReportFiles.of(job.path).page) == []  # page.js ran: no error
    assert painted(browser)["grey"] + painted(browser)["red"] + painted(browser)["blue"] > 1000
    tip = browser.find_element("id", "runmap-tip").text
    assert tip.startswith("Drag over the map")  # the script filled it: page.js was not swallowed
    assert HOSTILE[0] in browser.find_element("id", "report").text  # the host, shown as text


def test_a_peak_beyond_the_gpus_memory_is_unknown(job: JobFolder) -> None:
    """A 1 PB peak on a 16 GB V100: beyond the device's memory, read as unknown and said."""

    def on_a_v100(trace: dict) -> None:
        trace["deviceProperties"] = [{"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16 << 30}]
        at = _events("aten::mm")(trace)[0]["ts"]
        fine = {"Total Allocated": 8 << 30, "Total Reserved": 9 << 30, "Device Id": 0}
        trace["traceEvents"] += [
            memory_instant(at, fine),
            memory_instant(at + 1, {"Total Allocated": 10**15, "Total Reserved": 10**15, "Device Id": 0}),
        ]

    _rewrite_trace(job, 0, on_a_v100)
    report = report_holds(job)
    memory = report.ranks[0].memory
    assert memory is not None and memory.device == "cuda:0" and memory.peak_allocated_bytes == 8 << 30
    assert "rank 0: 1 allocator instant(s) no device can have" in said(report)
