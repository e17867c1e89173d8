"""What follows the reading of a report (:mod:`.build`): the clocks aligned, the summary with its
critical path and replay, report.png drawn meanwhile, the archive, the merged timeline, then
``report.md``, ``report.html`` and ``report.json``. Imported while the traces are read."""

from __future__ import annotations

import collections
import gzip
import json
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from profiling.analysis.across_ranks import decided_with_logs, summarise
from profiling.analysis.clocks import kept_alignment
from profiling.analysis.dumps import out_of_memory
from profiling.analysis.per_trace import TraceRecord
from profiling.archive import write_archive
from profiling.folder.layout import ReportFiles
from profiling.folder.report_json import encode_report, write_report_json
from profiling.history.baseline import with_baseline
from profiling.history.summary import write_summary
from profiling.ranks import RankSelection
from profiling.report import plot_path
from profiling.report.merged_json import write_merged_json
from profiling.report.page import write_page
from profiling.report.page_data import ranks_table
from profiling.report.pictures import Pictures
from profiling.report.plot import draw_ranks, plot_report
from profiling.report.read import Read
from profiling.report.render import report_markdown
from profiling.report.report_job import ReportJob
from profiling.schema import model
from slurm.common.files import atomic_path, write_text_atomically


def traces_report(job: ReportJob, read: Read) -> model.Report:
    """The report of the traces read: their clocks aligned, the summary with its critical path,
    report.png drawn meanwhile, the archive and the merged timeline."""
    folder, files, settings, pictures = job.folder, job.files, job.settings, job.pictures
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


def _write_gzip_json(path: Path, document: dict[str, Any]) -> None:
    """``document`` as gzipped JSON, whole or not at all."""
    with atomic_path(path, durable=False) as temp:
        temp.write_bytes(gzip.compress(json.dumps(document, separators=(",", ":")).encode(), compresslevel=6))


def write_report(
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


def _drawn(report: model.Report) -> model.Report:
    """What report.png shows of the report: of the critical path, its first steps."""
    path = report.critical_path
    return msgspec.structs.replace(report, critical_path=plot_path.drawn(path)) if path else report


def _chosen(selection: RankSelection | None, profiled: list[int]) -> list[int] | None:
    """The profiled ranks ``selection`` names (None: the archive chooses)."""
    if selection is None:
        return None
    return profiled if selection.everyone else sorted(selection.resolve(max(profiled) + 1))


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
