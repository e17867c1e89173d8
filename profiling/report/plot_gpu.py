"""``report.png``'s second row, on GPU traces: each rank's GPU time by kernel family, and each
collective's bus bandwidth (the figures of :mod:`profiling.analysis.across_ranks.gpu_sections`).

Kernel families are stacked bars per rank up to ``BARS_UP_TO`` ranks, a heat map rank × family
against the median rank above. Collectives are one bar each (kind and message size, the most
time first), at the ranks' median p50 with the slowest rank's as a mark, so the panel reads
the same at 2 ranks and at 4096; the link's rate (``--link-gbps``) is a line. Traces without
message sizes get the collectives' p50 durations instead, and the panel says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profiling.analysis.across_ranks import LINK_SHARE
from profiling.analysis.per_trace import FAMILIES
from profiling.schema import model
from profiling.schema.model_ranks import RankReport

SHOWN_COLLECTIVES = 8


def has_panels(report: model.Report) -> bool:
    return has_kernels(report) or bool(report.collectives_across)


def has_kernels(report: model.Report) -> bool:
    """GPU kernels in some rank's traces: a CPU job's collectives have none to draw."""
    return any(r.kernels for r in report.ranks)


def family_values(ranks: list[RankReport]) -> np.ndarray:
    """rank × family: GPU time per step (µs)."""
    return np.array(
        [
            [
                (r.kernels.by_family_us.get(f, 0.0) if r.kernels else 0.0) / max(len(r.steps), 1)
                for f in FAMILIES
            ]
            for r in ranks
        ]
    )


def kernel_bars(axes: Any, ranks: list[RankReport]) -> None:
    labels = [str(r.rank) for r in ranks]
    values = family_values(ranks) / 1e3
    bottom = np.zeros(len(ranks))
    for column, family in enumerate(FAMILIES):
        axes.bar(labels, values[:, column], bottom=bottom, label=family)
        bottom += values[:, column]
    axes.set(title="GPU time per step by kernel family", xlabel="rank", ylabel="ms per step")
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def bandwidth(axes: Any, report: model.Report) -> None:
    rows = report.collectives_across[:SHOWN_COLLECTIVES]
    sized = [row for row in rows if row.busbw_gbps is not None]
    if not rows:
        axes.set_axis_off()
        axes.set_title("Collectives: none in these traces")
        return
    if sized:
        labels = [f"{row.kind}\n{_size(row.bytes or 0)}" for row in sized]
        bars = axes.bar(
            labels, [row.busbw_gbps for row in sized], color="tab:blue", label="median rank's p50"
        )
        axes.bar_label(bars, fmt="%.3g", fontsize="small", padding=2)
        axes.scatter(
            labels, [row.slowest_busbw_gbps or 0.0 for row in sized], color="firebrick", zorder=3,
            label="slowest rank's",
        )  # fmt: skip
        link = report.link_gbps
        if link:
            axes.axhline(link, color="0.3", linestyle="--", linewidth=1, label=f"link {link:g} GB/s")
            axes.axhline(
                LINK_SHARE * link, color="0.6", linestyle=":", linewidth=1, label=f"{LINK_SHARE:.0%} of it"
            )
        axes.set(title="Collectives: bus bandwidth (nccl-tests)", ylabel="GB/s")
        axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    else:
        labels = [row.kind for row in rows]
        axes.bar(labels, [row.p50_us / 1e3 for row in rows], color="tab:gray")
        axes.set(title="Collectives: p50 duration (no message sizes in the traces)", ylabel="ms")
    axes.tick_params(axis="x", labelsize="small", labelrotation=30)


def _size(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} B"
