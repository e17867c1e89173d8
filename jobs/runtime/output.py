"""What a task says goes through :mod:`logging`: the runtime, the profiler and the workload loop
log, and never print. The commands that run a task decide where it goes
(:func:`show_task_output`: ``python -m jobs.task`` and submitit's call of the task send it to the
task's stdout and stderr, a line each, as the job's logs have always held it); a loop of one's
own (:class:`~jobs.profiled_run.ProfiledRun`) leaves it to its user's logging configuration,
where warnings (a hang's verdict, a rank ended by its watchdog) still reach stderr."""

from __future__ import annotations

import logging
import sys

# the job's output: rank 0's is what --wait shows
OUTPUT = logging.getLogger("jobs.task")
_ROOMS = ("jobs", "workload", "profiling", "slurm")


def say(line: str) -> None:
    """A line of the job's output."""
    OUTPUT.info(line)


class _TaskOutput(logging.StreamHandler):
    """A line per record, as it was said; flushed at once (the monitor follows the file)."""

    def __init__(self, stream: object, *, errors: bool) -> None:
        super().__init__(stream)
        self.setFormatter(logging.Formatter("%(message)s"))
        if errors:
            self.setLevel(logging.WARNING)
        else:
            self.addFilter(lambda record: record.levelno < logging.WARNING)


def show_task_output() -> None:
    """The toolkit's records from INFO up: information to stdout, warnings and errors to stderr
    (once per process, however often it is called)."""
    for name in _ROOMS:
        logger = logging.getLogger(name)
        if not any(isinstance(handler, _TaskOutput) for handler in logger.handlers):
            logger.addHandler(_TaskOutput(sys.stdout, errors=False))
            logger.addHandler(_TaskOutput(sys.stderr, errors=True))
        logger.setLevel(logging.INFO)
