"""Cross-rank report of a job folder: ``python -m profiling.report <job folder>``.

Reads the folder's traces one at a time (plain or gzipped), and writes to ``<folder>/meta/``:

``report.json``
    ``ranks``: per rank (sorted), ``rank``, ``host``, ``trace_files``, ``steps`` (the
    ``ProfilerStep#`` numbers), ``step_ms`` (each step's duration), ``step_time_ms``
    (``mean``/``min``/``max``), ``breakdown_ms`` (mean per step of ``forward``, ``backward``,
    ``optimizer``, ``communication`` — time spent waiting in collectives, nothing computing —
    and ``other``), ``compute_ms`` (forward + backward + optimizer), ``communication_total_ms``
    (all collective time in the window, overlapped or not), ``gpu`` (``busy_ms`` and
    ``idle_ms`` per step, or null on CPU) and ``clock_shift_us`` (applied in the merged trace).
    ``straggler``: the rank with the most compute per step, its ``compute_ms``, the median
    over ranks and ``over_median_pct``. ``step_time_spread_ms``: ``min``/``median``/``max``
    of the ranks' mean step times and ``max_minus_min``. ``communication_wait_ms``: rank ->
    mean communication wait per step (the fastest ranks wait longest). ``merged_trace``,
    ``clock_alignment``, ``generated_at``, ``seconds`` (time this report took).
``report.md``
    The same as tables.
``report.png``
    A stacked bar of the breakdown per rank, and each rank's step times.
``merged_trace.json.gz``
    Every rank in one timeline, a process lane per rank named ``rank N (host)``, clocks
    aligned (see :mod:`profiling.merge`). Opens in Perfetto.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from profiling.analysis import PHASES, RankAnalysis, analyse
from profiling.job_folder import meta_of
from profiling.manifest import utc_now
from profiling.merge import (
    ALIGNMENT_METHOD,
    MergedTraceWriter,
    Reference,
    lane_metadata,
    merged_events,
    shift_us,
)
from profiling.traces import TraceFile, atomic_path, list_traces, open_trace, write_json_atomically

MERGED_NAME = "merged_trace.json.gz"


class ReportError(ValueError):
    """A folder that cannot be reported on."""


def build_report(
    folder: Path,
    out_dir: Path | None = None,
    *,
    merged: bool = True,
    plot: bool = True,
    jobs: int | None = None,
) -> dict[str, Any]:
    """Analyse every trace in ``folder`` and write the report files; returns ``report.json``'s content.

    ``jobs`` processes read the traces (default: this process's CPUs, at most 8); each holds
    one trace's events at a time.
    """
    started = time.perf_counter()
    traces = list_traces(folder)
    if not traces:
        raise ReportError(f"{folder} holds no rank<r>_iter<a>_<b>.json[.gz] trace. HINT: pass a job folder")
    out_dir = out_dir or meta_of(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = jobs or min(8, len(os.sched_getaffinity(0)))

    if merged:
        with atomic_path(out_dir / MERGED_NAME) as merged_path:
            writer = _LazyWriter(merged_path)
            per_rank, shifts = _read_traces(traces, writer, jobs)
            writer.close({"clock_alignment": ALIGNMENT_METHOD, "ranks": sorted(per_rank)})
    else:
        per_rank, shifts = _read_traces(traces, None, jobs)

    report = _summarise(folder, per_rank, shifts)
    report["merged_trace"] = MERGED_NAME if merged else None
    if plot:
        plot_report(report, out_dir / "report.png")
    report["seconds"] = round(time.perf_counter() - started, 3)
    write_json_atomically(out_dir / "report.json", report)
    (out_dir / "report.md").write_text(render_markdown(report))
    return report


class _LazyWriter:
    """A MergedTraceWriter opened once the first trace tells the reference clock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.writer: MergedTraceWriter | None = None

    def write(self, chunk: bytes, reference: Reference) -> None:
        if self.writer is None:
            self.writer = MergedTraceWriter(self.path, gzipped=True, base_time_ns=reference.base_time_ns)
        self.writer.write(chunk)

    def close(self, other_data: dict[str, Any]) -> None:
        if self.writer is not None:
            self.writer.close(other_data)


def _load_and_analyse(trace_file: TraceFile) -> tuple[dict[str, Any], RankAnalysis]:
    with open_trace(trace_file.path) as handle:
        trace = orjson.loads(handle.read())
    analysis = analyse(trace)
    if analysis.rank != trace_file.rank:
        raise ReportError(
            f"{trace_file.path.name} says distributedInfo.rank={analysis.rank}; its name says "
            f"{trace_file.rank}. HINT: do not rename trace files"
        )
    return trace, analysis


def _analyse_and_merge(
    trace_file: TraceFile, reference: Reference | None
) -> tuple[RankAnalysis, bytes, float]:
    """One trace, start to end (in a worker process): its analysis and its merged events."""
    trace, analysis = _load_and_analyse(trace_file)
    if reference is None:
        return analysis, b"", 0.0
    shift = shift_us(analysis, reference)
    return analysis, merged_events(trace, analysis.rank, shift), shift


def _read_traces(
    traces: Sequence[TraceFile], writer: _LazyWriter | None, jobs: int
) -> tuple[dict[int, list[tuple[TraceFile, RankAnalysis]]], dict[int, float]]:
    """Analyse (and merge) the traces, written in the listed order: by rank, then window.

    The first rank is read here first: its all-reduces define the merged clock. The others
    are read by ``jobs`` worker processes, a bounded number in flight, so that memory holds a
    few traces whatever their number.
    """
    per_rank: dict[int, list[tuple[TraceFile, RankAnalysis]]] = {}
    shifts: dict[int, float] = {}
    first_rank = traces[0].rank
    reference = Reference(base_time_ns=0, anchors_us={})

    def record(trace_file: TraceFile, analysis: RankAnalysis, chunk: bytes, shift: float) -> None:
        if writer is not None:
            if trace_file.rank not in per_rank:
                writer.write(lane_metadata(trace_file.rank, analysis.host), reference)
            writer.write(chunk, reference)
        shifts.setdefault(trace_file.rank, shift)
        per_rank.setdefault(trace_file.rank, []).append((trace_file, analysis))

    for trace_file in (t for t in traces if t.rank == first_rank):
        trace, analysis = _load_and_analyse(trace_file)
        if not per_rank:
            reference = Reference(base_time_ns=analysis.base_time_ns, anchors_us={})
        if analysis.steps and analysis.comm_anchor_us is not None:
            reference.anchors_us[analysis.steps[0].step] = analysis.comm_anchor_us
        chunk = merged_events(trace, first_rank, 0.0) if writer is not None else b""
        del trace  # only one trace's events are held here
        record(trace_file, analysis, chunk, 0.0)

    rest = [t for t in traces if t.rank != first_rank]
    wanted = reference if writer is not None else None
    if jobs <= 1 or len(rest) <= 1:
        for trace_file in rest:
            record(trace_file, *_analyse_and_merge(trace_file, wanted))
        return per_rank, shifts
    # spawn: rank 0 calls this at the end of a job, with torch's threads around; forking those is unsafe
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        pending: collections.deque = collections.deque()
        for trace_file in rest:
            pending.append((trace_file, pool.submit(_analyse_and_merge, trace_file, wanted)))
            if len(pending) >= 2 * jobs:
                done_file, future = pending.popleft()
                record(done_file, *future.result())
        while pending:
            done_file, future = pending.popleft()
            record(done_file, *future.result())
    return per_rank, shifts


def _summarise(
    folder: Path, per_rank: dict[int, list[tuple[TraceFile, RankAnalysis]]], shifts: dict[int, float]
) -> dict[str, Any]:
    ranks = []
    for rank, items in sorted(per_rank.items()):
        steps = [step for _, analysis in items for step in analysis.steps]
        step_ms = [s.duration_us / 1e3 for s in steps]
        breakdown = {p: _mean([s.phases_us[p] / 1e3 for s in steps]) for p in PHASES}
        gpu_busy = [s.gpu_busy_us for s in steps if s.gpu_busy_us is not None]
        ranks.append(
            {
                "rank": rank,
                "host": items[0][1].host,
                "trace_files": [trace_file.path.name for trace_file, _ in items],
                "steps": [s.step for s in steps],
                "step_ms": step_ms,
                "step_time_ms": {
                    "mean": _mean(step_ms),
                    "min": min(step_ms, default=0.0),
                    "max": max(step_ms, default=0.0),
                },
                "breakdown_ms": breakdown,
                "compute_ms": breakdown["forward"] + breakdown["backward"] + breakdown["optimizer"],
                "communication_total_ms": sum(a.comm_total_us for _, a in items) / 1e3 / max(len(steps), 1),
                "gpu": (
                    {
                        "busy_ms": _mean([b / 1e3 for b in gpu_busy]),
                        "idle_ms": _mean([(s.duration_us - s.gpu_busy_us) / 1e3 for s in steps]),
                    }
                    if gpu_busy
                    else None
                ),
                "clock_shift_us": shifts.get(rank),
            }
        )
    compute = [r["compute_ms"] for r in ranks]
    means = [r["step_time_ms"]["mean"] for r in ranks]
    slowest = max(ranks, key=lambda r: r["compute_ms"])
    median_compute = statistics.median(compute)
    return {
        "folder": str(folder),
        "generated_at": utc_now(),
        "ranks": ranks,
        "straggler": {
            "rank": slowest["rank"],
            "compute_ms": slowest["compute_ms"],
            "median_compute_ms": median_compute,
            "over_median_pct": 100.0 * (slowest["compute_ms"] - median_compute) / median_compute
            if median_compute
            else 0.0,
        },
        "step_time_spread_ms": {
            "min": min(means),
            "median": statistics.median(means),
            "max": max(means),
            "max_minus_min": max(means) - min(means),
        },
        "communication_wait_ms": {str(r["rank"]): r["breakdown_ms"]["communication"] for r in ranks},
        "clock_alignment": ALIGNMENT_METHOD,
    }


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def render_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Trace report: {report['folder']}", ""]
    straggler = report["straggler"]
    lines += [
        f"**Straggler: rank {straggler['rank']}**, {straggler['compute_ms']:.2f} ms of compute per step, "
        f"{straggler['over_median_pct']:+.1f}% over the median rank "
        f"({straggler['median_compute_ms']:.2f} ms).",
        "",
        "## Step time (ms)",
        "",
        "| rank | host | steps | mean | min | max |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for r in report["ranks"]:
        t = r["step_time_ms"]
        steps = f"{r['steps'][0]}-{r['steps'][-1]}" if r["steps"] else "-"
        lines.append(
            f"| {r['rank']} | {r['host']} | {steps} | {t['mean']:.2f} | {t['min']:.2f} | {t['max']:.2f} |"
        )
    spread = report["step_time_spread_ms"]
    lines += [
        "",
        f"Spread of the ranks' mean step times: {spread['min']:.2f} to {spread['max']:.2f} ms "
        f"(median {spread['median']:.2f}, max - min {spread['max_minus_min']:.2f}).",
        "",
    ]
    lines += [
        "## Where a step's time goes (mean ms per step)",
        "",
        "| rank | " + " | ".join(PHASES) + " | compute | all collectives | GPU busy | GPU idle |",
        "|---:|" + "---:|" * (len(PHASES) + 4),
    ]
    for r in report["ranks"]:
        b, gpu = r["breakdown_ms"], r["gpu"]
        gpu_cells = f"{gpu['busy_ms']:.2f} | {gpu['idle_ms']:.2f}" if gpu else "- | -"
        lines.append(
            f"| {r['rank']} | "
            + " | ".join(f"{b[p]:.2f}" for p in PHASES)
            + f" | {r['compute_ms']:.2f} | {r['communication_total_ms']:.2f} | {gpu_cells} |"
        )
    lines += [
        "",
        "*communication* is time waiting in collectives with nothing computing; *all collectives* "
        "also counts the part hidden behind compute.",
        "",
    ]
    if report.get("merged_trace"):
        lines += [
            f"Merged timeline: `{report['merged_trace']}` (open in Perfetto). {report['clock_alignment']}",
            "",
        ]
    return "\n".join(lines)


def plot_report(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ranks = report["ranks"]
    labels = [str(r["rank"]) for r in ranks]
    fig, (bars, lines) = plt.subplots(1, 2, figsize=(12, 4.5))
    bottom = [0.0] * len(ranks)
    for phase in PHASES:
        values = [r["breakdown_ms"][phase] for r in ranks]
        bars.bar(labels, values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    bars.set(title="Mean step breakdown per rank", xlabel="rank", ylabel="ms per step")
    bars.legend(fontsize="small")
    for r in ranks:
        lines.plot(r["steps"], r["step_ms"], marker="o", label=f"rank {r['rank']}")
    lines.set(title="Step time per rank", xlabel="step (ProfilerStep#)", ylabel="ms")
    lines.xaxis.set_major_locator(MaxNLocator(integer=True))
    if len(ranks) <= 16:
        lines.legend(fontsize="small")
    fig.suptitle(
        f"straggler: rank {report['straggler']['rank']} "
        f"({report['straggler']['over_median_pct']:+.1f}% compute over median)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m profiling.report", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "folder", type=Path, help="a job folder (or a restart<k>/ folder) of rank<r>_iter<a>_<b>.json traces"
    )
    parser.add_argument("--out", type=Path, help="where to write (default: FOLDER/meta)")
    parser.add_argument("--no-merged-trace", action="store_true", help="skip merged_trace.json.gz")
    parser.add_argument("--no-plot", action="store_true", help="skip report.png")
    parser.add_argument(
        "--jobs", type=int, help="processes reading traces (default: CPUs available, at most 8)"
    )
    args = parser.parse_args(argv)
    try:
        report = build_report(
            args.folder, args.out, merged=not args.no_merged_trace, plot=not args.no_plot, jobs=args.jobs
        )
    except (ReportError, OSError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
