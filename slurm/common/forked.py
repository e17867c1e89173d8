"""A function over chunks of work, the first chunk in this process and each other in a child
forked from it: the child shares this process's memory as it is (the traces' records, the
steps' meetings), so nothing is pickled on the way in; each result is pickled back."""

from __future__ import annotations

import multiprocessing
import signal
import sys
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

Chunk = TypeVar("Chunk")
Result = TypeVar("Result")


def fork_safe() -> bool:
    """Whether this process may fork: not once torch is imported (rank 0 reports at the end of
    its job, with torch's threads around, and a fork copies their locks as they are)."""
    return "torch" not in sys.modules


def deaf_to_warnings() -> None:
    """A worker ignores the scheduler's warning signals: SLURM sends them to every process of a
    job step (a preemption's USR2 at the end of a job would kill rank 0's report workers, and
    the report with them); the rank that started them handles the signal."""
    for name in ("SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)


class Forked(Generic[Result]):
    """``function(chunk)`` begun in a child forked from this process now, its result taken by
    :meth:`result` (a child's exception is raised there); :meth:`close` ends a child whose
    result is not taken."""

    def __init__(self, function: Callable[[Chunk], Result], chunk: Chunk) -> None:
        context = multiprocessing.get_context("fork")
        self._reader, writer = context.Pipe(duplex=False)
        self._child: BaseProcess = context.Process(target=_child, args=(function, chunk, writer), daemon=True)
        self._child.start()
        writer.close()

    def result(self) -> Result:
        """What the child's function returned, once it has."""
        return _result(self._child, self._reader)

    def close(self) -> None:
        """The child ended, if its result was not taken, and waited for."""
        if self._child.is_alive() and not self._reader.closed:
            self._child.terminate()
        self._child.join()
        self._reader.close()


def forked_map(function: Callable[[Chunk], Result], chunks: Sequence[Chunk]) -> list[Result]:
    """``function`` of each chunk, in order: the others' in forked children, meanwhile. All here
    where there is one chunk or forking is not safe. A child's exception is raised here."""
    if len(chunks) < 2 or not fork_safe():
        return [function(chunk) for chunk in chunks]
    children: list[Forked[Result]] = []
    try:
        children.extend(Forked(function, chunk) for chunk in chunks[1:])
        return [function(chunks[0]), *(child.result() for child in children)]
    finally:  # a child whose result is not taken (this process's chunk failed) is ended
        for child in children:
            child.close()


def _result(child: BaseProcess, reader: Connection) -> Any:  # what the child's function returned
    try:
        done, found = reader.recv()  # before the join: a child blocks on a full pipe
    except EOFError:
        child.join()
        raise ChildProcessError(
            f"a forked worker ended without its result (exit code {child.exitcode})"
        ) from None
    finally:
        reader.close()
    if not done:
        raise found
    return found


def _child(function: Callable[[Chunk], Result], chunk: Chunk, writer: Connection) -> None:
    deaf_to_warnings()
    with writer:
        try:
            writer.send((True, function(chunk)))
        except BaseException as error:  # noqa: BLE001 - raised in the parent
            writer.send((False, error))
