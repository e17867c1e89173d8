"""report.md's GPU sections (why the GPU idles, kernels, collectives, waiting and transferring),
from the typed report (:mod:`profiling.schema.model`)."""

from __future__ import annotations

from profiling.analysis.across_ranks import LINK_SHARE, SHOWN_KERNELS
from profiling.analysis.per_trace import CAUSES, FAMILIES, KERNEL_GAP_US
from profiling.report.table_ranks import cell, others_line, shown_ranks
from profiling.schema.model import Report


def markdown(report: Report) -> list[str]:
    """report.md's idle causes, kernel and collective sections."""
    return _idle_lines(report) + _kernel_lines(report) + _collective_lines(report) + _wait_lines(report)


def _wait_lines(report: Report) -> list[str]:
    waits = {r.rank: r.collective_wait for r in report.ranks if r.collective_wait is not None}
    ranks = [r for r in report.ranks if r.rank in waits]
    if not ranks or not waits[ranks[0].rank].collectives:
        return []
    wait = sum(w.wait_ms for w in waits.values())
    total = wait + sum(w.transfer_ms for w in waits.values())
    share = wait / total if total > 0 else 0.0
    last = max(ranks, key=lambda r: waits[r.rank].last_arrivals)
    count = waits[ranks[0].rank].collectives
    verdict = (
        f"Most of it is waiting: the time points at a straggler, not at the network (rank {last.rank} "
        f"arrived last in {waits[last.rank].last_arrivals} of {count})."
        if share > 0.5
        else "Most of it is transferring: the ranks arrive together, the time is the collective's own."
    )
    reached = (
        f"collectives every rank of their group reached ({count} on rank {ranks[0].rank})"
        if report.layout is not None
        else f"{count} collectives every rank reached"
    )
    lines = [
        f"Time per step in the {reached}, on the aligned clocks: waiting for "
        f"the last rank to arrive, and transferring ({share:.0%} waiting over all ranks). {verdict} "
        "A wait under a rank's clock ± (Clock alignment) is noise.",
        "",
        "| rank | waiting (ms) | transferring (ms) | waiting share | arrived last |",
        "|---:|---:|---:|---:|---:|",
    ]
    shown = shown_ranks(report, ranks)
    for r in shown:
        w = waits[r.rank]
        its_share = "-" if w.waiting_share is None else f"{w.waiting_share:.0%}"
        cells = f"{w.wait_ms:.2f} | {w.transfer_ms:.2f} | {its_share} | {w.last_arrivals}"
        lines.append(f"| {r.rank} | {cells} |")
    return lines + others_line(len(ranks), len(shown), 5)


def _idle_lines(report: Report) -> list[str]:
    gpus = {r.rank: r.gpu for r in report.ranks if r.gpu is not None and r.gpu.idle_causes_ms}
    ranks = [r for r in report.ranks if r.rank in gpus]
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
        causes = gpus[r.rank].idle_causes_ms
        total = sum(causes.values())
        share = f"{causes['host_wait'] / total:.0%}" if total > 0 else "-"
        cells = " | ".join(f"{causes[c]:.2f}" for c in CAUSES)
        lines.append(f"| {r.rank} | {cells} | {share} |")
    lines += others_line(len(ranks), len(shown), len(FAMILIES) + 2)
    unlaunched = [r for r in ranks if gpus[r.rank].unlaunched]
    if unlaunched:
        named = ", ".join(f"rank {r.rank}: {gpus[r.rank].unlaunched}" for r in unlaunched[:8])
        more = f" and {len(unlaunched) - 8} more ranks" if len(unlaunched) > 8 else ""
        lines += [
            f"GPU activities whose launch the trace does not hold (launched before the recording "
            f"began): {named}{more}. As in HTA, a trace of several steps leaves them out, a trace of "
            "one step counts them where they ran.",
            "",
        ]
    return lines


def _kernel_lines(report: Report) -> list[str]:
    kernels = {r.rank: r.kernels for r in report.ranks if r.kernels is not None}
    ranks = [r for r in report.ranks if r.rank in kernels]
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
        steps = max(len(r.steps), 1)
        families = kernels[r.rank].by_family_us
        cells = [families.get(f, 0.0) / steps for f in FAMILIES] + [kernels[r.rank].per_step_us]
        lines.append(f"| {r.rank} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")
    lines += others_line(len(ranks), len(shown), 5)
    first = kernels[ranks[0].rank]
    lines += [
        f"Rank {ranks[0].rank}'s top {SHOWN_KERNELS} kernels (report.json has each rank's):",
        "",
        "| kernel | family | count | total µs | mean | p50 | p99 | share |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for k in first.top[:SHOWN_KERNELS]:
        share = k.total_us / first.total_us if first.total_us else 0.0
        lines.append(
            f"| `{cell(_short(k.name))}` | {k.family} | {k.count} | {k.total_us:.0f} | "
            f"{k.mean_us:.1f} | {k.p50_us:.1f} | {k.p99_us:.1f} | {share:.1%} |"
        )
    lines.append("")
    across = report.kernels_across
    if across is not None:
        lines += [
            f"Kernels whose time per step differs most between the fastest rank ({across.fastest_rank}) "
            f"and the slowest ({across.slowest_rank}):",
            "",
            "| kernel | family | fastest µs/step | slowest µs/step | difference |",
            "|---|---|---:|---:|---:|",
        ]
        for d in across.kernels:
            lines.append(
                f"| `{cell(_short(d.name))}` | {d.family} | {d.fastest_us:.1f} | {d.slowest_us:.1f} | "
                f"{d.difference_us:+.1f} |"
            )
        lines.append("")
    return lines


def _collective_lines(report: Report) -> list[str]:
    rows = report.collectives_across
    if not rows:
        return []
    sized = any(row.bytes for row in rows)
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
    grouped = any(row.group for row in rows)
    if grouped:  # a job of many groups: which group each row is of
        lines[-2:] = ["| group " + lines[-2], "|---" + lines[-1]]
    for row in rows[:20]:
        mark = " ⚠" if row.below_link else ""
        group = f"| {cell(row.group or '-')} " if grouped else ""
        lines.append(
            f"{group}| {cell(row.kind)} | {_number(row.bytes)} | {_number(row.group_size)} | {row.count} | "
            f"{row.p50_us:.1f} | {row.p90_us:.1f} | {row.max_us:.1f} | "
            f"{_gbps(row.busbw_gbps)}{mark} | {row.slowest_rank} | {_gbps(row.slowest_busbw_gbps)} |"
        )
    if len(rows) > 20:
        lines.append(f"| {len(rows) - 20} others | | | | | | | | | |" + (" |" if grouped else ""))
    link = report.link_gbps
    if link:
        lines += ["", f"⚠: bus bandwidth below {LINK_SHARE:.0%} of the link's {link:g} GB/s (--link-gbps)."]
    return [*lines, ""]


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
