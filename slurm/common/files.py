"""Files the toolkit writes so that a reader on NFS never sees half of one (written beside, then
renamed), and reads back bounded: a regular file only, never larger than it expects."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TEMP_SUFFIX = ".tmp"
# what the toolkit reads back at most: a small JSON of its own (a request, a marker), and a large
# file (a step log of a million steps, a dense trace's record, report.json at thousands of ranks)
SMALL_FILE_BYTES = 16 << 20
LARGE_FILE_BYTES = 2 << 30


def temporary_path(path: Path) -> Path:
    """``.<name>.<pid>.tmp`` beside ``path``: hidden, and not ending in ``.json``, so that no trace
    reader (ours, HTA's or Perfetto's folder loaders) picks it up."""
    return path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")


@contextlib.contextmanager
def atomic_path(path: Path, *, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path; once the block has written it, it becomes ``path``: flushed to
    disk (unless not ``durable``: a copy that can be made again), then renamed, which is atomic
    within one folder, on NFS too."""
    temp = temporary_path(path)
    try:
        yield temp
        if durable:
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


class NotARegularFile(OSError):
    """A path read back that is no regular file (a FIFO, a device, a directory), or too large."""


def read_regular(path: Path, max_bytes: int) -> bytes:
    """A file the toolkit reads back, as bytes: a regular file only, at most ``max_bytes``.

    Opened without blocking, so that a FIFO put where a file was expected (a sibling job's
    summary, by mistake or malice) is refused at once instead of hanging the reader, and the job's
    end with it; a device or a directory is refused too. Raises FileNotFoundError where there is
    none, :class:`NotARegularFile` (an OSError) for the rest, with the path and why.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NotARegularFile(f"{path}: not a regular file (a FIFO, a device or a directory)")
        if status.st_size > max_bytes:
            raise NotARegularFile(f"{path}: {status.st_size} bytes, more than the {max_bytes} read back")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            # the size it has, and a byte: read(max_bytes + 1) allocated the bound for every
            # file (0.2 ms a step log, 0.7 s of the run map of 4096 ranks)
            found = handle.read(status.st_size + 1)
            if len(found) > status.st_size:  # it grew while read: the rest, up to the bound
                found += handle.read(max_bytes + 1 - len(found))
    finally:
        os.close(fd)
    if len(found) > max_bytes:  # grew while read
        raise NotARegularFile(f"{path}: more than the {max_bytes} bytes read back")
    return found


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
