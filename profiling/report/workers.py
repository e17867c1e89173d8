"""Worker processes for the report: ``map`` in order, with few calls in flight at once, so that
memory holds a few traces' columns whatever the number of traces; started only when there is
more than one call to make, since starting a worker costs more than a small trace."""

from __future__ import annotations

import collections
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from slurm.common.forked import deaf_to_warnings, fork_safe


def default_jobs() -> int:
    return min(8, len(os.sched_getaffinity(0)))


class Workers:
    """``jobs`` worker processes (or this process, for ``jobs`` = 1)."""

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = jobs or default_jobs()
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the processes (their heaps hold what they read); a later :meth:`map` starts others."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def _started(self) -> ProcessPoolExecutor | None:
        if self._pool is None and self.jobs > 1:
            self._pool = _pool(self.jobs)
        return self._pool

    def map(self, function: Callable[..., Any], *arguments: Sequence[Any]) -> Iterator[Any]:
        """``function`` over the calls, results in order; the first calls are submitted before
        this returns, so that what the caller does next overlaps them."""
        calls = list(zip(*arguments, strict=True))
        pool = self._started() if len(calls) > 1 else None
        if pool is None:
            return (function(*call) for call in calls)
        window = 2 * self.jobs
        pending = collections.deque(pool.submit(function, *call) for call in calls[:window])
        return _in_order(pool, function, pending, calls[window:])


class Ahead:
    """One process for calls made later (the plot), which :meth:`warm` readies when a core is
    free (matplotlib's import then overlaps the alignment, not the reading); with ``enabled``
    False, a call runs here when it is made."""

    def __init__(self, prepare: Callable[[], None], *, enabled: bool = True) -> None:
        self._prepare = prepare
        self._pool = _pool(1) if enabled else None
        self._warm = False
        if self._pool is not None:
            # the process starts now, forked from this one while it is small: forked later, it
            # would share (and count, and copy as it touches them) every record read by then
            self._pool.submit(_nothing)

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def warm(self) -> None:
        """Start the process's preparation now, for calls to come."""
        if self._pool is not None and not self._warm:
            self._warm = True
            self._pool.submit(self._prepare)

    def submit(self, function: Callable[..., Any], *arguments: Any) -> Future:
        if self._pool is not None:
            self._warm = True
            return self._pool.submit(function, *arguments)
        done: Future = Future()
        done.set_result(function(*arguments))
        return done


def _in_order(
    pool: ProcessPoolExecutor, function: Callable[..., Any], pending: collections.deque, calls: list[tuple]
) -> Iterator[Any]:
    """The results of the ``pending`` calls, then of ``calls``, submitted as results are taken
    (few in flight: memory holds a few traces' columns whatever their number)."""
    for call in calls:
        yield pending.popleft().result()
        pending.append(pool.submit(function, *call))
    while pending:
        yield pending.popleft().result()


def _nothing() -> None:
    pass


def _pool(jobs: int) -> ProcessPoolExecutor:
    # fork is cheap (the imports are done), spawn where it is not safe
    method = "fork" if fork_safe() else "spawn"
    return ProcessPoolExecutor(
        max_workers=jobs, mp_context=multiprocessing.get_context(method), initializer=deaf_to_warnings
    )
