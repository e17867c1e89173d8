"""``report.md``: the report as tables, with the straggler verdict and each rank's clock."""

from __future__ import annotations

import math

from profiling.report import render_efficiency, render_gpu, render_path
from profiling.report.table_ranks import cell, others_line, shown_ranks
from profiling.schema.model import Archive, Merge, RankReport, Report, Run, RunRank


def report_markdown(report: Report) -> str:
    lines = [f"# Trace report: {report.folder}", ""]
    if report.straggler is not None:
        lines += [f"**{report.straggler.text[0].upper()}{report.straggler.text[1:]}.**", ""]
    if report.stages is not None and report.stages.verdict == "imbalance":
        lines += [f"**{report.stages.text[0].upper()}{report.stages.text[1:]}.**", ""]
    lines += [f"**Out of memory: {oom.line}.**" for oom in report.oom] + ([""] if report.oom else [])
    lines += _baseline_lines(report)
    lines += render_path.what_limits(report)
    lines += [f"Warning: {w}." for w in report.warnings] + ([""] if report.warnings else [])
    run = report.run
    run_lines = _run_lines(run, report.run_plot) if run is not None else []
    if not report.ranks:
        lines += [
            "No traces: the job recorded none (`--profile-ranks none`, or it ended before its window), "
            "so the run is all there is.",
            "",
            *run_lines,
        ]
        return "\n".join(lines)
    if report.layout is not None:
        dims = " × ".join(f"{name} {size}" for name, size in report.layout.dims.items())
        lines += [f"Layout: {dims} (from {report.layout.source}); each rank with its coordinates.", ""]
        if report.stages is not None and report.stages.verdict != "imbalance":
            lines += [f"{report.stages.text[0].upper()}{report.stages.text[1:]}.", ""]
    lines += [
        "## Step time (ms)",
        "",
        "| rank | host | steps | mean | min | max |",
        "|---:|---|---|---:|---:|---:|",
    ]
    shown = shown_ranks(report)
    for r in shown:
        t = r.step_time_ms
        steps = f"{r.steps[0]}-{r.steps[-1]}" if r.steps else "-"
        lines.append(
            f"| {rank_cell(r)} | {cell(r.host)} | {steps} | {t.mean:.2f} | {t.min:.2f} | {t.max:.2f} |"
        )
    lines += others_line(len(report.ranks), len(shown), 6)
    spread = report.step_time_spread_ms
    assert spread is not None  # a report of ranks has their spread
    lines += [
        f"Spread of the ranks' mean step times: {spread.min:.2f} to {spread.max:.2f} ms "
        f"(median {spread.median:.2f}, max - min {spread.max_minus_min:.2f}).",
        "",
        "## Where a step's time goes (mean ms per step)",
        "",
    ]
    for device in ("gpu", "cpu"):
        ranks = [r for r in shown if r.device == device]
        if ranks:
            lines += _breakdown_table(device, ranks)
    if len(shown) < len(report.ranks):
        lines += [f"{len(report.ranks) - len(shown)} other ranks: report.json.", ""]
    lines += render_efficiency.efficiency_lines(report, shown)
    lines += render_gpu.markdown(report) + run_lines
    lines += [
        "## Clock alignment",
        "",
        "| rank | method | shift (µs) | pairs | residual (µs) | ± (µs) | paired | note |",
        "|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in shown:
        c = r.clock
        residual, uncertainty, share = (
            f"{value:{form}}" if value is not None else "-"
            for value, form in ((c.residual_us, ".1f"), (c.uncertainty_us, ".1f"), (c.paired_share, ".0%"))
        )
        lines.append(
            f"| {r.rank} | {c.method} | {c.shift_us:.1f} | {c.pairs} | {residual} | "
            f"{uncertainty} | {share} | {c.note} |"
        )
    lines += others_line(len(report.ranks), len(shown), 8)
    lines += _reading_lines(report) + _archive_lines(report.archive, report.folder) + _merged_lines(report)
    return "\n".join(lines)


def _breakdown_table(device: str, ranks: list[RankReport]) -> list[str]:
    parts = list(ranks[0].breakdown_ms)
    if device == "gpu":
        header = parts + ["span", "comm. overlapped", "all collectives"]
        lines = ["GPU: each step's GPU span = compute + communication (exposed) + memory + other + idle.", ""]
    else:
        header = parts + ["step", "compute", "all collectives"]
        lines = ["CPU: each step = forward + backward + optimizer + communication (waiting) + other.", ""]
    lines += ["| rank | " + " | ".join(header) + " |", "|---:|" + "---:|" * len(header)]
    for r in ranks:
        cells = [r.breakdown_ms[p] for p in parts]
        if r.gpu is not None:
            cells += [r.gpu.span_ms, r.gpu.communication_overlapped_ms, r.communication_total_ms]
        else:
            cells += [r.accounted_ms, r.compute_ms, r.communication_total_ms]
        lines.append(f"| {r.rank} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    return [*lines, ""]


def _reading_lines(report: Report) -> list[str]:
    reading = report.reading
    here = reading.read_here
    line = (
        f"Analysis: {reading.traces} trace(s); {reading.from_records} from the analysis records "
        f"their readers left ({', '.join(reading.analysed_by)})"
        if reading.from_records
        else f"Analysis: {reading.traces} trace(s)"
    )
    if here:
        line += f"; {len(here)} read here ({_names(here)}), as none had a fresh record"
    return [line + ".", ""] if reading.traces else []


def _archive_lines(archive: Archive | None, folder: str) -> list[str]:
    if archive is None:
        return []
    left_out = (
        f"; left out to stay within {(archive.budget_bytes or 0) / 1e6:.0f} MB: rank(s) {archive.left_out}"
        if archive.left_out
        else ""
    )
    return [
        f"Merged timeline: `{archive.file}` (open in ui.perfetto.dev: the traces as they are, one "
        f"machine per rank, clocks pinned to rank {archive.reference_rank}'s): "
        f"rank(s) {archive.ranks}, {archive.bytes / 1e6:.1f} MB of traces{left_out}. Others: "
        f"`python -m jobs.commands.archive {folder} --ranks SPEC`.",
        "",
    ]


def _merged_lines(report: Report) -> list[str]:
    merge: Merge | None = report.merge
    if merge is None:
        return []
    depth, kept = merge.max_cpu_depth, "everything"
    if depth is not None:
        what = (
            f"CPU operators nested up to {depth} deep"
            if depth >= 0
            else "top-level CPU operators, steps and collectives, no other GPU kernel"
        )
        budget = merge.budget_bytes or 0.0
        kept = (
            f"{what}: {merge.events_dropped} events left out to stay within "
            f"{budget / 1e6:.0f} MB (--full-merge keeps them)"
            + ("; still over it, as what is always kept is more than that" if merge.bytes > budget else "")
        )
    return [
        f"Merged JSON: `{report.merged_trace}` (for viewers that cannot open archives), every rank on "
        f"rank {report.ranks[0].rank}'s clock; {merge.bytes / 1e6:.1f} MB of JSON holding {kept}.",
        "",
    ]


def _names(traces: list[str]) -> str:
    return ", ".join(traces[:4]) + (f" and {len(traces) - 4} more" if len(traces) > 4 else "")


def _capture_lines(run: Run) -> list[str]:
    """Each capture taken while the job ran (outlined in green on the map): who asked, and why."""
    lines = []
    for c in run.captures:
        recorded = f"steps {c.first}-{c.last} of rank(s) {', '.join(map(str, c.ranks))}"
        wrote = f" ({_names(c.traces)})" if c.traces else " (no trace written: past the run's end?)"
        if c.automatic:
            lines.append(
                f"- **Captured automatically** (`--auto-capture`, {c.id}): {recorded}{wrote}: {c.why}."
            )
        else:
            lines.append(
                f"- Captured on request (`jobs.commands.capture`, capture {c.id}): {recorded}{wrote}."
            )
    return lines


def _run_lines(run: Run, plot: str | None) -> list[str]:
    first, last = run.steps
    lines = [
        f"## The whole run: steps {first}-{last}, every rank",
        "",
        f"From every rank's step log (meta/steps/): {run.measures}; each rank against the other "
        f"ranks' median at that step. A rank is slow above ×{run.slow_above:.2f} for "
        f"{run.min_steps} steps or more (the run's step-to-step noise: {run.noise:.1%}).",
        "",
    ]
    if plot:
        lines += [f"![rank × step]({plot})", ""]
    lines += [*_capture_lines(run), *([""] if run.captures else [])]
    for node in run.slow_nodes:
        slow_ranks = ", ".join(map(str, node.slow_ranks))
        lines += [
            f"**Slow node: {node.node}**, steps {node.first}-{node.last}: rank(s) {slow_ranks} of its "
            f"{len(node.ranks)} at ×{node.ratio:.2f} the other ranks (+{node.excess_ms:.1f} ms a "
            f"step), the other nodes' not. {node.hint[0].upper()}{node.hint[1:]}.",
            "",
        ]
    if run.segments:
        lines += [
            "| rank | node | steps | slow steps | slower by (ms) | × the others | traces |",
            "|---:|---|---|---:|---:|---:|---|",
        ]
        for s in run.segments:
            traces = ", ".join(s.traces) if s.traces else s.hint
            lines.append(
                f"| {s.rank} | {cell(s.node)} | {s.first}-{s.last} | {s.slow_steps} | "
                f"{s.excess_ms:.1f} | {s.ratio:.2f} | {traces} |"
            )
        lines.append("")
    else:
        lines += ["No rank was persistently slow.", ""]
    lines += _memory_lines(run)
    if run.ends.note:
        lines += [f"Where the logs end: {run.ends.note}.", ""]
    if run.unreadable:
        lines += [f"Step logs read in part or not at all: {'; '.join(run.unreadable)}.", ""]
    ranks = sorted(run.ranks, key=_worst_relative)[:8]
    lines += [
        "Scores (NVIDIA Resiliency Extension's sense; 1 is best): *relative*, the fastest rank's "
        "median over this rank's; *individual*, the rank's best interval over its median. The "
        f"lowest {len(ranks)} of {len(run.ranks)} ranks by their worst interval:",
        "",
        "| rank | node | median ms | relative | individual | worst steps | relative | individual |",
        "|---:|---|---:|---:|---:|---|---:|---:|",
    ]
    for r in ranks:
        worst = min(r.intervals, key=lambda i: i.relative, default=None)
        stretch = (
            f"{worst.first}-{worst.last} | {worst.relative:.2f} | {worst.individual:.2f}"
            if worst
            else "– | – | –"
        )
        lines.append(
            f"| {r.rank} | {cell(r.node)} | {_number(r.median_ms, '.1f')} | {_number(r.relative, '.2f')} | "
            f"{_number(r.individual, '.2f')} | {stretch} |"
        )
    lines.append("")
    return lines


def _baseline_lines(report: Report) -> list[str]:
    """Where the job stands against the last jobs of its config (``slurm-profile history``)."""
    baseline = report.baseline
    if baseline is None:
        return []
    line = f"Against its history: {baseline.line}"
    if baseline.jobs:
        line += f"; baseline: job{'s' if len(baseline.jobs) > 1 else ''} {', '.join(baseline.jobs)}"
    return [f"**{line}.**" if baseline.regression else f"{line}.", ""]


def rank_cell(rank: RankReport) -> str:
    """``13 (dp 1, pp 3, tp 1)``: a rank with its coordinates, where the job has a layout."""
    where = ", ".join(f"{dim} {index}" for dim, index in (rank.mesh or {}).items())
    return f"{rank.rank} ({where})" if where else str(rank.rank)


def _worst_relative(rank: RunRank) -> float:
    """A rank's lowest relative score over its intervals; a rank with no known time last."""
    known = [i.relative for i in rank.intervals]
    return min(known, default=rank.relative if rank.relative is not None else math.inf)


def _number(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "–"


def _memory_lines(run: Run) -> list[str]:
    """The ranks whose memory grew step after step: a leak no recorded window shows."""
    if run.memory is None:
        return []
    what = (
        "the allocator's peak in each step"
        if run.memory == "cuda"
        else "the process's resident memory at each step's end"
    )
    if not run.memory_growth:
        return [f"No rank's memory grew steadily over the run ({what}).", ""]
    lines = [f"**Memory growing to the end of the log** ({what}): a leak?", ""]
    lines += [f"- {growth.line}" for growth in run.memory_growth[:8]]
    more = len(run.memory_growth) - 8
    return lines + ([f"- and {more} more ranks: report.json's run.memory_growth"] if more > 0 else []) + [""]
