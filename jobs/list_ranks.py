"""``python -m jobs.commands.list --ranks JOB``: every rank's scores now, from the ranks' step logs.

While the job runs, from the files its ranks flush every few seconds (never a trace, never the
job itself): per rank, its CPU time per step over the last ``--last`` steps and over the whole
run, with the relative and individual scores of :mod:`profiling.analysis.run.run_map`, and whether
it is slow now (in a slow segment that reaches the last steps). Lowest relative score first, so
the rank to capture heads the list, with the ``jobs.capture`` command that records it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jobs.job_state import job_state
from profiling.analysis.run import run_map
from profiling.analysis.run.run_logs import read_run
from profiling.folder.layout import JobFolder

RECENT_STEPS = 50
SHOWN = 16  # ranks printed, the lowest scores first; --json has them all


class NoStepLogs(ValueError):
    """A job folder without step logs."""


def rank_scores(folder: JobFolder, recent_steps: int = RECENT_STEPS) -> dict[str, Any]:
    """What ``--ranks`` prints (``--json``: as it is)."""
    found = read_run(folder.path)
    if found is None:
        raise NoStepLogs(
            f"job {folder.job_id} has no step log in {folder.steps}. HINT: step logs start with the job's "
            "first step; a job submitted before this version has none"
        )
    run, unreadable = found
    recent = run_map.tail(run, recent_steps)
    now = {s.rank: s for s in run_map.scores(recent, intervals=1)}
    whole = {s.rank: s for s in run_map.scores(run)}
    last = run.last_of(len(run.first) - 1)
    # slow now: a segment that reaches the rank's own last compared step, not the run's last
    # (the logs end where each rank last flushed, seconds apart)
    compared = dict(zip(run.ranks.tolist(), run.last_compared.tolist(), strict=True))
    reach = run_map.MAX_GAP + run_map.SMOOTHING // 2
    slow_now = {s.rank: s for s in run_map.segments(run) if s.last >= compared[s.rank] - reach}
    ranks = []
    for row, rank in enumerate(run.ranks.tolist()):
        segment = slow_now.get(rank)
        ranks.append(
            {
                "rank": rank,
                "node": run.nodes[row],
                "last_step": int(run.last_step[row]),
                "recent_ms": now[rank].median_ms,
                "recent_relative": now[rank].relative,
                "recent_individual": _best(whole[rank]) / now[rank].median_ms,
                "median_ms": whole[rank].median_ms,
                "relative": whole[rank].relative,
                "individual": whole[rank].individual,
                "slow_since": segment.first if segment else None,
                "slow_by_ms": segment.excess_ms if segment else None,
            }
        )
    ranks.sort(key=lambda r: (r["recent_relative"], r["rank"]))
    growing = zip(run.ranks.tolist(), run.memory.growth if run.memory else [], strict=False)
    return {
        "job_id": folder.job_id,
        "state": job_state(folder).how,
        "steps": [int(run.first[0]), last],
        "recent": [int(recent.first[0]), last],
        "ranks": ranks,
        "memory_growth": [
            {"rank": rank, **dataclasses.asdict(growth), "line": growth.line(rank)}
            for rank, growth in growing
            if growth is not None
        ],
        "unreadable": unreadable,
    }


def _best(scores: run_map.Scores) -> float:
    """The rank's best interval median over the whole run (its individual reference)."""
    return min((median for _, _, median, _, _ in scores.intervals), default=scores.median_ms)


def render_ranks(table: dict[str, Any], shown: int = SHOWN) -> str:
    first, last = table["steps"]
    recent = table["recent"]
    lines = [
        f"{table['state']}; {len(table['ranks'])} ranks, steps {first}-{last} in their step logs. CPU time "
        f"per step (ms) in steps {recent[0]}-{recent[1]} and over the run; scores: 1 is best (relative: "
        "against the fastest rank; individual: against the rank's best stretch)",
        "",
    ]
    header = ("rank", "node", "last step", "ms now", "relative", "individual", "ms run", "relative",
              "individual", "slow now")  # fmt: skip
    rows = [header]
    for r in table["ranks"][:shown]:
        slow = (
            f"since step {r['slow_since']} (+{r['slow_by_ms']:.1f} ms)"
            if r["slow_since"] is not None
            else "-"
        )
        rows.append(
            (
                str(r["rank"]),
                r["node"],
                str(r["last_step"]),
                f"{r['recent_ms']:.1f}",
                f"{r['recent_relative']:.2f}",
                f"{r['recent_individual']:.2f}",
                f"{r['median_ms']:.1f}",
                f"{r['relative']:.2f}",
                f"{r['individual']:.2f}",
                slow,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    if len(table["ranks"]) > shown:
        lines.append(f"... and {len(table['ranks']) - shown} more ranks (--json lists them all)")
    slowest = table["ranks"][0]
    if slowest["slow_since"] is not None:
        lines += [
            "",
            f"HINT: record rank {slowest['rank']} while it is slow: "
            f"python -m jobs.commands.capture {table['job_id']} --ranks {slowest['rank']}",
        ]
    growing = table["memory_growth"]
    if growing:
        lines += ["", "memory growing to the end of the log (a leak?):"]
        lines += [f"  {g['line']}" for g in growing[:shown]]
    lines += [f"unreadable: {u}" for u in table["unreadable"]]
    return "\n".join(lines)
