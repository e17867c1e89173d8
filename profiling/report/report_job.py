"""One report's job, made once by :mod:`.build` and handed to each part of it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TextIO

from profiling.folder.layout import JobFolder, ReportFiles
from profiling.report.pictures import Pictures
from profiling.report.settings import ReportSettings
from profiling.report.workers import Workers
from profiling.schema.manifest import Manifest


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
