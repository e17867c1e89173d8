"""Round 6's files read back, fed as a new user or a broken file system would (issue #58): a
traces root with one bad summary among good ones, a FIFO or a device where a file was, numbers
no job can have, names that would break a table. ``history`` ends with status 0 within its
bound, names the bad file in one line, prints no inf or nan, and ``--json`` is strict JSON; the
report never writes a summary that reading it back refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from profiling.history.jobs import newest_first, nodes_named_slow, read_jobs, standings
from profiling.history.summary import config_fingerprint, write_summary
from profiling.report.table_ranks import cell
from profiling.schema.files import FileRefused, read_file
from profiling.schema.summary import JobSummary
from slurm.common.files import NotARegularFile, read_regular
from tests.common import REPO

CONFIG = {"name": "workload.resnet18:build", "batch_size": 10, "ranks": 2, "nodes": 1, "backend": "gloo"}


def _summary(job_id: str, step_ms: float, minute: int, config: dict | None = None) -> dict:
    config = config or CONFIG
    return {
        "schema_version": 1,
        "job_id": job_id,
        "ended_at": f"2026-12-04T10:{minute:02d}:00+00:00",
        "nodes": ["node1"],
        "workload": config["name"],
        "config": config,
        "fingerprint": config_fingerprint(config),
        "ranks": config["ranks"],
        "step_median_ms": step_ms,
        "noise_ms": 1.0,
        "verdict": "none",
    }


def _root(tmp_path: Path, summaries: list[dict]) -> Path:
    for number, summary in enumerate(summaries):
        meta = tmp_path / f"job{number}" / "meta"
        meta.mkdir(parents=True)
        (meta / "summary.json").write_text(json.dumps(summary))
    return tmp_path


def _history(root: Path, *args: str) -> subprocess.CompletedProcess:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "jobs.commands.history", str(root), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert time.monotonic() - started < 20
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "inf" not in done.stdout.lower().replace("info", "") and "nan" not in done.stdout.lower()
    return done


GOOD = [_summary(str(i), 100.0 + i, i) for i in range(1, 7)]
BAD = {
    "5000 digits": {"job_id": "9" * 5000},
    "a newline in the id": {"job_id": "7\n8"},
    "yesterday": {"ended_at": "yesterday"},
    "a negative step": {"step_median_ms": -500.0},
    "a step of 1e308": {"step_median_ms": 1e308},
    "ranks 10^30": {"ranks": 10**30},
    "a straggler of no rank": {"verdict": "straggler", "straggler": 10**18},
    "schema_version -1": {"schema_version": -1},
    "a step under a microsecond": {"step_median_ms": 5e-324},
}


@pytest.mark.parametrize("bad", sorted(BAD))
def test_one_bad_summary_among_good_ones_is_named_and_left_out(tmp_path: Path, bad: str) -> None:
    root = _root(tmp_path, [*GOOD, {**_summary("99", 100.0, 30), **BAD[bad]}])
    done = _history(root)
    assert f"job{len(GOOD)}/meta/summary.json" in done.stderr and "skipped" in done.stderr, done.stderr
    strict = _history(root, "--json")
    document = json.loads(strict.stdout, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert sum(len(c["jobs"]) for c in document["configs"]) == len(GOOD)


def test_a_job_id_of_unicode_digits_is_a_string_listed_as_such(tmp_path: Path) -> None:
    """'²' is a digit to str.isdigit and no number to int(): it sorted every later report away."""
    root = _root(tmp_path, [*GOOD, _summary("²", 100.0, 30)])
    assert "²" in _history(root).stdout
    document = json.loads(_history(root, "--json").stdout)
    assert "²" in [job["job_id"] for config in document["configs"] for job in config["jobs"]]


def test_steps_at_the_edges_of_the_bounds_print_finite_numbers(tmp_path: Path) -> None:
    """Five jobs at a microsecond, a sixth at 11 days: a change, not +inf %; strict JSON."""
    tiny = [_summary(str(i), 1e-3, i) for i in range(1, 6)]
    root = _root(tmp_path, [*tiny, _summary("6", 1e9, 6)])
    done = _history(root)
    assert "REGRESSION" in done.stdout
    json.loads(_history(root, "--json").stdout, parse_constant=lambda name: pytest.fail(name))


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_summary_that_is_no_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """A FIFO where a sibling's summary was blocked every later reader in open() forever: the
    history, the report, and rank 0's end of every later job of the root."""
    root = _root(tmp_path, GOOD)
    path = root / "odd" / "meta" / "summary.json"
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    done = _history(root)
    assert "odd" in done.stderr and "not a regular file" in done.stderr, done.stderr
    with pytest.raises(FileRefused, match="not a regular file"):
        read_file(path, JobSummary)
    with pytest.raises(NotARegularFile, match="summary.json: not a regular file"):
        read_regular(path, 1 << 20)


def test_a_file_larger_than_its_bound_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 2048)
    with pytest.raises(NotARegularFile, match="2048 bytes, more than the 1024 read back"):
        read_regular(path, 1024)


@pytest.mark.parametrize(("grown", "bound", "whole"), [(100, 1024, True), (2000, 1024, False)])
def test_a_file_that_grew_while_read_is_read_whole_up_to_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grown: int, bound: int, whole: bool
) -> None:
    """A step log appended to while it is read: the size its status said, then the rest, up to
    the bound (its status made to say 10 bytes, as it was when opened)."""
    import os

    from slurm.common import files

    path = tmp_path / "growing.log"
    path.write_bytes(b"x" * grown)
    real = os.fstat
    monkeypatch.setattr(files.os, "fstat", lambda fd: os.stat_result((*real(fd)[:6], 10, *real(fd)[7:])))
    if whole:
        assert read_regular(path, bound) == b"x" * grown
    else:
        with pytest.raises(NotARegularFile, match="more than the 1024 bytes read back"):
            read_regular(path, bound)


def test_two_configs_sharing_a_job_id_are_kept_apart() -> None:
    """A +100 % regression hid as '-' where another config had a job of the same id."""
    other = dict(CONFIG, batch_size=64)
    jobs = [msgspec.convert(_summary(str(i), 100.0, i), JobSummary) for i in range(1, 6)]
    jobs.append(msgspec.convert(_summary("6", 200.0, 6), JobSummary))
    jobs.append(msgspec.convert(_summary("6", 50.0, 7, other), JobSummary))
    found = standings(jobs)
    assert found[config_fingerprint(CONFIG), "6"].regression
    assert found[config_fingerprint(other), "6"].baseline_ms is None


def test_slow_nodes_are_counted_in_linear_time() -> None:
    """A summary naming 100 000 nodes: within a second on a quiet machine, 3 s asked here (CI's
    shared machine took 1.3 s; list membership took over 20 s)."""
    nodes = [f"node{i}" for i in range(100_000)]
    jobs = [
        msgspec.convert({**_summary(str(i), 100.0, i), "nodes": nodes, "slow_nodes": nodes}, JobSummary)
        for i in range(1, 4)
    ]
    started = time.perf_counter()
    named = nodes_named_slow(jobs)
    assert time.perf_counter() - started < 3.0
    assert len(named) == 100_000 and all(n.excluded for n in named[:10])


def test_job_ids_sort_as_strings_numbers_by_value_only_when_plain_and_short() -> None:
    jobs = [
        msgspec.convert({**_summary(job_id, 100.0, 1)}, JobSummary)
        for job_id in ("10", "9", "²", "9" * 30, "4242_3")
    ]
    # at one instant: plain numbers by value, the largest first; the rest after, as strings
    assert [j.job_id for j in newest_first(jobs)] == ["4242_3", "10", "9", "²", "9" * 30]


def test_a_name_never_breaks_a_table() -> None:
    assert cell("gloo:all_reduce|x") == "gloo:all_reduce\\|x"
    assert cell("node\n1\r\x1b[31m") == "node 1  [31m"


def test_read_jobs_reads_a_root_of_good_and_bad(tmp_path: Path) -> None:
    root = _root(tmp_path, [*GOOD, {**_summary("99", 100.0, 30), "ended_at": "yesterday"}])
    found, skipped = read_jobs(root)
    assert len(found) == len(GOOD) and len(skipped) == 1 and "ended_at 'yesterday'" in skipped[0]
    write_summary(tmp_path / "again" / "meta", found[0])  # what is read back writes back


def test_the_slurm_comment_carries_printable_characters_only() -> None:
    from profiling.history.comment import comment_line

    summary = msgspec.convert(
        {**_summary("1", 100.0, 1), "slow_nodes": ["node\n1", "node\r2\x1b[31m"]}, JobSummary
    )
    line = comment_line(summary, None)
    assert all(" " <= c <= "~" for c in line), line
    assert "slow node?1,node?2?[31m" in line


@pytest.mark.parametrize(
    "parallel",
    [5, "dp=2", [["pp", 20_000_000]], [["pp", 2], ["pp", 2]], [["p p", 2]], [["pp", 2.0]], [[1, 2]]],
)
def test_a_manifests_parallel_field_that_cannot_be_is_no_layout(parallel: object) -> None:
    """Untyped JSON: ``5`` gave a traceback, ``"dp=2"`` a raw message, 20 million stages in a job
    of 2 ranks 22.8 s and 5.7 GB."""
    from profiling.analysis.run.run_rows import manifest_layout, run_mesh
    from profiling.schema.manifest import Manifest

    manifest = msgspec.convert(
        {
            "job_id": "1", "launcher": "local", "nodes": 1, "master": "host", "backend": "gloo",
            "attempts": [], "trace_files": [], "world_size": 2, "workload": {"parallel": parallel},
        },
        Manifest,
    )  # fmt: skip
    started = time.perf_counter()
    assert run_mesh(None, manifest) == {}
    assert time.perf_counter() - started < 1.0
    assert manifest_layout([["dp", 2]]) == (("dp", 2),)


@pytest.mark.parametrize("peer", ["²", "9" * 5000, "-1", "3.0"])
def test_a_group_labels_peer_that_is_no_rank_makes_no_label(peer: str) -> None:
    """A gloo send's label with a peer of '²' or 5000 digits dropped the whole trace with int()'s
    raw message."""
    from profiling.folder.group_label import parse_group_label

    assert parse_group_label(f"pg 0 default_pg peer {peer}") is None
    assert parse_group_label("pg 0 default_pg peer 3") == ("0", "default_pg", 3)


@pytest.mark.parametrize(("peer", "tied"), [(1, True), (0, False), (99, False), (2**40, False)])
def test_a_gloo_transfers_peer_is_checked_through_the_reader(peer: int, tied: bool) -> None:
    """Rank 0 sends within the default group of ranks 0 and 1: to 1 it is a transfer; to
    itself, to 99 or to 2^40 it ties nothing (every rank its own peer gave S = 0.94)."""
    from profiling.analysis.per_trace.groups import Group
    from profiling.analysis.reading.collectives import Collective
    from profiling.analysis.reading.instances import instances, transfer_ranks

    ops = [
        Collective(f"pg 0 default_pg peer {peer}", 0.0, 10.0, 1, False, ()),
        Collective("c10d::send", 1.0, 2.0, 1, False, ()),
        Collective("gloo:send", 1.0, 5.0, 1, False, ()),
    ]
    found = instances(ops, 0, [Group("0", "default_pg", (0, 1))])
    assert [transfer_ranks(i) for i in found] == ([(0, 1)] if tied else [None])


def test_a_step_log_of_another_world_is_left_out_with_a_line(tmp_path: Path) -> None:
    """A step log whose header names rank 2**31 - 2 of a world of 2**31 - 1, among a 2-rank job's
    logs (its header holds together on its own): listed as a rank before."""
    from profiling.analysis.run.run_logs import read_run
    from profiling.folder.layout import JobFolder
    from profiling.folder.step_log import StepLogHeader, StepLogWriter

    folder = JobFolder(tmp_path, "1")
    for rank, world in ((0, 2), (1, 2), (2**31 - 2, 2**31 - 1)):
        writer = StepLogWriter(
            folder.step_log(rank, 0),
            StepLogHeader(rank=rank, world_size=world, restart=0, node="n", gpu=False),
        )
        for step in range(20):
            writer.add(step, 400.0, 100.0)
        writer.close()
    found = read_run(folder.path)
    assert found is not None
    run, unreadable = found
    assert run.ranks.tolist() == [0, 1]
    assert unreadable == [f"rank {2**31 - 2}'s step log: world size {2**31 - 1}, the job's 2: left out"]


def test_the_last_step_a_log_can_hold_lists_without_an_overflow(tmp_path: Path) -> None:
    import warnings

    from jobs.list_ranks import rank_scores, render_ranks
    from profiling.folder.layout import JobFolder
    from profiling.folder.step_log import StepLogHeader, StepLogWriter

    folder = JobFolder(tmp_path, "1")
    for rank in (0, 1):
        header = StepLogHeader(rank=rank, world_size=2, restart=0, node="n", gpu=False)
        writer = StepLogWriter(folder.step_log(rank, 0), header)
        for step in [*range(10), 2**31 - 1]:
            writer.add(step, 400.0, 100.0)
        writer.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in scalar add" was one
        assert f"steps 0-{2**31 - 1} in their step logs" in render_ranks(rank_scores(folder))


def test_history_holds_whatever_one_summary_among_good_ones_holds(tmp_path: Path, capsys) -> None:
    """Fuzzed as tests/test_report_fuzz.py fuzzes the report's inputs: one summary among good
    ones mutated (a value of another kind, a huge, negative or non-finite number, a hostile
    string, bytes flipped, cut or appended), 60 cases on a fixed seed. ``history`` ends with 0,
    prints finite numbers, and ``--json`` is strict JSON."""
    import random

    from jobs.commands import history
    from tests.test_report_fuzz import json_mutation

    rng = random.Random(58)
    for case in range(60):
        root = tmp_path / str(case)
        _root(root, GOOD)
        bad = root / "bad" / "meta" / "summary.json"
        bad.parent.mkdir(parents=True)
        bad.write_bytes(json_mutation(json.dumps(_summary("99", 100.0, 30)).encode(), rng))
        for args in ([], ["--json"]):
            assert history.main([str(root), *args]) == 0, case
            out = capsys.readouterr().out
            assert "inf" not in out.lower() and "nan" not in out.lower(), (case, out)
            if args:
                json.loads(out, parse_constant=_not_json)


def _not_json(name: str) -> None:
    pytest.fail(f"{name} is not JSON")
