"""Each file the report reads back, mutated, through the whole report: the report is written and
holds to its model whatever the file holds (tests/robust_job.py's checks), and, differentially,
what does not come from the mutated file is what the intact job's report says. A mutated
record or lanes cache changes nothing but a line; a mutated step log, dump or manifest leaves
the traces' figures as they were; a trace's mutated op shapes or allocator totals leave the
other rank's.

Mutations of the real files of a small job: bytes flipped, files cut, garbage appended, values
of another type, huge, negative and non-finite numbers, nesting 100 000 deep, hostile strings.
The seed is fixed (a failure is reproduced by its case number); each family is bounded in
cases and in time."""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from profiling.folder.layout import JobFolder, analysis_record, lanes_record
from profiling.folder.traces import list_traces
from profiling.schema import model
from tests.robust_job import copy_job, make_job, report_holds

CASES = 36  # a family
SECONDS = 25.0  # at most, a family
HOSTILE = ["<!--<script>", "</script><img src=x onerror=alert(1)>", "\u2028", "\x00", "é" * 300]
DEEP = "nested 100 000 deep"  # written as such by _dumps (no Python value nests that deep)
NUMBERS = [-1, -1e300, 1e300, 2**62, 10**30, 0, 1e-300, float("nan"), float("inf"), True, "7", None]


def flip(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data))
    return data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :]


def cut(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data))]


def garbage(data: bytes, rng: random.Random) -> bytes:
    return data + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))


def _walk(document: object, rng: random.Random) -> object:
    """``document`` with one value somewhere in it replaced by something of another kind."""
    if isinstance(document, dict) and document:
        key = rng.choice(list(document))
        return {**document, key: _walk(document[key], rng) if rng.random() < 0.6 else _odd(rng)}
    if isinstance(document, list) and document:
        at = rng.randrange(len(document))
        return [
            *document[:at],
            _walk(document[at], rng) if rng.random() < 0.6 else _odd(rng),
            *document[at + 1 :],
        ]
    return _odd(rng)


def _odd(rng: random.Random) -> object:
    kind = rng.randrange(4)
    if kind == 0:
        return rng.choice(NUMBERS)
    if kind == 1:
        return rng.choice(HOSTILE)
    if kind == 2:
        return rng.choice([[], {}, [1, [2]], {"a": None}])
    return DEEP if rng.random() < 0.1 else -rng.random() * 1e9


def json_mutation(data: bytes, rng: random.Random) -> bytes:
    """A value swapped (most cases), or the bytes damaged."""
    if rng.random() < 0.7:
        try:
            document = json.loads(data)
        except ValueError:
            return flip(data, rng)
        return _dumps(_walk(document, rng))
    return rng.choice([flip, cut, garbage])(data, rng)


def _dumps(document: object) -> bytes:
    return (
        json.dumps(document, allow_nan=True).replace(json.dumps(DEEP), "[" * 100_000 + "]" * 100_000).encode()
    )


def bytes_mutation(data: bytes, rng: random.Random) -> bytes:
    return rng.choice([flip, flip, cut, garbage])(data, rng)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobFolder, model.Report]:
    job = make_job(tmp_path_factory.mktemp("base"))
    return job, report_holds(job)


def _trace(job: JobFolder, rank: int) -> Path:
    return next(t.path for t in list_traces(job.path) if t.rank == rank)


def _fuzz(
    base: tuple[JobFolder, model.Report],
    tmp_path: Path,
    seed: int,
    target: Callable[[JobFolder], Path],
    mutate: Callable[[bytes, random.Random], bytes],
    same: Callable[[model.Report, model.Report], None],
) -> None:
    job, intact = base
    rng = random.Random(seed)
    deadline = time.monotonic() + SECONDS
    for case in range(CASES):
        if time.monotonic() > deadline and case >= 8:
            break
        copy = copy_job(job, tmp_path / str(case))
        path = target(copy)
        path.write_bytes(mutate(path.read_bytes(), rng))
        try:
            report = report_holds(copy)
            same(report, intact)
        except BaseException as error:
            raise AssertionError(f"case {case} (seed {seed}), {path.name}: {error}") from error
        shutil.rmtree(copy.path)


def _traces_alike(report: model.Report, intact: model.Report) -> None:
    assert [r.step_ms for r in report.ranks] == [r.step_ms for r in intact.ranks]
    assert report.critical_path == intact.critical_path and report.straggler == intact.straggler


def _all_alike(report: model.Report, intact: model.Report) -> None:
    _traces_alike(report, intact)
    assert report.ranks == intact.ranks and report.run == intact.run


def test_step_logs(base: tuple[JobFolder, model.Report], tmp_path: Path) -> None:
    _fuzz(base, tmp_path, 1, lambda job: job.step_log(1), bytes_mutation, _traces_alike)


def test_oom_dumps(base: tuple[JobFolder, model.Report], tmp_path: Path) -> None:
    def alike(report: model.Report, intact: model.Report) -> None:
        _traces_alike(report, intact)
        assert report.run == intact.run

    _fuzz(base, tmp_path, 2, lambda job: job.oom_dump(1), json_mutation, alike)


def test_manifests(base: tuple[JobFolder, model.Report], tmp_path: Path) -> None:
    _fuzz(base, tmp_path, 3, lambda job: job.manifest, json_mutation, _traces_alike)


def test_record_caches(base: tuple[JobFolder, model.Report], tmp_path: Path) -> None:
    _fuzz(base, tmp_path, 4, lambda job: analysis_record(_trace(job, 1), job.path), json_mutation, _all_alike)


def test_lanes_caches(base: tuple[JobFolder, model.Report], tmp_path: Path) -> None:
    def lanes_mutation(data: bytes, rng: random.Random) -> bytes:
        if rng.random() < 0.5:
            return bytes_mutation(data, rng)
        lanes = msgspec.msgpack.decode(data)  # a value of another kind, somewhere in it
        return msgspec.msgpack.encode(_walk(lanes, rng), enc_hook=str)

    _fuzz(base, tmp_path, 5, lambda job: lanes_record(_trace(job, 1), job.path), lanes_mutation, _all_alike)


def test_trace_args(base: tuple[JobFolder, model.Report], tmp_path: Path) -> None:
    """The args the readers decode beyond a collective's: op shapes and allocator totals."""

    def mutate(data: bytes, rng: random.Random) -> bytes:
        trace = json.loads(data)
        events = [e for e in trace["traceEvents"] if e["name"] in ("aten::mm", "[memory]")]
        event = rng.choice(events)
        event["args"] = _walk(event["args"], rng)
        return _dumps(trace)

    def alike(report: model.Report, intact: model.Report) -> None:
        assert report.ranks[1] == intact.ranks[1]  # the other rank's: its trace is as it was

    _fuzz(base, tmp_path, 6, lambda job: _trace(job, 0), mutate, alike)
