"""Compare two jobs: ``python -m jobs.commands.compare <job A> <job B>`` (or ``slurm-profile compare``).

Reads each job's ``meta/report.json`` (making the report first where there is none) and, for
every rank present in both, sets step time and each part of the step breakdown side by side:
A, B, the difference, and whether it is *beyond the noise*: larger than twice the
step-to-step standard deviation of either job (and than 1 % of A), so that a difference a
rerun of the same job could show is not called a change. Jobs of different world sizes or
workloads are compared on what they share, and the differences are listed.

Writes ``compare.json``, ``compare.md`` and ``compare.png`` to ``--out`` (default:
``<job B>/meta/compare-<job A>/``), and prints the verdict line, e.g. "B is 12 % slower per
step: backward +9.1 ms on every rank; communication, optimizer unchanged".
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

import msgspec

from profiling.analysis.across_ranks import mean
from profiling.folder.layout import JobFolder, ReportFiles
from profiling.folder.manifest import manifest_or_none
from profiling.folder.traces import find_traces
from profiling.report.build import ReportError, build_report
from profiling.schema import model
from profiling.schema.comparison import Comparison, RankComparison, SideBySide
from profiling.schema.model import RankReport, Report
from slurm.common.clock import utc_now
from slurm.common.files import LARGE_FILE_BYTES, read_regular


class CompareError(ValueError):
    """Two folders that cannot be compared; the message names the argument and the fix."""


def load_report(folder: Path, argument: str) -> Report:
    """The job's report, typed; made first if the folder has traces but no report, or one an
    earlier version wrote in another shape."""
    if not folder.is_dir():
        raise CompareError(
            f"{argument} {folder} is not a folder. HINT: pass a job folder, <traces root>/<job id>"
        )
    path = ReportFiles.of(folder).json
    try:
        return model.checked(read_regular(path, LARGE_FILE_BYTES))
    except (OSError, msgspec.DecodeError):
        pass  # none, or of another shape: made again from the traces
    if not find_traces(folder):
        raise CompareError(
            f"{argument} {folder} holds no trace (*.json, *.json.gz, here or one folder down) and no "
            "report. HINT: pass a job folder, <traces root>/<job id>, or a folder of traces"
        )
    try:
        return build_report(folder)
    except ReportError as error:
        raise CompareError(f"{argument} {folder}: {error}") from None


def compare(folder_a: Path, folder_b: Path) -> Comparison:
    """``compare.json``'s content."""
    if folder_a.resolve() == folder_b.resolve():
        raise CompareError(
            f"job A and job B are the same folder ({folder_a}). HINT: compare two different jobs"
        )
    report_a, report_b = load_report(folder_a, "job A"), load_report(folder_b, "job B")
    ranks_a = {r.rank: r for r in report_a.ranks}
    ranks_b = {r.rank: r for r in report_b.ranks}
    common = sorted(set(ranks_a) & set(ranks_b))
    if not common:
        raise CompareError(
            f"job A ranks {sorted(ranks_a)} and job B ranks {sorted(ranks_b)} share no rank. "
            "HINT: profile the same ranks in both (--profile-ranks)"
        )
    same_device = all(ranks_a[r].device == ranks_b[r].device for r in common)
    rows = [_rank_row(ranks_a[r], ranks_b[r], same_device) for r in common]
    parts = list(rows[0].parts) if same_device else []
    return _summary(
        Comparison(
            a=str(folder_a),
            b=str(folder_b),
            generated_at=utc_now(),
            ranks=rows,
            ranks_only_in_a=sorted(set(ranks_a) - set(ranks_b)),
            ranks_only_in_b=sorted(set(ranks_b) - set(ranks_a)),
            differences=_job_differences(folder_a, folder_b, report_a, report_b, same_device),
        ),
        parts,
    )


def _side_by_side(a: Sequence[float], b: Sequence[float]) -> SideBySide:
    mean_a, mean_b = mean(a), mean(b)
    noise = max(_stdev(a), _stdev(b))
    diff = mean_b - mean_a
    return SideBySide(
        a_ms=mean_a,
        b_ms=mean_b,
        diff_ms=diff,
        diff_pct=100 * diff / mean_a if mean_a else None,
        noise_ms=noise,
        beyond_noise=abs(diff) > max(2 * noise, 0.01 * abs(mean_a), 1e-3),
    )


def _rank_row(a: RankReport, b: RankReport, same_device: bool) -> RankComparison:
    parts = (
        {
            part: _side_by_side(a.breakdown_steps_ms[part], b.breakdown_steps_ms[part])
            for part in a.breakdown_ms
        }
        if same_device
        else {}
    )
    return RankComparison(rank=a.rank, step=_side_by_side(a.step_ms, b.step_ms), parts=parts)


def _summary(compared: Comparison, parts: list[str]) -> Comparison:
    """``compared`` with what its rows say as a whole: the step, the parts that changed, the verdict."""
    rows = compared.ranks
    step_a = mean([r.step.a_ms for r in rows])
    step_b = mean([r.step.b_ms for r in rows])
    pct = 100 * (step_b - step_a) / step_a if step_a else 0.0
    changed_ranks = sum(r.step.beyond_noise for r in rows)
    changed, unchanged = [], []
    for part in parts:
        moved = [r for r in rows if r.parts[part].beyond_noise]
        if not moved:
            unchanged.append(part)
            continue
        diff = mean([r.parts[part].diff_ms for r in moved])
        where = "on every rank" if len(moved) == len(rows) else f"on {len(moved)} of {len(rows)} ranks"
        changed.append((abs(diff), f"{part} {_signed_duration(diff)} {where}"))
    if changed_ranks * 2 > len(rows):
        headline = f"B is {abs(pct):.0f} % {'slower' if pct > 0 else 'faster'} per step"
    else:
        headline = f"B's step time is within noise of A's ({pct:+.1f} %)"
    details = [text for _, text in sorted(changed, reverse=True)]
    if unchanged:
        details.append(f"{', '.join(unchanged)} unchanged")
    return msgspec.structs.replace(
        compared,
        step_a_ms=step_a,
        step_b_ms=step_b,
        step_diff_pct=pct,
        ranks_with_changed_step=changed_ranks,
        parts_changed=[text for _, text in sorted(changed, reverse=True)],
        parts_unchanged=unchanged,
        verdict=headline + (": " + "; ".join(details) if details else ""),
    )


def _job_differences(
    folder_a: Path, folder_b: Path, report_a: Report, report_b: Report, same_device: bool
) -> list[str]:
    """What differs between the jobs besides their timings: world size, device, workload, schedule."""
    found = []
    if len(report_a.ranks) != len(report_b.ranks):
        found.append(f"traced ranks: {len(report_a.ranks)} in A, {len(report_b.ranks)} in B")
    if not same_device:
        found.append("devices differ (GPU against CPU): only step times are compared")
    manifest_a, manifest_b = (
        manifest_or_none(JobFolder.at(folder_a)),
        manifest_or_none(JobFolder.at(folder_b)),
    )
    if manifest_a and manifest_b:
        for key in ("world_size", "nodes", "backend"):
            if getattr(manifest_a, key) != getattr(manifest_b, key):
                found.append(f"{key}: {getattr(manifest_a, key)} in A, {getattr(manifest_b, key)} in B")
        for section in ("workload", "schedule"):
            a, b = (msgspec.to_builtins(getattr(m, section)) or {} for m in (manifest_a, manifest_b))
            for key in sorted(set(a) | set(b)):
                if a.get(key) != b.get(key):
                    found.append(f"{section} {key}: {a.get(key)} in A, {b.get(key)} in B")
    return found


def comparison_markdown(result: Comparison) -> str:
    lines = [f"# {result.verdict}", "", f"A: `{result.a}`  ", f"B: `{result.b}`", ""]
    if result.differences:
        lines += ["The jobs differ in:", "", *[f"- {d}" for d in result.differences], ""]
    if result.ranks_only_in_a or result.ranks_only_in_b:
        lines += [
            f"Ranks only in A: {result.ranks_only_in_a or '-'}; only in B: {result.ranks_only_in_b or '-'}.",
            "",
        ]
    lines += [
        "Mean ms per step; `*` marks a difference beyond the noise (twice the larger step-to-step "
        "standard deviation of the two jobs).",
        "",
    ]
    columns = ["step", *result.ranks[0].parts]
    lines += ["| rank | " + " | ".join(f"{c} A | B | diff" for c in columns) + " |"]
    lines += ["|---:|" + "---:|---:|---:|" * len(columns)]
    for row in result.ranks:
        cells = []
        for column in columns:
            cell = row.step if column == "step" else row.parts[column]
            mark = " *" if cell.beyond_noise else ""
            cells.append(f"{cell.a_ms:.2f} | {cell.b_ms:.2f} | {cell.diff_ms:+.2f}{mark}")
        lines.append(f"| {row.rank} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, ""])


def plot_compare(result: Comparison, path: Path) -> None:
    """Mean part times of A and B over the common ranks, and each rank's step time in both."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.5))
    parts_axis, steps_axis = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.15, top=0.86, wspace=0.2)
    columns = ["step", *result.ranks[0].parts]
    for offset, side in ((-0.2, "a_ms"), (0.2, "b_ms")):
        values = [
            mean([getattr(r.step if c == "step" else r.parts[c], side) for r in result.ranks])
            for c in columns
        ]
        parts_axis.bar([i + offset for i in range(len(columns))], values, width=0.4, label=side[0].upper())
    parts_axis.set_xticks(range(len(columns)), columns, rotation=20)
    parts_axis.set(title="Mean over common ranks", ylabel="ms per step")
    parts_axis.legend(fontsize="small")
    ranks = [r.rank for r in result.ranks]
    steps_axis.plot(ranks, [r.step.a_ms for r in result.ranks], marker="o", label="A")
    steps_axis.plot(ranks, [r.step.b_ms for r in result.ranks], marker="o", label="B")
    steps_axis.set(title="Step time per rank", xlabel="rank", ylabel="ms")
    steps_axis.legend(fontsize="small")
    fig.suptitle(result.verdict[:110])
    fig.savefig(path, dpi=100)


def _signed_duration(ms: float) -> str:
    """``+9.1 ms``, or ``+9 µs`` below a millisecond."""
    return f"{ms:+.1f} ms" if abs(ms) >= 1 else f"{ms * 1e3:+.0f} µs"


def _stdev(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0
