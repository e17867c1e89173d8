"""What ``report.html`` explores, kept in the page: the run map as levels of detail, and the
whole tables of ranks that report.md cuts to their top rows.

The run map is every rank's time for every step (:class:`~profiling.analysis.run.run_map.RunMap`);
at 4096 ranks × 10 900 columns that is 45 million cells, more than a page holds. So the page
keeps levels: the finest holds at most :data:`FINEST_CELLS` cells (every cell of a job of up
to that many; a longer run's columns joined, each the median of the steps it joins, as
``run.png`` joins them), and each coarser level joins two columns (and two rows, while there
are more than :data:`COARSEST_ROWS`) of the one below, down to one that draws whole at once.
A joined cell keeps the median time and the largest ratio of its cells: a slow rank stays a
stripe at every level. Values are float32 where every cell of the finest level fits
:data:`EXACT_CELLS` (what report.json says, to the bit), float16 beyond (3 significant digits:
a picture and a tooltip's worth).

Where the finest level joins steps, the page also keeps **details**: around each slow node and
slow segment the report names, every column of the map (the step log's own: a step, or a
bucket of 100 past step 10 000) for the ranks of that node, from half the stretch before it to
half after, float32, at most :data:`DETAIL_CELLS` cells each and :data:`DETAILS` in all. A
user who reads "node 7 slow in steps 30 000-31 000" zooms there and reads single cells.
"""

from __future__ import annotations

import base64
import warnings
from typing import Any

import numpy as np

from profiling.analysis.run.run_map import RunMap, binned, binned_medians
from profiling.schema import model

FINEST_CELLS = 1_500_000
EXACT_CELLS = 250_000
COARSEST_ROWS = 512
COARSEST_COLUMNS = 1024
DETAILS = 32
DETAIL_CELLS = 200_000


def run_levels(run: RunMap, section: model.Run) -> dict[str, Any]:
    """The run map's levels, finest first, as the page's script reads them, its details (see
    the module's docstring) and the colour scale: as run.png's, 1 ± the 99.5th percentile of
    the ratios' distance from 1 (of the coarsest level: the whole run in few cells)."""
    rows, columns = run.values.shape
    finest = max(1, min(columns, FINEST_CELLS // max(rows, 1)))
    exact = rows * finest <= EXACT_CELLS
    if finest >= columns:
        ms, ratio = run.values, run.ratio
        first, last = run.first, run.first + run.width - 1
    else:  # a long run: its columns joined as run.png joins them
        joined = binned(run, finest)
        ms = binned_medians(run.values, np.linspace(0, columns, finest + 1).astype(int))
        ratio, first, last = joined.ratio, joined.first, joined.last
    group = np.arange(rows)
    levels = [_level(ms, ratio, first, last, group, exact)]
    while ms.shape[0] > COARSEST_ROWS or ms.shape[1] > COARSEST_COLUMNS:
        join_rows = ms.shape[0] > COARSEST_ROWS
        ms, ratio = _joined(ms, np.nanmedian, join_rows), _joined(ratio, np.nanmax, join_rows)
        first, last = first[::2], np.maximum.reduceat(last, np.arange(0, len(last), 2))
        group = group[::2] if join_rows else group
        levels.append(_level(ms, ratio, first, last, group, exact))
    distance = np.abs(ratio - 1.0)
    distance = distance[np.isfinite(distance)]
    spread = float(np.percentile(distance, 99.5)) if len(distance) else 0.1
    return {
        "ranks": run.ranks.tolist(),
        "nodes": run.nodes,
        "levels": levels,
        "details": _details(run, section) if finest < columns else [],
        "spread": min(max(spread, 0.1), 1.0),
    }


def _details(run: RunMap, section: model.Run) -> list[dict[str, Any]]:
    """Every column around each slow node and segment, for the ranks of its node."""
    wanted = [(node.node, node.first, node.last) for node in section.slow_nodes]
    wanted += [(segment.node, segment.first, segment.last) for segment in section.segments]
    nodes = np.array(run.nodes)
    last = run.first + run.width - 1
    details: list[dict[str, Any]] = []
    seen: set[tuple[str, int, int]] = set()
    for node, first, final in wanted:
        rows = np.flatnonzero(nodes == node)
        pad = max(10, (final - first) // 2)
        columns = np.flatnonzero((last >= first - pad) & (run.first <= final + pad))
        if not len(rows) or not len(columns):
            continue
        rows = np.arange(rows.min(), rows.max() + 1)  # a node's ranks, and any between: a block
        key = (node, int(columns[0]), len(columns))
        if key in seen or len(rows) * len(columns) > DETAIL_CELLS:
            continue
        seen.add(key)
        cells = np.ix_(rows, columns)
        ms, ratio = run.values[cells], run.ratio[cells]
        details.append(_level(ms, ratio, run.first[columns], last[columns], rows, exact=True))
        if len(details) == DETAILS:
            break
    return details


def _level(
    ms: np.ndarray, ratio: np.ndarray, first: np.ndarray, last: np.ndarray, group: np.ndarray, exact: bool
) -> dict[str, Any]:
    kind = np.float32 if exact else np.float16
    return {
        "rows": ms.shape[0],
        "columns": ms.shape[1],
        "row_first": group.tolist(),  # each row's first rank's index in "ranks"
        "first": first.tolist(),
        "last": last.tolist(),
        "dtype": "float32" if exact else "float16",
        "ms": _packed(ms, kind),
        "ratio": _packed(ratio, kind),
    }


def _joined(values: np.ndarray, how: Any, join_rows: bool) -> np.ndarray:
    """Pairs of columns (and of rows) as one, by ``how`` (a trailing odd one alone)."""
    rows, columns = values.shape
    pad_rows, pad_columns = (rows % 2) if join_rows else 0, columns % 2
    padded = np.pad(values.astype(np.float32), ((0, pad_rows), (0, pad_columns)), constant_values=np.nan)
    shape = (
        (padded.shape[0] // 2, 2, padded.shape[1] // 2, 2)
        if join_rows
        else (rows, 1, padded.shape[1] // 2, 2)
    )
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a pair of NaN cells: NaN, quietly
        return how(padded.reshape(shape), axis=(1, 3))


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
