"""Where one job's files live on the shared filesystem: the only module that spells the layout,
its folders and the names of the files in them (trace names: :mod:`profiling.folder.traces`).

::

    <traces root>/
    └── <job id>/                       JobFolder(root, job_id).path
        ├── rank<r>_iter<a>_<b>.json    attempt 0's traces: .attempt(0) is the job folder itself
        ├── restart<k>/                 attempt k's traces (after k requeues): .attempt(k)
        │   └── meta/                   that attempt's report: ReportFiles.of(.attempt(k))
        ├── meta/                       .meta
        │   ├── manifest.json           .manifest
        │   ├── submitted.json          .submitted: its size, from the moment it was submitted
        │   ├── running.json            .running: while the job runs, its size and rank 0's process
        │   ├── report.json, .md, .png  ReportFiles.of(.path): the cross-rank report
        │   ├── summary.json            the job's line in its history (profiling.history.summary)
        │   ├── merged_trace.tar        ReportFiles.archive: ranks' traces as one Perfetto timeline
        │   ├── merged_trace.json.gz    ReportFiles.merged: the same, re-encoded (--merged-json)
        │   ├── analysis/               analysis_record(t), lanes_record(t): what the report keeps of a trace
        │   ├── steps/                  .step_log(r, k): every rank's time for every step
        │   ├── run.png                 ReportFiles.run_plot: the run's rank x step map
        │   ├── compare-<job>/          ReportFiles.compare(job): two jobs compared
        │   ├── ranks/rank<r>.json      .marker(r): every rank's, to check the folder is shared
        │   ├── capture/                .capture_request(n), .capture_accepted(n)
        │   ├── hang/                   .hang_dump(r), .hang_verdict, .hang_markdown
        │   ├── flight_recorder/        .flight_recorder_dump(r): torch's own per-rank dumps (fr_trace)
        │   └── oom/                    .oom_dump(r), .oom_snapshot(r): a rank out of memory
        ├── checkpoint/                 .checkpoint_state(r), .checkpoint_rng(r): what a requeued
        │                               attempt resumes from
        └── logs/                       .logs: submitit's per-task logs and pickles

Everything that is not a trace sits in ``meta/`` or ``logs/``, because HTA's ``TraceAnalysis``
takes every ``.json``/``.gz`` file of the folder it is given for a trace (it does not descend
into folders). One job is one folder: to copy, list or delete.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from profiling.folder.traces import list_traces

_META = "meta"
_LOGS = "logs"
_CHECKPOINT = "checkpoint"
_HANG = "hang"
FLIGHT_RECORDER_PREFIX = "rank_"  # torch's NCCL dumps on timeout are named so too (TORCH_FR_DUMP_TEMP_FILE)
_OOM = "oom"
_CAPTURE = "capture"
_MARKERS = "ranks"
_RESTART = "restart{}"
_STEPS = "steps"
_STEP_LOG = "rank{}.steps"  # attempt 0's; attempt k's: rank<r>.restart<k>.steps
_STEP_LOG_NAME = re.compile(r"rank(\d+)(?:\.restart\d+)?\.steps")
_PER_RANK = "rank{}.json"  # a rank's marker, a rank's hang dump
_REQUEST = "request-{}.json"
_ACCEPTED = "accepted-{}.json"


def meta_of(trace_folder: Path) -> Path:
    """The ``meta/`` folder beside a folder of traces (a job folder or one attempt's)."""
    return trace_folder / _META


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    """The cross-rank report of a folder of traces, in its ``meta/`` (or where ``--out`` says)."""

    folder: Path

    @classmethod
    def of(cls, trace_folder: Path) -> ReportFiles:
        return cls(meta_of(trace_folder))

    @property
    def json(self) -> Path:
        return self.folder / "report.json"

    @property
    def markdown(self) -> Path:
        return self.folder / "report.md"

    @property
    def plot(self) -> Path:
        return self.folder / "report.png"

    @property
    def run_plot(self) -> Path:
        return self.folder / "run.png"

    @property
    def page(self) -> Path:
        """The whole report as one page that works offline (:mod:`profiling.report.page`)."""
        return self.folder / "report.html"

    @property
    def clocks(self) -> Path:
        """The last report's clock alignment, taken again while its inputs are the same."""
        return self.folder / "clocks.json"

    @property
    def merged(self) -> Path:
        return self.folder / "merged_trace.json.gz"

    @property
    def kept_path(self) -> Path:
        """The last report's critical path and replay, taken again while their inputs are the same."""
        return self.folder / "critical_path.msgpack"

    @property
    def ideal_trace(self) -> Path:
        """Each rank's step replayed as measured and ideal, side by side (Perfetto opens it)."""
        return self.folder / "ideal_trace.json.gz"

    @property
    def archive(self) -> Path:
        """Several ranks' traces as one Perfetto timeline (:mod:`profiling.archive`)."""
        return self.folder / "merged_trace.tar"

    def compare(self, other: str) -> ComparisonFiles:
        """Where this job's comparison with job ``other`` goes (``python -m jobs.commands.compare``)."""
        return ComparisonFiles(self.folder / f"compare-{other}")


@dataclasses.dataclass(frozen=True)
class ComparisonFiles:
    """Two jobs compared, in a folder of their own."""

    folder: Path

    @property
    def json(self) -> Path:
        return self.folder / "compare.json"

    @property
    def markdown(self) -> Path:
        return self.folder / "compare.md"

    @property
    def plot(self) -> Path:
        return self.folder / "compare.png"


@dataclasses.dataclass(frozen=True)
class JobFolder:
    root: Path
    job_id: str

    @classmethod
    def at(cls, path: Path) -> JobFolder:
        """The job folder at ``path`` (``<root>/<job id>``)."""
        return cls(path.parent, path.name)

    @classmethod
    def of_traces(cls, trace_folder: Path) -> JobFolder:
        """The job folder of a folder of traces: itself, or the one above an attempt's."""
        path = trace_folder.absolute()
        restart = _RESTART.format("")
        if path.name.startswith(restart) and path.name[len(restart) :].isdigit():
            return cls.at(path.parent)
        return cls.at(path)

    @property
    def path(self) -> Path:
        return self.root / self.job_id

    @property
    def meta(self) -> Path:
        return meta_of(self.path)

    @property
    def manifest(self) -> Path:
        return self.meta / "manifest.json"

    @property
    def submitted(self) -> Path:
        """What the job was submitted with (nodes, tasks), by ``submit.py`` or the batch script."""
        return self.meta / "submitted.json"

    @property
    def running(self) -> Path:
        """Written by rank 0 while the job runs (its size, for ``jobs.capture``); removed at the end."""
        return self.meta / "running.json"

    @property
    def report(self) -> ReportFiles:
        return ReportFiles.of(self.path)

    @property
    def hang(self) -> Path:
        return self.meta / _HANG

    def hang_dump(self, rank: int) -> Path:
        """What rank ``rank`` was doing when it made no progress (``jobs.runtime.watchdog``)."""
        return self.hang / _PER_RANK.format(rank)

    def hang_dumps(self) -> list[Path]:
        return sorted(self.hang.glob(_PER_RANK.format("*")))

    @property
    def flight_recorder(self) -> Path:
        """torch's own dumps of its flight recorder, ``rank_<r>`` (``fr_trace`` reads the folder)."""
        return self.meta / "flight_recorder"

    @property
    def hang_verdict(self) -> Path:
        return self.hang / "hang.json"

    @property
    def hang_markdown(self) -> Path:
        return self.hang / "hang.md"

    @property
    def oom(self) -> Path:
        return self.meta / _OOM

    def oom_dump(self, rank: int) -> Path:
        """What rank ``rank`` held when it ran out of memory (``jobs.runtime.oom``)."""
        return self.oom / _PER_RANK.format(rank)

    def oom_snapshot(self, rank: int) -> Path:
        """Its CUDA allocator's history (``--memory-history``), for pytorch.org/memory_viz."""
        return self.oom / f"rank{rank}.snapshot.pickle"

    def oom_dumps(self) -> list[Path]:
        return sorted(self.oom.glob(_PER_RANK.format("*")))

    @property
    def capture(self) -> Path:
        """Live capture requests and what the ranks agreed on (``python -m jobs.commands.capture``)."""
        return self.meta / _CAPTURE

    def capture_request(self, number: int) -> Path:
        return self.capture / _REQUEST.format(number)

    def capture_requests(self) -> list[Path]:
        return sorted(self.capture.glob(_REQUEST.format("*")))

    def capture_accepted(self, number: int) -> Path:
        return self.capture / _ACCEPTED.format(number)

    @property
    def markers(self) -> Path:
        """One file per rank, left at the start to check that every node sees this folder."""
        return self.meta / _MARKERS

    def marker(self, rank: int) -> Path:
        return self.markers / _PER_RANK.format(rank)

    @property
    def steps(self) -> Path:
        return self.meta / _STEPS

    def step_log(self, rank: int, restart_count: int = 0) -> Path:
        """Rank ``rank``'s times for every step of attempt ``restart_count``
        (:mod:`profiling.folder.step_log`)."""
        name = _STEP_LOG.format(rank if restart_count == 0 else f"{rank}.{_RESTART.format(restart_count)}")
        return self.steps / name

    def step_logs(self) -> list[Path]:
        """Every rank's step logs, of every attempt."""
        return sorted(self.steps.glob(_STEP_LOG.format("*")))

    def step_logs_by_rank(self) -> dict[int, list[Path]]:
        """Each rank's step logs, of every attempt, by their names (no other file)."""
        by_rank: dict[int, list[Path]] = {}
        for path in self.step_logs():
            if named := _STEP_LOG_NAME.fullmatch(path.name):
                by_rank.setdefault(int(named.group(1)), []).append(path)
        return by_rank

    @property
    def checkpoint(self) -> Path:
        return self.path / _CHECKPOINT

    def checkpoint_state(self, rank: int | None = None) -> Path:
        """The workload's state and the step to resume at: one rank's, or (None) the one state
        rank 0 writes where every rank holds the same."""
        return self.checkpoint / ("state.pt" if rank is None else f"state-rank{rank}.pt")

    def checkpoint_rng(self, rank: int) -> Path:
        return self.checkpoint / f"rng-rank{rank}.pt"

    @property
    def logs(self) -> Path:
        """submitit's logs and pickles of this job: ``<job id>_<task>_log.out``, ..."""
        return self.path / _LOGS

    def attempt(self, restart_count: int) -> Path:
        """Where attempt ``restart_count`` writes its traces.

        SLURM keeps the job id across a requeue; a folder per attempt keeps the first attempt's
        traces, and one trace per rank and window in each folder, as trace viewers and HTA expect."""
        if restart_count < 0:
            raise ValueError(f"restart_count {restart_count} must be 0 or more")
        return self.path if restart_count == 0 else self.path / _RESTART.format(restart_count)

    def attempts(self) -> list[Path]:
        """The attempt folders that exist, attempt 0 (the job folder) first."""
        found = [self.path] if self.path.is_dir() else []
        while found and (later := self.attempt(len(found))).is_dir():
            found.append(later)
        return found

    def attempt_name(self, restart_count: int) -> str:
        """``attempt(k)`` relative to the job folder, as the manifest records it ("." for attempt 0)."""
        return str(self.attempt(restart_count).relative_to(self.path))


def analysis_record(trace: Path, folder: Path | None = None) -> Path:
    """Where a trace's analysis record goes (:mod:`profiling.analysis.per_trace.record`): ``meta/analysis/``
    of its folder of traces (``folder``; default: the trace's own), named after it (a trace one
    level down, ``worker3/x.json``, as ``worker3__x.json``)."""
    folder = trace.parent if folder is None else folder
    name = trace.relative_to(folder).as_posix().replace("/", "__")
    return meta_of(folder) / "analysis" / f"{name}.analysis.json"


def lanes_record(trace: Path, folder: Path | None = None) -> Path:
    """Where the lanes of a trace's analysis record are kept: beside the record, as msgpack."""
    record = analysis_record(trace, folder)
    return record.with_name(record.name.removesuffix(".analysis.json") + ".lanes.msgpack")


def submitit_folder(root: Path) -> Path:
    """The folder submitit is given: each job's ``logs/``, its id filled in by submitit (``%j``)."""
    return JobFolder(root, "%j").logs


def job_folders(root: Path) -> list[JobFolder]:
    """The job folders under a traces root, by name: the one way every command reads a root
    (a symlink is followed to no folder: a root is the jobs' own)."""
    with os.scandir(root) as entries:
        found = sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False))
    return [JobFolder.at(path) for path in found if is_job_folder(path)]


def is_job_folder(path: Path) -> bool:
    """A folder a job wrote (it has ``meta/``, ``logs/`` or traces), as opposed to anything else
    under the traces root (a flat ``logs/`` of the layout before one folder per job, say)."""
    folder = JobFolder.at(path)
    return (
        path.is_dir()
        and path.name != _LOGS
        and (folder.meta.is_dir() or folder.logs.is_dir() or bool(list_traces(path)))
    )
