"""The report's kernels and collectives: what a GPU user looks at first, from each trace's
record (:mod:`profiling.analysis.kernels`, :mod:`profiling.analysis.bandwidth`).

Per rank: its kernels by time, by family, and its collectives by kind and size with their
bandwidth. Across ranks: the kernels whose time differs most between the fastest and the
slowest rank, and each collective over every rank.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from profiling.analysis.bandwidth import CollectiveRow, bandwidths
from profiling.analysis.idle import CAUSES, KERNEL_GAP_US, IdleCauses
from profiling.analysis.kernels import FAMILIES, KernelRow, KernelSummary
from profiling.report.table_ranks import others_line, shown_ranks

SHOWN_KERNELS = 10  # per rank in report.md (report.json keeps what the records keep)
LINK_SHARE = 0.5  # with --link-gbps: a collective whose busbw is below this share of it is marked


def rank_kernels(summaries: Sequence[KernelSummary | None], steps: int) -> dict[str, Any] | None:
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
    return {
        "total_us": total,
        "per_step_us": total / max(steps, 1),
        "by_family_us": {f: sum(s.by_family_us.get(f, 0.0) for s in found) for f in FAMILIES},
        "top": merged,
    }


def _merged_kernel(name: str, rows: list[KernelRow], steps: int) -> dict[str, Any]:
    count, total = sum(r.count for r in rows), sum(r.total_us for r in rows)
    return {
        "name": name,
        "family": rows[0].family,
        "count": count,
        "total_us": total,
        "per_step_us": total / max(steps, 1),
        "mean_us": total / count,
        # one window: exact; several: the median of their p50s and the largest p99
        "p50_us": rows[0].p50_us if len(rows) == 1 else statistics.median(r.p50_us for r in rows),
        "p99_us": max(r.p99_us for r in rows),
    }


def idle_causes_per_step(found: Sequence[IdleCauses | None], steps: int) -> dict[str, float] | None:
    """A rank's stream idle time per step (ms) by cause, over its windows."""
    causes = [c for c in found if c is not None]
    if not causes:
        return None
    return {cause: sum(c.by_cause_us()[cause] for c in causes) / 1e3 / max(steps, 1) for cause in CAUSES}


def rank_collectives(tables: Sequence[list[CollectiveRow]]) -> list[dict[str, Any]]:
    """One rank's collectives over its windows, by kind, bytes and group size."""
    by_key: dict[tuple, list[CollectiveRow]] = {}
    for table in tables:
        for row in table:
            by_key.setdefault((row.kind, row.bytes, row.group_size), []).append(row)
    merged = []
    for (kind, size, ranks), rows in by_key.items():
        p50 = statistics.median(r.p50_us for r in rows)
        algbw, busbw = bandwidths(kind, size, ranks, p50)
        merged.append(
            {
                "kind": kind,
                "bytes": size,
                "group_size": ranks,
                "count": sum(r.count for r in rows),
                "p50_us": p50,
                "p90_us": max(r.p90_us for r in rows),
                "max_us": max(r.max_us for r in rows),
                "total_us": sum(r.total_us for r in rows),
                "algbw_gbps": algbw,
                "busbw_gbps": busbw,
            }
        )
    merged.sort(key=lambda row: -row["total_us"])
    return merged


def kernels_across(ranks: list[dict[str, Any]], shown: int = SHOWN_KERNELS) -> dict[str, Any] | None:
    """The kernels whose time per step differs most between the fastest and the slowest rank."""
    with_kernels = [r for r in ranks if r.get("kernels")]
    if len(with_kernels) < 2:
        return None
    fastest = min(with_kernels, key=lambda r: (r["step_time_ms"]["mean"], r["rank"]))
    slowest = max(with_kernels, key=lambda r: (r["step_time_ms"]["mean"], -r["rank"]))
    if fastest is slowest:
        return None
    fast = {k["name"]: k for k in fastest["kernels"]["top"]}
    slow = {k["name"]: k for k in slowest["kernels"]["top"]}
    rows = []
    for name in fast.keys() | slow.keys():
        a = fast[name]["per_step_us"] if name in fast else 0.0
        b = slow[name]["per_step_us"] if name in slow else 0.0
        family = (fast.get(name) or slow[name])["family"]
        rows.append(
            {"name": name, "family": family, "fastest_us": a, "slowest_us": b, "difference_us": b - a}
        )
    rows.sort(key=lambda row: -abs(row["difference_us"]))
    rows = [row for row in rows if row["difference_us"]]
    return {"fastest_rank": fastest["rank"], "slowest_rank": slowest["rank"], "kernels": rows[:shown]}


def collectives_across(ranks: list[dict[str, Any]], link_gbps: float | None = None) -> list[dict[str, Any]]:
    """Each collective over every rank: its p50 the median of the ranks', its p90 and max the
    largest, its bandwidth at that p50 and at the slowest rank's."""
    by_key: dict[tuple, list[tuple[int, dict[str, Any]]]] = {}
    for r in ranks:
        for row in r.get("collectives") or []:
            by_key.setdefault((row["kind"], row["bytes"], row["group_size"]), []).append((r["rank"], row))
    rows = []
    for (kind, size, group), found in by_key.items():
        p50 = statistics.median(row["p50_us"] for _, row in found)
        slow_rank, slowest = max(found, key=lambda item: item[1]["p50_us"])
        _, busbw = bandwidths(kind, size, group, p50)
        row = {
            "kind": kind,
            "bytes": size,
            "group_size": group,
            "ranks": len(found),
            "count": sum(row["count"] for _, row in found),
            "p50_us": p50,
            "p90_us": max(row["p90_us"] for _, row in found),
            "max_us": max(row["max_us"] for _, row in found),
            "busbw_gbps": busbw,
            "slowest_rank": slow_rank,
            "slowest_busbw_gbps": slowest["busbw_gbps"],
            "below_link": busbw is not None and link_gbps is not None and busbw < LINK_SHARE * link_gbps,
        }
        rows.append(row)
    rows.sort(key=lambda row: -row["p50_us"] * row["count"])
    return rows


def markdown(report: dict[str, Any]) -> list[str]:
    """report.md's idle causes, kernel and collective sections."""
    return _idle_lines(report) + _kernel_lines(report) + _collective_lines(report) + _wait_lines(report)


def _wait_lines(report: dict[str, Any]) -> list[str]:
    ranks = [r for r in report["ranks"] if r.get("collective_wait")]
    if not ranks or not ranks[0]["collective_wait"]["collectives"]:
        return []
    wait = sum(r["collective_wait"]["wait_ms"] for r in ranks)
    total = wait + sum(r["collective_wait"]["transfer_ms"] for r in ranks)
    share = wait / total if total > 0 else 0.0
    last = max(ranks, key=lambda r: r["collective_wait"]["last_arrivals"])
    count = ranks[0]["collective_wait"]["collectives"]
    verdict = (
        f"Most of it is waiting: the time points at a straggler, not at the network (rank {last['rank']} "
        f"arrived last in {last['collective_wait']['last_arrivals']} of {count})."
        if share > 0.5
        else "Most of it is transferring: the ranks arrive together, the time is the collective's own."
    )
    lines = [
        f"Time per step in the {count} collectives every rank reached, on the aligned clocks: waiting for "
        f"the last rank to arrive, and transferring ({share:.0%} waiting over all ranks). {verdict} "
        "A wait under a rank's clock ± (Clock alignment) is noise.",
        "",
        "| rank | waiting (ms) | transferring (ms) | waiting share | arrived last |",
        "|---:|---:|---:|---:|---:|",
    ]
    shown = shown_ranks(report, ranks)
    for r in shown:
        w = r["collective_wait"]
        its_share = "-" if w["waiting_share"] is None else f"{w['waiting_share']:.0%}"
        cells = f"{w['wait_ms']:.2f} | {w['transfer_ms']:.2f} | {its_share} | {w['last_arrivals']}"
        lines.append(f"| {r['rank']} | {cells} |")
    return lines + others_line(len(ranks), len(shown), 5)


def _idle_lines(report: dict[str, Any]) -> list[str]:
    ranks = [r for r in report["ranks"] if r.get("gpu") and r["gpu"].get("idle_causes_ms")]
    if not ranks:
        return []
    lines = [
        "## Why the GPU idles",
        "",
        "Each stream's gaps between its kernels, memcpys and memsets, per step (ms, summed over "
        "streams; HTA's get_idle_time_breakdown): host wait, launched only after the stream's previous "
        f"activity ended (the CPU was late); kernel wait, a gap under {KERNEL_GAP_US:g} µs (launch "
        "overhead); other, queued in time and still late (another stream, a peer).",
        "",
        "| rank | host wait | kernel wait | other | host wait share |",
        "|---:|---:|---:|---:|---:|",
    ]
    shown = shown_ranks(report, ranks)
    for r in shown:
        causes = r["gpu"]["idle_causes_ms"]
        total = sum(causes.values())
        share = f"{causes['host_wait'] / total:.0%}" if total > 0 else "-"
        cells = " | ".join(f"{causes[c]:.2f}" for c in CAUSES)
        lines.append(f"| {r['rank']} | {cells} | {share} |")
    lines += others_line(len(ranks), len(shown), len(FAMILIES) + 2)
    unlaunched = [r for r in ranks if r["gpu"].get("unlaunched")]
    if unlaunched:
        named = ", ".join(f"rank {r['rank']}: {r['gpu']['unlaunched']}" for r in unlaunched[:8])
        more = f" and {len(unlaunched) - 8} more ranks" if len(unlaunched) > 8 else ""
        lines += [
            f"GPU activities whose launch the trace does not hold (launched before the recording "
            f"began): {named}{more}. As in HTA, a trace of several steps leaves them out, a trace of "
            "one step counts them where they ran.",
            "",
        ]
    return lines


def _kernel_lines(report: dict[str, Any]) -> list[str]:
    ranks = [r for r in report["ranks"] if r.get("kernels")]
    if not ranks:
        return []
    lines = [
        "## Kernels",
        "",
        "GPU time per step by family (µs; every kernel, memcpy and memset of the trace):",
        "",
        "| rank | " + " | ".join(FAMILIES) + " | all |",
        "|---:|" + "---:|" * (len(FAMILIES) + 1),
    ]
    shown = shown_ranks(report, ranks)
    for r in shown:
        steps = max(len(r["steps"]), 1)
        families = r["kernels"]["by_family_us"]
        cells = [families.get(f, 0.0) / steps for f in FAMILIES] + [r["kernels"]["per_step_us"]]
        lines.append(f"| {r['rank']} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")
    lines += others_line(len(ranks), len(shown), 5)
    first = ranks[0]
    lines += [
        f"Rank {first['rank']}'s top {SHOWN_KERNELS} kernels (report.json has each rank's):",
        "",
        "| kernel | family | count | total µs | mean | p50 | p99 | share |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for k in first["kernels"]["top"][:SHOWN_KERNELS]:
        share = k["total_us"] / first["kernels"]["total_us"] if first["kernels"]["total_us"] else 0.0
        lines.append(
            f"| `{_short(k['name'])}` | {k['family']} | {k['count']} | {k['total_us']:.0f} | "
            f"{k['mean_us']:.1f} | {k['p50_us']:.1f} | {k['p99_us']:.1f} | {share:.1%} |"
        )
    lines.append("")
    across = report.get("kernels_across")
    if across:
        lines += [
            f"Kernels whose time per step differs most between the fastest rank ({across['fastest_rank']}) "
            f"and the slowest ({across['slowest_rank']}):",
            "",
            "| kernel | family | fastest µs/step | slowest µs/step | difference |",
            "|---|---|---:|---:|---:|",
        ]
        for k in across["kernels"]:
            lines.append(
                f"| `{_short(k['name'])}` | {k['family']} | {k['fastest_us']:.1f} | {k['slowest_us']:.1f} | "
                f"{k['difference_us']:+.1f} |"
            )
        lines.append("")
    return lines


def _collective_lines(report: dict[str, Any]) -> list[str]:
    rows = report.get("collectives_across") or []
    if not rows:
        return []
    sized = any(row["bytes"] for row in rows)
    lines = [
        "## Collectives",
        "",
        "Every rank's collectives by kind and message size: durations (µs), and the bus bandwidth "
        "nccl-tests defines (GB/s) at the ranks' median p50 and at the slowest rank's."
        + ("" if sized else " These traces record no message sizes: durations only."),
        "",
        "| kind | bytes | ranks in group | count | p50 | p90 | max | busbw | slowest rank | its busbw |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows[:20]:
        mark = " ⚠" if row["below_link"] else ""
        lines.append(
            f"| {row['kind']} | {_number(row['bytes'])} | {_number(row['group_size'])} | {row['count']} | "
            f"{row['p50_us']:.1f} | {row['p90_us']:.1f} | {row['max_us']:.1f} | "
            f"{_gbps(row['busbw_gbps'])}{mark} | {row['slowest_rank']} | {_gbps(row['slowest_busbw_gbps'])} |"
        )
    if len(rows) > 20:
        lines.append(f"| {len(rows) - 20} others | | | | | | | | | |")
    link = report.get("link_gbps")
    if link:
        lines += ["", f"⚠: bus bandwidth below {LINK_SHARE:.0%} of the link's {link:g} GB/s (--link-gbps)."]
    return [*lines, ""]


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
