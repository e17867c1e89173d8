"""The jobs under a traces root: ``python -m jobs.commands.list [traces root] [--json]``
(``slurm-profile list``), one line each (:mod:`jobs.listing`); ``--ranks JOB``: one job's ranks
instead, their scores now (:mod:`jobs.list_ranks`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jobs.list_ranks import RECENT_STEPS, NoStepLogs, rank_scores, render_ranks
from jobs.listing import list_jobs, render_jobs
from jobs.options import add_traces_root, not_a_traces_root
from profiling.folder.layout import JobFolder
from slurm.common.command_line import OneLineParser


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m jobs.commands.list", description=__doc__.split("\n\n")[0])
    add_traces_root(parser)
    parser.add_argument("--json", action="store_true", help="one JSON list, for scripts")
    parser.add_argument(
        "--ranks",
        metavar="JOB",
        help="instead: every rank's scores now, from the step logs of job JOB (an id under the root, or "
        "its folder), the slowest first",
    )
    parser.add_argument(
        "--last",
        type=int,
        metavar="N",
        help=f"with --ranks: 'now' is the last N steps (default: {RECENT_STEPS})",
    )
    args = parser.parse_args(argv)
    if args.last is not None and args.last < 1:
        return parser.fail(f"--last {args.last} must be at least 1")
    if args.last is not None and args.ranks is None:
        return parser.fail(f"--last {args.last} applies to a job's ranks. HINT: add --ranks JOB")
    if args.ranks is not None:
        return _ranks(parser, args)
    if (wrong := not_a_traces_root(args.root)) is not None:
        return parser.fail(wrong)
    jobs = list_jobs(args.root)
    print(
        json.dumps(jobs, indent=2)
        if args.json
        else render_jobs(jobs)
        if jobs
        else f"no job folder in {args.root}"
    )
    return 0


def _ranks(parser: OneLineParser, args: Any) -> int:
    path = Path(args.ranks)
    folder = (
        JobFolder.at(path)
        if path.is_dir() and args.ranks not in ("", ".")
        else JobFolder(args.root, args.ranks)
    )
    if not folder.path.is_dir():
        return parser.fail(
            f"--ranks {args.ranks}: no job folder {folder.path}. HINT: pass a job id under the traces root "
            f"({args.root}) or a job folder"
        )
    try:
        table = rank_scores(folder, args.last or RECENT_STEPS)
    except NoStepLogs as error:
        return parser.fail(str(error))
    print(json.dumps(table, indent=2) if args.json else render_ranks(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
