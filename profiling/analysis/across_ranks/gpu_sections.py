"""The report's kernels and collectives: what a GPU user looks at first, from each trace's
record (:mod:`profiling.analysis.per_trace.kernels`, :mod:`profiling.analysis.per_trace.bandwidth`).

Per rank: its kernels by time, by family, and its collectives by kind and size with their
bandwidth. Across ranks: the kernels whose time differs most between the fastest and the
slowest rank, and each collective over every rank.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from profiling.analysis.per_trace.bandwidth import CollectiveRow, bandwidths
from profiling.analysis.per_trace.idle import CAUSES, IdleCauses
from profiling.analysis.per_trace.kernels import FAMILIES, KernelRow, KernelSummary
from profiling.schema import model, model_ranks

SHOWN_KERNELS = 10  # per rank in report.md (report.json keeps what the records keep)
LINK_SHARE = 0.5  # with --link-gbps: a collective whose busbw is below this share of it is marked


def rank_kernels(summaries: Sequence[KernelSummary | None], steps: int) -> model_ranks.Kernels | None:
    """One rank's kernels over its windows; totals per step, so ranks with more windows compare."""
    found = [s for s in summaries if s is not None]
    if not found:
        return None
    rows: dict[str, list[KernelRow]] = {}
    for summary in found:
        for row in summary.top:
            rows.setdefault(row.name, []).append(row)
    # the largest alone, merged: report.json stays small at thousands of ranks; records keep more
    kept = sorted(rows.items(), key=lambda item: -sum(r.total_us for r in item[1]))[: 2 * SHOWN_KERNELS]
    merged = [_merged_kernel(name, same, steps) for name, same in kept]
    total = sum(s.total_us for s in found)
    return model_ranks.Kernels(
        total_us=total,
        per_step_us=total / max(steps, 1),
        by_family_us={f: sum(s.by_family_us.get(f, 0.0) for s in found) for f in FAMILIES},
        top=merged,
    )


def _merged_kernel(name: str, rows: list[KernelRow], steps: int) -> model_ranks.KernelRow:
    count, total = sum(r.count for r in rows), sum(r.total_us for r in rows)
    return model_ranks.KernelRow(
        name=name,
        family=rows[0].family,
        count=count,
        total_us=total,
        per_step_us=total / max(steps, 1),
        mean_us=total / count,
        # one window: exact; several: the median of their p50s and the largest p99
        p50_us=rows[0].p50_us if len(rows) == 1 else statistics.median(r.p50_us for r in rows),
        p99_us=max(r.p99_us for r in rows),
    )


def idle_causes_per_step(found: Sequence[IdleCauses | None], steps: int) -> dict[str, float] | None:
    """A rank's stream idle time per step (ms) by cause, over its windows."""
    causes = [c for c in found if c is not None]
    if not causes:
        return None
    return {cause: sum(c.by_cause_us()[cause] for c in causes) / 1e3 / max(steps, 1) for cause in CAUSES}


def rank_collectives(tables: Sequence[list[CollectiveRow]]) -> list[model_ranks.CollectiveRow]:
    """One rank's collectives over its windows, by kind, bytes and group size."""
    by_key: dict[tuple, list[CollectiveRow]] = {}
    for table in tables:
        for row in table:
            by_key.setdefault((row.kind, row.bytes, row.group_size, row.group), []).append(row)
    merged = []
    for (kind, size, ranks, group), rows in by_key.items():
        p50 = statistics.median(r.p50_us for r in rows)
        algbw, busbw = bandwidths(kind, size, ranks, p50)
        merged.append(
            model_ranks.CollectiveRow(
                kind=kind,
                bytes=size,
                group_size=ranks,
                count=sum(r.count for r in rows),
                p50_us=p50,
                p90_us=max(r.p90_us for r in rows),
                max_us=max(r.max_us for r in rows),
                total_us=sum(r.total_us for r in rows),
                algbw_gbps=algbw,
                busbw_gbps=busbw,
                group=group,
            )
        )
    merged.sort(key=lambda row: -row.total_us)
    return merged


def kernels_across(
    ranks: Sequence[model_ranks.RankReport], shown: int = SHOWN_KERNELS
) -> model.KernelsAcross | None:
    """The kernels whose time per step differs most between the fastest and the slowest rank."""
    with_kernels = [r for r in ranks if r.kernels]
    if len(with_kernels) < 2:
        return None
    fastest = min(with_kernels, key=lambda r: (r.step_time_ms.mean, r.rank))
    slowest = max(with_kernels, key=lambda r: (r.step_time_ms.mean, -r.rank))
    if fastest is slowest or fastest.kernels is None or slowest.kernels is None:
        return None
    fast = {k.name: k for k in fastest.kernels.top}
    slow = {k.name: k for k in slowest.kernels.top}
    rows = []
    for name in fast.keys() | slow.keys():
        a = fast[name].per_step_us if name in fast else 0.0
        b = slow[name].per_step_us if name in slow else 0.0
        family = (fast.get(name) or slow[name]).family
        rows.append(
            model.KernelDifference(name=name, family=family, fastest_us=a, slowest_us=b, difference_us=b - a)
        )
    rows.sort(key=lambda row: -abs(row.difference_us))
    rows = [row for row in rows if row.difference_us]
    return model.KernelsAcross(fastest_rank=fastest.rank, slowest_rank=slowest.rank, kernels=rows[:shown])


def collectives_across(
    ranks: Sequence[model_ranks.RankReport], link_gbps: float | None = None
) -> list[model.CollectiveAcross]:
    """Each collective over every rank: its p50 the median of the ranks', its p90 and max the
    largest, its bandwidth at that p50 and at the slowest rank's."""
    by_key: dict[tuple, list[tuple[int, model_ranks.CollectiveRow]]] = {}
    for r in ranks:
        for row in r.collectives:
            by_key.setdefault((row.kind, row.bytes, row.group_size, row.group), []).append((r.rank, row))
    rows = []
    for (kind, size, group, described), found in by_key.items():
        p50 = statistics.median(row.p50_us for _, row in found)
        slow_rank, slowest = max(found, key=lambda item: item[1].p50_us)
        _, busbw = bandwidths(kind, size, group, p50)
        rows.append(
            model.CollectiveAcross(
                kind=kind,
                bytes=size,
                group_size=group,
                ranks=len(found),
                count=sum(row.count for _, row in found),
                p50_us=p50,
                p90_us=max(row.p90_us for _, row in found),
                max_us=max(row.max_us for _, row in found),
                busbw_gbps=busbw,
                slowest_rank=slow_rank,
                slowest_busbw_gbps=slowest.busbw_gbps,
                below_link=busbw is not None and link_gbps is not None and busbw < LINK_SHARE * link_gbps,
                group=described,
            )
        )
    rows.sort(key=lambda row: -row.p50_us * row.count)
    return rows
