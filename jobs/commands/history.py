"""``slurm-profile history [TRACES_ROOT]``: the jobs under a traces root, grouped by config, the
newest first, each against the last jobs of its config (a regression flagged), and the nodes
named slow again and again, with the ``--exclude`` that leaves them out.

Each job's line is the ``meta/summary.json`` its report wrote (:mod:`profiling.history`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import msgspec

from jobs.options import add_traces_root, not_a_traces_root
from profiling.history.jobs import (
    SlowNode,
    Standing,
    key_of,
    newest_first,
    nodes_named_slow,
    read_jobs,
    standings,
)
from profiling.schema.summary import JobSummary
from slurm.common.command_line import OneLineParser

_SHAPE = ("batch_size", "image_size", "dtype", "parallel")  # what a config's heading shows of it


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m jobs.commands.history", description=__doc__.split("\n\n")[0])
    add_traces_root(parser)
    parser.add_argument("--json", action="store_true", help="one JSON document, for programs")
    args = parser.parse_args(argv)
    if (wrong := not_a_traces_root(args.root)) is not None:
        return parser.fail(wrong)
    jobs, skipped = read_jobs(args.root)
    for line in skipped:
        print(line, file=sys.stderr)
    found, nodes = standings(jobs), nodes_named_slow(jobs)
    if args.json:
        print(json.dumps(_document(jobs, found, nodes), indent=2, allow_nan=False))
    elif not jobs:
        print(f"no job summary under {args.root} (a job's report writes meta/summary.json)")
    else:
        print(render(jobs, found, nodes))
    return 0


def render(
    jobs: Sequence[JobSummary], found: dict[tuple[str, str], Standing], nodes: Sequence[SlowNode]
) -> str:
    """The history as text: a table a config, then the slow nodes."""
    lines: list[str] = []
    for group in _by_config(jobs):
        first = group[0]
        shape = ", ".join(f"{key} {first.config[key]}" for key in _SHAPE if first.config.get(key) is not None)
        where = f"{first.ranks} ranks on {first.config.get('nodes')} node(s)"
        count = f"{len(group)} job{'s' if len(group) > 1 else ''}"
        lines.append(
            f"config {first.fingerprint}: {first.workload}, {where}{', ' + shape if shape else ''} ({count})"
        )
        rows: list[tuple[str, ...]] = [
            ("job", "ended", "step ms", "p90 ms", "noise ms", "against the last jobs", "verdict")
        ]
        rows += [_row(job, found[key_of(job)]) for job in group]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += [
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
        ]
        lines.append("")
    if nodes:
        lines.append("Nodes named slow, in the last jobs that ran on each:")
        lines += [f"  {n.node}: {n.named} of {n.jobs}" for n in nodes]
        excluded = [n.node for n in nodes if n.excluded]
        if excluded:
            names = ",".join(excluded)
            lines.append(f"Leave them out: submit.py --sbatch exclude={names} (sbatch --exclude={names})")
    return "\n".join(lines).rstrip()


def _by_config(jobs: Sequence[JobSummary]) -> list[list[JobSummary]]:
    """The jobs by config, each newest first; the config of the newest job first."""
    groups: dict[str, list[JobSummary]] = {}
    for job in newest_first(jobs):
        groups.setdefault(job.fingerprint, []).append(job)
    return list(groups.values())


def _row(job: JobSummary, standing: Standing) -> tuple[str, ...]:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    if standing.change is None:
        against = "-"
    else:
        against = f"{standing.change * 100:+.0f} % of {standing.baseline_ms:.1f}"
        against += " REGRESSION" if standing.regression else ""
    verdict = job.verdict or "-"
    if job.straggler is not None:
        verdict += f" (rank {job.straggler})"
    if job.slow_nodes:
        verdict += f"; slow: {','.join(job.slow_nodes)}"
    if job.oom:
        verdict += "; OOM"
    return (
        job.job_id,
        job.ended_at[:19].replace("T", " "),
        ms(job.step_median_ms),
        ms(job.step_p90_ms),
        ms(job.noise_ms),
        against,
        verdict,
    )


def _document(
    jobs: Sequence[JobSummary], found: dict[tuple[str, str], Standing], nodes: Sequence[SlowNode]
) -> dict:
    """``--json``: the configs, each job with its summary and its standing; the slow nodes."""
    return {
        "configs": [
            {
                "fingerprint": group[0].fingerprint,
                "jobs": [
                    {**msgspec.to_builtins(job), "standing": msgspec.to_builtins(found[key_of(job)])}
                    for job in group
                ],
            }
            for group in _by_config(jobs)
        ],
        "slow_nodes": [
            {"node": n.node, "named": n.named, "jobs": n.jobs, "excluded": n.excluded} for n in nodes
        ],
        "exclude": [n.node for n in nodes if n.excluded],
    }


if __name__ == "__main__":
    sys.exit(main())
