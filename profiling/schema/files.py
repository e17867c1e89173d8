"""The files the toolkit writes and reads back (beside ``report.json``), typed: each is a
msgspec Struct of this room, read by :func:`read_file` and written by :func:`write_file`, and
nothing else opens them.

Each carries ``schema_version``, as report.json does. It changes when a field changes meaning
or goes away (a new field is a new field, with a default). A file without it was written
before the files were typed, in the same form as version 1, and is read as such; a file of a
newer version than this toolkit knows, or one that does not hold to its Struct, is refused with
:class:`FileRefused`: one line that names the file and what is wrong with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, TypeVar

import msgspec

from slurm.common.files import NotARegularFile, atomic_path, read_regular

T = TypeVar("T", bound="Versioned")
# an age or a size nobody writes: a file claiming more is damaged, not big
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_MAX_BYTES = 64 << 20  # a manifest of 100 000 ranks is ~60 MB; a dump is kilobytes


class FileRefused(ValueError):
    """A typed file that cannot be read, in one line: its path and what is wrong."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


class Versioned(msgspec.Struct, kw_only=True):
    """A typed file: ``schema_version`` first, then the file's own fields."""

    VERSION: ClassVar[int] = 1
    schema_version: Annotated[int, msgspec.Meta(ge=1)] = 1


def read_file(path: Path, kind: type[T]) -> T:
    """``path`` as a ``kind``; raises :class:`FileRefused` (and FileNotFoundError where there is
    no such file, which a reader usually takes as "not written yet")."""
    try:
        raw = read_regular(path, _MAX_BYTES)
    except FileNotFoundError:
        raise
    except NotARegularFile as error:
        reason = str(error).removeprefix(f"{path}: ")
        raise FileRefused(path, f"{reason}: not a file the toolkit wrote") from error
    except OSError as error:
        raise FileRefused(path, f"cannot be read ({error.strerror or error})") from error
    try:
        value = msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as error:
        raise FileRefused(path, f"not a {kind.__name__} file: {error}") from error
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as error:
        raise FileRefused(path, f"not JSON ({first_line(error)})") from error
    if value.schema_version > kind.VERSION:
        raise FileRefused(
            path,
            f"schema_version {value.schema_version}, newer than the {kind.VERSION} this toolkit reads. "
            "HINT: read it with the toolkit that wrote it",
        )
    return value


def write_file(path: Path, value: Versioned) -> None:
    """``value`` to ``path``, atomically (a reader on NFS never sees half of it), held to its
    Struct first as :func:`read_file` will hold it: a Struct's constraints (a count below 0, a
    value of another type) hold when decoded, not when made, and a file its reader would refuse
    fails here, in its writer, with the field named."""
    encoded = msgspec.json.encode(value)
    msgspec.json.decode(encoded, type=type(value))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as temp:
        temp.write_bytes(msgspec.json.format(encoded, indent=2) + b"\n")


def first_line(error: BaseException) -> str:
    """An error in one line of at most 200 characters, for a line that names its file."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]
