"""The report reads any folder of Kineto traces, not only the toolkit's: files named as torch's
``tensorboard_trace_handler`` names them (one folder per worker, or all in one), another
producer's shape (integer µs, no ``Seq``, one step each), and it names what it cannot read."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from profiling.analysis.per_trace.record import ReportError
from profiling.archive import write_archive
from profiling.compare import compare
from profiling.folder.layout import ReportFiles
from profiling.folder.traces import find_traces
from profiling.ranks import RankSelection
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from profiling.schema import model
from tests import trace_variants as variants
from tests.common import REPO

SCRIPT = REPO / "tests" / "scripts" / "tensorboard_handler_job.py"


def torchrun(out: Path, *flags: str) -> None:
    """Two ranks of a script that uses torch alone, as its user would run it."""
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(SCRIPT), str(out), *flags],
        capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def torch_named(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tb") / "per-worker"
    torchrun(out, "--per-worker", "--gzip")
    return out


def test_traces_named_by_torchs_handler_one_folder_per_worker(torch_named: Path) -> None:
    names = [source.name for source in find_traces(torch_named)]
    assert len(names) == 2 and all(name.endswith(".pt.trace.json.gz") for name in names)
    assert {name.split("/")[0] for name in names} == {"worker0", "worker1"}  # as torch left them
    report = build_report(torch_named, ReportSettings(plot=False))
    assert [r.rank for r in report.ranks] == [0, 1]  # from each trace's distributedInfo
    for rank in report.ranks:
        assert rank.steps == [2, 3, 4] and rank.trace_files[0].startswith(f"worker{rank.rank}/")
    assert report.ranks[1].clock.method != "none"
    archive = report.archive
    with tarfile.open(ReportFiles.of(torch_named).archive) as packed:
        assert sorted(packed.getnames()) == sorted(
            ["perfetto_manifest.json", *(n.replace("/", "__") for n in archive.traces)]
        )


def test_traces_named_by_torchs_handler_in_one_folder(tmp_path: Path) -> None:
    torchrun(tmp_path / "flat")
    report = build_report(tmp_path / "flat", ReportSettings(plot=False, merged_trace=False))
    assert [r.rank for r in report.ranks] == [0, 1]
    assert all(name.endswith(".pt.trace.json") for r in report.ranks for name in r.trace_files)
    # the report's own files are not traces: a second report reads the same two, from their records
    again = build_report(tmp_path / "flat", ReportSettings(plot=False, merged_trace=False))
    assert again.reading.from_records == 2 and again.reading.traces == 2


def another_producers_job(folder: Path, ranks: int = 4) -> Path:
    """``worker<r>_step_<n>.<time>.pt.trace.json``: integer µs, no Seq, one step, rank inside only."""
    real = variants.one_step(variants.as_older_torch(variants.load("nccl_data.json.gz")), 5)
    folder.mkdir(parents=True)
    for rank in range(ranks):
        trace = variants.integer_us(variants.as_rank(real, rank, ranks, shift_us=1000.0 * rank))
        (folder / f"worker{rank}_step_5.{1697000000000 + rank}.pt.trace.json").write_text(json.dumps(trace))
    return folder


def test_another_producers_shape(tmp_path: Path) -> None:
    folder = another_producers_job(tmp_path / "other")
    report = build_report(folder, ReportSettings(plot=False))
    assert [r.rank for r in report.ranks] == [0, 1, 2, 3]
    assert all(r.steps == [5] and r.device == "gpu" for r in report.ranks)
    assert report.warnings == []
    assert report.archive.ranks == "0-3"  # every trace fits the budget


def test_one_recorded_step_says_its_noise_cannot_be_measured(tmp_path: Path) -> None:
    real = variants.one_step(variants.as_older_torch(variants.load("nccl_data.json.gz")), 5)
    traces = variants.late_at_every_allreduce([variants.as_rank(real, r, 4) for r in range(4)], 2, 500.0)
    folder = tmp_path / "late"
    folder.mkdir()
    for rank, trace in enumerate(traces):
        (folder / f"worker{rank}.pt.trace.json").write_text(json.dumps(trace))
    text = build_report(folder, ReportSettings(plot=False, merged_trace=False)).straggler.text
    assert "rank 2" in text and "the step-to-step noise cannot be measured from one step" in text, text
    assert "noise of 0.00" not in text
    assert (folder / "meta" / "report.md").read_text().startswith(f"# Trace report: {folder}")


def test_a_rank_from_the_name_where_the_trace_says_none(tmp_path: Path) -> None:
    folder = another_producers_job(tmp_path / "other", ranks=2)
    for path, rank in zip(sorted(folder.glob("*.json")), (0, 1), strict=True):
        trace = json.loads(path.read_text())
        del trace["distributedInfo"]
        path.unlink()
        (folder / f"host_rank-{rank}.json").write_text(json.dumps(trace))
    report = build_report(folder, ReportSettings(plot=False, merged_trace=False))
    assert [r.rank for r in report.ranks] == [0, 1]
    assert "rank 1: the trace has no distributedInfo: rank 1 is taken from its file name" in report.warnings


def test_what_is_not_a_trace_is_named_and_skipped(tmp_path: Path) -> None:
    folder = another_producers_job(tmp_path / "other", ranks=3)
    (folder / "config.json").write_text('{"lr": 0.1}')
    whole = gzip.compress((folder / "worker2_step_5.1697000000002.pt.trace.json").read_bytes())
    (folder / "worker2_step_5.1697000000002.pt.trace.json").unlink()
    (folder / "worker2_step_5.1697000000002.pt.trace.json.gz").write_bytes(whole[: len(whole) // 2])
    nameless = json.loads((folder / "worker1_step_5.1697000000001.pt.trace.json").read_text())
    del nameless["distributedInfo"]
    (folder / "worker1_step_5.1697000000001.pt.trace.json").write_text(json.dumps(nameless))
    report = build_report(folder, ReportSettings(plot=False, merged_trace=False))
    assert [r.rank for r in report.ranks] == [0]  # the others are still analysed
    skipped = [w for w in report.warnings if w.startswith("skipped ")]
    assert len(skipped) == 3, report.warnings
    assert any(w.startswith("skipped config.json: no traceEvents") for w in skipped), skipped
    assert any(w.startswith("skipped worker2_step_5.1697000000002.pt.trace.json.gz:") for w in skipped)
    assert any(
        w.startswith(
            "skipped worker1_step_5.1697000000001.pt.trace.json says no rank: no distributedInfo.rank"
        )
        for w in skipped
    ), skipped
    markdown = (folder / "meta" / "report.md").read_text()
    assert "Warning: skipped config.json" in markdown


def test_two_files_of_one_rank_whose_steps_overlap_are_refused(tmp_path: Path) -> None:
    folder = another_producers_job(tmp_path / "other", ranks=2)
    shutil.copy(folder / "worker1_step_5.1697000000001.pt.trace.json", folder / "copy.json")
    with pytest.raises(ReportError, match=r"copy.json \(steps 5-5\) and worker1_step_5\.1697000000001"):
        build_report(folder, ReportSettings(plot=False, merged_trace=False))


def test_compare_and_archive_on_folders_of_foreign_traces(tmp_path: Path) -> None:
    a = another_producers_job(tmp_path / "a", ranks=2)
    b = another_producers_job(tmp_path / "b", ranks=2)
    result = compare(a, b)
    assert [row.rank for row in result.ranks] == [0, 1]
    report = model.checked(ReportFiles.of(a).json.read_bytes())
    written = write_archive(a, report, tmp_path / "one.tar", ranks=[1])
    assert written.traces == ["worker1_step_5.1697000000001.pt.trace.json"]
    report = build_report(a, ReportSettings(plot=False, ranks=RankSelection.parse_named("1")))
    assert report.archive.ranks == "1"
