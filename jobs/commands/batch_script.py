"""``python -m jobs.commands.batch_script --write``: ``slurm/profile_resnet18.sbatch`` made anew
from the code's defaults (:mod:`slurm.batch_script`), after changing one; a test holds the file
to them."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from slurm.batch_script import PLAIN_SCRIPT, plain_batch_script
from slurm.common.command_line import OneLineParser

REPO = Path(__file__).resolve().parents[2]


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m jobs.commands.batch_script", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {PLAIN_SCRIPT}")
    args = parser.parse_args(argv)
    if not args.write:
        return parser.fail("nothing to do. HINT: add --write")
    (REPO / PLAIN_SCRIPT).write_text(plain_batch_script())
    print(f"written: {PLAIN_SCRIPT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
