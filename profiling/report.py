"""Cross-rank report of a job folder: ``python -m profiling.report <job folder>``.

Reads the folder's traces one at a time (plain or gzipped), and writes to ``<folder>/meta/``:

``report.json``
    ``ranks``: per rank (sorted):

    - ``rank``, ``host``, ``device`` (``"gpu"`` if the trace has GPU activity, else ``"cpu"``),
      ``trace_files``, ``warnings`` (e.g. the rank taken from the file name);
    - ``steps`` (the ``ProfilerStep#`` numbers), ``step_ms`` (each step's CPU span),
      ``step_time_ms`` (``mean``/``min``/``max`` of those);
    - ``breakdown_ms``: the mean per step of each part (:mod:`profiling.analysis.breakdown` says how each
      is measured). GPU: ``compute + communication + memory + other + idle = gpu.span_ms``,
      the step's GPU span. CPU: ``forward + backward + optimizer + communication + other =
      step_time_ms.mean``, the CPU span. ``accounted_ms`` is what the parts add up to;
      ``breakdown_steps_ms`` the same parts for each step (what ``profiling.compare`` reads);
    - ``compute_ms``: GPU ``compute``; CPU ``forward + backward + optimizer``;
    - ``communication_total_ms``: time any collective ran per step, overlapped or not;
    - ``gpu`` (null on CPU): ``span_ms``, ``busy_ms`` (``span_ms - idle``), ``idle_ms``,
      ``communication_overlapped_ms`` (NCCL running alongside compute), and
      ``compute_by_phase_ms`` (``forward``/``backward``/``optimizer``/``unattributed``, adding
      up to ``compute``), all means per step;
    - ``clock``: how the rank's trace was put on the first rank's clock (see
      :mod:`profiling.analysis.alignment`): ``method`` (``reference``, ``sequence numbers``, ``matched
      collectives`` or ``base time``), ``shift_us`` (added to its ts in the merged trace),
      ``pairs``, ``residual_us`` (median absolute deviation of the pairs' offsets),
      ``max_residual_us``, ``paired_share`` (of the shorter trace's all-reduce-like
      collectives), ``uncertainty_us`` (the shift's standard error: how well the clock is
      known), ``note`` (why a rank kept its base time, e.g. an ambiguous offset).

    ``straggler`` (null for one rank): ``verdict`` (``straggler``, ``none`` or
    ``undetermined``), ``rank``, ``text``, and the evidence: ``collectives`` (paired on every
    rank), ``candidate`` and its ``lateness_ms`` (how long after the next rank it came, on
    average, where it came last), ``last_arrivals``, ``steps_held_back`` and
    ``charged_ms_per_step`` per rank,
    ``step_noise_ms`` and ``threshold_ms``, ``clock_uncertainty_us`` and ``min_lateness_us``
    (lateness below it is no evidence), ``p_value``, ``compute_ms`` per rank (see
    :mod:`profiling.analysis.straggler`).
    ``step_time_spread_ms``: ``min``/``median``/``max`` of the ranks' mean step times and
    ``max_minus_min``. ``communication_wait_ms``: rank -> mean exposed communication per step.
    ``warnings``, ``merged_trace``, ``generated_at``, ``seconds`` (time this report took),
    ``alignment_seconds`` (of which aligning the clocks, every rank against the first).
``report.md``
    The same as tables, with the straggler verdict and each rank's clock alignment.
``report.png``
    A stacked bar of the breakdown per rank, and each rank's step times.
``merged_trace.json.gz``
    Every rank in one timeline, a process lane per rank named ``rank N (host)``, clocks
    aligned. Opens in Perfetto.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from profiling.analysis import alignment
from profiling.analysis.alignment import Alignment
from profiling.analysis.breakdown import RankAnalysis, analyse
from profiling.analysis.collectives import Instance, instances
from profiling.analysis.json_stream import TraceFormatError
from profiling.analysis.merge import (
    DEFAULT_BUDGET_BYTES,
    MergedTraceWriter,
    MergeStats,
    keep_levels,
    lane_metadata,
    merge_stats,
    plan_depth,
    write_part,
)
from profiling.analysis.straggler import find_straggler
from profiling.analysis.trace_events import read as read_trace
from profiling.folder.layout import ReportFiles
from profiling.folder.traces import TraceFile, list_traces
from slurm.basics import OneLineParser, atomic_path, utc_now, write_json_atomically, write_text_atomically


class ReportError(ValueError):
    """A folder that cannot be reported on."""


@dataclasses.dataclass(frozen=True)
class TraceResult:
    """One trace, read: its analysis, its collectives, its alignment, what it adds to the merge."""

    trace_file: TraceFile
    analysis: RankAnalysis
    instances: list[Instance]
    main_pid: Any
    merge: MergeStats | None  # None when no merged trace is made
    depths: Path | None  # keep_levels() of the trace, saved for the merge
    alignment: Alignment | None = None  # set once every trace has been read


def build_report(
    folder: Path,
    out_dir: Path | None = None,
    *,
    merged: bool = True,
    plot: bool = True,
    jobs: int | None = None,
    merge_budget_bytes: float | None = DEFAULT_BUDGET_BYTES,
) -> dict[str, Any]:
    """Analyse every trace in ``folder`` and write the report files; returns ``report.json``'s content.

    ``jobs`` processes read the traces (default: this process's CPUs, at most 8), each one
    trace at a time; the merged trace keeps within ``merge_budget_bytes`` of JSON (None: all).
    """
    started = time.perf_counter()
    traces = list_traces(folder)
    if not traces:
        raise ReportError(f"{folder} holds no rank<r>_iter<a>_<b>.json[.gz] trace. HINT: pass a job folder")
    files = ReportFiles(out_dir) if out_dir else ReportFiles.of(folder)
    files.folder.mkdir(parents=True, exist_ok=True)
    jobs = jobs or min(8, len(os.sched_getaffinity(0)))
    with tempfile.TemporaryDirectory(prefix="report-") as scratch, _Workers(jobs) as workers:
        depths_dir = Path(scratch) if merged else None
        results = list(workers.map(_read_one, traces, [depths_dir] * len(traces)))
        aligning = time.perf_counter()
        per_rank = _align(results)
        aligning = time.perf_counter() - aligning
        report = summarise(folder, per_rank)
        # the plot is drawn by a worker while the others write the merged trace
        plotted = workers.submit(plot_report, report, files.plot) if plot else None
        merge = _write_merged(per_rank, files.merged, workers, merge_budget_bytes) if merged else None
        if plotted is not None:
            plotted.result()
    report["merged_trace"] = files.merged.name if merged else None
    report["merge"] = merge
    report["alignment_seconds"] = round(aligning, 3)
    report["seconds"] = round(time.perf_counter() - started, 3)
    write_json_atomically(files.json, report)
    write_text_atomically(files.markdown, render_markdown(report))
    return report


class _Workers:
    """``map`` over worker processes (or in this process for ``jobs`` = 1), results in order,
    a bounded number in flight so that memory holds a few traces whatever their number."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> _Workers:
        if self.jobs > 1:
            # spawn: rank 0 calls this at the end of a job, with torch's threads around: forking
            # those is unsafe
            self._pool = ProcessPoolExecutor(
                max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn")
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def submit(self, function: Callable[..., Any], *arguments: Any) -> Future:
        """One call in a worker (or here, done before returning, for ``jobs`` = 1)."""
        if self._pool is not None:
            return self._pool.submit(function, *arguments)
        done: Future = Future()
        done.set_result(function(*arguments))
        return done

    def map(self, function: Callable[..., Any], *arguments: Sequence[Any]) -> Iterator[Any]:
        calls = list(zip(*arguments, strict=True))
        if self._pool is None or len(calls) <= 1:
            yield from (function(*call) for call in calls)
            return
        pending: collections.deque = collections.deque()
        for call in calls:
            pending.append(self._pool.submit(function, *call))
            if len(pending) >= 2 * self.jobs:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _read_one(trace_file: TraceFile, depths_dir: Path | None) -> TraceResult:
    """One trace, start to end (in a worker process): its analysis, its collectives, its merge plan."""
    trace = read_trace(trace_file.path)
    analysis = analyse(trace, rank_from_name=trace_file.rank)
    if analysis.rank != trace_file.rank:
        raise ReportError(
            f"{trace_file.path.name} says distributedInfo.rank={analysis.rank}; its name says "
            f"{trace_file.rank}. HINT: do not rename trace files"
        )
    stats, depths_path = None, None
    if depths_dir is not None:
        depths = keep_levels(trace)
        stats = merge_stats(trace, depths)
        depths_path = depths_dir / f"rank{trace_file.rank}_{trace_file.first_step}.npy"
        np.save(depths_path, depths)
    found = instances(analysis.collectives)
    return TraceResult(trace_file, analysis, found, trace.main_pid(), stats, depths_path)


def _align(results: list[TraceResult]) -> dict[int, list[TraceResult]]:
    """Every trace's clock against the first rank's trace of the same window; by rank, then window."""
    first_rank = results[0].trace_file.rank
    reference = {r.trace_file.first_step: r for r in results if r.trace_file.rank == first_rank}
    steps = [s.duration_us for r in reference.values() for s in r.analysis.steps]
    step_us = statistics.median(steps) if steps else None
    per_rank: dict[int, list[TraceResult]] = {}
    for result in results:
        theirs = reference.get(result.trace_file.first_step)
        if result.trace_file.rank == first_rank:
            clock = alignment.reference_alignment(len(result.instances))
        elif theirs is None:
            clock = alignment.base_time(
                _prior_us(result, results[0]), "the first rank did not record this window"
            )
        else:
            clock = alignment.align(
                theirs.instances, result.instances, prior_us=_prior_us(result, theirs), step_us=step_us
            )
        per_rank.setdefault(result.trace_file.rank, []).append(dataclasses.replace(result, alignment=clock))
    return per_rank


def _prior_us(result: TraceResult, reference: TraceResult) -> float:
    """The shift the two traces' base times give (0 where either has none)."""
    mine, theirs = result.analysis.base_time_ns, reference.analysis.base_time_ns
    return (mine - theirs) / 1e3 if mine is not None and theirs is not None else 0.0


def _write_merged(
    per_rank: dict[int, list[TraceResult]], path: Path, workers: _Workers, budget_bytes: float | None
) -> dict[str, Any]:
    """The merged trace, written atomically; returns what ``report.json`` says of it."""
    results = [result for _, results in sorted(per_rank.items()) for result in results]
    max_depth = plan_depth((r.merge for r in results), budget_bytes)
    base = results[0].analysis.base_time_ns or 0
    kept = dropped = 0
    with atomic_path(path) as temp:
        writer = MergedTraceWriter(temp, base_time_ns=base)
        writer.write(lane_metadata(results[0].trace_file.rank, results[0].analysis.host))
        parts = workers.map(
            write_part,
            [r.trace_file.path for r in results],
            [r.depths.with_suffix(".part") for r in results],
            [r.trace_file.rank for r in results],
            [r.alignment.shift_us for r in results],
            [r.main_pid for r in results],
            [r.depths for r in results],
            [max_depth] * len(results),
        )
        lanes_written = {results[0].trace_file.rank}
        for result, part in zip(results, parts, strict=True):
            if result.trace_file.rank not in lanes_written:
                writer.write(b"," + lane_metadata(result.trace_file.rank, result.analysis.host))
                lanes_written.add(result.trace_file.rank)
            writer.append(part)
            part.path.unlink()
            kept, dropped = kept + part.kept, dropped + part.dropped
        size = writer.close({"ranks": sorted(per_rank), "max_cpu_depth": max_depth})
    return {
        "bytes": size,
        "budget_bytes": budget_bytes,
        "max_cpu_depth": max_depth,
        "events_kept": kept,
        "events_dropped": dropped,
    }


def summarise(folder: Path, per_rank: dict[int, list[TraceResult]]) -> dict[str, Any]:
    """``report.json``'s content from every trace's result (by rank, then window)."""
    ranks = [_rank_summary(rank, results) for rank, results in sorted(per_rank.items())]
    means = [r["step_time_ms"]["mean"] for r in ranks]
    straggler = find_straggler(
        arrivals={rank: _arrivals(results) for rank, results in per_rank.items()},
        anchor_steps=_anchor_steps(per_rank[min(per_rank)]),
        step_ms={r["rank"]: r["step_ms"] for r in ranks},
        compute_ms={r["rank"]: r["compute_ms"] for r in ranks},
        clock_uncertainty_us={r["rank"]: r["clock"]["uncertainty_us"] or 0.0 for r in ranks},
    )
    return {
        "folder": str(folder),
        "generated_at": utc_now(),
        "ranks": ranks,
        "straggler": straggler,
        "step_time_spread_ms": {
            "min": min(means),
            "median": statistics.median(means),
            "max": max(means),
            "max_minus_min": max(means) - min(means),
        },
        "communication_wait_ms": {str(r["rank"]): r["breakdown_ms"]["communication"] for r in ranks},
        "warnings": [f"rank {r['rank']}: {w}" for r in ranks for w in r["warnings"]],
    }


def _arrivals(results: list[TraceResult]) -> dict[tuple[int, int], float] | None:
    """When this rank reached each of the first rank's collectives, on the first rank's clock.

    Keyed by (window's first step, the first rank's collective index); None if no window's
    clock was paired.
    """
    if not any(result.alignment.paired for result in results):
        return None
    return {
        (result.trace_file.first_step, theirs): result.instances[mine].arrival + result.alignment.shift_us
        for result in results
        if result.alignment.paired
        for theirs, mine in result.alignment.matched.items()
    }


def _anchor_steps(reference: list[TraceResult]) -> dict[tuple[int, int], int]:
    """The step (on the first rank) in which each of the first rank's collectives began."""
    found = {}
    for result in reference:
        starts = [s.start_us for s in result.analysis.steps]
        for index, instance in enumerate(result.instances):
            at = bisect.bisect_right(starts, instance.arrival) - 1
            if at >= 0:
                found[(result.trace_file.first_step, index)] = result.analysis.steps[at].step
    return found


def _rank_summary(rank: int, results: list[TraceResult]) -> dict[str, Any]:
    analyses = [result.analysis for result in results]
    steps = [step for analysis in analyses for step in analysis.steps]
    parts = analyses[0].parts
    step_ms = [s.duration_us / 1e3 for s in steps]
    breakdown = {part: mean([s.parts_us[part] / 1e3 for s in steps]) for part in parts}
    gpu_steps = [s.gpu for s in steps if s.gpu is not None]
    gpu = None
    if gpu_steps:
        gpu = {
            "span_ms": mean([g.duration_us / 1e3 for g in gpu_steps]),
            "busy_ms": mean([g.busy_us / 1e3 for g in gpu_steps]),
            "idle_ms": breakdown["idle"],
            "communication_overlapped_ms": mean([g.communication_overlapped_us / 1e3 for g in gpu_steps]),
            "compute_by_phase_ms": {
                phase: mean([g.compute_by_phase_us[phase] / 1e3 for g in gpu_steps])
                for phase in gpu_steps[0].compute_by_phase_us
            },
        }
    compute = (
        breakdown["compute"] if gpu else breakdown["forward"] + breakdown["backward"] + breakdown["optimizer"]
    )
    clock = results[0].alignment
    return {
        "rank": rank,
        "host": analyses[0].host,
        "device": analyses[0].device,
        "trace_files": [result.trace_file.path.name for result in results],
        "steps": [s.step for s in steps],
        "step_ms": step_ms,
        "step_time_ms": {
            "mean": mean(step_ms),
            "min": min(step_ms, default=0.0),
            "max": max(step_ms, default=0.0),
        },
        "breakdown_ms": breakdown,
        "breakdown_steps_ms": {part: [s.parts_us[part] / 1e3 for s in steps] for part in parts},
        "accounted_ms": mean([s.accounted_us / 1e3 for s in steps]),
        "compute_ms": compute,
        "communication_total_ms": mean([s.collectives_us / 1e3 for s in steps]),
        "gpu": gpu,
        "clock": {
            "method": clock.method,
            "shift_us": clock.shift_us,
            "pairs": clock.pairs,
            "residual_us": clock.residual_us,
            "max_residual_us": clock.max_residual_us,
            "paired_share": clock.paired_share,
            "uncertainty_us": clock.uncertainty_us,
            "note": clock.note,
        },
        "warnings": list(dict.fromkeys(w for analysis in analyses for w in analysis.warnings)),
    }


def mean(values: Sequence[float]) -> float:
    """The mean, 0 for no values (a rank without steps)."""
    return statistics.fmean(values) if values else 0.0


def render_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Trace report: {report['folder']}", ""]
    if report["straggler"] is not None:
        lines += [f"**{report['straggler']['text'][0].upper()}{report['straggler']['text'][1:]}.**", ""]
    lines += [f"Warning: {w}." for w in report["warnings"]] + ([""] if report["warnings"] else [])
    lines += [
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
        "## Where a step's time goes (mean ms per step)",
        "",
    ]
    for device in ("gpu", "cpu"):
        ranks = [r for r in report["ranks"] if r["device"] == device]
        if ranks:
            lines += _breakdown_table(device, ranks)
    lines += [
        "## Clock alignment",
        "",
        "| rank | method | shift (µs) | pairs | residual (µs) | ± (µs) | paired | note |",
        "|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["ranks"]:
        c = r["clock"]
        residual, uncertainty, share = (
            f"{value:{form}}" if value is not None else "-"
            for value, form in (
                (c["residual_us"], ".1f"),
                (c["uncertainty_us"], ".1f"),
                (c["paired_share"], ".0%"),
            )
        )
        lines.append(
            f"| {r['rank']} | {c['method']} | {c['shift_us']:.1f} | {c['pairs']} | {residual} | "
            f"{uncertainty} | {share} | {c['note']} |"
        )
    lines.append("")
    if report.get("merged_trace"):
        merge = report["merge"]
        depth, kept = merge["max_cpu_depth"], "everything"
        if depth is not None:
            what = (
                f"CPU operators nested up to {depth} deep"
                if depth >= 0
                else "top-level CPU operators, steps and collectives, no other GPU kernel"
            )
            over = merge["bytes"] > merge["budget_bytes"]
            kept = (
                f"{what}: {merge['events_dropped']} events left out to stay within "
                f"{merge['budget_bytes'] / 1e6:.0f} MB (--full-merge keeps them)"
                + ("; still over it, as what is always kept is more than that" if over else "")
            )
        lines += [
            f"Merged timeline: `{report['merged_trace']}` (open in Perfetto), every rank on rank "
            f"{report['ranks'][0]['rank']}'s clock; {merge['bytes'] / 1e6:.1f} MB of JSON holding {kept}.",
            "",
        ]
    return "\n".join(lines)


def _breakdown_table(device: str, ranks: list[dict[str, Any]]) -> list[str]:
    parts = list(ranks[0]["breakdown_ms"])
    if device == "gpu":
        header = parts + ["span", "comm. overlapped", "all collectives"]
        lines = ["GPU: each step's GPU span = compute + communication (exposed) + memory + other + idle.", ""]
    else:
        header = parts + ["step", "compute", "all collectives"]
        lines = ["CPU: each step = forward + backward + optimizer + communication (waiting) + other.", ""]
    lines += ["| rank | " + " | ".join(header) + " |", "|---:|" + "---:|" * len(header)]
    for r in ranks:
        cells = [r["breakdown_ms"][p] for p in parts]
        if device == "gpu":
            cells += [
                r["gpu"]["span_ms"],
                r["gpu"]["communication_overlapped_ms"],
                r["communication_total_ms"],
            ]
        else:
            cells += [r["accounted_ms"], r["compute_ms"], r["communication_total_ms"]]
        lines.append(f"| {r['rank']} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    return [*lines, ""]


def plot_report(report: dict[str, Any], path: Path) -> None:
    """A stacked bar of each rank's mean step breakdown, and each rank's step times."""
    # matplotlib's Figure without pyplot: no global state, and less to import
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    ranks = report["ranks"]
    labels = [str(r["rank"]) for r in ranks]
    fig = Figure(figsize=(12, 4.5))
    bars, lines = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.12, top=0.86, wspace=0.2)
    bottom = [0.0] * len(ranks)
    for part in dict.fromkeys(p for r in ranks for p in r["breakdown_ms"]):
        values = [r["breakdown_ms"].get(part, 0.0) for r in ranks]
        bars.bar(labels, values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    bars.set(title="Mean step breakdown per rank", xlabel="rank", ylabel="ms per step")
    bars.legend(fontsize="small", loc="lower right")
    for r in ranks:
        lines.plot(r["steps"], r["step_ms"], marker="o", label=f"rank {r['rank']}")
    lines.set(title="Step time per rank", xlabel="step (ProfilerStep#)", ylabel="ms")
    lines.xaxis.set_major_locator(MaxNLocator(integer=True))
    if len(ranks) <= 16:
        lines.legend(fontsize="small", loc="lower right")
    if report["straggler"] is not None:
        verdict = report["straggler"]
        fig.suptitle(
            f"straggler: rank {verdict['rank']}" if verdict["rank"] is not None else verdict["text"][:100]
        )
    fig.savefig(path, dpi=100)


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m profiling.report", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "folder", type=Path, help="a job folder (or a restart<k>/ folder) of rank<r>_iter<a>_<b>.json traces"
    )
    parser.add_argument("--out", type=Path, help="where to write (default: FOLDER/meta)")
    parser.add_argument("--no-merged-trace", action="store_true", help="skip merged_trace.json.gz")
    parser.add_argument(
        "--merge-budget-mb",
        type=float,
        default=DEFAULT_BUDGET_BYTES / 1e6,
        metavar="MB",
        help="keep the merged trace within MB of JSON by leaving out the deepest CPU operators "
        "(default: %(default)g)",
    )
    parser.add_argument("--full-merge", action="store_true", help="keep every event in the merged trace")
    parser.add_argument("--no-plot", action="store_true", help="skip report.png")
    parser.add_argument(
        "--jobs", type=int, help="processes reading traces (default: CPUs available, at most 8)"
    )
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        return parser.fail(f"--jobs {args.jobs} must be at least 1")
    if not args.merge_budget_mb > 0:
        return parser.fail(
            f"--merge-budget-mb {args.merge_budget_mb:g} must be positive. HINT: --full-merge keeps all"
        )
    try:
        report = build_report(
            args.folder,
            args.out,
            merged=not args.no_merged_trace,
            plot=not args.no_plot,
            jobs=args.jobs,
            merge_budget_bytes=None if args.full_merge else args.merge_budget_mb * 1e6,
        )
    except (ReportError, TraceFormatError, OSError) as error:
        return parser.fail(str(error))
    print(render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
