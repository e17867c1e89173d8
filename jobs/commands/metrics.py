"""``python -m jobs.commands.metrics FOLDER --node NODE --job ID --ranks A-B``: one node's publisher of
live metrics for Prometheus (:mod:`jobs.runtime.live_metrics`), and with ``--auto-capture`` (rank
0's node) the trigger that asks for captures of a rank turned slow
(:mod:`jobs.runtime.auto_capture`). Started by the node's first rank
(:mod:`jobs.runtime.metrics_publisher`) and ended by it with SIGTERM, after which it publishes
once more and removes its textfile. It also ends where that rank has gone (killed, say).

Every ``--every`` seconds it reads its ranks' step logs and publishes; the trigger looks every
:attr:`~profiling.recording.config.AutoCaptureConfig.look_every_s`. Either waits at least twice
as long as a reading took: on a busy node it takes a third of a core at most. A sink that fails
(a Pushgateway down, a folder not writable) is said once, in one line, and tried again each time:
the job never waits on it. The trigger's decisions go to standard error: rank 0's log.
"""

from __future__ import annotations

import collections
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from jobs.runtime.auto_capture import AutoCapture
from jobs.runtime.live_metrics import Sinks, publish, registry_of, remove_textfile
from profiling.analysis.run.run_logs import read_run
from profiling.folder.layout import JobFolder
from profiling.folder.requests import read_requests
from profiling.recording.config import AutoCaptureConfig
from slurm.common.command_line import OneLineParser
from slurm.common.mesh import coordinates, parse_layout

PUSH_TIMEOUT_S = 5.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m jobs.commands.metrics", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the job's folder")
    parser.add_argument("--node", required=True, help="this node's name (the metrics' node label)")
    parser.add_argument("--job", required=True, help="the job's id (the slurm_job_id label)")
    parser.add_argument("--ranks", required=True, metavar="A-B", help="the node's ranks")
    parser.add_argument("--whole-job", action="store_true", help="read every rank's log: the job's view too")
    parser.add_argument("--every", type=float, default=5.0, metavar="SECONDS")
    parser.add_argument("--push", metavar="URL", help="a Prometheus Pushgateway")
    parser.add_argument("--textfile", type=Path, metavar="DIR", help="node_exporter's textfile folder")
    parser.add_argument("--layout", help="the job's parallel dimensions, dp=2,pp=2 (the mesh labels)")
    parser.add_argument(
        "--auto-capture", type=int, metavar="MAX", help="with --whole-job: ask for at most MAX captures"
    )
    args = parser.parse_args(argv)
    first, _, last = args.ranks.partition("-")
    if not (first.isdigit() and last.isdigit() and int(first) <= int(last)):
        return parser.fail(f"--ranks {args.ranks} is not A-B. HINT: the node's first and last rank, 0-7")
    sinks = Sinks(args.push, args.textfile, args.every)
    own = set(range(int(first), int(last) + 1))
    dims = parse_layout(args.layout) if args.layout else None
    trigger, folder = None, JobFolder.of_traces(args.folder)
    if args.auto_capture is not None and args.whole_job:
        config = AutoCaptureConfig(enabled=True, max_captures=args.auto_capture)
        trigger = AutoCapture(folder, config, dims)
    stopped = threading.Event()

    def stop(_signal: int, _frame: FrameType | None) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    parent, said, published = os.getppid(), set(), -math.inf
    while True:
        started = time.monotonic()
        found = read_run(args.folder, None if args.whole_job else own)
        ending = stopped.is_set()
        if found is not None and trigger is not None and not ending:
            decision = trigger.look(found[0])
            if decision:
                print(decision, file=sys.stderr, flush=True)
        if found is not None and sinks.any and (ending or started - published >= args.every):
            published = started
            run = found[0]
            mesh = {rank: coordinates(rank, dims) for rank in run.ranks.tolist()} if dims else {}
            # the job's captures are rank 0's node's to publish: no other node reads the requests
            asked = (
                collections.Counter("auto" if r.trigger else "request" for r in read_requests(folder))
                if args.whole_job
                else None
            )
            registry = registry_of(args.job, run, mesh, own, whole_job=args.whole_job, captures=asked)
            last_sinks = Sinks(sinks.push_url, None) if ending else sinks  # the textfile goes at the end
            for line in publish(registry, last_sinks, args.job, args.node, timeout_s=PUSH_TIMEOUT_S):
                if line not in said:
                    said.add(line)
                    print(f"metrics not published: {line} (the job goes on)", file=sys.stderr, flush=True)
        if ending or os.getppid() != parent:
            break
        period = min(args.every, trigger.config.look_every_s) if trigger else args.every
        stopped.wait(max(period, 2 * (time.monotonic() - started)))
    remove_textfile(sinks, args.job, args.node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
