"""The manifest's pieces: step-time summaries split by profiler window, and attempt records."""

from __future__ import annotations

import json

import msgspec
import pytest

from profiling.folder.layout import JobFolder
from profiling.folder.manifest import (
    attempt_record,
    manifest_or_none,
    read_manifest,
    record_attempt,
    step_time_summary,
    with_attempt,
    write_manifest,
)
from profiling.schema.files import FileRefused
from profiling.schema.manifest import AttemptRecord, JobFacts, Manifest, StepTimeSummary


def test_step_time_summary_without_windows() -> None:
    summary = msgspec.structs.asdict(step_time_summary([0.4, 0.1, 0.2, 0.3]))
    assert {key: value for key, value in summary.items() if value is not None} == {
        "steps": 4,
        "mean_s": pytest.approx(0.25),
        "median_s": pytest.approx(0.25),
        "p90_s": pytest.approx(0.37),  # 0.3 + 0.7 of the way to 0.4: the inclusive 90th percentile
        "min_s": 0.1,
        "max_s": 0.4,
        "first_s": 0.4,
    }
    assert step_time_summary([]) == StepTimeSummary(steps=0)


def test_step_time_summary_splits_recorded_after_and_other_steps() -> None:
    # steps 10..19; window 13-14: recorded 13, 14; 15 closes the window; the first step (10) is
    # warm-up of the loop and counts in no kind
    seconds = [9.0, 1.0, 1.2, 2.0, 2.2, 5.0, 1.1, 0.9, 1.0, 1.3]
    summary = step_time_summary(seconds, first_step=10, windows=[(13, 14)])
    assert summary.recorded_median_s == pytest.approx(2.1)
    assert summary.after_window_mean_s == pytest.approx(5.0)
    assert summary.unrecorded_median_s == pytest.approx(1.05)  # steps 11, 12, 16-19
    assert summary.first_s == 9.0 and summary.steps == 10


def test_attempt_record_lists_that_attempts_traces(tmp_path) -> None:
    job = JobFolder(tmp_path, "4242")
    job.attempt(1).mkdir(parents=True)
    for folder, name in ((job.path, "rank0_iter3_4.json"), (job.attempt(1), "rank0_iter8_9.json")):
        (folder / name).write_text("{}")
    (job.attempt(1) / ".rank1_iter8_9.json.77.tmp").write_text("{")  # half-written: not listed
    record = attempt_record(
        job, restart_count=1, resumed_from_step=6, next_step=20, outcome="completed", started_at="t0"
    )
    assert record.folder == job.attempt_name(1)
    assert record.trace_files == [str((job.attempt(1) / "rank0_iter8_9.json").relative_to(job.path))]
    assert (record.restart_count, record.resumed_from_step, record.next_step) == (1, 6, 20)
    assert record.error is None and "error" not in msgspec.json.decode(msgspec.json.encode(record))
    first = attempt_record(
        job, restart_count=0, resumed_from_step=0, next_step=6, outcome="preempted", started_at="t", error="x"
    )
    assert first.folder == "." and first.trace_files == ["rank0_iter3_4.json"] and first.error == "x"


def test_attempts_accumulate_and_a_rerun_replaces_its_own(tmp_path) -> None:
    job = JobFolder(tmp_path, "7")
    facts = JobFacts(job_id="7", launcher="slurm", nodes=2, master="node1:29500", backend="nccl")

    def attempt(count: int, outcome: str) -> AttemptRecord:
        return attempt_record(
            job, restart_count=count, resumed_from_step=0, next_step=5, outcome=outcome, started_at="t"
        )

    record_attempt(job, facts, attempt(0, "preempted"))
    record_attempt(job, facts, attempt(1, "failed"))
    manifest = read_manifest(job)
    assert [(a.restart_count, a.outcome) for a in manifest.attempts] == [(0, "preempted"), (1, "failed")]
    assert manifest.launcher == "slurm" and manifest.ranks == [] and manifest.schema_version == 1
    # attempt 1's final record replaces its failure record; attempt 0 stays
    attempts = with_attempt(job, attempt(1, "completed"))
    assert [(a.restart_count, a.outcome) for a in attempts] == [(0, "preempted"), (1, "completed")]


def _facts(**more: object) -> Manifest:
    return msgspec.convert(
        {"job_id": "1", "launcher": "local", "nodes": 1, "master": "h:1", "backend": "gloo"}
        | {"attempts": [], "trace_files": []}
        | more,
        Manifest,
    )


def test_a_manifest_is_written_and_read_typed(tmp_path) -> None:
    job = JobFolder(tmp_path, "1")
    assert read_manifest(job) is None
    write_manifest(job, _facts(workload={"steps": 20}))
    manifest = read_manifest(job)
    assert manifest == _facts(workload={"steps": 20}) and manifest.workload_steps == 20
    assert json.loads(job.manifest.read_text())["schema_version"] == Manifest.VERSION


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"half', r"manifest.json: not JSON \(.*truncated"),
        ("[1, 2]", r"manifest.json: not a Manifest file: Expected `object`, got `array`"),
        ('{"job_id": 7}', r"not a Manifest file: Expected `str`, got `int` - at `\$.job_id`"),
        (b"\xff\xfe{}", r"manifest.json: not JSON"),
    ],
)
def test_a_manifest_that_does_not_read_is_refused_in_one_line(tmp_path, text, said) -> None:
    job = JobFolder(tmp_path, "1")
    job.meta.mkdir(parents=True)
    (job.manifest.write_bytes if isinstance(text, bytes) else job.manifest.write_text)(text)
    with pytest.raises(FileRefused, match=said) as refused:
        read_manifest(job)
    assert "\n" not in str(refused.value)
    assert manifest_or_none(job) is None  # the tools that can go on without it


def test_a_manifest_of_a_newer_version_is_refused_and_one_of_before_versions_is_read(tmp_path) -> None:
    job = JobFolder(tmp_path, "1")
    write_manifest(job, _facts())
    document = json.loads(job.manifest.read_text())
    job.manifest.write_text(json.dumps(document | {"schema_version": 9}))
    with pytest.raises(FileRefused, match=r"schema_version 9, newer than the 1 this toolkit reads. HINT"):
        read_manifest(job)
    del document["schema_version"]  # written before the files were typed: the same form
    job.manifest.write_text(json.dumps(document))
    assert read_manifest(job) == _facts()
