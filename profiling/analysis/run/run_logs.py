"""The job's step logs as one :class:`~profiling.analysis.run.run_map.RunMap`: each rank's logs,
of every attempt, as a row, and the rows as the map.

At thousands of ranks this is most of a report's reading: 4096 ranks of 100 000 steps are
4096 files of 200 KB. They are read in threads (on NFS, reading is mostly waiting), each rank
reduced to what the map keeps at once: its :data:`~profiling.analysis.run.run_map.METRIC` per
column and a median of its other times, the step columns shared between the ranks that have
the same (all, but in a job some ranks of which were requeued apart).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import itertools
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from profiling.analysis.run.memory_growth import Reduced, combine_memory, reduce_series
from profiling.analysis.run.run_map import METRIC, RunMap
from profiling.folder.layout import JobFolder
from profiling.folder.step_log import COLUMNS, StepLog, StepLogError, decode_step_log
from slurm.common.files import LARGE_FILE_BYTES, read_regular

_READERS = 4  # on NFS, reads wait; here, from the page cache, more only contend
_AHEAD = 4 * _READERS
_In = TypeVar("_In")
_Out = TypeVar("_Out")
_OTHERS = tuple(name for name in COLUMNS if name != METRIC)  # kept as a median per row


@dataclasses.dataclass(frozen=True)
class RankRow:
    """One rank's columns over all its attempts: :data:`METRIC` per column, its other times as
    a median over the row (what the map keeps of them)."""

    rank: int
    node: str
    gpu: bool
    first: np.ndarray
    steps: np.ndarray
    values: np.ndarray
    medians: dict[str, float]
    memory: Reduced | None = None  # its memory per stretch of steps (None: not recorded)
    memory_kind: str = ""  # see StepLogHeader.memory
    world: int = 0  # the world size its header names


def rank_row(attempts: Sequence[StepLog]) -> RankRow | None:
    """One rank's logs as a row (None if none holds a step); a later attempt's steps replace an
    earlier one's from the step it resumed at."""
    kept: list[dict[str, np.ndarray]] = []
    for log in sorted((log for log in attempts if len(log)), key=lambda log: log.header.restart):
        resumed = int(log.first[0])
        kept = [_before(part, resumed) for part in kept]
        kept.append({"first": log.first, "steps": log.steps, **log.median})
    if not kept:
        return None
    row = {key: np.concatenate([part[key] for part in kept]) for key in kept[0]} if len(kept) > 1 else kept[0]
    latest = max(attempts, key=lambda log: log.header.restart).header
    gpu = any(log.header.gpu for log in attempts)
    mem = row.get("mem")
    recorded = mem is not None and bool(np.isfinite(mem).any())
    memory = reduce_series(row["first"], row["steps"], mem) if mem is not None and recorded else None
    return RankRow(
        rank=latest.rank,
        node=latest.node,
        gpu=gpu,
        first=row["first"],
        steps=row["steps"],
        values=row[METRIC],
        medians={name: _median_of(row[name]) for name in _OTHERS if name in row and (name != "gpu" or gpu)},
        memory=memory,
        memory_kind=latest.memory if recorded else "",
        world=latest.world_size,
    )


def combine_logs(logs: Sequence[StepLog]) -> RunMap | None:
    """The logs of every rank and attempt as one map (None if none holds a step)."""
    by_rank: dict[int, list[StepLog]] = {}
    for log in logs:
        by_rank.setdefault(log.header.rank, []).append(log)
    return combine_rows([row for attempts in by_rank.values() if (row := rank_row(attempts))])


def combine_rows(rows: Sequence[RankRow], values: np.ndarray | None = None) -> RunMap | None:
    """Every rank's row as one map (None if there is none). ``values``: the rows' values, in
    order, already as the map's, where every row shares the first one's step columns (see
    :class:`_Matrix`); taken as they are."""
    if not rows:
        return None
    in_order = all(before.rank < after.rank for before, after in itertools.pairwise(rows))
    rows = rows if in_order else sorted(rows, key=lambda row: row.rank)
    firsts = [row.first for row in rows]
    shared = all(first is firsts[0] for first in firsts)  # and their steps: see _shared
    if shared or all(_same(first, firsts[0]) for first in firsts):
        columns = firsts[0].astype(np.int64)  # the usual case: one sort saved
    else:
        columns = np.unique(np.concatenate(firsts)).astype(np.int64)
    # in 64 bits: the logs' 32-bit steps overflowed at the last one a log can hold (2**31 - 1)
    last = np.array([int(row.first[-1]) + int(row.steps[-1]) - 1 for row in rows], dtype=np.int64)
    if values is not None and shared and in_order and values.shape == (len(rows), len(columns)):
        return _run_map(rows, columns, np.maximum(rows[0].steps, 1).astype(np.int64), values, last)
    width = np.ones(len(columns), dtype=np.int64)
    # float32, as the logs store them: 4096 ranks x 10 900 columns is 180 MB so
    values = np.full((len(rows), len(columns)), np.nan, dtype=np.float32)
    for index, row in enumerate(rows):
        # a row's columns are distinct: a plain indexed maximum, not np.maximum.at
        at = slice(None) if len(row.first) == len(columns) else np.searchsorted(columns, row.first)
        width[at] = np.maximum(width[at], row.steps)
        values[index, at] = row.values
    return _run_map(rows, columns, width, values, last)


def _run_map(
    rows: Sequence[RankRow], columns: np.ndarray, width: np.ndarray, values: np.ndarray, last: np.ndarray
) -> RunMap:
    return RunMap(
        ranks=np.array([row.rank for row in rows]),
        nodes=[row.node for row in rows],
        first=columns,
        width=width,
        values=values,
        row_medians={
            name: np.array([row.medians.get(name, np.nan) for row in rows], dtype=np.float64)
            for name in _OTHERS
        },
        last_step=last,
        gpu=any(row.gpu for row in rows),
        memory=combine_memory([row.memory_kind for row in rows], [row.memory for row in rows]),
    )


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    # bytes: np.array_equal costs a few times more, 8192 times over at 4096 ranks
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes())


def _median_of(values: np.ndarray) -> float:
    """np.median's value at half its cost: a call per rank, 4096 times at 4096 ranks."""
    finite = values[np.isfinite(values)]  # a copy: partitioned in place
    count = len(finite)
    if not count:
        return float("nan")
    middle = (count - 1) // 2
    if count % 2:
        finite.partition(middle)
        return float(finite[middle])
    finite.partition((middle, middle + 1))
    return float(finite[middle : middle + 2].mean())


def read_run(trace_folder: Path, ranks: Collection[int] | None = None) -> tuple[RunMap, list[str]] | None:
    """The job's step logs as one map, and what could not be read (None: the job has none);
    ``ranks``: those ranks' alone (a node's, say)."""
    logs = JobFolder.of_traces(trace_folder).step_logs_by_rank()
    by_rank = sorted((rank, paths) for rank, paths in logs.items() if ranks is None or rank in ranks)
    rows: list[RankRow] = []
    unreadable: list[str] = []
    matrix = _Matrix(len(by_rank))
    # the files are read in threads (on NFS, reading is mostly waiting), decoded here: numpy's
    # small steps hold the GIL, and threads decoding side by side were slower than one
    with concurrent.futures.ThreadPoolExecutor(max_workers=_READERS) as pool:
        for read in _ahead(pool, _contents, [paths for _, paths in by_rank]):
            row, problems = _rank_of(read)
            unreadable += problems
            if row is not None and rows and (row.world != rows[0].world or row.rank >= rows[0].world):
                # the lowest rank's world is the job's (the ranks are read in order): a log of
                # another world, or of a rank beyond it (rank 2**31 - 2 of a 2-rank job), is none
                unreadable.append(
                    f"rank {row.rank}'s step log: world size {row.world}, the job's {rows[0].world}: left out"
                )
                continue
            if row is not None:
                rows.append(matrix.add(_shared(row, rows[0] if rows else None), len(rows)))
    run = combine_rows(rows, matrix.values(len(rows)))
    return (run, unreadable) if run is not None else None


class _Matrix:
    """The map's values, written as each rank's row is read where its step columns are the
    first row's (all of them, but in a job some ranks of which were requeued apart): a copy of
    every row then a map made of them held both, and touching 180 MB of fresh memory took
    0.2-0.5 s here at 4096 ranks."""

    def __init__(self, ranks: int) -> None:
        self._ranks = ranks
        self._values: np.ndarray | None = None
        self._first: np.ndarray | None = None
        self._whole = True  # every row so far is in it

    def add(self, row: RankRow, index: int) -> RankRow:
        """``row``, its values a view of the matrix's row ``index`` where it shares the columns."""
        if self._first is None:
            self._first = row.first
            self._values = np.empty((self._ranks, len(row.first)), dtype=np.float32)
        if not self._whole or row.first is not self._first or self._values is None:
            self._whole = False
            return row
        self._values[index] = row.values
        return dataclasses.replace(row, values=self._values[index])

    def values(self, rows: int) -> np.ndarray | None:
        """The first ``rows`` rows, if every row read is one of them."""
        return self._values[:rows] if self._whole and self._values is not None else None


def _ahead(
    pool: concurrent.futures.Executor, function: Callable[[_In], _Out], items: Iterable[_In]
) -> Iterator[_Out]:
    """``pool.map``, with at most :data:`_AHEAD` calls done or running ahead of the one used:
    ``map`` starts them all, and the threads read faster than this thread decodes, so that at
    4096 ranks 800 MB of step logs waited in memory."""
    pending: collections.deque[concurrent.futures.Future[_Out]] = collections.deque()
    for item in items:
        pending.append(pool.submit(function, item))
        if len(pending) > _AHEAD:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _contents(paths: list[Path]) -> list[tuple[Path, bytes | OSError]]:
    read: list[tuple[Path, bytes | OSError]] = []
    for path in paths:
        try:
            read.append((path, read_regular(path, LARGE_FILE_BYTES)))
        except OSError as error:
            read.append((path, error))
    return read


def _rank_of(read: list[tuple[Path, bytes | OSError]]) -> tuple[RankRow | None, list[str]]:
    logs, unreadable = [], []
    for path, data in read:
        try:  # the medians alone: the metric for the map, the other times for each row's median
            if isinstance(data, OSError):
                raise data
            log = decode_step_log(data, path, COLUMNS, spread=False)
            logs.append(log)
            if log.note:
                unreadable.append(log.note)
        except (OSError, StepLogError) as error:
            unreadable.append(f"{path.name}: {error}")
    return rank_row(logs), unreadable


def _shared(row: RankRow, like: RankRow | None) -> RankRow:
    """``row``, holding ``like``'s step columns where they are the same (the usual case: 4096
    ranks keep one copy of them, not 4096)."""
    if like is None or not (_same(row.first, like.first) and _same(row.steps, like.steps)):
        return row
    return dataclasses.replace(row, first=like.first, steps=like.steps)


def _before(part: dict[str, np.ndarray], step: int) -> dict[str, np.ndarray]:
    keep = part["first"] < step
    return {key: value[keep] for key, value in part.items()}
