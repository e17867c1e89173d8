"""``python -m jobs.commands.capture JOB`` (``slurm-profile capture``): record chosen ranks of a
running job now (:mod:`jobs.capture`); ``--wait`` prints the traces' paths once they exist."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from jobs.capture import CaptureRequestError, running_job, wait_for_traces
from jobs.spec import TaskConfig
from profiling.folder.requests import write_request
from profiling.ranks import DEFAULT_RANKS, RankSelection, RankSpecError
from slurm.common.command_line import OneLineParser
from slurm.queue_view import QueueView

PROG = "python -m jobs.commands.capture"


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("job", help="the job's id (under --traces-root) or its folder")
    parser.add_argument(
        "--active", type=int, default=3, metavar="N", help="steps to record (default: %(default)s)"
    )
    parser.add_argument(
        "--ranks",
        type=RankSelection.parse_named,
        default=RankSelection.parse_named(DEFAULT_RANKS),
        metavar="SPEC",
        help="'all', '0,3', '0-3' (default: 0)",
    )
    parser.add_settings(TaskConfig, only=("traces_root",))
    parser.add_argument(
        "--wait", action="store_true", help="block until the traces exist, then print their paths"
    )
    parser.add_argument(
        "--timeout", type=float, default=600, metavar="SECONDS", help="for --wait (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        if args.active < 1:
            raise CaptureRequestError(f"--active {args.active} must be at least 1")
        queue = QueueView()  # one view of SLURM for the whole command: one squeue, rate-limited
        folder, running = running_job(args.job, args.traces_root, queue)
        chosen = sorted(args.ranks.resolve(running["world_size"]))
        request = write_request(folder, active=args.active, ranks=str(args.ranks))
        print(f"capture {request.id} of job {folder.job_id}: ranks {chosen}, {args.active} steps", flush=True)
        if args.wait:
            for path in wait_for_traces(folder, request.id, running["restart_count"], args.timeout, queue):
                print(path)
    except (CaptureRequestError, RankSpecError) as error:
        parser.fail(error)
        return 2 if not args.wait else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
