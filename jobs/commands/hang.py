"""``python -m jobs.commands.hang <job folder>``: why a job hung, from the dumps its ranks left in
``meta/hang/`` (:mod:`profiling.analysis.dumps.hang`), and whether the job still runs."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from jobs.job_state import job_state
from profiling.analysis.dumps.hang import HangError
from profiling.folder.layout import JobFolder
from profiling.report.hang import explain
from slurm.common.command_line import OneLineParser


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m jobs.commands.hang", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a job folder, <traces root>/<job id>")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(
            f"{parser.prog}: error: {args.folder} is not a folder. HINT: pass a job folder", file=sys.stderr
        )
        return 2
    folder = JobFolder.at(args.folder)
    state = job_state(folder)
    try:
        verdict = explain(folder)
    except HangError as error:
        print(f"{parser.prog}: error: {args.folder}: {error}. HINT: did the job hang?", file=sys.stderr)
        return 2
    if state.running:  # dumps of a job that still runs show a slow rank as well as a stuck one
        print(f"{state.how}: the verdict is from the dumps so far")
    print("\n".join(verdict.verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
