"""The report of one folder of traces, start to end: read (each trace once, or its record),
combine, then write ``report.json``, ``report.md``, ``report.png`` and the merged timeline."""

from __future__ import annotations

import contextlib
import gc
import importlib
import time
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TextIO

import msgspec

from profiling.analysis.per_trace import ReportError
from profiling.folder.layout import JobFolder, ReportFiles
from profiling.folder.manifest import read_manifest
from profiling.folder.traces import TraceSource, find_traces
from profiling.report.pictures import Pictures, prepare_drawing, read_drawn
from profiling.report.read import read_records
from profiling.report.report_job import ReportJob
from profiling.report.settings import ReportSettings
from profiling.report.workers import Ahead, Workers
from profiling.schema import model
from profiling.schema.files import FileRefused
from profiling.schema.manifest import Manifest
from slurm.common.clock import utc_now

_ASSEMBLY = "profiling.report.assemble"  # what follows the reading
_COLLECT_EVERY = (200_000, 30, 30)
# Below this many bytes of traces, the plot's process imports matplotlib (a second) while they are
# read; above, once they are read, when a core is free (reading keeps both busy).
_READ_WHILE_IMPORTING = 64 << 20


def build_report(
    folder: Path, settings: ReportSettings | None = None, *, progress: TextIO | None = None
) -> model.Report:
    """Report on every trace in ``folder`` as ``settings`` say (None: the defaults, as
    ``python -m jobs.commands.report`` has them); returns ``report.json``'s content.

    ``settings.jobs`` processes read the traces that have no fresh record. The job's step logs,
    if it has some, add the whole run (``run``, ``run.png``); a job with step logs and no trace
    gets that alone. ``progress``: where to show it, if a terminal.
    """
    with _collecting_less():
        return _build_report(folder, settings or ReportSettings(), progress)


@contextlib.contextmanager
def _collecting_less() -> Iterator[None]:
    """The cycle collector's thresholds raised while the report is built, then as they were.

    The report makes millions of small containers (a step's graph at thousands of ranks) that
    reference counting frees; at the default first threshold (700) the collector's passes over
    the records and lanes held meanwhile took 10 % of a 4096-rank report (2026-12-04). It
    collects less often meanwhile, as mypy's command line does.
    """
    before = gc.get_threshold()
    gc.set_threshold(*_COLLECT_EVERY)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _build_report(folder: Path, settings: ReportSettings, progress: TextIO | None) -> model.Report:
    started = time.perf_counter()
    sources = find_traces(folder)
    job_folder = JobFolder.of_traces(folder)
    if not sources and not job_folder.step_logs():  # said before any process starts
        raise _nothing_to_report(folder)
    files = ReportFiles(settings.out) if settings.out else ReportFiles.of(folder)
    # the plot's process is forked first, while this one is small: forked later, it would count
    # (and copy, as either writes) what this one holds by then: 370 MB of step logs at 4096 ranks
    workers = Workers(settings.jobs)
    with Ahead(prepare_drawing, enabled=settings.plot and workers.jobs > 1) as plotter:
        pictures = Pictures(plotter, read_drawn(files.json)) if settings.plot else None
        if pictures and sum(source.path.stat().st_size for source in sources) < _READ_WHILE_IMPORTING:
            pictures.warm()  # little to read: matplotlib's import overlaps it, not what follows
        run = None
        if job_folder.step_logs():  # the run's analysis (numpy, its map) for a job with step logs only
            from profiling.report.run_part import read_run, run_report

            run = read_run(folder)
        if not sources and run is None:
            raise _nothing_to_report(folder)
        has_run = run is not None
        files.folder.mkdir(parents=True, exist_ok=True)
        job = ReportJob(
            folder, job_folder, files, settings, workers, pictures, *_manifest(job_folder), started, progress
        )
        # the run needs only the step logs: its map is drawn while the traces are read
        section, levels = run_report(job, run) if run else (None, None)
        del run  # the map and its ratios: 400 MB at 4096 ranks, not needed past this point
        with workers:
            report = _traces_report(job, sources, has_run) if sources else _empty_report(folder)
        # report.md and report.html are made while report.png is drawn (the page takes it last)
        from profiling.report.assemble import write_report  # imported while the traces were read

        return write_report(job, report, section, levels)


def _manifest(job: JobFolder) -> tuple[Manifest | None, list[str]]:
    """The job's manifest (none for traces of another origin), and the line that says why it
    was not read where it does not read."""
    try:
        return read_manifest(job), []
    except FileRefused as refused:
        return None, [
            f"the manifest was not read: {refused}; the ranks' nodes and the run's steps are not known"
        ]


def _nothing_to_report(folder: Path) -> ReportError:
    return ReportError(
        f"{folder} holds no trace (*.json, *.json.gz, here or one folder down) and its job no "
        "step log (meta/steps/). HINT: pass a job folder, or a folder of torch.profiler traces"
    )


def _traces_report(job: ReportJob, sources: Sequence[TraceSource], has_run: bool) -> model.Report:
    folder, pictures = job.folder, job.pictures
    # what follows the reading (alignment, summary, critical path, archive, page: a seventh of a
    # second of imports) is imported while the readers read, not before they start
    read = read_records(
        sources, job.workers, job.progress, meanwhile=partial(importlib.import_module, _ASSEMBLY)
    )
    job.workers.close()  # their heaps hold what they read: 100 MB for the dense folder's two
    if pictures:  # a core is free from here: this process aligns the clocks alone
        pictures.warm()
    if not read.traces and not has_run:
        raise ReportError(f"{folder} holds no trace the report can read: {'; '.join(read.skipped)}")
    if not read.traces:
        return msgspec.structs.replace(_empty_report(folder), warnings=read.skipped)
    from profiling.report.assemble import traces_report  # imported while the traces were read

    return traces_report(job, read)


def _empty_report(folder: Path) -> model.Report:
    """A job without traces (``--profile-ranks none``): its run alone."""
    return model.empty(str(folder), utc_now())
