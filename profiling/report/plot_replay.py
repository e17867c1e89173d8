"""``report.png``'s replay row: the heat map of what stragglers cost, S by stage x replica (a
heavy stage is a hot row, a slow rank one hot cell) or by rank x step, and the replayed gains
that add up, from the measured step down to what is left
(:mod:`profiling.analysis.across_ranks.critical_path.what_if`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from profiling.schema.model_replay import Replay

_TICKS = 12  # at most this many labels an axis


def heat(fig: Any, axes: Any, replay: Replay) -> None:
    """S of each cell, white at 1, red above."""
    found = replay.heat
    values = np.array([[np.nan if v is None else v for v in row] for row in found.values], dtype=float)
    spread = max(0.05, float(np.nanmax(np.abs(values - 1.0)))) if np.isfinite(values).any() else 0.05
    image = axes.imshow(
        values, aspect="auto", interpolation="nearest", cmap="RdBu_r", vmin=1 - spread, vmax=1 + spread
    )
    fig.colorbar(image, ax=axes, label="S (the rest ideal)", fraction=0.05, pad=0.02)
    names = {"pp": "stage", "dp": "replica", "rank": "rank", "step": "step (ProfilerStep#)"}
    for set_ticks, labels in ((axes.set_yticks, found.row_labels), (axes.set_xticks, found.column_labels)):
        shown = np.linspace(0, len(labels) - 1, min(len(labels), _TICKS)).round().astype(int)
        set_ticks(shown, [str(labels[i]) for i in shown])
    if values.size and len(found.column_labels) <= 8 and len(found.row_labels) <= 8:  # room to write S
        for (row, column), value in np.ndenumerate(values):
            if np.isfinite(value):
                axes.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize="small")
    by = f"{names[found.rows]} × {names[found.columns]}"
    axes.set(
        title=f"What stragglers cost: S = {replay.slowdown:.2f}, by {by}",
        ylabel=names[found.rows],
        xlabel=names[found.columns],
    )


def gains(axes: Any, replay: Replay) -> None:
    """The measured step, each replayed gain taken off in turn, and the ideal step."""
    labels = ["measured"]
    lows, highs = [0.0], [replay.measured_ms]
    step = replay.measured_ms
    for gain in replay.gains:
        labels.append(_what(gain.what, gain.rank, gain.coordinate))
        lows.append(step - gain.gain_ms)
        highs.append(step)
        step -= gain.gain_ms
    labels += ["what is left", "ideal"]
    lows += [0.0, 0.0]
    highs += [step, replay.ideal_ms]
    rows = np.arange(len(labels))
    colours = ["0.5"] + ["tab:green"] * len(replay.gains) + ["0.7", "tab:blue"]
    axes.barh(rows, np.array(highs) - np.array(lows), left=lows, color=colours)
    axes.set_yticks(rows, labels, fontsize="small")
    axes.invert_yaxis()
    axes.set(title="Replayed gains, each on top of those above", xlabel="ms per step")


def _what(what: str, rank: int | None, coordinate: str | None) -> str:
    if rank is not None:
        return f"rank {rank} like its peers"
    if coordinate is not None:
        return f"stage {coordinate.split()[-1]} like the others"
    return {"the exposed communication hidden": "comm. hidden"}.get(what, what)
