"""The end of a job, for its report: each rank reads the traces it wrote into their analysis
records, all at once and where the traces are, before the job ends; rank 0 then only combines
(:mod:`profiling.report`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiling.schema.manifest import OwnAnalysis

if TYPE_CHECKING:
    from profiling.schema.model import Report


def analyse_own_traces(traces: list[Path], *, reader: str, limit_s: float) -> OwnAnalysis:
    """Read this rank's traces into their records; what the manifest says of it.

    Bounded by ``limit_s`` (half the collective timeout), since every rank then meets the others
    in the manifest's gather: a rank still analysing leaves its traces to rank 0, and a failed
    analysis costs the job nothing but that.
    """
    from profiling.folder.traces import TraceSource  # numpy, msgspec: only with traces
    from profiling.report.read import analyse_and_save

    outcome: dict[str, Any] = {"records": [], "seconds": 0.0, "outcome": "written"}

    def analyse() -> None:
        try:
            for path in traces:
                analyse_and_save(TraceSource(path.parent, path.name), reader)
                outcome["records"].append(path.name)
        except Exception as error:  # rank 0 reads it instead; the report says so
            outcome["outcome"] = f"failed: {type(error).__name__}: {error}"

    started = time.monotonic()
    worker = threading.Thread(target=analyse, name="trace-analysis", daemon=True)
    worker.start()
    worker.join(timeout=limit_s)
    if worker.is_alive():
        outcome["outcome"] = f"unfinished after {limit_s:g} s (half --dist-timeout): left to rank 0"
    return OwnAnalysis(
        records=list(outcome["records"]),
        seconds=round(time.monotonic() - started, 3),
        outcome=outcome["outcome"],
    )


def report_on(trace_dir: Path, log: Callable[[str], None], *, comment_on: str | None = None) -> None:
    """Rank 0, after the job: combine the records into the report, reading what has none; then,
    with ``comment_on`` (a SLURM job id), put its verdict in one line into the job's Comment."""
    from profiling.folder.layout import ReportFiles
    from profiling.report.build import build_report  # numpy, msgspec: only where there is a report to make

    try:
        report = build_report(trace_dir)
    except Exception as error:  # the traces are what the job is for; a report can be redone
        rerun = f"python -m jobs.commands.report {trace_dir}"
        log(f"report failed ({type(error).__name__}: {error}); rerun: {rerun}")
        return
    reading = report.reading
    verdict = f": {report.straggler.text}" if report.straggler else ""
    run = report.run
    if run is not None:
        nodes = [f"node {n.node} slow in steps {n.first}-{n.last}" for n in run.slow_nodes]
        ranks = [f"rank {s.rank} slow in steps {s.first}-{s.last}" for s in run.segments]
        slow = "; ".join([*nodes, *ranks][:3])
        verdict += f"; the run: {slow or 'no rank persistently slow'}"
    log(
        f"report in {ReportFiles.of(trace_dir).folder} ({report.seconds:.1f}s: "
        f"{reading.from_records} of {reading.traces} traces from their ranks' records, "
        f"{len(reading.read_here)} read here in {reading.seconds:.1f}s, "
        f"combined in {report.seconds - reading.seconds:.1f}s){verdict}"
    )
    if comment_on is not None:
        _comment(comment_on, ReportFiles.of(trace_dir).folder, report, log)


def _comment(job_id: str, meta: Path, report: Report, log: Callable[[str], None]) -> None:
    """The job's Comment: the report's verdict, after a comment of the user's own where both fit."""
    from profiling.history.comment import comment_line, merged_comment
    from profiling.history.summary import SUMMARY, read_summary
    from profiling.schema.files import FileRefused
    from slurm import scheduler

    try:
        summary = read_summary(meta / SUMMARY)
    except (FileNotFoundError, FileRefused):
        return  # traces of no manifest: no summary, nothing to say
    line = comment_line(summary, report.baseline)
    existing = scheduler.job_comment(job_id)
    if existing is None:
        log(f"job comment not set: SLURM did not say job {job_id}'s comment")
        return
    comment = merged_comment(existing, line)
    if comment is None:
        log(f"job comment left as the user set it (no room for: {line})")
        return
    refused = scheduler.set_job_comment(job_id, comment)
    log(f"job comment not set: {refused}" if refused else f"job comment: {comment}")
