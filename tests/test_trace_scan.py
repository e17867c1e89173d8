"""The compiled trace scanner (profiling/analysis/reading/_scan.c) gives the Python reader's columns,
exactly, or declines and the Python reader reads the trace."""

from __future__ import annotations

import collections
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiling.analysis.reading import trace_scan
from profiling.analysis.reading.trace_columns import TraceEvents
from profiling.analysis.reading.trace_events import read, read_in_python
from tests.common import needs_scanner

DATA = Path(__file__).parent / "data" / "gpu_traces"

pytestmark = needs_scanner()


def assert_same(scanned: TraceEvents, python: TraceEvents) -> None:
    for field in dataclasses.fields(TraceEvents):
        a, b = getattr(scanned, field.name), getattr(python, field.name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), field.name
        else:
            assert a == b, field.name


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json.gz")))
def test_the_real_gpu_traces_scan_to_the_python_readers_columns(name: str) -> None:
    assert_same(trace_scan.read_scanned(DATA / name), read_in_python(DATA / name))


def event(i: int, **fields: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": f"op {i}",
        "pid": 7,
        "tid": 8,
        "ts": 10.0 * i,
        "dur": 5,
        **fields,
    }


def write(path: Path, events: list[dict[str, Any]], indent: int | None = None) -> Path:
    document = {"distributedInfo": {"rank": 0}, "traceEvents": events, "baseTimeNanoseconds": 9}
    path.write_text(json.dumps(document, indent=indent, ensure_ascii=False))
    return path


@pytest.mark.parametrize("indent", [None, 2])
def test_cuts_inside_strings_and_args_and_every_kind_of_event(tmp_path: Path, indent: int | None) -> None:
    events = []
    for i in range(300):
        events += [
            event(i, args={"nested": {"a": [1, {"b": "}, {"}]}, "s": "},]"}),  # the cut marker inside
            event(
                i,
                cat="kernel",
                name="ncclKernel_AllReduce_RING_LL_Sum_float",
                pid=0,
                tid=7,
                args={"correlation": i, "stream": 7, "Collective name": "allreduce", "Group size": 8},
            ),
            event(i, cat="cuda_runtime", name="cudaLaunchKernel", args={"correlation": i}),
            event(i, cat="cuda_runtime", name="cudaEventRecord", args={"correlation": 10_000 + i}),
            event(
                i,
                cat="cuda_sync",
                name="Stream Wait Event",
                pid=0,
                tid=8,
                args={"stream": 8, "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 10_000 + i},
            ),
            event(i, cat="cuda_sync", name="Stream Wait Event", pid=0, tid=8, args={"wait_on_stream": "7"}),
            event(i, cat="gpu_memcpy", pid=0, tid="stream 7 ", args={"stream": "copy"}),
            event(i, name="ProfilerStep#3", cat="user_annotation", pid="Spans", tid=None),
            event(i, ts=None),  # not complete: no time
            {"ph": "f", "id": i, "pid": 7, "tid": 8, "ts": 1.5, "cat": "ac2g", "name": "ac2g", "bp": "e"},
            {"ph": "X", "name": "no category", "ts": 3, "tid": 1},
            event(i, name="ünïcødé ✓", dur=2.5e-3, ts=1718000000000000.125),
        ]
    path = write(tmp_path / "t.json", events, indent)
    for chunk_bytes in (997, 4096, 1 << 20):  # cuts fall everywhere, also inside strings and args
        assert_same(trace_scan.read_scanned(path, chunk_bytes), read_in_python(path, chunk_bytes=chunk_bytes))


@pytest.mark.parametrize(
    "odd",
    [
        {"name": 'an "escaped" name'},
        {"pid": 1.5},
        {"args": None},
        {"args": {"correlation": 1.5}},
    ],
    ids=["escaped name", "fractional pid", "args not an object", "fractional correlation"],
)
def test_what_the_scanner_declines_is_read_the_python_way(tmp_path: Path, odd: dict[str, Any]) -> None:
    path = write(tmp_path / "t.json", [event(0), event(1, **odd), event(2)])
    with pytest.raises(trace_scan.NotScannable):
        trace_scan.read_scanned(path)
    try:
        python = read_in_python(path)
    except ValueError:  # refused the Python way: read() refuses it the same way
        with pytest.raises(ValueError):
            read(path)
        return
    assert_same(read(path), python)


# no character JSON escapes (a name with one is declined: test above), "}," and "]" welcome
text = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='"\\'), max_size=12)
value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
lane = st.none() | st.integers(-(2**31), 2**59) | text  # the scanner takes 18 digits
random_event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "X", "X", "X", "i", "M", "f", "B"]),
        "ts": st.integers(0, 2**53) | st.floats(0, 2e15) | st.floats(0, 2e15) | st.none(),
    },
    optional={
        "cat": st.sampled_from(
            ["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "gpu_user_annotation", "cpu_instant_event", ""]
        )
        | text,
        # FLOPs counted; the allocator's instants
        "name": text | st.sampled_from(["aten::mm", "aten::addmm", "aten::convolution", "[memory]"]),
        "pid": lane,
        "tid": lane,
        "dur": st.integers(0, 10**6) | st.floats(0, 1e6),
        "id": st.integers(0, 10**6),
        "args": st.dictionaries(text, value, max_size=4)
        | st.fixed_dictionaries(
            {"correlation": st.integers(-1, 2**40)}, optional={"stream": st.integers(0, 99) | text}
        )
        | st.fixed_dictionaries(
            {"Total Allocated": st.integers(-5, 2**40) | text | st.none()},
            optional={
                "Total Reserved": st.integers(0, 2**40),
                "Device Id": st.integers(-2, 9) | st.booleans(),
            },
        )
        | st.fixed_dictionaries(
            {"Input Dims": st.lists(st.lists(st.integers(0, 9), max_size=4), max_size=4)},
            optional={
                "Input type": st.lists(st.sampled_from(["float", "c10::BFloat16", "", "Scalar"]), max_size=3),
                "Concrete Inputs": st.lists(st.sampled_from(["", "[2, 2]", "[1]", "True", "x"]), max_size=11),
            },
        ),
    },
)


def test_any_trace_scans_to_the_python_readers_columns_or_is_declined() -> None:
    outcomes: collections.Counter[str] = collections.Counter()

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(events=st.lists(random_event, max_size=40), chunk_bytes=st.integers(64, 2048))
    def scans_alike(events: list[dict[str, Any]], chunk_bytes: int) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = write(Path(folder) / "t.json", events)
            try:
                python = read_in_python(path, chunk_bytes=chunk_bytes)
            except ValueError:
                outcomes["not a trace"] += 1  # a str ts, say: the Python reader refuses it
                return
            try:
                scanned = trace_scan.read_scanned(path, chunk_bytes)
            except trace_scan.NotScannable:
                outcomes["declined"] += 1
                return
            assert_same(scanned, python)
            outcomes["the same columns"] += 1

    scans_alike()
    assert outcomes["the same columns"] >= 0.8 * sum(outcomes.values()), outcomes


def test_an_empty_chunk_and_a_long_lane_are_taken_as_they_are(tmp_path: Path) -> None:
    assert trace_scan._scan is not None
    assert trace_scan._scan.scan(b"", {}, {}, {}) == (False, 0)  # declined, not "cut" before its start
    # a pid and tid over 255 bytes in a chunk's last event: read, not taken for a cut
    path = write(tmp_path / "t.json", [event(0), event(1, pid="p" * 200, tid="t" * 200)])
    assert_same(trace_scan.read_scanned(path), read_in_python(path))
