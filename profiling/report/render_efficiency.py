"""report.md's section on how each rank uses its hardware: peak memory, FLOPs, TFLOP/s, MFU."""

from __future__ import annotations

import statistics

from profiling.report.table_ranks import cell
from profiling.schema.model import Report
from profiling.schema.model_ranks import RankReport


def efficiency_lines(report: Report, shown: list[RankReport]) -> list[str]:
    if not report.ranks:
        return []
    return ["## Memory and efficiency", "", *_memory_lines(report.ranks, shown), *_flops_lines(shown)]


def _memory_lines(ranks: list[RankReport], shown: list[RankReport]) -> list[str]:
    recorded = [r for r in shown if r.memory is not None]
    if not recorded:
        return [
            "No memory recorded: the traces hold no [memory] instant (recorded with --no-profile-memory, "
            "or without profile_memory).",
            "",
        ]
    lines = [
        "| rank | device | peak allocated | peak reserved | at step | op at the peak | of the device |",
        "|---:|---|---:|---:|---:|---|---:|",
    ]
    for r in recorded:
        m = r.memory
        assert m is not None
        reserved = _size(m.peak_reserved_bytes) if m.peak_reserved_bytes is not None else "-"
        share = f"{m.peak_allocated_bytes / m.total_bytes:.0%}" if m.total_bytes else "-"
        lines.append(
            f"| {r.rank} | {cell(m.device)} | {_size(m.peak_allocated_bytes)} | {reserved} | {m.peak_step} | "
            f"{m.peak_op or '-'} | {share} |"
        )
    peaks = {r.rank: r.memory.peak_allocated_bytes for r in ranks if r.memory is not None}
    most = max(peaks, key=lambda rank: (peaks[rank], -rank))
    lines += [
        "",
        f"Peak allocated across {len(peaks)} rank(s): {_size(min(peaks.values()))} to "
        f"{_size(peaks[most])} (median {_size(statistics.median(peaks.values()))}); the most: rank {most}.",
        "",
    ]
    return lines


def _size(count: float) -> str:
    return f"{count / 2**30:.2f} GiB" if count >= 2**30 else f"{count / 2**20:.1f} MiB"


def _flops_lines(shown: list[RankReport]) -> list[str]:
    counted = [r for r in shown if r.flops is not None]
    lines: list[str] = []
    if not counted:
        return [
            *lines,
            "No FLOPs counted: the traces hold no matmul, convolution or attention op with its shapes "
            "(recorded without record_shapes, or compiled kernels only). See docs/report.md.",
            "",
        ]
    lines += [
        "| rank | GFLOP per step | TFLOP/s | MFU | dtype | peak TFLOP/s | device |",
        "|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in counted:
        f = r.flops
        assert f is not None
        mfu = f"{f.mfu:.1%}" if f.mfu is not None else "-"
        peak = f"{f.peak_tflops:g}" if f.peak_tflops is not None else "-"
        lines.append(
            f"| {r.rank} | {f.per_step / 1e9:.2f} | {f.tflops_per_s:.3f} | {mfu} | {cell(f.dtype)} | "
            f"{peak} | {cell(f.device_name or r.device)} |"
        )
    lines.append("")
    first = counted[0].flops
    assert first is not None
    if first.mfu is None and first.mfu_missing:
        lines += [f"No MFU: {first.mfu_missing}.", ""]
    lines += _furthest(counted)
    total = sum(op.gflops_per_step for op in first.ops) or 1.0
    ops = ", ".join(f"{op.name} {op.gflops_per_step / total:.0%}" for op in first.ops[:5])
    lines += [f"Rank {counted[0].rank}'s FLOPs by op: {ops} (report.json: ranks[].flops.ops).", ""]
    return lines


_ALIKE = 0.05  # ranks this close to the median rank's rate are alike


def _furthest(ranks: list[RankReport]) -> list[str]:
    """The rank whose TFLOP/s is furthest from the median rank's."""
    rates = {r.rank: r.flops.tflops_per_s for r in ranks if r.flops is not None}
    if len(rates) < 2:
        return []
    median = statistics.median(rates.values())
    if median <= 0:
        return []
    rank = max(rates, key=lambda k: (abs(rates[k] - median), -k))
    if abs(rates[rank] / median - 1) < _ALIKE:
        return [f"Every rank within {_ALIKE:.0%} of the median rank's {median:.3f} TFLOP/s.", ""]
    return [
        f"Furthest from the others: rank {rank}, {rates[rank]:.3f} TFLOP/s against the median "
        f"rank's {median:.3f} ({rates[rank] / median - 1:+.0%}).",
        "",
    ]
