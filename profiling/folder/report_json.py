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

from slurm.basics import atomic_path


def encode_report(report: dict[str, Any]) -> bytes:
    """``report`` as JSON, compact (``jq .`` shows it indented)."""
    return msgspec.json.encode(report, enc_hook=_plain)


def write_report_json(path: Path, encoded: bytes) -> None:
    """The encoded report to ``path``, atomically."""
    with atomic_path(path) as temp:
        temp.write_bytes(encoded + b"\n")


class _Verdict(msgspec.Struct):
    straggler: dict[str, Any] | None = None


class _RankClocks(msgspec.Struct):
    rank: int
    host: str | None = None
    compute_ms: float = 0.0
    trace_clocks: list[dict[str, Any]] = []


class _ArchiveFields(msgspec.Struct):
    ranks: list[_RankClocks]
    straggler: dict[str, Any] | None = None


def read_straggler(path: Path) -> dict[str, Any] | None:
    """The straggler verdict alone (``ValueError`` if the file is not a report)."""
    return msgspec.json.decode(path.read_bytes(), type=_Verdict).straggler


def read_archive_fields(path: Path) -> dict[str, Any]:
    """What the archive reads of each rank (its host, compute time and trace clocks) and the
    straggler verdict, as plain dicts shaped as in the whole report."""
    return msgspec.to_builtins(msgspec.json.decode(path.read_bytes(), type=_ArchiveFields))


def _plain(value: Any) -> Any:
    """numpy's scalars as Python's (the standard library's encoder took their float subclass)."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")
