"""The history across jobs (``slurm-profile history``): regressions against the last jobs of a
config, nodes named slow again and again, and what it says of files it cannot read; the line put
into a SLURM job's Comment. Summaries made here, with known answers; the real jobs are in
tests/test_history_cluster.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.commands import history
from profiling.history.comment import MARK, MAX_CHARS, comment_line, merged_comment
from profiling.history.jobs import nodes_named_slow, read_jobs, standing, standings
from profiling.history.summary import SUMMARY, config_fingerprint, write_summary
from profiling.schema import model
from profiling.schema.summary import JobSummary

CONFIG = {"name": "workload.resnet18:build", "batch_size": 10, "ranks": 4, "nodes": 2, "backend": "gloo"}


def _job(
    job_id: int,
    step_ms: float | None,
    *,
    noise_ms: float = 2.0,
    config: dict | None = None,
    nodes: tuple[str, ...] = ("node1", "node2"),
    slow: tuple[str, ...] = (),
) -> JobSummary:
    config = config or CONFIG
    return JobSummary(
        job_id=str(job_id),
        ended_at=f"2026-12-04T10:{job_id:02d}:00+00:00",
        nodes=list(nodes),
        workload=config["name"],
        config=config,
        fingerprint=config_fingerprint(config),
        ranks=config["ranks"],
        step_median_ms=step_ms,
        noise_ms=noise_ms,
        verdict="straggler" if slow else "none",
        slow_nodes=list(slow),
    )


def _root(tmp_path: Path, jobs: list[JobSummary]) -> Path:
    for job in jobs:
        write_summary(tmp_path / job.job_id / "meta", job)
    return tmp_path


def test_five_balanced_jobs_then_a_slow_one_flags_the_slow_one_alone() -> None:
    jobs = [_job(i, ms) for i, ms in enumerate([100.0, 102.0, 99.0, 101.0, 100.5], start=1)]
    jobs.append(_job(6, 150.0))
    found = standings(jobs)
    fingerprint = config_fingerprint(CONFIG)
    assert [found[fingerprint, str(i)].regression for i in range(1, 7)] == [False] * 5 + [True]
    sixth = found[fingerprint, "6"]
    assert sixth.baseline_jobs == ["5", "4", "3", "2", "1"]  # the newest first
    assert sixth.baseline_ms == pytest.approx(100.5)  # the median of the five
    assert sixth.change == pytest.approx(150.0 / 100.5 - 1)
    assert sixth.line(jobs[-1]) == (
        "49 % slower than the last 5 jobs of this config (median 100 ms a step): a regression"
    )
    assert found[fingerprint, "1"].baseline_ms is None and found[fingerprint, "1"].line(jobs[0]) == (
        "the first job of this config: no baseline yet"
    )


def test_a_regression_must_pass_both_five_percent_and_the_noise() -> None:
    base = [_job(i, 100.0) for i in range(1, 6)]
    under_five = _job(6, 104.0, noise_ms=1.0)  # 4 %: beyond its noise, within 5 %
    noisy = _job(7, 108.0, noise_ms=10.0)  # 8 %: within its noise of 10 ms
    both = _job(8, 108.0, noise_ms=5.0)
    assert not standing(under_five, base).regression
    assert not standing(noisy, base).regression
    assert standing(noisy, base).line(noisy) == (
        "as fast as the last 5 jobs of this config (median 100 ms a step), within its noise"
    )
    assert standing(both, base).regression
    # runs of the config that differ among themselves: 3 x 1.4826 x their median deviation (2 ms)
    spread = [_job(i, ms) for i, ms in enumerate([96.0, 100.0, 104.0, 98.0, 102.0], start=1)]
    assert not standing(_job(10, 108.5), spread).regression  # 8.5 ms: within 8.9
    assert standing(_job(11, 109.5), spread).regression
    faster = _job(9, 80.0)
    assert (
        standing(faster, base).line(faster)
        == "20 % faster than the last 5 jobs of this config (median 100 ms a step)"
    )


def test_a_config_s_first_jobs_are_compared_but_never_flagged() -> None:
    # One earlier job gives no spread to judge against: a second balanced run on a shared
    # machine may well be 30 % slower than the first
    jobs = [_job(1, 100.0), _job(2, 130.0)]
    second = standing(jobs[1], jobs[:1])
    assert not second.regression and second.change == pytest.approx(0.3)
    assert second.line(jobs[1]) == (
        "30 % slower than the last job of this config (median 100 ms a step), "
        "too few to judge a regression (5 needed)"
    )
    four = [_job(i, 100.0) for i in range(1, 5)]
    assert not standing(_job(5, 150.0), four).regression
    assert standing(_job(6, 150.0), [*four, _job(5, 100.0)]).regression


def test_only_jobs_of_the_same_config_and_earlier_make_the_baseline() -> None:
    other = dict(CONFIG, batch_size=64)
    jobs = [_job(i, 100.0) for i in range(1, 4)] + [_job(i, 400.0, config=other) for i in range(4, 9)]
    late = _job(30, 100.0)  # ended after the one we ask about: not its baseline
    found = standing(_job(20, 101.0), [*jobs, late])
    assert found.baseline_jobs == ["3", "2", "1"] and found.baseline_ms == pytest.approx(100.0)
    assert not found.regression
    assert config_fingerprint(CONFIG) == config_fingerprint(dict(reversed(list(CONFIG.items()))))
    assert config_fingerprint(CONFIG) != config_fingerprint(other)


def test_a_node_named_slow_in_three_of_its_last_jobs_is_excluded(tmp_path: Path, capsys) -> None:
    jobs = [_job(i, 100.0) for i in range(1, 6)]
    jobs += [_job(i, 150.0, slow=("node2",)) for i in range(6, 9)]
    jobs += [_job(9, 100.0, nodes=("node3", "node4"), slow=("node4",))]
    named = {n.node: n for n in nodes_named_slow(jobs)}
    assert (named["node2"].named, named["node2"].jobs, named["node2"].excluded) == (3, 8, True)
    assert (named["node4"].named, named["node4"].excluded) == (1, False)
    assert "node1" not in named
    root = _root(tmp_path, jobs)
    assert history.main([str(root)]) == 0
    out = capsys.readouterr().out
    assert "node2: 3 of 8" in out and "node4: 1 of 1" in out
    assert "submit.py --sbatch exclude=node2 (sbatch --exclude=node2)" in out
    table = out.splitlines()
    rows = [line.split()[0] for line in table if line.startswith("  ") and line.split()[0].isdigit()]
    assert rows == ["9", "8", "7", "6", "5", "4", "3", "2", "1"]  # the newest first
    flagged = [line.split()[0] for line in table if "REGRESSION" in line]
    assert flagged == ["8", "7", "6"]  # 7 and 8 too: their last 5 are mostly the balanced ones


def test_json_groups_by_config_with_each_standing(tmp_path: Path, capsys) -> None:
    other = dict(CONFIG, dtype="bf16")
    base = [_job(i, 100.0) for i in range(1, 6)]
    root = _root(tmp_path, [*base, _job(6, 130.0), _job(7, 50.0, config=other)])
    assert history.main([str(root), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    configs = {c["fingerprint"]: [job["job_id"] for job in c["jobs"]] for c in document["configs"]}
    assert configs == {
        config_fingerprint(CONFIG): ["6", "5", "4", "3", "2", "1"],
        config_fingerprint(other): ["7"],
    }
    sixth = next(job for c in document["configs"] for job in c["jobs"] if job["job_id"] == "6")
    assert sixth["standing"]["regression"] is True
    assert sixth["standing"]["baseline_ms"] == 100.0 and document["exclude"] == []


def test_a_damaged_or_newer_summary_is_named_in_one_line_and_skipped(tmp_path: Path, capsys) -> None:
    root = _root(tmp_path, [_job(1, 100.0), _job(2, 101.0)])
    (root / "3" / "meta").mkdir(parents=True)
    (root / "3" / "meta" / SUMMARY).write_text('{"schema_version": 1, "job_id": ')  # cut short
    (root / "4" / "meta").mkdir(parents=True)
    newer = json.loads((root / "1" / "meta" / SUMMARY).read_text()) | {"schema_version": 99, "job_id": "4"}
    (root / "4" / "meta" / SUMMARY).write_text(json.dumps(newer))
    (root / "5" / "meta").mkdir(parents=True)
    (root / "5" / "meta" / SUMMARY).write_text(
        '{"schema_version": 1, "job_id": 5}'
    )  # a field of another type
    (root / "6").mkdir()  # a job still running: no summary yet, nothing to say
    jobs, skipped = read_jobs(root)
    assert [job.job_id for job in jobs] == ["1", "2"]
    assert len(skipped) == 3
    assert history.main([str(root)]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 3 and all(line.endswith(": skipped") for line in lines)
    assert f"{root / '3' / 'meta' / SUMMARY}: not JSON" in lines[0]
    assert "schema_version 99, newer than the 1 this toolkit reads" in lines[1]
    assert f"{root / '5' / 'meta' / SUMMARY}: not a JobSummary file" in lines[2]
    assert "config " in captured.out and "  2  " in captured.out


def test_a_root_without_jobs_says_so(tmp_path: Path, capsys) -> None:
    assert history.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"no job summary under {tmp_path} (a job's report writes meta/summary.json)"
    )


def _baseline(change: float | None, regression: bool, jobs: int = 5) -> model.Baseline:
    return model.Baseline(
        jobs=[str(i) for i in range(jobs)],
        median_ms=100.0,
        change=change,
        regression=regression,
        fingerprint="f",
        line="",
    )


def test_the_comment_says_the_verdict_in_one_line_within_the_limit() -> None:
    summary = JobSummary(
        job_id="7",
        ended_at="2026-12-04T10:00:00+00:00",
        workload="w",
        fingerprint="f",
        ranks=8,
        step_median_ms=131.4,
        step_p90_ms=140.2,
        verdict="straggler",
        straggler=3,
        slow_nodes=["node2"],
        slowdown=1.234,
        mfu=0.412,
        oom=False,
    )
    assert comment_line(summary, _baseline(0.12, True)) == (
        "slurm-profile: step 131 ms (p90 140); straggler rank 3; slow node2; S 1.23; MFU 41%; no OOM; "
        "+12% vs last 5 (regression)"
    )
    balanced = JobSummary(
        job_id="8",
        ended_at="2026-12-04T10:08:00+00:00",
        workload="w",
        fingerprint="f",
        ranks=2,
        verdict="none",
        oom=True,
    )
    assert comment_line(balanced, None) == "slurm-profile: balanced; OOM"
    many = JobSummary(
        job_id="9",
        ended_at="2026-12-04T10:09:00+00:00",
        workload="w",
        fingerprint="f",
        ranks=2,
        slow_nodes=[f"n{'x' * 90}{i}" for i in range(3)],
    )
    long = comment_line(many, None)
    assert len(long) == MAX_CHARS and long.endswith("...")


def test_the_comment_keeps_the_users_own() -> None:
    ours = f"{MARK} step 100 ms; no OOM"
    assert merged_comment("", ours) == ours
    assert merged_comment(f"{MARK} step 90 ms", ours) == ours  # ours from an earlier attempt: replaced
    assert merged_comment("my ablation 3", ours) == f"my ablation 3 | {ours}"
    assert merged_comment(f"my ablation 3 | {MARK} old", ours) == f"my ablation 3 | {ours}"
    assert merged_comment("x" * MAX_CHARS, ours) is None  # no room: the user's is left as it is
