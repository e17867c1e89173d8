"""The report as a map and a reduce: each trace read once and its record kept, the records of a
job's own ranks, a SLURM job array for big folders, progress on a terminal, a picture at any
number of ranks."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from jobs.runtime.report_step import analyse_own_traces
from profiling.analysis.per_trace import record as records
from profiling.folder.layout import ReportFiles, analysis_record
from profiling.folder.traces import list_traces
from profiling.report.build import build_report
from profiling.report.plot import plot_report
from profiling.report.progress import Progress
from profiling.report.settings import ReportSettings
from profiling.schema import model
from tests import trace_variants as tv
from tests.common import REPO
from tests.synthetic import cpu_job, write_job
from tests.synthetic_report import synthetic_report, with_gpu_figures

TIMINGS = ("generated_at", "seconds", "alignment_seconds")


def without_timings(report: model.Report) -> model.Report:
    """The report less what differs from one run to the next: when, how long, and who read."""
    return msgspec.structs.replace(
        report,
        **dict.fromkeys(TIMINGS, ""),
        reading=model.empty("", "").reading,
        archive=None,
        folder="",
        ranks=[msgspec.structs.replace(r, analysed_by={}) for r in report.ranks],
    )


def test_a_trace_is_read_once_and_read_again_when_it_changes(tmp_path: Path) -> None:
    write_job(tmp_path, cpu_job(8, lambda step: {1: 30.0}), 8)
    cold = build_report(tmp_path, ReportSettings(plot=False, merged_trace=False))
    assert cold.reading.read_here == ["rank0_iter10_17.json", "rank1_iter10_17.json.gz"]
    warm = build_report(tmp_path, ReportSettings(plot=False, merged_trace=False))
    assert (warm.reading.from_records, warm.reading.read_here) == (2, [])
    assert without_timings(warm) == without_timings(cold)
    # a changed trace (a new mtime) is read again; so is every trace of an older analysis
    trace = tmp_path / "rank0_iter10_17.json"
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 1))
    assert build_report(tmp_path, ReportSettings(plot=False, merged_trace=False)).reading.read_here == [
        trace.name
    ]
    record = json.loads(analysis_record(trace).read_text())
    # its cost on one core: the reader's CPU time, within its wall time
    assert 0 < record["cpu_seconds"] <= record["seconds"] + 0.01, record
    analysis_record(trace).write_text(json.dumps({**record, "version": records.ANALYSIS_VERSION - 1}))
    assert build_report(tmp_path, ReportSettings(plot=False, merged_trace=False)).reading.read_here == [
        trace.name
    ]
    markdown = ReportFiles.of(tmp_path).markdown.read_text()
    assert "1 read here (rank0_iter10_17.json), as none had a fresh record" in markdown


def test_a_ranks_own_analysis_is_bounded_and_cannot_fail_the_job(tmp_path: Path) -> None:
    write_job(tmp_path, cpu_job(8, lambda step: {}), 8)
    (trace, _) = list_traces(tmp_path)
    done = analyse_own_traces([trace.path], reader="rank 0 on n1 (pid 1)", limit_s=60)
    assert (done.outcome, done.records) == ("written", [trace.path.name])
    assert records.load_fresh(trace.source).analysed_by == "rank 0 on n1 (pid 1)"
    unfinished = analyse_own_traces([trace.path], reader="rank 0", limit_s=0)
    assert unfinished.outcome.startswith("unfinished after 0 s (half --dist-timeout): left to rank 0")
    broken = tmp_path / "rank5_iter10_17.json"
    broken.write_text("{not json")
    failed = analyse_own_traces([broken], reader="rank 5", limit_s=60)
    assert failed.outcome.startswith("failed: TraceFormatError") and failed.records == []


def test_progress_only_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    shown, hidden = Terminal(), io.StringIO()
    for stream in (shown, hidden):
        progress = Progress("read", 2, 2 << 20, stream=stream)
        progress.advance(nbytes=1 << 20, every_s=0)
        progress.advance(nbytes=1 << 20, every_s=0)
        progress.close()
    assert "\rread 1/2, " in shown.getvalue() and "MiB/s" in shown.getvalue() and "s left" in shown.getvalue()
    assert "\rread 2/2" in shown.getvalue() and hidden.getvalue() == ""


@pytest.mark.parametrize("ranks", [2, 32, 256])
def test_the_picture_at_any_number_of_ranks(ranks: int, tmp_path: Path) -> None:
    from matplotlib.image import imread

    from profiling.report.plot import BARS_UP_TO

    path = tmp_path / f"report-{ranks}.png"
    (fig,) = plot_report(synthetic_report(ranks), path)  # no critical path: the ranks' rows alone
    assert imread(path).shape[:2] == (550, 1300)  # the figure as drawn, 13 x 5.5 in at 100 dpi
    left, right = fig.axes[:2]
    assert "rank 7" in fig._suptitle.get_text()
    if ranks <= BARS_UP_TO:  # bars of every part for every rank, a line per rank
        assert left.get_title() == "Mean step breakdown per rank"
        assert len(left.patches) == ranks * 5
        assert [t.get_text() for t in left.get_legend().get_texts()] == [
            "compute", "communication", "memory", "other", "idle"
        ]  # fmt: skip
        assert right.get_title() == "Step time per rank" and len(right.get_lines()) == ranks
    else:  # heat maps, rank x part and rank x step, each with its colour bar, the outlier named
        assert left.get_title() == "Mean step breakdown: rank × part"
        assert left.get_images()[0].get_array().shape == (ranks, 5)
        assert right.get_title() == "Step time: rank × step"
        assert right.get_images()[0].get_array().shape == (ranks, 12)
        assert len(fig.axes) == 4  # the two colour bars
        assert any(text.get_text().startswith("rank 7: ×") for text in right.texts)


@pytest.mark.parametrize("ranks", [2, 256])
def test_gpu_panels_kernel_families_and_bus_bandwidth(ranks: int, tmp_path: Path) -> None:
    from matplotlib.image import imread

    from profiling.report.plot import BARS_UP_TO

    path = tmp_path / "report.png"
    (fig,) = plot_report(with_gpu_figures(synthetic_report(ranks)), path)
    assert imread(path).shape[:2] == (1050, 1300)
    titles = [a.get_title() for a in fig.axes]
    assert "Collectives: bus bandwidth (nccl-tests)" in titles
    (bandwidth,) = [a for a in fig.axes if a.get_title().startswith("Collectives")]
    assert len(bandwidth.patches) == 8  # the 8 collectives with the most time, whatever the ranks
    assert {line.get_ydata()[0] for line in bandwidth.get_lines()} == {100.0, 50.0}  # the link, half of it
    if ranks <= BARS_UP_TO:
        (kernels,) = [a for a in fig.axes if a.get_title() == "GPU time per step by kernel family"]
        assert len(kernels.patches) == ranks * 6
    else:
        (kernels,) = [a for a in fig.axes if a.get_title().endswith("rank × family")]
        assert kernels.get_images()[0].get_array().shape == (ranks, 6)
        assert any(text.get_text() == "rank 7: ×1.50" for text in kernels.texts)


def test_the_title_is_wrapped_not_cut() -> None:
    from profiling.report.plot import _title

    text = synthetic_report(2).straggler.text
    title = _title(synthetic_report(2).straggler)
    assert title.replace("\n", " ") == text and title.count("\n") >= 1


@pytest.mark.full_cluster
@pytest.mark.bare_cluster
def test_big_folders_are_read_by_a_slurm_job_array(slurm_cluster, tmp_path: Path) -> None:
    base = tv.as_older_torch(tv.load("trace_filter_sampled_rank-0.json.gz"))
    folder = tv.write(tmp_path / "job", [tv.as_rank(base, rank, 64, rank * 3.0) for rank in range(64)])
    local = build_report(
        folder, ReportSettings(out=tmp_path / "local", plot=False, merged_trace=False)
    )  # records saved...
    for trace in list_traces(folder):
        analysis_record(trace.path).unlink()  # ...and dropped, for the array to make again
    measured = subprocess.run(
        [sys.executable, "-c", (
            "import resource, subprocess, sys; "
            "out = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=600); "
            "print(out.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
            "print(out.stdout + out.stderr)"
        ), sys.executable, "-m", "jobs.commands.report", str(folder), "--slurm", "--tasks", "4",
         "--no-merged-trace", "--no-plot"],
        cwd=REPO, capture_output=True, text=True, timeout=660,
    )  # fmt: skip
    status, peak_kib = measured.stdout.split("\n", 1)[0].split()
    assert status == "0", measured.stdout + measured.stderr
    assert "submitted job " in measured.stdout and ": 4 task(s) reading 64 trace(s)" in measured.stdout
    remote = model.checked(ReportFiles.of(folder).json.read_bytes())
    assert remote.reading.from_records == 64 and remote.reading.analysed_by == ["64 by a --slurm job array"]
    assert without_timings(remote) == without_timings(local)
    array_logs = ReportFiles.of(folder).folder / "analysis" / "slurm"
    assert not list(array_logs.glob(".submission_file_*"))  # submitit's hidden links: removed
    assert int(peak_kib) / 1024 <= 150, f"the login node's process peaked at {int(peak_kib) / 1024:.0f} MiB"


def test_report_md_tables_show_16_ranks_those_that_matter_and_a_line_for_the_others(tmp_path: Path) -> None:
    write_job(tmp_path, cpu_job(8, lambda step: {30: 300.0}, ranks=40), 8)
    report = build_report(tmp_path, ReportSettings(plot=False, merged_trace=False))
    assert report.straggler.rank == 30
    markdown = ReportFiles.of(tmp_path).markdown.read_text()
    step_table = markdown.split("## Step time (ms)")[1].split("Spread of")[0]
    rows = [
        line for line in step_table.splitlines() if line.startswith("| ") and not line.startswith("| rank")
    ]
    shown = [row.split(" | ")[0].removeprefix("| ") for row in rows]
    assert shown[:16] == [str(r) for r in range(16)] and "30" in shown  # the straggler beyond the 16
    others = len(report.ranks) - (len(shown) - 1)
    assert rows[-1] == f"| {others} other ranks (report.json) |" + " |" * 5
    clock_rows = [
        line for line in markdown.split("## Clock alignment")[1].splitlines() if line.startswith("| ")
    ]
    assert len(clock_rows) == 1 + len(shown)  # the header, the same ranks and the others' line


def test_a_cpu_job_with_collectives_draws_no_empty_kernel_panel_and_one_step_is_a_whole_step(
    tmp_path: Path,
) -> None:
    report = with_gpu_figures(synthetic_report(2, steps=1))
    for rank in report.ranks:
        rank.kernels = None  # a CPU job: collectives, and no kernel to draw
    (fig,) = plot_report(report, tmp_path / "report.png")
    titles = [a.get_title() for a in fig.axes]
    assert not any("kernel family" in title for title in titles), titles
    assert "Collectives: bus bandwidth (nccl-tests)" in titles
    steps = next(a for a in fig.axes if a.get_title() == "Step time per rank")
    assert steps.get_xlim() == (99.0, 101.0) and list(steps.get_xticks()) == [100]
