"""The step every rank stops at when one of them is told to stop (a preemption).

Each rank reads its own :class:`~jobs.runtime.preemption.Preemption` flag; this turns those
flags into one answer per step, the same on every rank.
"""

from __future__ import annotations

import queue
import threading
from types import TracebackType

import torch.distributed as dist

from jobs.runtime.flag_tree import FlagTree
from jobs.runtime.preemption import Preemption


class AgreedStop:
    """Every rank stops before the same step: the one after the first step that began, on any
    rank, with that rank's ``flag`` up.

    Were each rank to stop on its own flag, one that saw the signal before step N would leave
    while another, signalled a moment later, had begun step N and waits in its all-reduce for
    the rank that left (gloo: "Connection closed by peer"): the job fails instead of being
    requeued. So at the start of every step each rank adds its flag to a reduction (MAX) over
    every rank, and reads the result at the start of the next step, when it is long done. The
    reduction has a thread of its own and a tree of at most three connections per rank
    (:mod:`jobs.runtime.flag_tree`), not a second process group (a full mesh: n - 1 sockets per
    rank); the profiler records the training thread's operators only, and on a GPU the flag
    never touches the device, so the loop gains no host synchronisation. ``should_stop`` gives
    every rank the same answers, in the same order, by construction.
    """

    def __init__(self, flag: Preemption, *, timeout_s: float, name: str = "agreed-stop") -> None:
        """``name``: the tree's keys in the job's store (each AgreedStop of a job needs its own)."""
        self._flag, self._timeout_s = flag, timeout_s
        self._group: FlagTree | None = None
        if dist.get_world_size() > 1:
            store = dist.distributed_c10d._get_default_store()
            self._group = FlagTree(
                store, dist.get_rank(), dist.get_world_size(), timeout_s=timeout_s, name=name
            )
        self._flags: queue.SimpleQueue[bool | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[bool | BaseException] = queue.SimpleQueue()
        # a daemon: a rank that fails mid-step must not wait at exit for a collective nobody ends
        self._thread = threading.Thread(target=self._reduce_flags, name="agreed-stop", daemon=True)

    def __enter__(self) -> AgreedStop:
        if self._group is not None:
            self._answers.put(False)  # the first step has no step before it to have asked
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._group is None:
            return
        self._flags.put(None)
        if kind is None:  # every rank queued the last step's reduction: it ends at once
            self._thread.join(timeout=self._timeout_s)
            self._group.close()

    def should_stop(self, step: int) -> bool:
        """Asked by every rank at the start of every step: stop before ``step``?"""
        if self._group is None:
            return self._flag.requested
        try:
            answer = self._answers.get(timeout=self._timeout_s)  # the step before's all-reduce
        except queue.Empty:
            raise TimeoutError(
                f"the ranks did not agree within {self._timeout_s:g}s (--dist-timeout) whether to "
                f"stop before step {step}"
            ) from None
        if isinstance(answer, BaseException):
            raise answer
        if answer:
            return True
        self._flags.put(self._flag.requested)
        return False

    def _reduce_flags(self) -> None:
        assert self._group is not None
        while (flagged := self._flags.get()) is not None:
            try:
                self._answers.put(bool(self._group.max(int(flagged))))
            except Exception as error:  # the training thread raises it
                self._answers.put(error)
                return
