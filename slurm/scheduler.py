"""Asking SLURM about jobs: the one module that runs ``squeue``, ``sacct`` and ``scontrol``, and
the one that knows SLURM's state names.

Tools that follow jobs ask :class:`slurm.queue_view.QueueView`, one cached, rate-limited view
of the queue and of how jobs ended (as submitit's ``InfoWatcher``). Every command is bounded by
:data:`TIMEOUT_S`. A scheduler that does not answer (slurmctld restarting, a machine without
SLURM) is told apart from one that answers "no such job": the first gives None, and each caller
decides what not knowing means.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

TIMEOUT_S = 30.0
# States in which a job runs no more (squeue's, sacct's and scontrol's names); a requeued job
# goes back to PENDING, so PREEMPTED and REQUEUED are not among them.
TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
)
# States of a job that has not ended; sacct can still say one of them for a moment after the job
# left the queue: slurmdbd hears of the end after slurmctld (CI saw "RUNNING" once).
_ACTIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUED", "SIGNALING",
     "STAGE_OUT"}
)  # fmt: skip
_PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD"})
SUCCEEDED = "COMPLETED"
ACCOUNTING_LAG_S = 15.0  # how long a job out of the queue may stay active in accounting
UNKNOWN_END = "ended, state unknown: no accounting"
_UNKNOWN_JOB = "Invalid job id"  # what squeue and scontrol say of a job they do not know


def available() -> bool:
    """Whether this machine can ask SLURM at all."""
    return shutil.which("squeue") is not None


def queue_states(job_ids: Sequence[str]) -> dict[str, str] | None:
    """Job id -> state (``RUNNING``, ``PENDING``, ``COMPLETING``...) of those of ``job_ids`` still in
    SLURM's queue; None if squeue did not answer."""
    if not job_ids:
        return {}
    out = _run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)])
    if out is None:
        return None
    if out.returncode != 0:
        # squeue refuses a list of ids none of which it knows: they all left the queue
        return {} if _UNKNOWN_JOB in out.stderr else None
    return dict(line.split(None, 1) for line in out.stdout.splitlines() if " " in line.strip())


def state_of(job_id: str, states: Mapping[str, str]) -> str:
    """The job's state in a queue as :func:`queue_states` read it (an array's: of a task still
    there, ``<id>_<task>``), "" if it is not there."""
    return next((s for i, s in states.items() if i == job_id or i.startswith(f"{job_id}_")), "")


def is_running(state: str) -> bool:
    """Whether a job in the queue in ``state`` still runs (or waits to) its code."""
    return bool(state) and state not in TERMINAL_STATES and state != "COMPLETING"


def is_pending(state: str) -> bool:
    return state in _PENDING_STATES


def has_ended(state: str) -> bool:
    """Whether a job whose queue state is ``state`` ("" once it has left the queue) ended."""
    return not state or state in TERMINAL_STATES


def end_state(job_id: str, warn: Callable[[str], None] = lambda line: None) -> str:
    """How a job that left the queue ended (see :func:`endings`)."""
    return ending(job_id, warn)[0]


def ending(
    job_id: str, warn: Callable[[str], None] = lambda line: None, lag_s: float = ACCOUNTING_LAG_S
) -> tuple[str, str | None]:
    """How one job that left the queue ended, and when: :func:`endings` of it alone."""
    return endings([job_id], warn, lag_s)[job_id]


def endings(
    job_ids: Sequence[str], warn: Callable[[str], None] = lambda line: None, lag_s: float = ACCOUNTING_LAG_S
) -> dict[str, tuple[str, str | None]]:
    """How jobs that left the queue ended, and when (SLURM's time, or None): from accounting, one
    ``sacct`` for all of them, or, where it has none, ``scontrol`` (which knows a job for
    ``MinJobAge``); ``warn`` hears once why not sacct. A job that left the queue but that
    accounting or ``scontrol`` still call active is ending now (slurmdbd hears of it last): those
    are asked again, for up to ``lag_s``; past that, what they say."""
    deadline = time.monotonic() + lag_s
    found: dict[str, tuple[str, str | None]] = {}
    left, warned = list(dict.fromkeys(job_ids)), False
    while True:
        accounting, why = _accounting(left)
        if why is not None and not warned:
            warn(f"accounting is unavailable ({why}): the job's end state comes from scontrol")
            warned = True
        lagging: dict[str, tuple[str, str | None]] = {}
        for job_id in left:
            said = accounting.get(job_id)
            if said is not None and said[0] not in _ACTIVE_STATES:
                found[job_id] = said
                continue
            controller = _controller_state(job_id)
            if controller is not None and controller[0] not in _ACTIVE_STATES:
                found[job_id] = controller
            elif said is None and controller is None:
                found[job_id] = (UNKNOWN_END, None)  # no accounting, and scontrol forgot it
            else:
                lagging[job_id] = said or controller  # type: ignore[assignment]
        if not lagging or time.monotonic() >= deadline:
            return {**found, **lagging}
        left = list(lagging)
        time.sleep(1.0)


def _accounting(job_ids: Sequence[str]) -> tuple[dict[str, tuple[str, str | None]], str | None]:
    """Each job's state and end in accounting (its first line: the job, not its steps), and why
    there is none where sacct gave nothing at all."""
    out = _run(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,State,End"])
    if out is None:
        return {}, "no answer"
    found: dict[str, tuple[str, str | None]] = {}
    for line in out.stdout.splitlines():
        job, _, rest = line.partition("|")
        state, _, end = rest.partition("|")
        job = job.split("_")[0] if job.split("_")[0] in job_ids else job  # an array's first task
        if job in job_ids and state.split() and job not in found:
            found[job] = (state.split()[0], _time(end))
    if found or out.returncode == 0 and out.stdout.split():
        return found, None
    return found, (out.stderr.strip().splitlines() or ["no record"])[0]


def _controller_state(job_id: str) -> tuple[str, str | None] | None:
    """The job's state and end from ``scontrol`` (None: it does not know the job, or no answer)."""
    detail = _run(["scontrol", "show", "job", "-o", job_id])
    state = re.search(r"\bJobState=(\S+)", detail.stdout) if detail is not None else None
    end = re.search(r"\bEndTime=(\S+)", detail.stdout) if detail is not None else None
    return (state.group(1), _time(end.group(1) if end else "")) if state else None


def _time(text: str) -> str | None:
    """SLURM's time stamp (local time of the controller, no zone), or None for none."""
    text = text.strip()
    return text if text and text not in ("Unknown", "None") else None


def release(job_id: str) -> None:
    """Let a job submitted held (``sbatch --hold``) start (raises if SLURM refuses)."""
    subprocess.run(["scontrol", "release", job_id], check=True, capture_output=True, timeout=TIMEOUT_S)


def cancel(job_id: str) -> None:
    """Cancel a job, if SLURM answers; a job already gone is no error."""
    _run(["scancel", job_id])


def requeue(job_id: str) -> None:
    """Put a running job back in the queue (raises if SLURM refuses)."""
    subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=TIMEOUT_S)


def job_comment(job_id: str) -> str | None:
    """The job's ``Comment`` ("" where none is set); None where SLURM does not answer or knows
    no such job."""
    found = _run(["squeue", "--noheader", "--jobs", job_id, "--format=%k"])
    if found is None or found.returncode != 0 or not found.stdout.strip():
        return None
    text = found.stdout.strip().splitlines()[0].strip()
    return "" if text == "(null)" else text


def set_job_comment(job_id: str, text: str) -> str | None:
    """Set the job's ``Comment`` (the job's own user may); the error in one line where SLURM
    refuses or does not answer, else None."""
    done = _run(["scontrol", "update", f"JobId={job_id}", f"Comment={text}"])
    if done is None:
        return "scontrol did not answer"
    if done.returncode != 0:
        return (
            (done.stderr or done.stdout).strip().splitlines()[0]
            if (done.stderr or done.stdout).strip()
            else (f"scontrol exited {done.returncode}")
        )
    return None


def _run(command: list[str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
