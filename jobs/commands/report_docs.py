"""``python -m jobs.commands.report_docs --write``: report.json's JSON Schema and the field
reference in docs/report.md made anew from the model (:mod:`profiling.report.model_docs`), after
changing it; ``tests/test_report_model.py`` holds both to the model."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from profiling.report import model_docs
from slurm.common.command_line import OneLineParser


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m jobs.commands.report_docs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the two documents in docs/")
    args = parser.parse_args(argv)
    if not args.write:
        return parser.fail("nothing to do. HINT: add --write")
    model_docs.write()
    print(f"written: {model_docs.SCHEMA_FILE}, {model_docs.REFERENCE_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
