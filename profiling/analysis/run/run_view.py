"""The run map as the report draws it: one view of the map (:class:`RunView`) that ``run.png``
(its :attr:`~RunView.picture`) and ``report.html`` (its :attr:`~RunView.levels`) both draw.

run.png is at most :data:`MAP_COLUMNS` columns (a longer run's steps joined, each the median
of the steps it joins) and :data:`MAP_ROWS` rows (beyond, a row per node: the slowest of its
ranks in each column).

report.html's map is every rank's time for every step (:class:`~.run_map.RunMap`); at 4096
ranks × 10 900 columns that is 45 million cells, more than a page holds. So the page keeps
levels: the finest holds at most :data:`FINEST_CELLS` cells (every cell of a job of up to that
many; a longer run's columns joined, each the median of the steps it joins, as run.png joins
them), and each coarser level joins two columns (and two rows, while there are more than
:data:`COARSEST_ROWS`) of the one below, down to one that draws whole at once. A joined cell
keeps the median time and the largest ratio of its cells: a slow rank stays a stripe at every
level. Values are exact (float32) where every cell of the finest level fits
:data:`EXACT_CELLS` (what report.json says, to the bit), float16 beyond (3 significant
digits: a picture and a tooltip's worth).

Where the finest level joins steps, the page also keeps **details**: around each slow node and
slow segment the report names, every column of the map (the step log's own: a step, or a
bucket of 100 past step 10 000) for the ranks of that node, from half the stretch before it to
half after, float32, at most :data:`DETAIL_CELLS` cells each and :data:`DETAILS` in all. A
user who reads "node 7 slow in steps 30 000-31 000" zooms there and reads single cells.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any

import numpy as np

from profiling.analysis.run import run_map
from profiling.analysis.run.run_map import RunMap, binned, binned_medians
from profiling.analysis.run.run_rows import Band, Mesh, grouped, node_bands
from profiling.schema import model

MAP_COLUMNS = 1000  # at most this many columns in run.png; a longer run's steps are joined
MAP_ROWS = 512  # at most this many rows of ranks in run.png; beyond, a row per node
_MEMORY_LABELS = {"cuda": "peak allocated in the step (MiB)", "rss": "resident at the step's end (MiB)"}
# report.html's levels (see the module's docstring)
FINEST_CELLS = 1_500_000
EXACT_CELLS = 250_000
COARSEST_ROWS = 512
COARSEST_COLUMNS = 1024
DETAILS = 32
DETAIL_CELLS = 200_000


@dataclasses.dataclass(frozen=True)
class MapLevel:
    """One level of the page's map (or a detail around a slow stretch): rank rows × columns."""

    ms: np.ndarray  # each cell's time (ms); float32
    ratio: np.ndarray  # ... against the other ranks' median
    first: np.ndarray  # each column's first step
    last: np.ndarray  # ... and last
    row_first: np.ndarray  # each row's first rank's index in the view's ranks
    exact: bool  # the values as report.json has them (else a picture's worth: float16 on the page)


@dataclasses.dataclass(frozen=True)
class MapLevels:
    """The page's map: its levels, finest first, the details, and the colour scale."""

    levels: list[MapLevel]
    details: list[MapLevel]
    spread: float  # the colour scale: 1 ± spread


class RunView:
    """The run map and its section, as both pictures draw them: :attr:`picture` at once,
    :attr:`levels` when first asked for (while run.png is drawn in the plot's process)."""

    def __init__(self, run: RunMap, section: model.Run, mesh: Mesh | None = None) -> None:
        """``mesh``: each rank's coordinates, where the job has a layout: the rows are drawn by
        stage and replica (:func:`~.run_rows.grouped`), else by rank."""
        drawn, self.bands = grouped(run, mesh or {})
        self.run, self.section = drawn, section
        self.ranks, self.nodes = drawn.ranks.tolist(), drawn.nodes
        self.picture = _picture(drawn, section, self.bands)

    @functools.cached_property
    def levels(self) -> MapLevels:
        return _levels(self.run, self.section)


@dataclasses.dataclass(frozen=True)
class RunPicture:
    """What ``run.png`` draws (small enough to send to the plot's process)."""

    ratio: np.ndarray  # row x column: the row's time against the other rows' median
    first: np.ndarray  # each column's first step
    last: np.ndarray  # ... and last
    rows: np.ndarray  # each row's rank, or its node's name where a row is a node
    nodes: list[str]  # each row's node
    by_node: bool  # thousands of ranks: a row per node, its slowest rank in each column
    step_median_ms: np.ndarray  # each column's median step time
    segments: list[model.Segment]
    title: str
    memory: RunPictureMemory | None = None
    bands: list[Band] = dataclasses.field(default_factory=list)  # stages and replicas, by row
    captures: list[CaptureMark] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class CaptureMark:
    """A capture taken while the job ran, outlined on the map: its steps, the rows of its ranks."""

    first: int
    last: int
    rows: list[int]
    label: str  # "capture 1 (auto)"


@dataclasses.dataclass(frozen=True)
class RunPictureMemory:
    """``run.png``'s memory row: each row's memory over the run, beside its time."""

    mib: np.ndarray  # row x column: the peak of each stretch of steps (by node: of its ranks)
    first: np.ndarray  # each column's first step
    last: np.ndarray  # ... and last
    label: str  # what the memory is
    growing: list[model.MemoryGrowth]


def _capture_marks(captures: list[model.Captured], rows: np.ndarray, run: RunMap) -> list[CaptureMark]:
    """Where each capture goes on the map: the rows of its ranks (by node: of their nodes)."""
    by_node = rows.dtype.kind not in "iu"
    node_of = dict(zip(run.ranks.tolist(), run.nodes, strict=True))
    row_of = {label: row for row, label in enumerate(rows.tolist())}
    marks = []
    for c in captures:
        keys = {node_of.get(rank) for rank in c.ranks} if by_node else set(c.ranks)
        found = sorted(row_of[key] for key in keys if key in row_of)
        label = f"capture {c.id}" + (" (auto)" if c.automatic else "")
        marks.append(CaptureMark(first=c.first, last=c.last, rows=found, label=label))
    return marks


def _picture(run: RunMap, section: model.Run, bands: list[Band]) -> RunPicture:
    """What ``run.png`` draws, at most :data:`MAP_COLUMNS` columns."""
    binned = run_map.binned(run, MAP_COLUMNS)
    rows, labels, nodes = binned.ratio, run.ranks, run.nodes
    memory = run.memory.peak if run.memory else None
    if len(run.ranks) > MAP_ROWS:  # a row per node: the slowest of its ranks in each column
        names = list(dict.fromkeys(run.nodes))
        code = _codes(run.nodes, names)
        order = np.argsort(code, kind="stable")
        starts = np.searchsorted(code[order], np.arange(len(names)))
        filled = np.nan_to_num(binned.ratio[order], nan=0.0)
        rows, labels, nodes = np.maximum.reduceat(filled, starts, axis=0), np.array(names), names
        bands = node_bands(bands, run.nodes, names)
        if memory is not None:  # ... and the most memory of its ranks
            memory = np.maximum.reduceat(np.nan_to_num(memory[order], nan=0.0), starts, axis=0)
    segments = section.segments
    found = "; ".join(
        f"rank {s.rank} slow in steps {s.first}-{s.last} (+{s.excess_ms:.1f} ms)" for s in segments[:4]
    )
    more = f" and {len(segments) - 4} more" if len(segments) > 4 else ""
    return RunPicture(
        ratio=rows.astype(np.float32),
        first=binned.first,
        last=binned.last,
        rows=labels,
        nodes=list(nodes),
        by_node=len(run.ranks) > MAP_ROWS,
        step_median_ms=binned.step_median,
        segments=segments,
        title=(
            "Each rank's CPU time per step against the other ranks' median. "
            + (f"{found}{more}." if segments else "No rank was persistently slow.")
        ),
        memory=RunPictureMemory(
            mib=memory.astype(np.float32),
            first=run.memory.first,
            last=run.memory.last,
            label=_MEMORY_LABELS[run.memory.kind],
            growing=section.memory_growth,
        )
        if run.memory is not None and memory is not None
        else None,
        bands=bands,
        captures=_capture_marks(section.captures, labels, run),
    )


def _codes(nodes: list[str], names: list[str]) -> np.ndarray:
    index_of = {name: index for index, name in enumerate(names)}
    return np.array([index_of[node] for node in nodes])


def _levels(run: RunMap, section: model.Run) -> MapLevels:
    """The map's levels, finest first, its details (see the module's docstring) and the colour
    scale: as run.png's, 1 ± the 99.5th percentile of the ratios' distance from 1 (of the
    coarsest level: the whole run in few cells)."""
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
    levels = [MapLevel(ms, ratio, first, last, group, exact)]
    while ms.shape[0] > COARSEST_ROWS or ms.shape[1] > COARSEST_COLUMNS:
        join_rows = ms.shape[0] > COARSEST_ROWS
        ms, ratio = _joined(ms, np.nanmedian, join_rows), _joined(ratio, np.nanmax, join_rows)
        first, last = first[::2], np.maximum.reduceat(last, np.arange(0, len(last), 2))
        group = group[::2] if join_rows else group
        levels.append(MapLevel(ms, ratio, first, last, group, exact))
    distance = np.abs(ratio - 1.0)
    distance = distance[np.isfinite(distance)]
    spread = float(np.percentile(distance, 99.5)) if len(distance) else 0.1
    details = _details(run, section) if finest < columns else []
    return MapLevels(levels, details, min(max(spread, 0.1), 1.0))


def _details(run: RunMap, section: model.Run) -> list[MapLevel]:
    """Every column around each slow node and segment, for the ranks of its node."""
    wanted = [(node.node, node.first, node.last) for node in section.slow_nodes]
    wanted += [(segment.node, segment.first, segment.last) for segment in section.segments]
    nodes = np.array(run.nodes)
    last = run.first + run.width - 1
    details: list[MapLevel] = []
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
        details.append(
            MapLevel(run.values[cells], run.ratio[cells], run.first[columns], last[columns], rows, True)
        )
        if len(details) == DETAILS:
            break
    return details


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
