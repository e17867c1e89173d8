"""``slurm-profile [command] [options]``: one command for the toolkit's tools.

``slurm-profile`` alone or with options is ``submit.py``; the first word may name another tool,
each a module of this room (``python -m jobs.commands.<command>``): ``submit``, ``list``,
``report``, ``compare``, ``capture``, ``hang``, ``archive``, ``history``. Each keeps its own
``--help``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from slurm.common.command_line import plain_text

# command -> module whose main() it runs; imported only when chosen (a login node stays fast)
COMMANDS = {
    name: f"jobs.commands.{name}"
    for name in ("submit", "list", "report", "compare", "capture", "hang", "archive", "history")
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help") and len(argv) == 1:
        print(plain_text(__doc__).strip())
        return 0
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        print(
            f"slurm-profile: error: {argv[0]!r} is not a command. HINT: use one of {', '.join(COMMANDS)}, "
            "or options alone to submit (slurm-profile --help)",
            file=sys.stderr,
        )
        return 2
    command = argv.pop(0) if argv and argv[0] in COMMANDS else "submit"
    return importlib.import_module(COMMANDS[command]).main(argv)


if __name__ == "__main__":
    sys.exit(main())
