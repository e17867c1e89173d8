"""The two trace readers agree on malformed input: for every file, the scanner in C gives the
Python reader's columns exactly, or declines (and the Python reader decides); neither raises
anything but :class:`TraceFormatError`, and neither hangs.

The inputs are mutations of the real GPU traces in tests/data (their first events, so that a
case takes milliseconds): bytes flipped, files cut, strings escaped, numbers made odd, values
nested deep, strings made long and bytes that are not UTF-8. The seed is fixed: a failure is
reproduced by its case number."""

from __future__ import annotations

import collections
import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from profiling.analysis.reading import trace_scan
from profiling.analysis.reading.trace_errors import TraceFormatError
from profiling.analysis.reading.trace_events import read, read_in_python
from tests import synthetic
from tests.common import needs_scanner, run_module
from tests.test_trace_reading import seconds_at_most
from tests.test_trace_scan import assert_same

DATA = Path(__file__).parent / "data" / "gpu_traces"
CASES = 3000

ODD_NUMBERS = [b"1e400", b"-1e400", b"1e-400", b"010", b"007", b"-.5", b"1-2", b"-", b"1e", b"1.", b"+1",
               b"-0", b"1E+2", b"9223372036854775808", b"12345678901234567890123", b"0.5e-320"]  # fmt: skip
ESCAPES = [b"\\u0063", b"\\x41", b"\\u12", b"\\ud800", b"\\udc00", b"\\ud83d\\ude00", b"\\/", b"\\n", b"\\"]
NOT_UTF8 = [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x01"]
FLIPS = b'"\\{}[],:-0e.n \xff\x00'


def excerpts() -> list[bytes]:
    """The first events of each real trace, with its other top-level fields, as JSON."""
    found = []
    for path in sorted(DATA.glob("*.json.gz")):
        document = json.loads(gzip.decompress(path.read_bytes()))
        document["traceEvents"] = document["traceEvents"][:60]
        found.append(json.dumps(document, ensure_ascii=False).encode())
    return found


def _somewhere(text: bytes, rng: random.Random, what: bytes) -> int:
    """A random place of ``what`` in ``text`` (-1 where it has none)."""
    places, at = [], text.find(what)
    while at >= 0 and len(places) < 200:
        places.append(at)
        at = text.find(what, at + 1)
    return rng.choice(places) if places else -1


def flip(text: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(text))
    return text[:at] + bytes([rng.choice(FLIPS)]) + text[at + 1 :]


def cut(text: bytes, rng: random.Random) -> bytes:
    return text[: rng.randrange(len(text))] + rng.choice([b"", b"]}", b"}]}"])


def escape(text: bytes, rng: random.Random) -> bytes:
    at = _somewhere(text, rng, b'"')
    return text[: at + 1] + rng.choice(ESCAPES) + text[at + 1 :]


def odd_number(text: bytes, rng: random.Random) -> bytes:
    key = rng.choice([b'"ts": ', b'"dur": ', b'"pid": ', b'"correlation": ', b'"stream": ', b'": '])
    at = _somewhere(text, rng, key)
    if at < 0:
        return text
    start = at + len(key)
    end = start
    while end < len(text) and text[end : end + 1] in b"0123456789.-+eE":
        end += 1
    return text[:start] + rng.choice(ODD_NUMBERS) + text[end:]


def nest(text: bytes, rng: random.Random) -> bytes:
    at = _somewhere(text, rng, b'"args": {')
    depth = rng.choice([10, 63, 65, 200, 3000])
    inner = rng.choice([b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth])
    return text[: at + 9] + b'"deep": ' + inner + b", " + text[at + 9 :] if at >= 0 else text


def long_string(text: bytes, rng: random.Random) -> bytes:
    at = _somewhere(text, rng, b'"name": "')
    filler = rng.choice([b"},", b"}, {", b"]", b'\\"},'])
    return text[: at + 9] + filler * rng.choice([100, 5000]) + text[at + 9 :] if at >= 0 else text


def not_utf8(text: bytes, rng: random.Random) -> bytes:
    at = _somewhere(text, rng, b'": "')
    return text[: at + 4] + rng.choice(NOT_UTF8) + text[at + 4 :] if at >= 0 else text


MUTATIONS: list[Callable[[bytes, random.Random], bytes]] = [
    flip, cut, escape, odd_number, nest, long_string, not_utf8,
]  # fmt: skip


def outcome_of(path: Path, chunk_bytes: int) -> str:
    """Both readers on one file: "refused", "declined" or "the same columns"; a disagreement
    or any other error fails the test."""
    try:
        python = read_in_python(path, chunk_bytes=chunk_bytes)
    except TraceFormatError:
        python = None
    try:
        scanned = trace_scan.read_scanned(path, chunk_bytes)
    except (trace_scan.NotScannable, TraceFormatError):
        return "refused" if python is None else "declined"
    assert python is not None, "the scanner took a file the Python reader refuses"
    assert_same(scanned, python)
    return "the same columns"


@needs_scanner()
def test_mutated_real_traces_are_read_alike_or_declined(tmp_path: Path) -> None:
    rng = random.Random(36)
    sources = excerpts()
    seen: collections.Counter[str] = collections.Counter()
    path = tmp_path / "t.json"
    with seconds_at_most(300):
        for case in range(CASES):
            text = rng.choice(sources)
            for _ in range(rng.choice([1, 1, 2, 3])):
                text = rng.choice(MUTATIONS)(text, rng)
            path.write_bytes(text)
            chunk_bytes = rng.choice([97, 1000, 4096, 1 << 20])
            try:
                seen[outcome_of(path, chunk_bytes)] += 1
            except AssertionError as error:
                raise AssertionError(f"case {case} (chunks of {chunk_bytes}): {error}") from None
    # every outcome is reached: the mutations test both readers, not only their refusals
    assert min(seen.values()) >= CASES // 20 and len(seen) == 3, seen


@needs_scanner()
@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (lambda e: e.replace(b'"correlation": 1', b'"\\u0063orrelation": 1'), None),
        (lambda e: e.replace(b'"ts": 10', b'"ts": 1e400'), "`ts` holds a number out of range"),
        (lambda e: e.replace(b'"ts": 10', b'"ts": 010'), r"not valid JSON at byte \d+ \(invalid number\)"),
        (lambda e: e.replace(b'"ts": 10', b'"ts": -.5'), "not valid JSON"),
        (lambda e: e.replace(b'"name": "op"', b'"name": "\\x41"'), "not valid JSON"),
        (lambda e: e.replace(b'"name": "op"', b'"name": "\\u12"'), "not valid JSON"),
        (lambda e: e.replace(b'"name": "op"', b'"name": "\xff"'), "not valid UTF-8"),
        (lambda e: e.replace(b'"correlation": 1', b'"correlation": 9223372036854775808'), "out of range"),
        (lambda e: e.replace(b'"x": 1', b'"x": ' + b"[" * 10000 + b"]" * 10000), "nested deeper"),
    ],
    ids=["escaped key", "1e400", "010", "-.5", "bad escape", "short escape", "not utf-8", "2**63", "deep"],
)
def test_what_the_issue_found(tmp_path: Path, fault: Callable[[bytes], bytes], reason: str | None) -> None:
    kernel = {"ph": "X", "cat": "kernel", "name": "op", "pid": 0, "tid": 7, "ts": 10, "dur": 2,
              "args": {"correlation": 1, "stream": 7, "x": 1}}  # fmt: skip
    path = tmp_path / "t.json"
    path.write_bytes(fault(json.dumps({"traceEvents": [kernel]}).encode()))
    if reason is None:  # a valid trace: both read correlation 1, or the scanner declines it
        assert read(path).gpu_corr.tolist() == [1]
        assert outcome_of(path, 1 << 20) in ("declined", "the same columns")
        return
    with pytest.raises(TraceFormatError, match=rf"^{path}: .*{reason}"):
        read(path)
    assert outcome_of(path, 1 << 20) == "refused"


def test_a_string_full_of_cut_marks_reads_in_linear_time(tmp_path: Path) -> None:
    # a 3 MB string of "}," across the first chunk: each "}," was tried as a cut, a copy and a
    # decode of up to 2 MiB each time, minutes in all
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op {i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
              for i in range(5000)]  # fmt: skip
    events[10]["name"] = '\\"},' * 750_000
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    for reader in (read_in_python, read):
        with seconds_at_most(20):
            assert len(reader(path).span_start) == 5000


def test_a_report_names_each_bad_trace_in_a_line_and_reads_the_others(tmp_path: Path) -> None:
    traces = synthetic.cpu_job(4, ranks=4)
    synthetic.write_job(tmp_path, traces[:2], 4)
    deep = json.dumps(traces[2]).replace(
        '"Input Dims": [[100]]', '"Input Dims": ' + "[" * 10_000 + "]" * 10_000
    )
    (tmp_path / "rank2_iter10_13.json").write_text(deep)
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1,
              "args": {"correlation": 2**63}}  # fmt: skip
    traces[3]["traceEvents"].append(kernel)
    (tmp_path / "rank3_iter10_13.json").write_text(json.dumps(traces[3]))
    result = run_module("jobs.commands.report", str(tmp_path), "--no-merged-trace", "--no-plot")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "skipped rank2_iter10_13.json: values nested deeper than a trace's" in result.stdout
    assert "skipped rank3_iter10_13.json: an event's `correlation` is out of range" in result.stdout
    assert "Analysis: 2 trace(s)" in result.stdout, result.stdout  # the two read; none "-1 from records"
