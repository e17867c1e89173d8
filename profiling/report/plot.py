"""``report.png``: each rank's step breakdown and step times, readable at any number of ranks.

Up to :data:`BARS_UP_TO` ranks: a stacked bar per rank and a line per rank. Above, bars and
lines would be a smear, so the same figures become heat maps, rank × part of the breakdown and
rank × step, each cell against the median rank (a slow rank is a stripe, a slow step a column),
so that outliers stand out whatever the count. The verdict is the title, wrapped, never cut;
legends sit outside the data.

The picture is two figures stacked, each drawn to pixels: the ranks' rows (they need no critical
path, so a cold report draws them while it finds the path) and the path's rows.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from profiling.analysis.per_trace import FAMILIES
from profiling.report import plot_gpu, plot_memory, plot_path, plot_replay
from profiling.schema import model
from profiling.schema.model_ranks import RankReport

BARS_UP_TO = 32
_DPI = 100
_LEFT = 0.08  # of the width: room for the path's "step N" labels, the same for every row
_BOTTOM_IN = 0.88  # inches under a figure's last row: its ticks and axis label
_TOP_IN = 0.45  # inches over the path's first row: its titles
_TITLE_WIDTH = 130
_OUTLIERS = 3  # rows named in a heat map's margin, the furthest from the median first
_OUTLIER_AT = 0.1  # ... if 10 % or more away from it


def plot_report(report: model.Report, path: Path, ranks_drawn: np.ndarray | None = None) -> list[Any]:
    """Draw report.png: the ranks' rows above the critical path's, two figures stacked. The
    ranks' rows need no path: ``ranks_drawn`` are their pixels, drawn by :func:`draw_ranks`
    while the path was found (else they are drawn here). Returns the Figures drawn here, top
    first (what the tests look at)."""
    figures = [] if ranks_drawn is not None else [ranks_figure(report)]
    below = path_figure(report)
    figures += [below] if below is not None else []
    drawn = [] if ranks_drawn is None else [ranks_drawn]
    _write_png([*drawn, *(_pixels(fig) for fig in figures)], path)
    return figures


def draw_ranks(report: model.Report) -> np.ndarray:
    """report.png's rows of ranks, as pixels (its critical path is not needed)."""
    return _pixels(ranks_figure(report))


def ranks_figure(report: model.Report) -> Any:
    """Each rank's step breakdown and step times; the GPU's kernels and collectives; memory
    and FLOPs: a row each, under the verdict."""
    ranks = report.ranks
    gpu = plot_gpu.has_panels(report)
    hardware = plot_memory.has_row(report)
    heights = [5.0] * (1 + gpu) + [3.0] * hardware  # inches a row
    title = _title(report.straggler)
    fig, grid = _figure(heights, 0.5)
    (left, right) = grid[0]
    if len(ranks) <= BARS_UP_TO:
        _bars(left, ranks)
        _lines(right, ranks)
    else:
        _parts_map(fig, left, ranks)
        _steps_map(fig, right, ranks)
    if gpu:
        kernels, collectives = grid[1]
        if not plot_gpu.has_kernels(report):  # collectives alone: no empty kernel panel beside them
            kernels, collectives = collectives, kernels
            fig.delaxes(kernels)
        elif len(ranks) <= BARS_UP_TO:
            plot_gpu.kernel_bars(kernels, ranks)
        else:
            _heat(fig, kernels, _relative(plot_gpu.family_values(ranks)), "× the median rank", ranks)
            kernels.set_xticks(range(len(FAMILIES)), FAMILIES, rotation=30, ha="right")
            kernels.set(title="GPU time per step by kernel family: rank × family", ylabel="rank")
        plot_gpu.bandwidth(collectives, report)
    if hardware:
        plot_memory.memory_peaks(grid[1 + gpu][0], report)
        plot_memory.flop_rates(grid[1 + gpu][1], report)
    fig.suptitle(title, fontsize="medium", y=0.99)
    inches = fig.get_figheight()
    top = (0.07 + 0.035 * title.count("\n")) * 5.5  # the title's lines
    # room for the legends beside the panels
    right = 0.9 if len(ranks) <= BARS_UP_TO or gpu else 0.95
    fig.subplots_adjust(left=_LEFT, right=right, bottom=_BOTTOM_IN / inches, top=1 - top / inches)
    return fig


def path_figure(report: model.Report) -> Any | None:
    """The critical path of the first steps and its time by rank and kind; the replay's heat
    map and gains: a row each (None without a path)."""
    critical = report.critical_path if report.critical_path and report.critical_path.steps else None
    if critical is None:
        return None
    replay = critical.replay
    heights = [3.0] + [3.5] * (replay is not None)
    fig, grid = _figure(heights, 0.0)
    plot_path.strips(grid[0][0], critical)
    plot_path.shares(grid[0][1], critical)
    if replay is not None:
        plot_replay.heat(fig, grid[1][0], replay)
        plot_replay.gains(grid[1][1], replay)
    inches = fig.get_figheight()
    fig.subplots_adjust(left=_LEFT, right=0.9, bottom=_BOTTOM_IN / inches, top=1 - _TOP_IN / inches)
    return fig


def _figure(heights: list[float], margin: float) -> tuple[Any, np.ndarray]:
    """A figure 13 in wide of rows ``heights`` in high, plus ``margin``, two panels a row."""
    # matplotlib's Figure without pyplot: no global state, and less to import
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, margin + sum(heights)), dpi=_DPI)
    grid = fig.subplots(
        len(heights), 2, gridspec_kw={"wspace": 0.4, "hspace": 0.45, "height_ratios": heights}, squeeze=False
    )
    return fig, grid


def _pixels(fig: Any) -> np.ndarray:
    """The figure drawn: (height, width, RGBA) bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())


def _write_png(parts: list[np.ndarray], path: Path) -> None:
    """The figures' pixels (RGBA, of one width), top first, as one opaque PNG (no alpha: they
    are drawn on white), compressed at zlib's level 3: of a dense report's 2000 x 1300, 0.08 s
    and 210 KB where matplotlib's RGBA at level 6 took 0.15 s and 217 KB, on the report's last
    stretch (the page waits for it). Each part is pasted from its own buffer: stacked first,
    then made RGB, it was three copies of the picture (30 MB at the process's peak)."""
    from PIL import Image

    picture = Image.new("RGB", (parts[0].shape[1], sum(part.shape[0] for part in parts)), "white")
    top = 0
    for part in parts:
        height, width = part.shape[:2]
        picture.paste(Image.frombuffer("RGBA", (width, height), part, "raw", "RGBA", 0, 1), (0, top))
        top += height
    picture.save(path, format="png", compress_level=3, dpi=(_DPI, _DPI))


def _title(verdict: model.Straggler | None) -> str:
    if verdict is None:
        return "one rank"
    return "\n".join(textwrap.wrap(verdict.text, _TITLE_WIDTH))


def _parts(ranks: list[RankReport]) -> list[str]:
    return list(dict.fromkeys(p for r in ranks for p in r.breakdown_ms))


def _bars(axes: Any, ranks: list[RankReport]) -> None:
    labels = [str(r.rank) for r in ranks]
    bottom = np.zeros(len(ranks))
    for part in _parts(ranks):
        values = np.array([r.breakdown_ms.get(part, 0.0) for r in ranks])
        axes.bar(labels, values, bottom=bottom, label=part)
        bottom += values
    axes.set(title="Mean step breakdown per rank", xlabel="rank", ylabel="ms per step")
    # beside the bars, not on them
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def whole_steps(axes: Any, steps: list[int]) -> None:
    """A step axis of whole steps: ticks on steps only, and one step alone centred between its
    neighbours (not 9.45 ... 10.50)."""
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    if steps and min(steps) == max(steps):
        axes.set_xlim(steps[0] - 1, steps[0] + 1)
        axes.set_xticks([steps[0]])


def _lines(axes: Any, ranks: list[RankReport]) -> None:
    for r in ranks:
        axes.plot(r.steps, r.step_ms, marker="o", label=f"rank {r.rank}")
    axes.set(title="Step time per rank", xlabel="step (ProfilerStep#)", ylabel="ms")
    whole_steps(axes, [s for r in ranks for s in r.steps])
    if len(ranks) <= 16:
        axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def _relative(values: np.ndarray) -> np.ndarray:
    """Each value against its column's median over ranks (1 = the median rank)."""
    median = np.median(values, axis=0, keepdims=True)
    return np.divide(values, median, out=np.ones_like(values), where=median > 0)


def _heat(fig: Any, axes: Any, values: np.ndarray, label: str, ranks: list[RankReport]) -> None:
    spread = max(0.05, float(np.nanmax(np.abs(values - 1.0))) if values.size else 0.05)
    image = axes.imshow(
        values, aspect="auto", interpolation="nearest", cmap="RdBu_r", vmin=1 - spread, vmax=1 + spread
    )
    fig.colorbar(image, ax=axes, label=label, fraction=0.05, pad=0.02)
    # a rank's row is a pixel or two at hundreds of ranks: the outliers are named beside it
    ticks = np.linspace(0, len(ranks) - 1, min(len(ranks), 12)).round().astype(int)
    axes.set_yticks(ticks, [str(ranks[row].rank) for row in ticks])
    deviation = np.nanmax(np.abs(values - 1.0), axis=1)
    for row in np.argsort(-deviation)[:_OUTLIERS]:
        if deviation[row] < _OUTLIER_AT:
            break
        worst = float(values[row][np.nanargmax(np.abs(values[row] - 1.0))])
        axes.annotate(
            f"rank {ranks[row].rank}: ×{worst:.2f}",
            xy=(-0.5, row),
            xytext=(4, 6),
            textcoords="offset points",
            fontsize="small",
            color="firebrick",
            fontweight="bold",
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "firebrick", "alpha": 0.9},
        )


def _parts_map(fig: Any, axes: Any, ranks: list[RankReport]) -> None:
    parts = _parts(ranks)
    values = np.array([[r.breakdown_ms.get(p, 0.0) for p in parts] for r in ranks])
    _heat(fig, axes, _relative(values), "× the median rank", ranks)
    axes.set_xticks(range(len(parts)), parts, rotation=30, ha="right")
    axes.set(title="Mean step breakdown: rank × part", ylabel="rank")


def _steps_map(fig: Any, axes: Any, ranks: list[RankReport]) -> None:
    steps = sorted({s for r in ranks for s in r.steps})
    column = {s: i for i, s in enumerate(steps)}
    values = np.full((len(ranks), len(steps)), np.nan)
    for row, r in enumerate(ranks):
        for step, ms in zip(r.steps, r.step_ms, strict=True):
            values[row, column[step]] = ms
    filled = np.where(np.isnan(values), np.nanmedian(values, axis=0, keepdims=True), values)
    _heat(fig, axes, _relative(filled), "× the step's median rank", ranks)
    every = max(1, -(-len(steps) // 8))  # at most 8 ticks, evenly spaced steps
    axes.set_xticks(range(0, len(steps), every), [str(steps[t]) for t in range(0, len(steps), every)])
    axes.set(title="Step time: rank × step", xlabel="step (ProfilerStep#)", ylabel="rank")
