"""``report.json``: written by msgspec, and read in part by the tools that need a few of its
fields.

At 4096 ranks the report is tens of MB (a few KiB per rank: its kernels, collectives, clocks and
scores). The standard library takes seconds over it either way; msgspec writes it in a fraction
of that, and decoding into a struct of the fields a reader needs skips the rest at the speed of
a scan: the archive's fields of 4096 ranks in 0.2 s, where ``json.loads`` takes 2.7.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from profiling.schema.model import Report, Straggler
from profiling.schema.model_ranks import TraceClock
from slurm.common.files import LARGE_FILE_BYTES, atomic_path, read_regular


def encode_report(report: Report) -> bytes:
    """``report`` as JSON, compact (``jq .`` shows it indented)."""
    return msgspec.json.encode(report, enc_hook=plain_scalar)


def write_report_json(path: Path, encoded: bytes) -> None:
    """The encoded report to ``path``, atomically."""
    with atomic_path(path) as temp:
        temp.write_bytes(encoded + b"\n")


class _Verdict(msgspec.Struct):
    straggler: Straggler | None = None


class ArchiveRank(msgspec.Struct):
    """Of a rank, what the archive reads: its host, compute time and trace clocks."""

    rank: int
    host: str
    compute_ms: float
    trace_clocks: list[TraceClock]


class ArchiveFields(msgspec.Struct):
    """The part of ``report.json`` the archive reads (a whole :class:`Report` serves as well)."""

    ranks: list[ArchiveRank]
    straggler: Straggler | None = None


def read_straggler(path: Path) -> Straggler | None:
    """The straggler verdict alone (``ValueError`` if the file is not a report)."""
    return msgspec.json.decode(read_regular(path, LARGE_FILE_BYTES), type=_Verdict).straggler


def read_archive_fields(path: Path) -> ArchiveFields:
    """What the archive reads of the report (``ValueError`` if the file is not a report)."""
    return msgspec.json.decode(read_regular(path, LARGE_FILE_BYTES), type=ArchiveFields)


def plain_scalar(value: Any) -> Any:
    """numpy's scalars as Python's (the standard library's encoder took their float subclass)."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")
