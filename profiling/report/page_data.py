"""What ``report.html`` explores, kept in the page: the run map's levels of detail
(:class:`~profiling.analysis.run.run_view.RunView`, which run.png draws too), packed as the
page's script reads them, and the whole tables of ranks that report.md cuts to their top rows."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from profiling.analysis.run import MapLevel, RunView
from profiling.schema import model


def run_levels(view: RunView) -> dict[str, Any]:
    """The view's levels, details and colour scale, as the page's script reads them."""
    levels = view.levels
    return {
        "ranks": view.ranks,
        "nodes": view.nodes,
        "levels": [_level(level) for level in levels.levels],
        "details": [_level(level) for level in levels.details],
        "spread": levels.spread,
        # stages, and replicas within them: the rows are drawn by them where the job has a layout
        "bands": [
            {"dim": band.dim, "label": band.label, "first": band.first, "end": band.end}
            for band in view.bands
        ],
    }


def _level(level: MapLevel) -> dict[str, Any]:
    """Values as float32 where exact, float16 beyond (3 significant digits: a picture's worth)."""
    kind = np.float32 if level.exact else np.float16
    return {
        "rows": level.ms.shape[0],
        "columns": level.ms.shape[1],
        "row_first": level.row_first.tolist(),  # each row's first rank's index in "ranks"
        "first": level.first.tolist(),
        "last": level.last.tolist(),
        "dtype": "float32" if level.exact else "float16",
        "ms": _packed(level.ms, kind),
        "ratio": _packed(level.ratio, kind),
    }


def _packed(values: np.ndarray, kind: type) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype=kind).tobytes()).decode()


def ranks_table(report: model.Report) -> dict[str, Any]:
    """Every rank's row: report.md's step time table (which keeps its top rows at many ranks),
    with where each step's time goes, the rank's peak memory and TFLOP/s where recorded. The
    page opens it whole on demand."""
    parts = list(dict.fromkeys(part for r in report.ranks for part in r.breakdown_ms))
    memory = any(r.memory for r in report.ranks)
    flops = any(r.flops for r in report.ranks)
    columns = ["rank", "host", "steps", "mean", "min", "max", *(f"{part} ms" for part in parts)]
    columns += ["peak MiB"] * memory + ["TFLOP/s"] * flops
    rows = []
    for r in report.ranks:
        row: list[Any] = [r.rank, r.host, f"{r.steps[0]}-{r.steps[-1]}" if r.steps else "-"]
        row += [round(value, 2) for value in (r.step_time_ms.mean, r.step_time_ms.min, r.step_time_ms.max)]
        row += [round(r.breakdown_ms.get(part, 0.0), 2) for part in parts]
        if memory:
            row.append(round(r.memory.peak_allocated_bytes / 2**20, 1) if r.memory else None)
        if flops:
            row.append(round(r.flops.tflops_per_s, 4) if r.flops else None)
        rows.append(row)
    return {"columns": columns, "rows": rows}
