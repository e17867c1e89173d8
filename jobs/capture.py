"""Capture steps of a running job from a login node (the command: :mod:`jobs.commands.capture`).

Writes a request into the job folder (see :mod:`profiling.recording.capture`); every rank of the job
looks for requests every couple of seconds, and the chosen ranks record the same steps a few
seconds later, into the usual ``rank<r>_iter<a>_<b>.json`` files, listed in the manifest under
``captures``. ``--wait`` blocks until those traces exist and prints their paths. Works under
``submit.py``, the plain batch script and the local executor alike: all it needs is the job
folder on the shared filesystem.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from jobs.job_state import job_state
from profiling.folder.layout import JobFolder
from profiling.folder.manifest import read_running
from profiling.folder.requests import read_accepted
from profiling.folder.traces import trace_file_name
from slurm.queue_view import QueueView


class CaptureRequestError(ValueError):
    """A capture that cannot be asked for; the message names the argument and the fix."""


def running_job(job: str, root: Path, queue: QueueView) -> tuple[JobFolder, dict[str, Any]]:
    """The job's folder and what its rank 0 wrote at the start, if it is still running
    (:func:`jobs.job_state.job_state` says whether it is, through the command's one ``queue``)."""
    path = Path(job)
    folder = JobFolder.at(path) if path.is_dir() else JobFolder(root, job)
    if not folder.path.is_dir():
        raise CaptureRequestError(
            f"job {job!r}: no folder {folder.path}. HINT: pass the job's folder, or its id with --traces-root"
        )
    state = job_state(folder, queue)
    if state.running is False:
        raise CaptureRequestError(
            f"{state.how}: there is nothing to capture. HINT: capture a job while it runs"
        )
    running = read_running(folder)
    if running is None:
        raise CaptureRequestError(
            f"{state.how}, but has not reached its first step: there is nothing to capture yet. "
            "HINT: capture it once it runs"
        )
    return folder, running


class _StillRunning:
    """Raises once the job has ended: its processes, or SLURM, asked through one view."""

    def __init__(self, folder: JobFolder, request_id: int, queue: QueueView) -> None:
        self.folder, self.request_id, self._queue = folder, request_id, queue

    def check(self) -> None:
        state = job_state(self.folder, self._queue)
        if state.running is False:
            raise CaptureRequestError(f"{state.how}, before capture {self.request_id} was served")


def wait_for_traces(
    folder: JobFolder, request_id: int, restart_count: int, timeout_s: float, queue: QueueView
) -> list[Path]:
    """The capture's trace files, once every chosen rank has written its own."""
    deadline = time.monotonic() + timeout_s
    still_running = _StillRunning(folder, request_id, queue)
    accepted = None
    while accepted is None:
        accepted = read_accepted(folder, request_id)
        if accepted is None:
            still_running.check()
        if accepted is None and time.monotonic() > deadline:
            raise CaptureRequestError(
                f"capture {request_id}: no rank took the request within {timeout_s:g}s. HINT: is the job "
                "still running (a job checks for requests between steps)?"
            )
        time.sleep(0.5)
    if not accepted["within_run"]:
        raise CaptureRequestError(
            f"capture {request_id}: steps {accepted['first']}-{accepted['last']} "
            "come after the job's last step. HINT: capture earlier, or ask for fewer --active steps"
        )
    trace_dir = folder.attempt(restart_count)
    names = {
        rank: [trace_file_name(rank, accepted["first"], accepted["last"], gzipped=gz) for gz in (False, True)]
        for rank in accepted["ranks"]
    }
    while True:
        found = {
            rank: next((trace_dir / n for n in options if (trace_dir / n).exists()), None)
            for rank, options in names.items()
        }
        paths = [path for path in found.values() if path is not None]
        if len(paths) == len(found):
            return sorted(paths)
        still_running.check()
        if time.monotonic() > deadline:
            missing = sorted(rank for rank, path in found.items() if path is None)
            raise CaptureRequestError(
                f"capture {request_id}: no trace from rank(s) {missing} within {timeout_s:g}s "
                f"(steps {accepted['first']}-{accepted['last']})"
            )
        time.sleep(0.5)
