"""Trace files: their names, finding them in a folder, and writing one atomically.

The toolkit names its traces ``rank<r>_iter<first>_<last>.json[.gz]``, where first and last are
the ``ProfilerStep#`` numbers the trace holds. A trace is exported under a temporary name in the
same folder and renamed (:func:`slurm.common.files.atomic_path`), so a reader on NFS never sees half
of one. The report also reads traces named otherwise (:func:`find_traces`): torch's
``tensorboard_trace_handler`` writes ``<worker>.<time>.pt.trace.json[.gz]``, one folder per
worker or all in one, and other tools name theirs as they like; their rank and steps are
read from inside them.
"""

from __future__ import annotations

import dataclasses
import gzip
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from slurm.common.files import atomic_path, temporary_path

_TRACE_NAME = re.compile(r"^rank(?P<rank>\d+)_iter(?P<first>\d+)_(?P<last>\d+)\.json(?P<gz>\.gz)?$")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[_-]?(\d+)", re.IGNORECASE)
TRACE_SUFFIXES = (".json", ".json.gz")
# What a job folder holds beside its traces: never searched for traces.
_NOT_TRACES = frozenset({"meta", "logs", "checkpoint"})


@dataclasses.dataclass(frozen=True, order=True)
class TraceFile:
    """A trace and the steps it holds: from its name (the toolkit's), or once read (any other)."""

    rank: int
    first_step: int
    last_step: int
    path: Path = dataclasses.field(compare=False)
    name: str = dataclasses.field(default="", compare=False)  # in its folder of traces; default: the file's

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.path.name)

    @property
    def source(self) -> TraceSource:
        """The file, as the report reads it."""
        folder = self.path.parents[len(Path(self.name).parts) - 1]
        return TraceSource(folder, self.name)


def trace_file_name(rank: int, first_step: int, last_step: int, *, gzipped: bool = False) -> str:
    return f"rank{rank}_iter{first_step}_{last_step}.json" + (".gz" if gzipped else "")


@dataclasses.dataclass(frozen=True, order=True)
class TraceSource:
    """A file of a folder of traces, before it is read: what the report reads and keeps a record of."""

    folder: Path  # the folder of traces searched (a job folder, an attempt's, anyone's)
    name: str  # relative to it: rank0_iter15_17.json, worker3/host.1697.pt.trace.json

    @property
    def path(self) -> Path:
        return self.folder / self.name

    @property
    def named(self) -> TraceFile | None:
        """What its name says, if the toolkit named it (rank and steps): its content must agree."""
        return parse_trace_name(self.path)

    @property
    def rank_in_name(self) -> int | None:
        """The rank its name gives (``rank<r>`` anywhere in it), for a trace that says none."""
        found = _RANK_IN_NAME.search(self.name.rsplit("/", 1)[-1])
        return int(found[1]) if found else None


def find_traces(folder: Path) -> list[TraceSource]:
    """Every file of ``folder`` and of its folders one level down that may hold a trace
    (``*.json``, ``*.json.gz``), but for the toolkit's own files (``meta/``, ``logs/``, later
    attempts' ``restart<k>/``) and temporary files; by name."""
    if not folder.is_dir():
        return []
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and entry.name not in _NOT_TRACES and not _is_attempt(entry.name):
            found += [
                f"{entry.name}/{inner.name}" for inner in sorted(entry.iterdir()) if _may_be_trace(inner)
            ]
        elif _may_be_trace(entry):
            found.append(entry.name)
    return [TraceSource(folder, name) for name in found]


def _may_be_trace(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES) and not path.name.startswith(".")


def _is_attempt(name: str) -> bool:
    return name.startswith("restart") and name[len("restart") :].isdigit()


def parse_trace_name(path: Path) -> TraceFile | None:
    match = _TRACE_NAME.match(path.name)
    if match is None:
        return None
    return TraceFile(int(match["rank"]), int(match["first"]), int(match["last"]), path)


def list_traces(folder: Path) -> list[TraceFile]:
    """The complete traces in ``folder``, by rank then step; temporary files are skipped."""
    if not folder.is_dir():
        return []
    found = (parse_trace_name(path) for path in folder.iterdir())
    return sorted(trace for trace in found if trace is not None)


def export_trace(export: Callable[[str], None], path: Path) -> None:
    """Write a trace through ``export(file name)`` (the profiler's own exporter) atomically.

    A ``.gz`` path is compressed here rather than by the exporter, so the temporary file can
    keep a name no trace reader matches.
    """
    if not path.name.endswith(".gz"):
        with atomic_path(path) as temp:
            export(str(temp))
        return
    plain = temporary_path(path.with_suffix(""))
    try:
        export(str(plain))
        with (
            atomic_path(path) as packed,
            open(plain, "rb") as source,
            gzip.open(packed, "wb", compresslevel=6) as sink,
        ):
            shutil.copyfileobj(source, sink, length=1 << 20)
    finally:
        plain.unlink(missing_ok=True)
