"""The merged timeline as a Perfetto trace archive, checked against every rule Perfetto's
manifest reference (``docs/reference/perfetto-manifest.md``, format version 1) lists: no
trace_processor can be fetched here, so the rules are checked one by one."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import msgspec
import pytest

from jobs.commands import archive as archive_command
from profiling import archive
from profiling.folder.layout import ReportFiles
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from profiling.schema import model
from tests import trace_variants as tv

CLOCK_NAMES = {"REALTIME", "REALTIME_COARSE", "MONOTONIC", "MONOTONIC_COARSE", "MONOTONIC_RAW", "BOOTTIME"}
INT64 = (-(2**63), 2**63 - 1)


def unpacked(path: Path) -> dict[str, bytes]:
    """Every member of a TAR archive, by name, in order; checked as plain ustar, which is what
    the UI's TAR reader takes."""
    with tarfile.open(path, "r:") as packed:
        members = packed.getmembers()
        assert all(m.isfile() and not m.pax_headers for m in members)
        return {m.name: packed.extractfile(m).read() for m in members}


def check_manifest(archive_file: dict[str, bytes]) -> dict[str, Any]:
    """The manifest of an archive, after checking it as trace_processor would; fails on any rule."""
    names = list(archive_file)
    manifests = [n for n in names if archive_file[n].lstrip().startswith(b'{"perfetto_manifest"')]
    assert len(manifests) == 1, f"exactly one manifest per archive: {manifests}"
    assert all(len(n) <= 99 for n in names), "the UI's TAR limits member names to 99 characters"
    assert all(len(data) < 8 * 10**9 for data in archive_file.values()), "files of 8 GB or more"
    document = json.loads(archive_file[manifests[0]])
    assert list(document) == ["perfetto_manifest"]
    manifest = document["perfetto_manifest"]
    assert manifest["version"] == 1 and type(manifest["version"]) is int
    files = manifest.get("files", [])
    paths = [entry["path"] for entry in files]
    assert len(set(paths)) == len(paths) and set(paths) <= set(names) - set(manifests)
    for entry in files:
        assert isinstance(entry["path"], str)
        assert not ("machine" in entry and "machines" in entry), "machine and machines are mutually exclusive"
        if "machine" in entry:
            assert isinstance(entry["machine"]["name"], str) and entry["machine"]["name"], "non-empty name"
        for machine in entry.get("machines", []):
            assert 0 <= machine["id"] <= 2**32 - 1 and machine["name"]
        clocks = entry.get("clocks")
        if clocks is not None:
            assert "sync_to" in clocks, "clocks: a sync_to block is required"
            sync_to = clocks["sync_to"]
            assert "file" in sync_to, "clocks: sync_to.file is required"
            assert sync_to["file"] in paths, "sync_to.file must match the path of an entry in files"
            assert sync_to["file"] != entry["path"]
            for clock in (clocks.get("clock"), sync_to.get("clock")):
                assert clock is None or clock in CLOCK_NAMES
            offset = clocks.get("offset_ns", 0)
            assert type(offset) is int and INT64[0] < offset <= INT64[1], "offset_ns must be an integer"
            # a pinned (clockless) file must be one: Chrome JSON, not an archive or a manifest
            assert clocks.get("clock") is None and entry["path"].endswith((".json", ".json.gz"))
    trace_time = manifest.get("trace_time")
    if trace_time is not None:
        assert trace_time["clock"] in CLOCK_NAMES and trace_time.get("file", paths[0]) in paths
    attributes = manifest.get("attributes", {})
    assert isinstance(attributes, dict)
    for key, value in attributes.items():
        assert key and type(value) in (str, int), f"attributes: {key!r} must be a string or an integer"
    return manifest


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 ranks of a real GPU trace on 2 nodes, older torch's collectives, clocks r x 1.7 ms apart."""
    base = tv.as_older_torch(tv.load("nccl_data.json.gz"))
    traces = [tv.as_rank(base, rank, 4, shift_us=rank * 1700.0) for rank in range(4)]
    for rank, trace in enumerate(traces):
        trace["host_name"] = f"node{rank // 2 + 1}"
    folder = tv.write(tmp_path_factory.mktemp("archive") / "4242", traces)
    build_report(folder, ReportSettings(plot=False))
    return folder


def test_the_archive_follows_the_manifest_format_and_holds_the_traces_as_they_are(job: Path) -> None:
    files = ReportFiles.of(job)
    report = model.checked(files.json.read_bytes())
    packed = unpacked(files.archive)
    manifest = check_manifest(packed)
    for entry in manifest["files"]:
        assert packed[entry["path"]] == (job / entry["path"]).read_bytes()  # byte for byte
    assert [entry["path"] for entry in manifest["files"]] == report.archive.traces
    for entry in manifest["files"]:  # a machine per rank, named by rank and node
        rank = int(entry["path"].removeprefix("rank").split("_")[0])
        assert entry["machine"]["name"] == f"rank {rank} (node{rank // 2 + 1})"
    assert manifest["attributes"]["slurm_profiling.job"] == "4242"


def test_offsets_are_the_reports_and_none_moves_an_event_earlier(job: Path) -> None:
    report = model.checked(ReportFiles.of(job).json.read_bytes())
    shifts = {c.trace: c.shift_us for r in report.ranks for c in r.trace_clocks}
    manifest = check_manifest(unpacked(ReportFiles.of(job).archive))
    pinned = {e["path"]: e["clocks"] for e in manifest["files"] if "clocks" in e}
    (reference,) = {e["path"] for e in manifest["files"]} - set(pinned)
    for path, clocks in pinned.items():
        assert clocks["sync_to"] == {"file": reference}
        assert clocks["offset_ns"] == round((shifts[path] - shifts[reference]) * 1000) >= 0
    # the alignment found rank r's clock 1.7 ms per rank ahead: the reference is the last rank's
    assert reference == f"rank{report.archive.reference_rank}_iter4_6.json"
    assert pinned and all(c["offset_ns"] % 1_700_000 == 0 for c in pinned.values())
    assert f"slurm_profiling.clock.{reference}" in manifest["attributes"]


def test_default_ranks_and_the_budget(job: Path, tmp_path: Path) -> None:
    report = model.checked(ReportFiles.of(job).json.read_bytes())
    # the first rank, the straggler's candidate (if any), the rank computing least, one rank per node
    order = archive.default_ranks(report)
    assert order[0] == 0 and {0, 2} <= set(order)
    small = archive.write_archive(job, report, tmp_path / "small.tar", budget_bytes=1)
    assert small.ranks == "0" and small.left_out  # the first rank always, then nothing fits
    every = archive.write_archive(job, report, tmp_path / "every.tar", budget_bytes=1e12)
    assert every.ranks == f"0-{len(report.ranks) - 1}" and not every.left_out  # all fit: all in
    assert report.straggler is not None
    verdict = msgspec.structs.replace(report.straggler, rank=None, candidate=3, verdict="none")
    undetermined = msgspec.structs.replace(report, straggler=verdict)
    assert archive.default_ranks(undetermined)[:2] == [0, 3]  # the candidate, not the key's None
    markdown = ReportFiles.of(job).markdown.read_text()
    assert "Merged timeline: `merged_trace.tar`" in markdown and report.archive.ranks in markdown


def test_an_archive_of_the_same_traces_and_clocks_is_kept_and_a_changed_one_made_again(
    job: Path, tmp_path: Path
) -> None:
    report = model.checked(ReportFiles.of(job).json.read_bytes())
    path = tmp_path / "kept.tar"
    archive.write_archive(job, report, path, ranks=[0, 1])
    written = path.stat().st_mtime_ns
    archive.write_archive(job, report, path, ranks=[0, 1])  # a warm report: nothing changed
    assert path.stat().st_mtime_ns == written
    archive.write_archive(job, report, path, ranks=[0, 2])  # other ranks: made again
    assert sorted(unpacked(path))[1:] == ["rank0_iter4_6.json", "rank2_iter4_6.json"]
    moved = msgspec.structs.replace(report, ranks=[
        msgspec.structs.replace(r, trace_clocks=[msgspec.structs.replace(c, shift_us=c.shift_us + 1.0)
                                                 for c in r.trace_clocks])
        for r in report.ranks
    ])  # fmt: skip
    before = path.stat().st_mtime_ns
    archive.write_archive(job, moved, path, ranks=[0, 2])  # other clocks: made again
    assert path.stat().st_mtime_ns != before


def test_an_archive_of_any_ranks_later_reads_no_trace(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import profiling.analysis.reading.trace_events as trace_events

    monkeypatch.setattr(trace_events, "read", lambda path: pytest.fail(f"read {path} again"))
    out = tmp_path / "1-3.tar"
    assert archive_command.main([str(job), "--ranks", "1,3", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("rank(s) 1,3 in ")
    manifest = check_manifest(unpacked(out))
    assert [e["machine"]["name"] for e in manifest["files"]] == ["rank 1 (node1)", "rank 3 (node2)"]
    assert archive_command.main([str(job), "--ranks", "7"]) == 2
    assert "--ranks '7' selects rank 7, but the job has 4 ranks" in capsys.readouterr().err


def test_ranks_of_one_host_that_pair_no_collective_are_archived_at_their_hosts_shift(
    tmp_path: Path,
) -> None:
    base = tv.as_older_torch(tv.load("nccl_data.json.gz"))
    traces = [tv.as_rank(base, 0, 2), tv.drop_collectives(tv.as_rank(base, 1, 2, shift_us=500.0), 1.0, 0)]
    for trace in traces:
        trace["host_name"] = "node1"
    folder = tv.write(tmp_path / "77", traces)
    report = build_report(folder, ReportSettings(plot=False))
    clock = report.ranks[1].clock
    assert (clock.method, clock.pairs, clock.residual_us) == ("one host", 0, None)
    manifest = check_manifest(unpacked(ReportFiles.of(folder).archive))
    (pinned,) = [e for e in manifest["files"] if "clocks" in e]
    assert pinned["clocks"]["offset_ns"] == round(clock.shift_us * 1000) - round(
        report.ranks[0].clock.shift_us * 1000
    )
    described = manifest["attributes"][f"slurm_profiling.clock.{pinned['path']}"]
    assert described.startswith("one host: 0 pairs") and "residual" not in described


def test_the_archive_is_a_tar_that_tar_itself_reads_and_is_the_same_where_the_kernel_cannot_copy(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = model.checked(ReportFiles.of(job).json.read_bytes())
    by_kernel = tmp_path / "kernel.tar"
    archive.write_archive(job, report, by_kernel, ranks=[0, 3])
    listed = subprocess.run(["tar", "tvf", str(by_kernel)], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    assert [line.split()[-1] for line in listed.stdout.splitlines()] == [
        archive.MANIFEST_NAME,
        "rank0_iter4_6.json",
        "rank3_iter4_6.json",
    ]

    def no_copy_file_range(*args: object) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", no_copy_file_range)
    by_python = tmp_path / "python.tar"
    archive.write_archive(job, report, by_python, ranks=[0, 3])
    assert by_python.read_bytes() == by_kernel.read_bytes()
