"""Reading traces in chunks (json_stream) and writing the merged trace in parts (merge)."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiling.analysis.across_ranks.merge import (
    ALWAYS,
    MergedTraceWriter,
    MergeStats,
    crc32_combine,
    plan_depth,
    write_part,
)
from profiling.analysis.reading.json_stream import TraceFormatError, TraceStream, read_header
from profiling.analysis.reading.trace_events import from_document, read


@contextlib.contextmanager
def seconds_at_most(seconds: int) -> Iterator[None]:
    """Ends what runs inside (Python code, in this thread) with TimeoutError after ``seconds``."""

    def expire(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def trace_document(events: int) -> dict:
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 1},
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": 'op "},{" ' + str(i),  # the cut marker inside a string
                "pid": 1,
                "tid": 1,
                "ts": i * 10.0,
                "dur": 5,
                "args": {"nested": {"a": [1, {"b": "}, {"}]}},
            }
            for i in range(events)
        ],
        "traceName": "x",
        "baseTimeNanoseconds": 1234,
    }


@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.parametrize("indent", [None, 2])
def test_chunks_hold_every_event_once_whatever_the_cuts(
    tmp_path: Path, gzipped: bool, indent: int | None
) -> None:  # noqa: E501
    document = trace_document(500)
    path = tmp_path / ("t.json.gz" if gzipped else "t.json")
    text = json.dumps(document, indent=indent).encode()
    path.write_bytes(gzip.compress(text) if gzipped else text)
    stream = TraceStream(path, chunk_bytes=997)  # cuts fall everywhere, also inside strings
    events = [event for chunk in stream.chunks() for event in chunk]
    assert [e.name for e in events] == [e["name"] for e in document["traceEvents"]]
    assert json.loads(bytes(events[3].args)) == {"nested": {"a": [1, {"b": "}, {"}]}}
    assert stream.header == {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 1},
        "traceName": "x",
        "baseTimeNanoseconds": 1234,
    }
    assert stream.bytes_read == len(text)
    assert read(path).span_start.tolist() == [i * 10.0 for i in range(500)]


def test_streamed_columns_equal_the_in_memory_ones(tmp_path: Path) -> None:
    document = trace_document(50)
    (tmp_path / "t.json").write_text(json.dumps(document))
    streamed, whole = read(tmp_path / "t.json"), from_document(document)
    for column in ("span_start", "span_end", "span_thread", "span_name", "span_ordinal"):
        assert getattr(streamed, column).tolist() == getattr(whole, column).tolist()
    assert streamed.names == whole.names and streamed.event_count == 50


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"schemaVersion": 1, "nothing": []}', "no traceEvents list"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2}', "traceEvents is not closed"),
        (
            b'{"traceEvents": [{"ph": "X", "ts": "yesterday"}]}',
            "event 0's `ts` is a string where the trace format has a number$",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1}, 7]}',
            "event 1 is an integer where the trace format has an object",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1}, {"ts": 1e400}]}',
            "event 1's `ts` holds a number out of range",
        ),
        (b'{"traceEvents": [{"ph": "X", "ts": 01}]}', r"not valid JSON at byte 36 \(invalid number\)"),
        (b'{"a": [[[[' + b"[" * 5000 + b'], "traceEvents": []}', "nested deeper than a trace's"),
    ],
)
def test_not_a_trace(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "t.json").write_bytes(content)
    with pytest.raises(TraceFormatError, match=message):
        read_header(tmp_path / "t.json")


def test_crc32_combine() -> None:
    a, b = os.urandom(1000), os.urandom(70_000)
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b""), 0) == zlib.crc32(a)


def test_plan_depth_drops_the_deepest_cpu_levels_then_gpu_kernels() -> None:
    stats = [MergeStats(100, 30, (0, 50, 80, 200)), MergeStats(100, 30, (0, 50, 80))]
    assert plan_depth(stats, None) is None
    assert plan_depth(stats, 10_000) is None  # all of it (720) fits
    assert plan_depth(stats, 519) == 1 and plan_depth(stats, 520) == 2  # 200 + 60 + 100 + 160
    assert plan_depth(stats, 360) == 1  # 200 always + 60 GPU + 100 at depth 1
    assert plan_depth(stats, 260) == 0  # top-level only
    assert plan_depth(stats, 259) == ALWAYS  # GPU kernels go too
    assert plan_depth(stats, 10) == ALWAYS  # that is as small as it gets: the report says the size


def test_merged_file_from_parts_is_one_valid_gzip_member(tmp_path: Path) -> None:
    for rank in (0, 1):
        (tmp_path / f"r{rank}.json").write_text(json.dumps(trace_document(300)))
    out = tmp_path / "merged.json.gz"
    writer = MergedTraceWriter(out, base_time_ns=7)
    writer.write(b'{"ph":"M","name":"process_name","pid":0,"tid":0,"args":{"name":"rank 0"}}')
    for rank in (0, 1):
        part = write_part(
            tmp_path / f"r{rank}.json", tmp_path / f"p{rank}", rank, 100.0 * rank, 1, None, None
        )  # noqa: E501
        assert (part.kept, part.dropped) == (300, 0)
        writer.append(part)
    size = writer.close({"ranks": [0, 1]})
    raw = zlib.decompressobj(31)  # one gzip member: nothing may be left after it
    text = raw.decompress(out.read_bytes())
    assert raw.eof and not raw.unused_data and len(text) == size
    merged = json.loads(text)
    assert merged["baseTimeNanoseconds"] == 7 and merged["otherData"] == {"ranks": [0, 1]}
    spans = [e for e in merged["traceEvents"] if e["ph"] == "X"]
    assert [e["pid"] for e in spans] == [0] * 300 + [1] * 300
    assert spans[300 + 5]["ts"] == 150.0 and spans[5]["ts"] == 50.0


def test_an_event_larger_than_a_chunk_is_read_whole(tmp_path: Path) -> None:
    # the stream found no whole event in a full buffer and looped without reading on (the
    # header's read takes the first MiB: the large event lies past it)
    document = trace_document(16000)
    document["traceEvents"][12000]["args"] = {"big": [{"x": "}, {" * 10} for _ in range(300)]}
    (tmp_path / "t.json").write_text(json.dumps(document))
    stream = TraceStream(tmp_path / "t.json", chunk_bytes=4096)
    with seconds_at_most(30):
        events = [event for chunk in stream.chunks() for event in chunk]
    assert [e.name for e in events] == [e["name"] for e in document["traceEvents"]]
    assert json.loads(bytes(events[12000].args)) == document["traceEvents"][12000]["args"]


@pytest.mark.parametrize(
    "odd",
    [
        b"{}", b"", b"null", b'"x"', b"[1, 2]", b'{"Device Id": -5, "Total Allocated": 1e300}',
        b'{"Device Id": 4294967296}', b'{"Device Id": 99999999999999999999999}', b'{"Device Id": true}',
        b'{"Device Id": 3.0}', b'{"Total Allocated": true}', b'{"Total Allocated": "3"}',
        b'{"Total Allocated": 99999999999999999999999}', b'{"Total Allocated": 5, "Total Allocated": 6}',
    ],
)  # fmt: skip
def test_the_allocators_instants_read_typed_give_what_they_give_untyped(
    odd: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The [memory] instants' args are read typed where they hold what torch writes (a trace's
    28 000 of them 5x faster), else one by one: each column the same either way, odd or not."""
    import msgspec
    import numpy as np

    from profiling.analysis.reading import instant_args

    args = [b'{"Total Allocated": 5, "Total Reserved": 7.5, "Device Id": 0}', odd, b'{"Device Id": 1}']
    typed: dict[str, list] = {}
    instant_args.add_memory(typed, np.arange(3.0), args)
    # no typed read: a decoder that never takes them
    monkeypatch.setattr(instant_args, "_MEMORY_ARGS", msgspec.json.Decoder(list[int]))
    untyped: dict[str, list] = {}
    instant_args.add_memory(untyped, np.arange(3.0), args)
    assert typed.keys() == untyped.keys()
    for column, [values] in typed.items():
        assert values.dtype == untyped[column][0].dtype
        np.testing.assert_array_equal(values, untyped[column][0])
    assert typed["memory_device"][0].tolist()[::2] == [0, 1]
