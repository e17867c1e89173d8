"""Where one job's files live on the shared filesystem: the only module that spells the layout.

::

    <traces root>/
    ├── <job id>/                       JobFolder(root, job_id).path
    │   ├── rank<r>_iter<a>_<b>.json    attempt 0's traces: .attempt(0) is the job folder itself
    │   ├── restart<k>/                 attempt k's traces (after k requeues): .attempt(k)
    │   │   └── meta/                   that attempt's report: meta_of(.attempt(k))
    │   ├── meta/                       .meta: .manifest, the report, .hang (hang forensics),
    │   │                               .capture (live capture), .running (while it runs),
    │   │                               .markers (every rank's, to check the folder is shared)
    │   └── checkpoint/                 .checkpoint: training state a requeued attempt resumes from
    └── logs/                           .logs: submitit's per-task logs and pickles, for every job

Everything that is not a trace sits in ``meta/``, because HTA's ``TraceAnalysis`` takes every
``.json``/``.gz`` file of the folder it is given for a trace.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

_META = "meta"
_LOGS = "logs"
_CHECKPOINT = "checkpoint"
_HANG = "hang"
_CAPTURE = "capture"
_RUNNING = "running.json"
_MARKERS = "ranks"
_MANIFEST = "manifest.json"


def logs_folder(root: Path) -> Path:
    """submitit's logs and pickles for every job under ``root``: ``<root>/logs/<job id>_<task>_log.out``.

    One flat folder that exists before submission: Slurm does not create the folder of
    ``--output``, so a per-job folder (submitit's ``%j``) would lose the logs.
    """
    return root / _LOGS


def meta_of(trace_folder: Path) -> Path:
    """The ``meta/`` folder beside a folder of traces (a job folder or one attempt's)."""
    return trace_folder / _META


@dataclasses.dataclass(frozen=True)
class JobFolder:
    root: Path
    job_id: str

    @classmethod
    def at(cls, path: Path) -> JobFolder:
        """The job folder at ``path`` (``<root>/<job id>``)."""
        return cls(path.parent, path.name)

    @property
    def path(self) -> Path:
        return self.root / self.job_id

    @property
    def meta(self) -> Path:
        return meta_of(self.path)

    @property
    def manifest(self) -> Path:
        return self.meta / _MANIFEST

    @property
    def hang(self) -> Path:
        return self.meta / _HANG

    @property
    def capture(self) -> Path:
        """Live capture requests and what the ranks agreed on (``python -m jobs.capture``)."""
        return self.meta / _CAPTURE

    @property
    def running(self) -> Path:
        """Written by rank 0 while the job runs (its size, for ``jobs.capture``); removed at the end."""
        return self.meta / _RUNNING

    @property
    def markers(self) -> Path:
        """One file per rank, left at the start to check that every node sees this folder."""
        return self.meta / _MARKERS

    @property
    def checkpoint(self) -> Path:
        return self.path / _CHECKPOINT

    @property
    def logs(self) -> Path:
        return logs_folder(self.root)

    def attempt(self, restart_count: int) -> Path:
        """Where attempt ``restart_count`` writes its traces.

        SLURM keeps the job id across a requeue; a folder per attempt keeps the first
        attempt's traces, and one trace per rank and window in each folder, as trace viewers
        and HTA expect.
        """
        if restart_count < 0:
            raise ValueError(f"restart_count {restart_count} must be 0 or more")
        return self.path if restart_count == 0 else self.path / f"restart{restart_count}"

    def attempts(self) -> list[Path]:
        """The attempt folders that exist, attempt 0 (the job folder) first."""
        found = [self.path] if self.path.is_dir() else []
        restart = 1
        while self.attempt(restart).is_dir():
            found.append(self.attempt(restart))
            restart += 1
        return found

    def attempt_name(self, restart_count: int) -> str:
        """``attempt(k)`` relative to the job folder, as the manifest records it ("." for attempt 0)."""
        return str(self.attempt(restart_count).relative_to(self.path))


def is_job_folder(path: Path) -> bool:
    """A folder a job wrote (it has ``meta/`` or traces), as opposed to ``logs/`` or anything else."""
    return (
        path.is_dir()
        and path.name != _LOGS
        and (meta_of(path).is_dir() or any(path.glob("rank*_iter*.json*")))
    )
