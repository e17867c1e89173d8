"""The run's part of the report, from the job's step logs (``report.json``'s ``run``, run.png):
imported by :mod:`.build` only for a job that has step logs."""

from __future__ import annotations

from typing import Any

from profiling.analysis.run import RunMap, RunView, read_run, run_mesh, run_section
from profiling.report.page_data import run_levels
from profiling.report.plot_run import plot_run
from profiling.report.report_job import ReportJob
from profiling.schema import model

__all__ = ["read_run", "run_report"]


def run_report(
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
