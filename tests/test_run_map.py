"""The whole run at a glance (profiling/analysis/run/run_map.py, run_section.py, jobs.list
--ranks): scores, slow segments and the map, on step logs written here and by real jobs."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from jobs.list_ranks import rank_scores
from profiling.analysis.run import run_logs, run_map, step_ratios
from profiling.analysis.run.slow_nodes import slow_nodes
from profiling.folder.layout import JobFolder
from profiling.folder.step_log import read_step_log
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from tests.common import REPO
from tests.step_logs import write_logs


def combined(folder: JobFolder) -> run_map.RunMap:
    run = run_logs.combine_logs([read_step_log(p) for p in folder.step_logs()])
    assert run is not None
    return run


def test_the_median_of_the_others_is_each_cells_own() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(size=(7, 40))
    values[rng.random(values.shape) < 0.2] = np.nan
    got = step_ratios.others_median(values)
    for row in range(7):
        for column in range(40):
            others = np.delete(values[:, column], row)
            others = others[np.isfinite(others)]
            expected = np.median(others) if np.isfinite(values[row, column]) and len(others) else np.nan
            assert got[row, column] == pytest.approx(expected, nan_ok=True)


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8])
def test_the_median_of_the_others_holds_for_tied_times_and_float32(rows: int) -> None:
    rng = np.random.default_rng(rows)
    values = rng.integers(0, 4, size=(rows, 60)).astype(np.float32)  # many ties
    values[:, 30:][rng.random((rows, 30)) < 0.25] = np.nan  # columns of different counts
    got = step_ratios.others_median(values)
    assert got.dtype == np.float32
    for row in range(rows):
        for column in range(60):
            others = np.delete(values[:, column], row)
            others = others[np.isfinite(others)]
            expected = np.median(others) if np.isfinite(values[row, column]) and len(others) else np.nan
            assert got[row, column] == pytest.approx(expected, nan_ok=True)


@pytest.mark.parametrize("axis", [0, 1])
def test_the_fast_nanmedian_is_numpys(axis: int) -> None:
    rng = np.random.default_rng(axis)
    values = rng.integers(0, 5, size=(9, 13)).astype(np.float32)
    values[rng.random(values.shape) < 0.3] = np.nan
    values[2] = np.nan  # a row, and so columns, of every count
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = np.nanmedian(values, axis=axis)
    np.testing.assert_allclose(step_ratios.nanmedian(values, axis), expected, equal_nan=True)


def test_the_running_median_is_each_windows_median_the_ends_padded() -> None:
    rng = np.random.default_rng(5)
    ratio = rng.random((6, 50)).astype(np.float32)
    ratio[rng.random(ratio.shape) < 0.1] = np.nan
    got = step_ratios.smoothed(ratio, 5)
    filled = np.pad(np.where(np.isnan(ratio), 1.0, ratio), ((0, 0), (2, 2)), mode="edge")
    for row in range(6):
        for column in range(50):
            expected = np.nan if np.isnan(ratio[row, column]) else np.median(filled[row, column : column + 5])
            assert got[row, column] == pytest.approx(expected, nan_ok=True)


def test_a_windowed_slowdown_is_one_segment_with_its_steps(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "1")
    write_logs(folder, lambda rank, step: 130.0 + (40.0 if rank == 2 and 30 <= step <= 60 else 0.0))
    run = combined(folder)
    [segment] = run_map.segments(run)
    assert (segment.rank, segment.node, segment.first, segment.last) == (2, "node2", 30, 60)
    assert segment.excess_ms == pytest.approx(40, abs=3) and segment.ratio == pytest.approx(1.31, abs=0.03)
    by_rank = {s.rank: s for s in run_map.scores(run)}
    # the whole run's median hardly moves (31 slow steps of 100); the intervals show when
    assert by_rank[2].relative > 0.9
    worst = min(by_rank[2].intervals, key=lambda i: i[3])
    assert worst[0] >= 30 and worst[1] <= 60 and worst[3] == pytest.approx(130 / 170, abs=0.03)
    assert all(min(i[3] for i in by_rank[r].intervals) > 0.93 for r in (0, 1, 3))


@pytest.mark.parametrize(
    ("slow_ranks", "per_node", "named"),
    [
        ({4, 5, 6, 7}, 4, "node2"),  # every rank of node2
        ({4, 5, 6}, 4, "node2"),  # most of them (a rank on a GPU the throttling spared)
        ({5}, 4, None),  # one rank of the node: the rank, not the node
        ({2, 3, 4, 5}, 2, None),  # two nodes of four: the job, not a node
        ({3}, 1, None),  # one rank per node: a rank and its node cannot be told apart
    ],
)
def test_a_slow_node_is_named_when_most_of_its_ranks_are_slow_and_no_other_nodes(
    tmp_path: Path, slow_ranks: set[int], per_node: int, named: str | None
) -> None:
    folder = JobFolder(tmp_path, "1")
    slow = lambda rank, step: 130.0 + (60.0 if rank in slow_ranks and 30 <= step <= 60 else 0.0)  # noqa: E731
    write_logs(folder, slow, ranks=8, per_node=per_node)
    run = combined(folder)
    assert {s.rank for s in run_map.segments(run)} == slow_ranks  # the ranks, as always
    nodes = slow_nodes(run)
    if named is None:
        assert nodes == []
        return
    [node] = nodes
    assert (node.node, set(node.slow_ranks), node.ranks) == (named, slow_ranks, [4, 5, 6, 7])
    assert (
        abs(node.first - 30) <= 1 and abs(node.last - 60) <= 1 and node.excess_ms == pytest.approx(60, abs=4)
    )
    report = build_report(folder.path, ReportSettings(plot=False, merged_trace=False))
    [found] = report.run.slow_nodes
    assert found.node == named and "--sbatch exclude=node2" in found.hint
    markdown = folder.report.markdown.read_text()
    assert f"**Slow node: node2**, steps {node.first}-{node.last}" in markdown


def test_a_balanced_run_has_no_segment_and_scores_near_1(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "2")
    # rank 3 steadily 10 % slower (ranks sharing cores do that): not a slow segment
    write_logs(folder, lambda rank, step: 130.0 * (1.1 if rank == 3 else 1.0), noise=6.0)
    run = combined(folder)
    assert run_map.segments(run) == []
    scores = {s.rank: s for s in run_map.scores(run)}
    assert scores[3].relative == pytest.approx(1 / 1.1, abs=0.02)
    assert all(scores[r].relative > 0.97 for r in (0, 1, 2))


def test_scores_in_nvrx_sense_relative_to_the_fastest_individual_to_its_best(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "3")
    # rank 1 twice as slow all along; rank 0 twice as slow in the second half only
    write_logs(folder, lambda r, s: 100.0 * (2 if r == 1 or (r == 0 and s >= 50) else 1), ranks=3, noise=0)
    run = combined(folder)
    scores = {s.rank: s for s in run_map.scores(run)}
    assert scores[1].relative == pytest.approx(0.5) and scores[1].individual == pytest.approx(1.0)
    first_half, last_half = scores[0].intervals[0], scores[0].intervals[-1]
    assert first_half[4] == pytest.approx(1.0) and last_half[4] == pytest.approx(0.5)
    assert scores[2].relative == pytest.approx(1.0)
    segment_ranks = [(s.rank, s.first, s.last) for s in run_map.segments(run)]
    assert segment_ranks == [(0, 50, 99), (1, 0, 99)]


def test_a_requeued_attempt_replaces_the_steps_it_ran_again(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "4")
    write_logs(folder, lambda r, s: 100.0, steps=range(60), noise=0)
    write_logs(folder, lambda r, s: 200.0, steps=range(50, 100), restart=1, noise=0)  # resumed at 50
    run = combined(folder)
    assert run.first.tolist() == list(range(100))
    assert (run.values[:, 49] == 100).all() and (run.values[:, 50] == 200).all()


@pytest.mark.parametrize(
    "ends", [(99, 99, 99, 99), (99, 99, 80, 99)], ids=["shared columns", "one rank ends early"]
)
def test_the_map_read_row_by_row_is_the_map_of_the_logs(tmp_path: Path, ends: tuple[int, ...]) -> None:
    # read_run writes each row into the map as it is read where its columns are the first
    # row's, and falls back to combining the rows where one's differ
    folder = JobFolder(tmp_path, "9")
    write_logs(folder, lambda rank, step: 100.0 + rank, steps_of=lambda rank: range(ends[rank] + 1))
    found = run_logs.read_run(folder.path)
    assert found is not None
    read, expected = found[0], combined(folder)
    for field in ("ranks", "first", "width", "values", "last_step"):
        assert np.array_equal(getattr(read, field), getattr(expected, field), equal_nan=True), field
    assert read.nodes == expected.nodes and read.values.dtype == np.float32
    assert np.isnan(read.values[2, 81:]).all() == (ends[2] == 80)


def test_a_long_run_is_drawn_in_at_most_a_thousand_columns(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "5")
    write_logs(folder, lambda r, s: 100.0 + (50 if r == 1 and 20_000 <= s < 30_000 else 0), ranks=2,
               steps=range(40_000), noise=0)  # fmt: skip
    run = combined(folder)
    assert len(run.first) == 10_000 + 300  # exact steps, then buckets of 100
    binned = run_map.binned(run, 1000)
    assert binned.ratio.shape == (2, 1000) and binned.first[0] == 0 and binned.last[-1] == 39_999
    assert binned.step_median.shape == (1000,)
    [segment] = [s for s in run_map.segments(run) if s.rank == 1]
    assert (segment.first, segment.last) == (20_000, 29_999)


def test_the_report_of_a_job_without_traces_is_its_run(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "6")
    write_logs(folder, lambda rank, step: 130.0 + (40.0 if rank == 2 and 30 <= step <= 60 else 0.0))
    report = build_report(folder.path, ReportSettings(jobs=1))
    run = report.run
    assert report.ranks == [] and report.straggler is None
    [segment] = run.segments
    assert (segment.rank, segment.first, segment.last, segment.traces) == (2, 30, 60, [])
    assert segment.hint == (
        "no trace of rank 2 covers steps 30-60: while it is slow, "
        "`python -m jobs.commands.capture 6 --ranks 2`; in the next run, "
        "`--profile-ranks 0,2 --schedule-wait 25` records steps 30-32"
    )
    # no manifest: a job that did not end by itself
    assert run.ends.note.startswith("no manifest: the job did not end by itself (killed?)")
    markdown = folder.report.markdown.read_text()
    assert "| 2 | node2 | 30-60 | 31 |" in markdown and "![rank × step](run.png)" in markdown
    assert folder.report.run_plot.stat().st_size > 10_000


def test_a_segment_links_the_traces_that_cover_it(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "7")
    write_logs(folder, lambda rank, step: 130.0 + (40.0 if rank == 1 and 30 <= step <= 60 else 0.0))
    for name in ("rank1_iter40_42.json", "rank0_iter40_42.json", "rank1_iter70_72.json"):
        (folder.path / name).write_text('{"traceEvents": []}')
    from profiling.analysis.run.run_logs import read_run
    from profiling.analysis.run.section import run_section

    run, unreadable = read_run(folder.path)
    [segment] = run_section(folder.path, run, unreadable, None).segments
    assert segment.traces == ["rank1_iter40_42.json"] and segment.hint is None


def list_ranks(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobs.commands.list", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("slow_rank_ends, others_end", [(45, 52), (52, 45)])
def test_slow_now_holds_while_the_logs_end_at_different_steps(
    tmp_path: Path, slow_rank_ends: int, others_end: int
) -> None:
    # live, each rank's log ends where it last flushed: the slow rank's a few steps before or
    # after the others' (CI's failure: its segment ended short of the run's last step)
    folder = JobFolder(tmp_path, "8")
    write_logs(
        folder, lambda rank, step: 130.0 + (60.0 if rank == 2 and step >= 30 else 0.0),
        steps_of=lambda rank: range((slow_rank_ends if rank == 2 else others_end) + 1),
    )  # fmt: skip
    table = rank_scores(folder, recent_steps=10)
    slowest = table["ranks"][0]
    assert slowest["rank"] == 2 and slowest["slow_since"] == 30, table
    assert [r["slow_since"] for r in table["ranks"][1:]] == [None] * 3
    compared = combined(folder).last_compared.tolist()
    assert compared == [others_end, others_end, min(slow_rank_ends, others_end), others_end]


def test_list_ranks_refuses_a_job_without_logs_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "8" / "meta").mkdir(parents=True)
    for args, expected in (
        (["--ranks", "8"], "job 8 has no step log in"),
        (["--ranks", "9"], "--ranks 9: no job folder"),
        (["--ranks", "8", "--last", "0"], "--last 0 must be at least 1"),
    ):
        result = list_ranks(str(tmp_path), *args)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert expected in result.stderr


def test_the_map_of_more_ranks_than_it_has_rows_draws_a_row_per_node(tmp_path: Path) -> None:
    from profiling.analysis.run.run_view import MAP_ROWS, RunView
    from profiling.analysis.run.section import run_section

    folder = JobFolder(tmp_path, "1")
    slowed = lambda rank, step: 130.0 + (60.0 if rank == 530 and 30 <= step <= 60 else 0.0)  # noqa: E731
    write_logs(folder, slowed, ranks=MAP_ROWS + 64, per_node=8)
    run = combined(folder)
    drawn = RunView(run, run_section(folder.path, run, [], None)).picture
    assert drawn.by_node and drawn.ratio.shape == ((MAP_ROWS + 64) // 8, 100)
    assert list(drawn.rows[:2]) == ["node1", "node2"]
    row = list(drawn.rows).index("node67")  # rank 530's node: its slowest rank shows
    assert np.nanmax(drawn.ratio[row, 35:55]) > 1.3 and np.nanmax(drawn.ratio[row - 1, 35:55]) < 1.2
    report = build_report(folder.path, ReportSettings(merged_trace=False))
    assert report.run_plot == "run.png" and folder.report.folder.joinpath("run.png").stat().st_size > 0


def test_run_png_numbers_whole_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 20-step run: matplotlib's own ticks would read 2.5, 7.5, ..."""
    from matplotlib.figure import Figure

    from profiling.analysis.run.run_view import RunView
    from profiling.analysis.run.section import run_section
    from profiling.report.plot_run import plot_run

    folder = JobFolder(tmp_path, "1")
    write_logs(folder, lambda rank, step: 130.0, ranks=2, steps=range(20))
    run = combined(folder)
    saved: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, *args, **kwargs: saved.append(figure))
    plot_run(RunView(run, run_section(folder.path, run, [], None)).picture, tmp_path / "run.png")
    (figure,) = saved
    ticks = figure.axes[1].get_xticks()  # the map's; the line above shares them
    assert len(ticks) > 2 and all(float(t).is_integer() for t in ticks), ticks
