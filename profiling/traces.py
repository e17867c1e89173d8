"""Trace file names, and writing files so that a reader on NFS never sees half of one.

Layout: ``<traces root>/<job id>/rank<r>_iter<first>_<last>.json[.gz]``, where first and last
are the ``ProfilerStep#`` numbers the trace holds. A file is written under a temporary name
in the same folder (``.<final name>.<pid>.tmp``: hidden, and not ending in ``.json``, so
neither our readers nor HTA's or Perfetto's folder loaders pick it up), flushed to disk, then
renamed, which is atomic within one folder, on NFS too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TEMP_SUFFIX = ".tmp"
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


def temporary_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path; once the block has written it, it becomes ``path``."""
    temp = temporary_path(path)
    try:
        yield temp
        _fsync(temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str) -> None:
    """``path.write_text(text)`` that a reader never sees half-written (a report is read while
    rank 0 rewrites it, e.g. by ``watch cat``)."""
    with atomic_path(path) as temp:
        temp.write_text(text)


def write_json_atomically(path: Path, document: Any) -> None:
    write_text_atomically(path, json.dumps(document, indent=2, sort_keys=False) + "\n")


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


def open_trace(path: Path) -> Any:
    """A binary file object over a trace, decompressing ``.gz`` transparently."""
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
