"""Trace files: their names, finding them in a folder, and writing one atomically.

``rank<r>_iter<first>_<last>.json[.gz]``, where first and last are the ``ProfilerStep#``
numbers the trace holds. A trace is exported under a temporary name in the same folder and
renamed (:func:`slurm.basics.atomic_path`), so a reader on NFS never sees half of one.
"""

from __future__ import annotations

import dataclasses
import gzip
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from slurm.basics import atomic_path, temporary_path

_TRACE_NAME = re.compile(r"^rank(?P<rank>\d+)_iter(?P<first>\d+)_(?P<last>\d+)\.json(?P<gz>\.gz)?$")


@dataclasses.dataclass(frozen=True, order=True)
class TraceFile:
    rank: int
    first_step: int
    last_step: int
    path: Path = dataclasses.field(compare=False)


def trace_file_name(rank: int, first_step: int, last_step: int, *, gzipped: bool = False) -> str:
    return f"rank{rank}_iter{first_step}_{last_step}.json" + (".gz" if gzipped else "")


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
