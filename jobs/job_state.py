"""Is this job still running? One answer, for every tool that needs one (capture, list, hang).

``meta/running.json`` cannot say it alone: a rank killed by SIGKILL, or a node that dies, never
removes it. The answer combines, in this order:

1. the manifest's last attempt: an outcome (``completed``, ``failed``) means the job ended, unless
   a later attempt has started since (``running.json`` of a higher restart count);
2. for a job SLURM runs: the scheduler (:mod:`slurm.scheduler`): still in the queue and not ending,
   it runs (or waits to, requeued); once it has left, how it ended comes from sacct, or from
   scontrol where there is no accounting;
3. for a job of this machine (submitit's local executor; torchrun or one plain process on this
   host): whether the processes it recorded at its start are alive: the local job's controller
   (its pid is the job id), else rank 0.

What the job was submitted with (``meta/submitted.json``: nodes and tasks) is written at
submission, by ``submit.py`` or the batch script, so that even a job killed before its first
step has a size.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path
from typing import Any

from profiling.folder.layout import JobFolder
from profiling.folder.manifest import manifest_or_none, read_running
from profiling.schema.manifest import AttemptRecord
from slurm import scheduler
from slurm.common.files import SMALL_FILE_BYTES, read_regular
from slurm.launchers import Launcher
from slurm.queue_view import QueueView

_ENDED = frozenset({"completed", "failed"})
NO_RECORD = "unknown: no manifest, running.json or submitted.json"


@dataclasses.dataclass(frozen=True)
class JobState:
    job_id: str
    running: bool | None  # None: nothing can tell (no scheduler answers, no process to look at)
    outcome: str  # "running", "pending", "completed", "failed", "cancelled", "timeout", "killed"...
    how: str  # one line for people: "job 4242 failed at 2026-12-01 08:02:31 UTC (RuntimeError: ...)"
    ended_at: str | None = None


def read_submitted(folder: JobFolder) -> dict[str, Any] | None:
    try:
        return json.loads(read_regular(folder.submitted, SMALL_FILE_BYTES))
    except (OSError, ValueError):
        return None


def size(folder: JobFolder) -> tuple[int | None, int | None]:
    """(nodes, tasks per node) the job was submitted with, or ran with; None where unknown."""
    manifest = manifest_or_none(folder)
    typed = {"nodes": manifest.nodes, "world_size": manifest.world_size} if manifest else None
    for record in (typed, read_running(folder), read_submitted(folder)):
        record = record or {}
        nodes, tasks = record.get("nodes"), record.get("world_size") or record.get("tasks")
        if nodes and tasks:
            return nodes, tasks // nodes
    return None, None


def launcher_of(folder: JobFolder) -> Launcher | None:
    manifest = manifest_or_none(folder)
    typed = {"launcher": manifest.launcher} if manifest else None
    for record in (read_running(folder), typed, read_submitted(folder)):
        try:
            return Launcher((record or {})["launcher"])
        except (KeyError, ValueError):
            continue
    return None


def job_state(folder: JobFolder, queue: QueueView | None = None) -> JobState:
    """``queue``: the caller's view of SLURM, shared by many jobs or calls (one squeue, and one
    sacct, for them all); None: a view of this call's own."""
    manifest, running = manifest_or_none(folder), read_running(folder)
    last = manifest.attempts[-1] if manifest and manifest.attempts else None
    newer = running is not None and last is not None and running["restart_count"] > last.restart_count
    if last is not None and last.outcome in _ENDED and not newer:
        return _from_attempt(folder.job_id, last)
    launcher = launcher_of(folder)
    if launcher is None and not manifest and running is None:
        return JobState(folder.job_id, None, NO_RECORD, f"job {folder.job_id}: {NO_RECORD}")
    if launcher is not None and launcher.queued:
        return _from_scheduler(folder.job_id, last, queue or QueueView())
    return _from_processes(folder, running, last, launcher)


def _from_attempt(job_id: str, attempt: AttemptRecord) -> JobState:
    when = _readable(attempt.ended_at)
    error = f" ({attempt.error.splitlines()[0][:200]})" if attempt.error else ""
    return JobState(job_id, False, attempt.outcome, f"job {job_id} {attempt.outcome} at {when}{error}", when)


def _from_scheduler(job_id: str, last: AttemptRecord | None, queue: QueueView) -> JobState:
    state = queue.state(job_id)
    if state is None:
        return JobState(job_id, None, "unknown", f"job {job_id}: SLURM does not answer (squeue)")
    if scheduler.is_running(state):
        outcome = "pending" if scheduler.is_pending(state) else "running"
        return JobState(job_id, True, outcome, f"job {job_id} is {state.lower()} (squeue)")
    ended, when = queue.ending(job_id)
    if ended == scheduler.UNKNOWN_END:
        if last is not None and last.outcome:
            return _from_attempt(job_id, last)
        return JobState(
            job_id, False, "ended", f"job {job_id} has left SLURM's queue; how it ended is unknown"
        )
    outcome = ended.split()[0].lower()  # "CANCELLED by 0" -> "cancelled"
    return JobState(
        job_id,
        False,
        outcome,
        f"job {job_id} {_past(outcome)} at {when or 'an unknown time'} (SLURM: {ended})",
        when,
    )


def _from_processes(
    folder: JobFolder, running: dict[str, Any] | None, last: AttemptRecord | None, launcher: Launcher | None
) -> JobState:
    job_id = folder.job_id
    alive = _alive(folder, running, launcher)
    if alive:
        return JobState(
            job_id,
            True,
            "running" if running else "pending",
            f"job {job_id} is running (its processes are alive)",
        )
    if alive is None:  # only where running.json names another host
        host = running.get("host") if running else None
        return JobState(job_id, None, "unknown", f"job {job_id} runs elsewhere (its processes are on {host})")
    if last is not None and last.outcome:
        return _from_attempt(job_id, last)
    seen = max((p.stat().st_mtime for p in (folder.running, folder.logs) if p.exists()), default=None)
    when = _readable_epoch(seen) if seen else "an unknown time"
    return JobState(
        job_id,
        False,
        "killed",
        f"job {job_id} was killed: none of its processes is left, and it wrote no end "
        f"(last sign of life {when})",
    )


def _alive(folder: JobFolder, running: dict[str, Any] | None, launcher: Launcher | None) -> bool | None:
    """Whether the job's processes live: its local controller, else rank 0 (None: on another host)."""
    if (
        launcher is Launcher.LOCAL
        and folder.job_id.isdigit()
        and _is_process(int(folder.job_id), "controller")
    ):
        return True
    if running is None or "pid" not in running:
        return False
    if running.get("host") != socket.gethostname():
        return None
    return _is_process(int(running["pid"]), running.get("pid_started"))


def _is_process(pid: int, started: str | int | None) -> bool:
    """Whether ``pid`` is alive and the same process (its start time, from /proc, or for the local
    controller the module it runs): pids are reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if stat[0] == "Z":  # a zombie has ended
        return False
    if started == "controller":
        return b"local_controller" in command or b"submitit.local._local" in command
    return started is None or stat[19] == str(started)


def _past(outcome: str) -> str:
    return {"cancelled": "was cancelled", "timeout": "ran out of time", "node_fail": "lost a node"}.get(
        outcome, outcome
    )


def _readable(stamp: str | None) -> str:
    """``2026-12-01T08:02:31.123+00:00`` -> ``2026-12-01 08:02:31 UTC``."""
    if not stamp:
        return "an unknown time"
    return stamp[:19].replace("T", " ") + (" UTC" if stamp.endswith("+00:00") else "")


def _readable_epoch(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
