"""Comparing two jobs: the verdict, noise, different world sizes, and bad input."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jobs.commands.compare import main
from profiling.compare import CompareError, compare
from profiling.folder.layout import meta_of
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from profiling.schema.comparison import Comparison
from profiling.schema.files import read_file
from tests.synthetic import cpu_job, write_job


def job(folder: Path, ranks: int = 2, backward_us: float = 10.0, seed: int = 0) -> Path:
    """8 steps with a little step-to-step noise; a report already made."""
    jitter = random.Random(seed)
    traces = cpu_job(8, lambda step: {0: jitter.uniform(0, 0.5)}, ranks=ranks, backward_us=backward_us)
    write_job(folder, traces, 8)
    build_report(folder, ReportSettings(merged_trace=False, plot=False))
    return folder


def test_slower_backward_on_every_rank(tmp_path: Path) -> None:
    result = compare(job(tmp_path / "a"), job(tmp_path / "b", backward_us=19.0, seed=1))
    # a step is 80 µs + 0-0.5 µs of waiting; B spends 9 µs more in backward on every rank
    assert result.verdict.startswith("B is 11 % slower per step: backward +9 µs on every rank; ")
    assert result.parts_changed == ["backward +9 µs on every rank"]
    assert set(result.parts_unchanged) == {"forward", "optimizer", "communication", "other"}
    for row in result.ranks:
        assert row.step.beyond_noise and row.parts["backward"].diff_ms == pytest.approx(0.009, abs=0.001)
        assert not row.parts["forward"].beyond_noise
    assert result.differences == []


def test_same_job_twice_is_within_noise(tmp_path: Path) -> None:
    result = compare(job(tmp_path / "a"), job(tmp_path / "b", seed=3))
    assert result.verdict.startswith("B's step time is within noise of A's")
    assert result.parts_changed == []


def test_different_world_sizes_compare_what_they_share(tmp_path: Path) -> None:
    result = compare(job(tmp_path / "a", ranks=2), job(tmp_path / "b", ranks=4))
    assert [row.rank for row in result.ranks] == [0, 1]
    assert result.ranks_only_in_b == [2, 3] and result.ranks_only_in_a == []
    assert result.differences == ["traced ranks: 2 in A, 4 in B"]


def test_a_job_without_a_report_gets_one_first(tmp_path: Path) -> None:
    a = job(tmp_path / "a")
    b = write_job(tmp_path / "b", cpu_job(8), 8)
    assert not (meta_of(b) / "report.json").exists()
    compare(a, b)
    assert (meta_of(b) / "report.json").exists()


def test_command_line_writes_json_md_png(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a, b = job(tmp_path / "a"), job(tmp_path / "b", backward_us=19.0)
    assert main([str(a), str(b)]) == 0
    out = meta_of(b) / "compare-a"
    assert sorted(p.name for p in out.iterdir()) == ["compare.json", "compare.md", "compare.png"]
    written = read_file(out / "compare.json", Comparison)
    assert written.verdict == capsys.readouterr().out.splitlines()[0] and written.schema_version == 1
    assert "| rank | step A | B | diff |" in (out / "compare.md").read_text()


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ("missing", "b", r"job A .*missing is not a folder. HINT: pass a job folder"),
        (
            "empty",
            "b",
            r"job A .*empty holds no trace \(\*\.json, \*\.json\.gz, here or one folder down\) and no report",
        ),
        ("b", "b", r"job A and job B are the same folder"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, a: str, b: str, message: str, capsys: pytest.CaptureFixture
) -> None:
    job(tmp_path / "b")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompareError, match=message):
        compare(tmp_path / a, tmp_path / b)
    assert main([str(tmp_path / a), str(tmp_path / b)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("python -m jobs.commands.compare: error: ")
