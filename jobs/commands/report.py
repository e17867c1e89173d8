"""``python -m jobs.commands.report <folder>``: the command line of the report."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from profiling.folder.layout import ReportFiles
from profiling.folder.traces import find_traces
from profiling.report import slurm_array
from profiling.report.settings import ReportSettings
from slurm.common.command_line import OneLineParser
from slurm.common.settings import from_namespace
from slurm.resources import SlurmResources

PROG = "python -m jobs.commands.report"


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description="Cross-rank report of a folder of traces.")
    parser.add_argument(
        "folder", type=Path, help="a job folder (or a restart<k>/ folder) of rank<r>_iter<a>_<b>.json traces"
    )
    parser.add_settings(ReportSettings)
    parser.add_settings(SlurmResources, only=("partition", "account", "qos", "time_min"))
    parser.set_defaults(time_min=slurm_array.TIME_MIN, job_name=slurm_array.JOB_NAME)
    return parser


def _read_on_the_cluster(args: argparse.Namespace, settings: ReportSettings) -> bool:
    """Submit the array for the traces without a fresh record and wait for it (unless --no-wait);
    False if the command should stop there."""
    from profiling.analysis.per_trace import ReportError, load_fresh  # imported by main() already

    traces = find_traces(args.folder)
    if not traces:
        raise ReportError(
            f"{args.folder} holds no trace (*.json, *.json.gz, here or one folder down). HINT: pass a job "
            "folder, or a folder of torch.profiler traces"
        )
    stale = [trace for trace in traces if load_fresh(trace) is None]
    if not stale:
        return True
    resources = from_namespace(SlurmResources, args, job_name=slurm_array.JOB_NAME)
    job_id = slurm_array.submit_array(args.folder, stale, resources, settings.tasks)
    size = sum(t.path.stat().st_size for t in stale)
    tasks = len(slurm_array.chunks(stale, settings.tasks))
    print(
        f"submitted job {job_id}: {tasks} task(s) reading {len(stale)} trace(s), {size / 2**20:.0f} MiB",
        flush=True,
    )
    if not settings.wait:
        print(f"when it has ended: {PROG} {args.folder}")
        return False
    left = slurm_array.wait(job_id, stale, sys.stderr)
    if left:
        print(f"job {job_id} ended; {len(left)} trace(s) still without a record: read here", file=sys.stderr)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # the report's reading stack (numpy, the scanner) past the command line, and the stages after
    # the reading while the traces are read (profiling.report.build): --help imports neither
    from profiling.analysis.per_trace import ReportError
    from profiling.analysis.reading import TraceFormatError
    from profiling.archive import ArchiveError
    from profiling.report.build import build_report

    try:
        settings = from_namespace(ReportSettings, args)
        if settings.slurm and not _read_on_the_cluster(args, settings):
            return 0
        build_report(args.folder, settings, progress=sys.stderr)
    except (ReportError, ArchiveError, TraceFormatError, OSError, ValueError) as error:
        return parser.fail(error)
    files = ReportFiles(settings.out) if settings.out else ReportFiles.of(args.folder)
    print(files.markdown.read_text())  # what the build rendered: not encoded and checked again
    return 0


if __name__ == "__main__":
    sys.exit(main())
