"""``python -m profiling.report <folder>``: the command line of the report."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from profiling.analysis.json_stream import TraceFormatError
from profiling.analysis.merge import DEFAULT_BUDGET_BYTES
from profiling.analysis.record import ReportError, load_fresh
from profiling.archive import DEFAULT_BUDGET_BYTES as DEFAULT_ARCHIVE_BUDGET_BYTES
from profiling.archive import ArchiveError
from profiling.folder.traces import find_traces
from profiling.ranks import RankSelection
from profiling.report import slurm_array
from profiling.report.build import build_report
from profiling.report.render import report_markdown
from slurm.command_line import OneLineParser
from slurm.resources import SlurmResources
from slurm.settings import from_namespace

PROG = "python -m profiling.report"


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description="Cross-rank report of a folder of traces.")
    parser.add_argument(
        "folder", type=Path, help="a job folder (or a restart<k>/ folder) of rank<r>_iter<a>_<b>.json traces"
    )
    parser.add_argument("--out", type=Path, help="where to write (default: FOLDER/meta)")
    parser.add_argument("--no-plot", action="store_true", help="skip report.png")
    parser.add_argument(
        "--jobs", type=int, help="processes reading traces (default: CPUs available, at most 8)"
    )
    merged = parser.add_argument_group("the merged timeline")
    merged.add_argument("--no-merged-trace", action="store_true", help="skip merged_trace.tar (and the JSON)")
    merged.add_argument(
        "--merge-ranks",
        dest="ranks",  # the field of RankSelection's errors
        type=RankSelection.parse_named,
        metavar="SPEC",
        help="ranks in merged_trace.tar (default: the ranks that matter)",
    )
    merged.add_argument(
        "--archive-budget-mb",
        type=float,
        default=DEFAULT_ARCHIVE_BUDGET_BYTES / 1e6,
        metavar="MB",
        help="keep the default ranks' traces within MB (default: %(default)g)",
    )
    merged.add_argument(
        "--merged-json", action="store_true", help="also write merged_trace.json.gz, re-encoded (slower)"
    )
    merged.add_argument(
        "--merge-budget-mb",
        type=float,
        default=DEFAULT_BUDGET_BYTES / 1e6,
        metavar="MB",
        help="keep the merged JSON within MB by leaving out the deepest CPU operators (default: %(default)g)",
    )
    merged.add_argument("--full-merge", action="store_true", help="keep every event in the merged JSON")
    parser.add_argument(
        "--link-gbps",
        type=float,
        metavar="GBPS",
        help="the network link's speed (GB/s): collectives whose bus bandwidth is below half of it "
        "are marked",
    )
    cluster = parser.add_argument_group("reading on the cluster (a SLURM job array), not here")
    cluster.add_argument(
        "--slurm", action="store_true", help="read the traces that have no fresh record as a job array"
    )
    cluster.add_argument(
        "--tasks",
        type=int,
        default=slurm_array.TASKS,
        help="array tasks, at most (default: %(default)s)",
    )
    parser.add_settings(SlurmResources, only=("partition", "account", "qos", "time_min"))
    parser.set_defaults(time_min=slurm_array.TIME_MIN, job_name=slurm_array.JOB_NAME)
    cluster.add_argument(
        "--no-wait",
        action="store_true",
        help="submit and return; run the command again (without --slurm) to combine",
    )
    return parser


def _read_on_the_cluster(parser: OneLineParser, args: argparse.Namespace) -> bool:
    """Submit the array for the traces without a fresh record and wait for it (unless --no-wait);
    False if the command should stop there."""
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
    job_id = slurm_array.submit_array(args.folder, stale, resources, args.tasks)
    size = sum(t.path.stat().st_size for t in stale)
    tasks = len(slurm_array.chunks(stale, args.tasks))
    print(
        f"submitted job {job_id}: {tasks} task(s) reading {len(stale)} trace(s), {size / 2**20:.0f} MiB",
        flush=True,
    )
    if args.no_wait:
        print(f"when it has ended: {PROG} {args.folder}")
        return False
    left = slurm_array.wait(job_id, stale, sys.stderr)
    if left:
        print(f"job {job_id} ended; {len(left)} trace(s) still without a record: read here", file=sys.stderr)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        return parser.fail(f"--jobs {args.jobs} must be at least 1")
    if args.link_gbps is not None and not args.link_gbps > 0:
        return parser.fail(
            f"--link-gbps {args.link_gbps:g} must be positive. HINT: the link's GB/s, e.g. 400"
        )
    for option, value, hint in (
        ("--merge-budget-mb", args.merge_budget_mb, "--full-merge keeps every event"),
        ("--archive-budget-mb", args.archive_budget_mb, "--merge-ranks chooses the ranks it holds"),
    ):
        if not value > 0:
            return parser.fail(f"{option} {value:g} must be positive. HINT: {hint}")
    try:
        if args.slurm and not _read_on_the_cluster(parser, args):
            return 0
        report = build_report(
            args.folder,
            args.out,
            plot=not args.no_plot,
            jobs=args.jobs,
            archive=not args.no_merged_trace,
            archive_ranks=args.ranks,
            archive_budget_bytes=None if args.ranks else args.archive_budget_mb * 1e6,
            merged_json=args.merged_json and not args.no_merged_trace,
            merge_budget_bytes=None if args.full_merge else args.merge_budget_mb * 1e6,
            progress=sys.stderr,
            link_gbps=args.link_gbps,
        )
    except (ReportError, ArchiveError, TraceFormatError, OSError, ValueError) as error:
        return parser.fail(error)
    print(report_markdown(report))
    return 0
