"""Benchmark: the critical path's straggler gain and the replay's what-if against a measurement,
on the test cluster.

    .venv/bin/python tests/bench/bench_critical_path.py [--pairs 3] [--ms 80]

Each pair: a job of 2 nodes of one rank each with rank 1 slowed by ``--ms`` ms a step
(``--inject-slowdown``), then the same job without. Printed per pair: the straggler gain the
slowed job's report estimates from its path, the measured difference of the two jobs' mean
step times, and their ratio (asked: within 15 %); then the replay's: S, the host's share
(the injected work is CPU time in no operator: the host's), rank 1's S alone, and the ratio
the replay predicts between the slowed job's step and the balanced one's (its measured step
over the one replayed with rank 1 like its peers) beside the measured ratio. Not a test: it
asserts nothing; run it on a quiet machine with the test cluster up (``bash slurm/cluster.sh
start full``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from profiling.folder.layout import meta_of  # noqa: E402
from profiling.schema import model  # noqa: E402
from tests.common import run_submit, submitted_job_id, wait_for_a_quiet_machine  # noqa: E402
from tests.test_critical_path_jobs import TWO_NODES  # noqa: E402


def step_ms(report: model.Report) -> float:
    return statistics.fmean(r.step_time_ms.mean for r in report.ranks)


def job(root: Path, *args: str) -> model.Report:
    result = run_submit("--traces-root", str(root), *TWO_NODES, *args, timeout=400)
    if result.returncode != 0:
        sys.exit(result.stdout + result.stderr)
    return model.checked((meta_of(root / submitted_job_id(result.stdout)) / "report.json").read_bytes())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--ms", type=float, default=80.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-path-"))
    print(
        f"{'pair':>4} {'estimated ms':>13} {'measured ms':>12} {'ratio':>6}  "
        f"{'S':>5} {'host':>5} {'rank 1':>6} {'replayed ratio':>14} {'measured ratio':>14}"
    )
    for pair in range(args.pairs):
        wait_for_a_quiet_machine()
        slowed = job(root, "--inject-slowdown", f"1:{args.ms:.0f}")
        balanced = job(root)
        assert slowed.critical_path is not None
        estimated = next(w.gain_ms for w in slowed.critical_path.what_if if w.what == "straggler")
        measured = step_ms(slowed) - step_ms(balanced)
        replay = slowed.critical_path.replay
        assert replay is not None
        peers = next(w for w in replay.what_if if w.what == "rank like its peers" and w.rank == 1)
        print(
            f"{pair:4} {estimated:13.1f} {measured:12.1f} {estimated / measured:6.2f}  "
            f"{replay.slowdown:5.2f} {replay.host_share:5.2f} {replay.by_rank[1]:6.2f} "
            f"{replay.measured_ms / peers.step_ms:14.3f} {step_ms(slowed) / step_ms(balanced):14.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
