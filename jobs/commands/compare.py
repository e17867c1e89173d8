"""``python -m jobs.commands.compare JOB_A JOB_B`` (``slurm-profile compare``): two jobs' reports side
by side (:mod:`profiling.compare`), written beside JOB_B's report; prints the verdict."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from profiling.compare import CompareError, compare, comparison_markdown, plot_compare
from profiling.folder.layout import ComparisonFiles, ReportFiles
from profiling.schema.files import write_file
from slurm.common.command_line import OneLineParser
from slurm.common.files import write_text_atomically


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m jobs.commands.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, metavar="JOB_A", help="the job to compare against (a job folder)")
    parser.add_argument("b", type=Path, metavar="JOB_B", help="the job compared (a job folder)")
    parser.add_argument(
        "--out", type=Path, help="where to write (default: JOB_B/meta/compare-<JOB_A's name>)"
    )
    parser.add_argument("--no-plot", action="store_true", help="skip compare.png")
    args = parser.parse_args(argv)
    try:
        result = compare(args.a, args.b)
    except (CompareError, OSError) as error:
        return parser.fail(str(error))
    out = ComparisonFiles(args.out) if args.out else ReportFiles.of(args.b).compare(args.a.resolve().name)
    out.folder.mkdir(parents=True, exist_ok=True)
    write_file(out.json, result)
    write_text_atomically(out.markdown, comparison_markdown(result))
    if not args.no_plot:
        plot_compare(result, out.plot)
    print(result.verdict)
    print(f"written to {out.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
