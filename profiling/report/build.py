"""The report of one folder of traces, start to end: read (each trace once, or its record),
combine, then write ``report.json``, ``report.md``, ``report.png`` and the merged timeline."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import gzip
import json
import time
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import msgspec

from profiling.analysis.across_ranks import decided_with_logs, summarise
from profiling.analysis.clocks import kept_alignment
from profiling.analysis.dumps import out_of_memory
from profiling.analysis.per_trace import ReportError, TraceRecord
from profiling.analysis.run import RunMap, RunView, read_run, run_mesh, run_section
from profiling.archive import write_archive
from profiling.folder.layout import JobFolder, ReportFiles
from profiling.folder.manifest import read_manifest
from profiling.folder.report_json import encode_report, write_report_json
from profiling.folder.traces import TraceSource, find_traces
from profiling.history.baseline import with_baseline
from profiling.history.summary import write_summary
from profiling.ranks import RankSelection
from profiling.report import plot_path
from profiling.report.merged_json import write_merged_json
from profiling.report.page import write_page
from profiling.report.page_data import ranks_table, run_levels
from profiling.report.pictures import Pictures, read_drawn
from profiling.report.plot import draw_ranks, plot_report
from profiling.report.plot import prepare as prepare_plot
from profiling.report.plot_run import plot_run
from profiling.report.read import read_records
from profiling.report.render import report_markdown
from profiling.report.settings import ReportSettings
from profiling.report.workers import Ahead, Workers
from profiling.schema import model
from profiling.schema.files import FileRefused
from profiling.schema.manifest import Manifest
from slurm.common.clock import utc_now
from slurm.common.files import atomic_path, write_text_atomically

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


@dataclasses.dataclass(frozen=True)
class ReportJob:
    """One report's job, made once and handed to each part of the build."""

    folder: Path  # the folder of traces reported on
    job: JobFolder  # the job folder above it (its step logs, manifest, dumps, history)
    files: ReportFiles  # where the report's files go
    settings: ReportSettings
    workers: Workers  # the processes that read traces without a fresh record
    pictures: Pictures | None  # report.png and run.png, drawn in the plot's process; None: no plot
    manifest: Manifest | None  # the job's, where it has one that reads
    refused: list[str]  # why the manifest was not read, where it was not
    started: float  # perf_counter() when the build began
    progress: TextIO | None  # where reading is shown, if a terminal


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
    with Ahead(prepare_plot, enabled=settings.plot and workers.jobs > 1) as plotter:
        pictures = Pictures(plotter, read_drawn(files.json)) if settings.plot else None
        if pictures and sum(source.path.stat().st_size for source in sources) < _READ_WHILE_IMPORTING:
            pictures.warm()  # little to read: matplotlib's import overlaps it, not what follows
        run = read_run(folder)
        if not sources and run is None:
            raise _nothing_to_report(folder)
        has_run = run is not None
        files.folder.mkdir(parents=True, exist_ok=True)
        job = ReportJob(
            folder, job_folder, files, settings, workers, pictures, *_manifest(job_folder), started, progress
        )
        # the run needs only the step logs: its map is drawn while the traces are read
        section, levels = _run_report(job, run) if run else (None, None)
        del run  # the map and its ratios: 400 MB at 4096 ranks, not needed past this point
        with workers:
            report = _traces_report(job, sources, has_run) if sources else _empty_report(folder)
        # report.md and report.html are made while report.png is drawn (the page takes it last)
        return _write_report(job, report, section, levels)


def _write_gzip_json(path: Path, document: dict[str, Any]) -> None:
    """``document`` as gzipped JSON, whole or not at all."""
    with atomic_path(path, durable=False) as temp:
        temp.write_bytes(gzip.compress(json.dumps(document, separators=(",", ":")).encode(), compresslevel=6))


def _write_report(
    job: ReportJob, report: model.Report, section: model.Run | None, levels: dict[str, Any] | None
) -> model.Report:
    """The report's files; report.json last but the job's summary, once its pictures are on disk:
    a picture whose drawing failed is not taken for current by the next report."""
    files, pictures = job.files, job.pictures
    oom, unread_dumps = out_of_memory(job.job)
    report = msgspec.structs.replace(
        report,
        oom=oom,
        straggler=decided_with_logs(report, section),
        run=section,
        run_plot=files.run_plot.name if pictures and section else None,
        drawn=pictures.drawn if pictures else {},
        warnings=[*report.warnings, *job.refused, *unread_dumps],
        seconds=round(time.perf_counter() - job.started, 3),
    )
    report, summary = with_baseline(report, job.manifest, job.job.path.parent)
    encoded = encode_report(report)
    # what was built is held to its model as programs will read it: a float field holding a
    # string, or a field the model lacks, fails here and not in a reader
    typed = model.checked(encoded)
    markdown = report_markdown(typed)
    write_text_atomically(files.markdown, markdown)
    if job.settings.html:
        _page(files, typed, markdown, levels, pictures)
    if pictures is not None:
        pictures.wait()
    write_report_json(files.json, encoded)
    if summary is not None:  # last: a job is in the history once its report is whole
        write_summary(files.folder, summary)
    return typed


def _page(
    files: ReportFiles,
    report: model.Report,
    markdown: str,
    levels: dict[str, Any] | None,
    pictures: Pictures | None,
) -> None:
    """report.html, with the pictures this report drew (an older report's may lie beside it)."""
    shown = ((files.plot, bool(report.ranks)), (files.run_plot, report.run is not None))
    drawn = [path for path, drawn_now in shown if drawn_now] if pictures else []
    inline = pictures.inline(drawn) if pictures else {}
    write_page(files.page, report, markdown, inline, levels, ranks_table(report))


def _run_report(
    job: ReportJob, run: tuple[RunMap, list[str]]
) -> tuple[model.Run | None, dict[str, Any] | None]:
    """``report.json``'s ``run`` (run.png drawn meanwhile), and the map's levels for report.html
    (a few MB, where the map is hundreds)."""
    section = run_section(job.folder, *run, job.manifest)
    view = RunView(run[0], section, run_mesh(job.settings.layout, job.manifest))
    if job.pictures:
        job.pictures.draw(plot_run, view.picture, job.files.run_plot)
    # the page's levels made while run.png is drawn
    return section, run_levels(view) if job.settings.html else None


def _traces_report(job: ReportJob, sources: Sequence[TraceSource], has_run: bool) -> model.Report:
    folder, files, settings, pictures = job.folder, job.files, job.settings, job.pictures
    read = read_records(sources, job.workers, job.progress)
    job.workers.close()  # their heaps hold what they read: 100 MB for the dense folder's two
    if pictures:  # a core is free from here: this process aligns the clocks alone
        pictures.warm()
    if not read.traces and not has_run:
        raise ReportError(f"{folder} holds no trace the report can read: {'; '.join(read.skipped)}")
    if not read.traces:
        return msgspec.structs.replace(_empty_report(folder), warnings=read.skipped)
    reading = _reading(read.records, read.read_here, time.perf_counter() - job.started)
    aligning = time.perf_counter()
    nodes = job.manifest.nodes_by_rank if job.manifest else {}
    per_rank = kept_alignment(files.clocks, read.traces, read.records, nodes)
    aligning = time.perf_counter() - aligning
    if not files.ideal_trace.exists():  # written as the path is found: without it, both anew
        files.kept_path.unlink(missing_ok=True)
    report = summarise(
        folder,
        per_rank,
        reading,
        settings.link_gbps,
        warnings=read.skipped,
        peak_tflops=settings.peak_tflops,
        layout=settings.layout,
        meanwhile=partial(pictures.ahead, draw_ranks, path=files.plot) if pictures else None,
        ideal_sink=partial(_write_gzip_json, files.ideal_trace),
        kept_path_at=files.kept_path,
        jobs=job.workers.jobs,
    )
    if pictures:  # drawn while this process packs the archive and writes the report
        pictures.draw(plot_report, _drawn(report), files.plot)
    packed = (
        write_archive(
            folder,
            report,
            files.archive,
            ranks=_chosen(settings.ranks, [r.rank for r in report.ranks]),
            budget_bytes=settings.archive_budget_bytes,
        )
        if settings.merged_trace
        else None
    )
    merged_json = settings.merged_json and settings.merged_trace
    merge = (
        write_merged_json(per_rank, files.merged, job.workers, settings.merge_budget_bytes)
        if merged_json
        else None
    )
    return msgspec.structs.replace(
        report,
        archive=packed,
        merged_trace=files.merged.name if merged_json else None,
        merge=merge,
        alignment_seconds=round(aligning, 3),
    )


def _drawn(report: model.Report) -> model.Report:
    """What report.png shows of the report: of the critical path, its first steps."""
    path = report.critical_path
    return msgspec.structs.replace(report, critical_path=plot_path.drawn(path)) if path else report


def _manifest(job: JobFolder) -> tuple[Manifest | None, list[str]]:
    """The job's manifest (none for traces of another origin), and the line that says why it
    was not read where it does not read."""
    try:
        return read_manifest(job), []
    except FileRefused as refused:
        return None, [
            f"the manifest was not read: {refused}; the ranks' nodes and the run's steps are not known"
        ]


def _chosen(selection: RankSelection | None, profiled: list[int]) -> list[int] | None:
    """The profiled ranks ``selection`` names (None: the archive chooses)."""
    if selection is None:
        return None
    return profiled if selection.everyone else sorted(selection.resolve(max(profiled) + 1))


def _nothing_to_report(folder: Path) -> ReportError:
    return ReportError(
        f"{folder} holds no trace (*.json, *.json.gz, here or one folder down) and its job no "
        "step log (meta/steps/). HINT: pass a job folder, or a folder of torch.profiler traces"
    )


def _empty_report(folder: Path) -> model.Report:
    """A job without traces (``--profile-ranks none``): its run alone."""
    return model.empty(str(folder), utc_now())


def _reading(records: Sequence[TraceRecord], read_here: list[str], seconds: float) -> model.Reading:
    """What ``report.json`` says of how the traces were read, and by whom."""
    readers = collections.Counter(_kind_of_reader(r.analysed_by) for r in records if r.trace not in read_here)
    return model.Reading(
        traces=len(records),
        from_records=len(records) - len(read_here),
        read_here=read_here,
        analysed_by=[f"{count} by {who}" for who, count in readers.most_common()],
        seconds=round(seconds, 3),
    )


def _kind_of_reader(analysed_by: str) -> str:
    if analysed_by.startswith("rank "):
        return "the ranks that wrote them"
    if analysed_by.startswith("slurm task"):
        return "a --slurm job array"
    return "an earlier report"
