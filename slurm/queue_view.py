"""One view of SLURM for a command that follows jobs, as submitit's ``InfoWatcher`` is one: what
the queue says of every job it watches, asked at once and not too often, and how each job that
left the queue ended, asked once and kept.

- The queue (``squeue``) is read for all watched jobs at once, at most every
  :attr:`QueueView.delay_s`, a delay that grows with how long the jobs have been watched (a
  twentieth of it, from :data:`MIN_DELAY_S` up to :data:`MAX_DELAY_S`): a young job's end is
  seen within seconds, an hour-long one's queue is not asked every two.
- How jobs ended (``sacct``, else ``scontrol``) is asked for every watched job that has left the
  queue in one call, and kept: a finished job is never asked about again.
- :meth:`QueueView.pause` is the one wait of a loop that follows jobs: until the next reading
  is due, or a bound of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from slurm import scheduler

MIN_DELAY_S = 2.0
MAX_DELAY_S = 30.0


class QueueView:
    """The jobs a command follows, as SLURM sees them (see the module)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since = clock()
        self._jobs: set[str] = set()
        self._states: dict[str, str] | None = None
        self._read_at: float | None = None
        self._finished: dict[str, tuple[str, str | None]] = {}

    @property
    def delay_s(self) -> float:
        """How long a reading of the queue stands."""
        return min(MAX_DELAY_S, max(MIN_DELAY_S, (self._clock() - self._since) / 20))

    def watch(self, job_ids: Sequence[str]) -> None:
        """Add jobs to the next reading (one squeue for many: ``jobs.list``)."""
        if not set(job_ids) <= self._jobs:
            self._jobs.update(job_ids)
            self._read_at = None

    def state(self, job_id: str) -> str | None:
        """The job's state while it is in the queue, "" once it has left it, None if squeue did
        not answer."""
        if job_id in self._finished:
            return ""
        self.watch([job_id])
        if self._read_at is None or self._clock() - self._read_at >= self.delay_s:
            self._read_at = self._clock()
            self._states = scheduler.queue_states(sorted(self._jobs - set(self._finished)))
        return None if self._states is None else scheduler.state_of(job_id, self._states)

    def ending(self, job_id: str, warn: Callable[[str], None] = lambda line: None) -> tuple[str, str | None]:
        """How a job that left the queue ended, and when (:func:`slurm.scheduler.endings`): asked
        with every other watched job that has left it, once."""
        if job_id not in self._finished:
            gone = [j for j in sorted(self._jobs) if j not in self._finished and self._left(j)]
            self._finished.update(scheduler.endings(sorted({*gone, job_id}), warn))
        return self._finished[job_id]

    def _left(self, job_id: str) -> bool:
        return self._states is not None and scheduler.has_ended(scheduler.state_of(job_id, self._states))

    def pause(self, at_most_s: float | None = None) -> None:
        """Wait until the next reading of the queue is due (or ``at_most_s``)."""
        due = 0.0 if self._read_at is None else self._read_at + self.delay_s - self._clock()
        time.sleep(max(0.0, min(due, at_most_s if at_most_s is not None else due)))
