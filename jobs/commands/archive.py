"""``python -m jobs.commands.archive FOLDER`` (``slurm-profile archive``): the traces of the ranks
that matter as one Perfetto timeline (:mod:`profiling.archive`), ``meta/merged_trace.tar``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from profiling.archive import ArchiveError, write_archive
from profiling.folder.layout import ReportFiles
from profiling.folder.report_json import read_archive_fields
from profiling.ranks import RankSelection, RankSpecError
from slurm.common.command_line import OneLineParser


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m jobs.commands.archive", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a job folder (or a restart<k>/ folder) with its report")
    parser.add_argument(
        "--ranks",
        type=RankSelection.parse_named,
        metavar="SPEC",
        help="'all', '0,3', '0-3,8' (default: the ranks that matter)",
    )
    parser.add_argument("--out", type=Path, help="where to write (default: FOLDER/meta/merged_trace.tar)")
    args = parser.parse_args(argv)
    files = ReportFiles.of(args.folder)
    try:
        report = read_archive_fields(files.json)
    except (OSError, ValueError):
        return parser.fail(
            f"{args.folder} has no report ({files.json}). HINT: python -m jobs.commands.report {args.folder}"
        )
    profiled = [r.rank for r in report.ranks]
    try:
        selection = args.ranks
        ranks = None
        if selection is not None:
            ranks = profiled if selection.everyone else sorted(selection.resolve(max(profiled) + 1))
        written = write_archive(args.folder, report, args.out or files.archive, ranks=ranks)
    except (RankSpecError, ArchiveError, OSError) as error:
        return parser.fail(error)
    print(f"rank(s) {written.ranks} in {args.out or files.archive}: open it in https://ui.perfetto.dev")
    return 0


if __name__ == "__main__":
    sys.exit(main())
