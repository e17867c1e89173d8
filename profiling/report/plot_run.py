"""``run.png``: the whole run's map, every rank's time for every step against the other ranks'
median, slow segments and captures outlined, memory below (drawn in the report's picture
process, :mod:`profiling.report.pictures`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the plot's process imports no more than it draws with
    from profiling.analysis.run import RunPicture, RunPictureMemory


def plot_run(drawn: RunPicture, path: Path) -> None:
    """``run.png``: every rank's time for every step, against the other ranks' median (a slow
    rank is a stripe, a slow node a band, a step where everyone is slow a bump in the line
    above); each slow segment outlined. ``drawn``: :attr:`profiling.analysis.run.run_view.RunView.picture`."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    ratio, ranks, nodes = drawn.ratio, drawn.rows, drawn.nodes
    edges = np.concatenate([drawn.first, [drawn.last[-1] + 1]]) - 0.5
    memory = drawn.memory
    height = 3.0 + min(len(ranks), 64) * 0.09
    fig = Figure(figsize=(13, height * (1.8 if memory else 1.0)))
    ratios = [1, 4, 4] if memory else [1, 4]
    axes = fig.subplots(len(ratios), 1, sharex=True, gridspec_kw={"height_ratios": ratios, "hspace": 0.08})
    pace, heat = axes[0], axes[1]
    pace.plot((edges[:-1] + edges[1:]) / 2, drawn.step_median_ms, color="0.3", linewidth=1)
    pace.set(ylabel="median ms")
    pace.set_title(drawn.title, fontsize="medium", loc="left")
    spread = float(np.nanpercentile(np.abs(ratio - 1.0), 99.5)) if np.isfinite(ratio).any() else 0.1
    spread = min(max(spread, 0.1), 1.0)
    image = heat.pcolormesh(
        edges, np.arange(len(ranks) + 1) - 0.5, ratio, cmap="RdBu_r", vmin=1 - spread, vmax=1 + spread
    )
    heat.invert_yaxis()
    pad = 0.05 if drawn.bands else 0.01  # room for the stages' names
    fig.colorbar(image, ax=[pace, heat], label="× the other ranks' median", fraction=0.03, pad=pad)
    by_node = drawn.by_node
    for row in range(1, len(ranks)):
        if not by_node and not drawn.bands and nodes[row] != nodes[row - 1]:  # a band per node
            heat.axhline(row - 0.5, color="0.2", linewidth=0.6)
    _rank_ticks(heat, ranks, nodes)
    _bands(heat, drawn)
    row_of = _rows(drawn)
    for segment in drawn.segments:
        row = row_of[segment.node if by_node else segment.rank]
        heat.add_patch(
            Rectangle(
                (segment.first - 0.5, row - 0.5),
                segment.last - segment.first + 1,
                1,
                fill=False,
                edgecolor="black",
                linewidth=1.5,
            )
        )
    _capture_marks(pace, heat, drawn)
    heat.set(xlabel="" if memory else "step", ylabel="node (its slowest rank)" if by_node else "rank (node)")
    if memory:
        _memory_map(fig, axes[2], memory, drawn)
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no step 2.5
    fig.savefig(path, dpi=100, bbox_inches="tight")


def _memory_map(fig: Any, axes: Any, memory: RunPictureMemory, drawn: RunPicture) -> None:
    """Each row's memory over the run, under its time; a rank whose memory grew to the end is
    named at its row."""
    edges = np.concatenate([memory.first, [memory.last[-1] + 1]]) - 0.5
    image = axes.pcolormesh(edges, np.arange(len(drawn.rows) + 1) - 0.5, memory.mib, cmap="viridis")
    axes.invert_yaxis()
    fig.colorbar(image, ax=axes, label=memory.label, fraction=0.03, pad=0.05 if drawn.bands else 0.01)
    _rank_ticks(axes, drawn.rows, drawn.nodes)
    _bands(axes, drawn)
    row_of = _rows(drawn)
    for growth in memory.growing[:8]:
        row = row_of[growth.node if drawn.by_node else growth.rank]
        axes.annotate(growth.line, (growth.since_step, row), color="white", fontsize="small", va="center")
    axes.set(xlabel="step", ylabel="memory: " + ("node" if drawn.by_node else "rank"))


def _capture_marks(pace: Any, heat: Any, drawn: RunPicture) -> None:
    """Each capture taken while the job ran: its ranks' rows outlined in green (dashed), named
    above the map."""
    from matplotlib.patches import Rectangle

    for mark in drawn.captures:
        pace.axvspan(mark.first - 0.5, mark.last + 0.5, color="tab:green", alpha=0.25, linewidth=0)
        pace.annotate(mark.label, (mark.first - 0.5, 0.95), xycoords=("data", "axes fraction"), va="top",
                      fontsize="small", color="tab:green")  # fmt: skip
        for row in mark.rows:
            heat.add_patch(
                Rectangle((mark.first - 0.5, row - 0.5), mark.last - mark.first + 1, 1, fill=False,
                          edgecolor="tab:green", linewidth=1.5, linestyle="--")
            )  # fmt: skip


def _rows(drawn: RunPicture) -> dict[Any, int]:
    """Each row's index by what it is: a rank, or a node where a row is a node (rows by stage
    are not in rank order)."""
    return {(str(label) if drawn.by_node else int(label)): row for row, label in enumerate(drawn.rows)}


def _bands(axes: Any, drawn: RunPicture) -> None:
    """The stages as bands, named on the right, and their replicas (where few enough to tell)."""
    stages = [band for band in drawn.bands if band.is_stage]
    replicas = [band for band in drawn.bands if not band.is_stage]
    for band in replicas if len(replicas) <= 64 else []:
        axes.axhline(band.first - 0.5, color="0.45", linewidth=0.6, linestyle="--")
    for band in stages[1:]:
        axes.axhline(band.first - 0.5, color="black", linewidth=1.8)
    if stages:
        named = axes.secondary_yaxis("right")
        named.set_yticks([(b.first + b.end - 1) / 2 for b in stages], [b.label for b in stages])
        named.tick_params(length=0)


def _rank_ticks(axes: Any, ranks: np.ndarray, nodes: list[str]) -> None:
    if len(ranks) <= 32:
        axes.set_yticks(
            range(len(ranks)), [f"{rank} ({node})" for rank, node in zip(ranks, nodes, strict=True)]
        )
    else:
        ticks = np.linspace(0, len(ranks) - 1, 12).round().astype(int)
        axes.set_yticks(ticks, [str(ranks[row]) for row in ticks])
