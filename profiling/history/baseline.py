"""The report's step across jobs: the job's summary, and where it stands against the jobs of its
config under the same traces root (report.json's ``baseline``)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from profiling.history.jobs import read_jobs, standing
from profiling.history.summary import job_summary
from profiling.schema import model
from profiling.schema.manifest import Manifest
from profiling.schema.summary import JobSummary


def with_baseline(
    report: model.Report, manifest: Manifest | None, traces_root: Path
) -> tuple[model.Report, JobSummary | None]:
    """``report`` with its ``baseline``, and the job's summary to write beside it; the report as
    it is, and no summary, for traces without a manifest (not a job of this toolkit's). The
    other jobs' summaries that do not read are named in the report's warnings."""
    if manifest is None:
        return report, None
    try:
        summary = job_summary(report, manifest)
    except ValueError as error:  # a job no summary can hold (its id, a field out of bounds): no history
        return _warned(report, [f"no meta/summary.json: {error}"]), None
    try:
        others, skipped = read_jobs(traces_root)
    except OSError as error:
        return _warned(report, [f"the history under {traces_root} was not read: {error}"]), summary
    found = standing(summary, others)
    baseline = model.Baseline(
        jobs=found.baseline_jobs,
        median_ms=found.baseline_ms,
        change=found.change,
        regression=found.regression,
        fingerprint=summary.fingerprint,
        line=found.line(summary),
    )
    return _warned(msgspec.structs.replace(report, baseline=baseline), skipped), summary


def _warned(report: model.Report, lines: list[str]) -> model.Report:
    return msgspec.structs.replace(report, warnings=[*report.warnings, *lines]) if lines else report
