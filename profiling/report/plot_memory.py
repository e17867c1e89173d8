"""report.png's row on how each rank uses its hardware: its peak memory (with the device's
memory as a line, where the trace says it) and its TFLOP/s; drawn where memory was recorded
(a row costs the report a tenth of a second to draw)."""

from __future__ import annotations

from typing import Any

import numpy as np

from profiling.schema import model

_LABELLED_UP_TO = 32  # ranks named under their bars


def has_row(report: model.Report) -> bool:
    return any(r.memory is not None for r in report.ranks)


def memory_peaks(axes: Any, report: model.Report) -> None:
    found = [(r.rank, r.memory) for r in report.ranks if r.memory is not None]
    if not found:
        _none(axes, "no memory recorded (--no-profile-memory?)")
        return
    top = max(m.peak_allocated_bytes for _, m in found)
    unit, scale = ("GiB", 2**30) if top >= 2**30 else ("MiB", 2**20)
    positions = _ranks_axis(axes, [rank for rank, _ in found])
    axes.bar(positions, [m.peak_allocated_bytes / scale for _, m in found], label="peak allocated")
    reserved = [(m.peak_reserved_bytes or 0) / scale for _, m in found]
    if any(reserved):
        axes.plot(positions, reserved, "k_", markersize=14, label="peak reserved")
    total = next((m.total_bytes for _, m in found if m.total_bytes), None)
    if total:
        axes.axhline(total / scale, color="tab:red", linestyle="--", label="device memory")
    axes.set(title=f"Peak memory per rank ({found[0][1].device})", xlabel="rank", ylabel=unit)
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def flop_rates(axes: Any, report: model.Report) -> None:
    found = [(r.rank, r.flops) for r in report.ranks if r.flops is not None]
    if not found:
        _none(axes, "no FLOPs counted (no shapes in the traces)")
        return
    positions = _ranks_axis(axes, [rank for rank, _ in found])
    axes.bar(positions, [f.tflops_per_s for _, f in found], color="tab:green")
    mfu = [f.mfu for _, f in found if f.mfu is not None]
    peak = found[0][1].peak_tflops
    title = "TFLOP/s per rank" + (f" (median MFU {np.median(mfu):.1%} of {peak:g})" if mfu and peak else "")
    axes.set(title=title, xlabel="rank", ylabel="TFLOP/s")


def _ranks_axis(axes: Any, ranks: list[int]) -> np.ndarray:
    positions = np.arange(len(ranks))
    axes.set_xticks(
        positions, [str(r) for r in ranks] if len(ranks) <= _LABELLED_UP_TO else [""] * len(ranks)
    )
    return positions


def _none(axes: Any, text: str) -> None:
    axes.set_axis_off()
    axes.text(0.5, 0.5, text, ha="center", va="center")
