"""Several ranks' traces as one Perfetto timeline (the command: ``python -m jobs.commands.archive
<folder> [--ranks SPEC]``).

Perfetto (ui.perfetto.dev and trace_processor, since v58.2) opens a ZIP or TAR of several traces
as one merged trace, configured by a ``perfetto_manifest.json`` inside it (format version 1,
Perfetto's ``docs/reference/perfetto-manifest.md``; the model: ``docs/concepts/merging-traces.md``).
The archive is a plain TAR, as Perfetto's own ``trace_processor util merge`` writes: it holds
the traces unchanged, byte for byte (copied by the kernel, ``copy_file_range``: a TAR, unlike a
ZIP, needs no checksum of the data, so no byte passes through Python). Its manifest gives each
file

- a machine, ``rank 8 (node2)``: Kineto numbers its GPU lanes 0-7 on every node, and separate
  machines keep them apart (a rank's windows share its machine);
- its clock: Chrome JSON has no clock of its own, so each file is pinned to a reference file
  with ``offset_ns``, the shift the report's clock alignment measured
  (:mod:`profiling.analysis.clocks.alignment`, read from ``report.json``: no trace is read again). The
  reference is the file whose clock is earliest, so that every offset is 0 or more and no
  event moves before the start of the merged timeline (Perfetto drops those).

Its ``attributes`` say the job and how each offset was found. A browser holds about 2 GB, so
by default the report's archive takes whole traces of the ranks that matter, within a budget:
the first rank, the straggler (or the candidate), the rank that computes least, then one rank
per node; this command makes one of any ranks later.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from profiling.folder.budgets import ARCHIVE_BUDGET_BYTES
from profiling.folder.report_json import ArchiveFields, ArchiveRank
from profiling.ranks import format_ranks
from profiling.schema import model
from profiling.schema.model_ranks import TraceClock
from slurm.common.files import atomic_path

_COPY_CHUNK = 1 << 22
# plain ustar headers: the UI's TAR reader takes no longer names (nor PAX records)
_TAR_FORMAT: Literal[0] = tarfile.USTAR_FORMAT
MANIFEST_NAME = "perfetto_manifest.json"
_ATTRIBUTE_PREFIX = "slurm_profiling."


class ArchiveError(ValueError):
    """An archive that cannot be made; the message names the argument and the fix."""


@dataclasses.dataclass(frozen=True)
class Member:
    """One trace in the archive, where the report put its clock."""

    path: Path
    rank: int
    host: str
    shift_us: float  # onto the first rank's clock (report.json's trace_clocks)
    clock: TraceClock

    @property
    def machine(self) -> str:
        return f"rank {self.rank} ({self.host})" if self.host else f"rank {self.rank}"

    @property
    def name(self) -> str:
        """Its name in the archive: the trace's in its folder of traces, one level flattened
        (``worker3/x.json`` as ``worker3__x.json``), so that names stay unique."""
        return self.clock.trace.replace("/", "__")


def default_ranks(report: model.Report | ArchiveFields) -> list[int]:
    """The ranks that matter, in order: the first, the straggler (or the candidate), the one
    that computes least, then the first rank of each node."""
    ranks: Sequence[model.RankReport | ArchiveRank] = report.ranks
    straggler: model.Straggler | None = report.straggler
    order: list[int | None] = [ranks[0].rank]
    if straggler is not None:  # an undetermined verdict names no rank and, maybe, a candidate
        order.append(straggler.rank if straggler.rank is not None else straggler.candidate)
    order.append(min(ranks, key=lambda r: (r.compute_ms, r.rank)).rank)
    hosts: dict[str, int] = {}
    for r in ranks:
        hosts.setdefault(r.host, r.rank)
    order += list(hosts.values())
    return list(dict.fromkeys(rank for rank in order if rank is not None))


def members(folder: Path, report: model.Report | ArchiveFields, ranks: Sequence[int]) -> list[Member]:
    by_rank = {r.rank: r for r in report.ranks}
    missing = [rank for rank in ranks if rank not in by_rank]
    if missing:
        raise ArchiveError(
            f"--ranks: rank(s) {format_ranks(missing)} have no trace in {folder} (it has rank(s) "
            f"{format_ranks(by_rank)}). HINT: name ranks that were profiled"
        )
    return [
        Member(folder / clock.trace, rank, by_rank[rank].host, clock.shift_us, clock)
        for rank in ranks
        for clock in by_rank[rank].trace_clocks
    ]


def within_budget(chosen: list[Member], budget_bytes: float | None) -> tuple[list[Member], list[int]]:
    """Whole ranks, in order, while their traces fit (the first always); and the ranks left out."""
    kept: list[Member] = []
    left_out: list[int] = []
    total = 0
    for rank in dict.fromkeys(m.rank for m in chosen):
        mine = [m for m in chosen if m.rank == rank]
        size = sum(m.path.stat().st_size for m in mine)
        if kept and budget_bytes is not None and total + size > budget_bytes:
            left_out.append(rank)
            continue
        kept, total = kept + mine, total + size
    return kept, left_out


def manifest(job: str, chosen: Sequence[Member]) -> dict[str, Any]:
    """The ``perfetto_manifest`` of the archive of these traces (version 1)."""
    reference = min(chosen, key=lambda m: (m.shift_us, m.rank))
    files = []
    for member in chosen:
        entry: dict[str, Any] = {"path": member.name, "machine": {"name": member.machine}}
        if member is not reference:
            # at a common instant the file reads T when the reference reads T + offset_ns;
            # no "clock" on either side: Chrome JSON is clockless, each file pinned to the other
            offset_ns = round((member.shift_us - reference.shift_us) * 1000)
            entry["clocks"] = {"sync_to": {"file": reference.name}, "offset_ns": offset_ns}
        files.append(entry)
    attributes: dict[str, str | int] = {f"{_ATTRIBUTE_PREFIX}job": job}
    for member in chosen:
        attributes[f"{_ATTRIBUTE_PREFIX}clock.{member.name}"] = _how(member.clock)
    return {"perfetto_manifest": {"version": 1, "files": files, "attributes": attributes}}


def _how(clock: TraceClock) -> str:
    if clock.method == "base time":
        return f"base time: {clock.note}" if clock.note else "base time"
    if clock.method == "reference":
        return "reference: the first rank's clock"
    # a clock of one host may pair no collective: no residual then, and its shift still exact
    residual, uncertainty = clock.residual_us, clock.uncertainty_us
    return (
        f"{clock.method}: {clock.pairs} pairs"
        + (f", residual {residual:.1f} us" if residual is not None else "")
        + (f", +/- {uncertainty:.2f} us" if uncertainty is not None else "")
        + f", shift {clock.shift_us:.1f} us"
    )


def write_archive(
    folder: Path,
    report: model.Report | ArchiveFields,
    path: Path,
    *,
    ranks: Sequence[int] | None = None,
    budget_bytes: float | None = ARCHIVE_BUDGET_BYTES,
) -> model.Archive:
    """Write the archive of ``ranks`` (default: every rank where all fit in ``budget_bytes``,
    else :func:`default_ranks` within it) atomically to ``path``; returns what ``report.json``
    says of it."""
    started = time.perf_counter()
    every = members(folder, report, [r.rank for r in report.ranks])
    if ranks is None and (budget_bytes is None or sum(m.path.stat().st_size for m in every) <= budget_bytes):
        chosen, left_out = every, list[int]()
    elif ranks is None:
        chosen, left_out = within_budget(members(folder, report, default_ranks(report)), budget_bytes)
    else:  # asked for by name: every one, whatever the budget
        chosen, left_out = members(folder, report, ranks), []
    # compact: trace_processor knows a manifest by its first bytes, '{"perfetto_manifest"'
    document = json.dumps(manifest(folder.name, chosen), separators=(",", ":")).encode()
    if not _is_current(path, document, chosen):
        # not fsynced: a copy of traces that stay beside it (the rename still keeps readers
        # from a half-written archive); hundreds of MB flushed to disk took longer than the copy
        with atomic_path(path, durable=False) as temp, temp.open("wb", buffering=0) as out:
            _header(out, tarfile.TarInfo(MANIFEST_NAME), len(document))
            out.write(document)
            _pad(out, len(document))
            for member in chosen:
                _add_trace(out, member)
            out.write(tarfile.NUL * (2 * tarfile.BLOCKSIZE))  # the end-of-archive marker
    return model.Archive(
        file=path.name,
        ranks=format_ranks({m.rank for m in chosen}),
        reference_rank=min(chosen, key=lambda m: (m.shift_us, m.rank)).rank,
        traces=[m.name for m in chosen],
        bytes=sum(m.path.stat().st_size for m in chosen),
        archive_bytes=path.stat().st_size,
        budget_bytes=budget_bytes,
        left_out=format_ranks(left_out),
        seconds=round(time.perf_counter() - started, 3),
    )


def _add_trace(out: io.RawIOBase, member: Member) -> None:
    """The trace as it is, gzipped or not (copying is a tenth of deflating: --gzip-traces for
    smaller traces, and archives)."""
    with member.path.open("rb", buffering=0) as source:
        stat = os.fstat(source.fileno())
        info = tarfile.TarInfo(member.name)
        info.mtime, info.mode = int(stat.st_mtime), 0o644
        _header(out, info, stat.st_size)
        _copy(source, out, stat.st_size)
        _pad(out, stat.st_size)


def _header(out: io.RawIOBase, info: tarfile.TarInfo, size: int) -> None:
    """A member's header, for ``size`` bytes that follow it."""
    info.size = size
    out.write(info.tobuf(_TAR_FORMAT))


def _pad(out: io.RawIOBase, size: int) -> None:
    """Zeros after a member's ``size`` bytes, to the next block."""
    out.write(tarfile.NUL * (-size % tarfile.BLOCKSIZE))


def _copy(source: io.RawIOBase, out: io.RawIOBase, size: int) -> None:
    """``size`` bytes by the kernel, from file to file; by Python where the kernel cannot
    (another filesystem on an old kernel, a filesystem without it)."""
    left = size
    try:
        while left > 0:
            copied = os.copy_file_range(source.fileno(), out.fileno(), left)
            if copied == 0:  # the file is shorter than it was: the archive would be corrupt
                name = getattr(source, "name", "a trace")
                raise ArchiveError(f"{name} shrank while it was archived. HINT: report again")
            left -= copied
    except OSError:
        if left != size:
            raise
        shutil.copyfileobj(source, out, _COPY_CHUNK)


def _is_current(path: Path, document: bytes, chosen: Sequence[Member]) -> bool:
    """An archive written since its traces last changed, of the same traces and clocks (a warm
    report): kept as it is."""
    try:
        if path.stat().st_mtime < max(m.path.stat().st_mtime for m in chosen):
            return False
        with tarfile.open(path, "r:") as archive:
            names = archive.getnames()
            manifest = archive.extractfile(MANIFEST_NAME)
            return (
                manifest is not None
                and manifest.read() == document
                and sorted(names) == sorted([MANIFEST_NAME, *(m.name for m in chosen)])
            )
    except (OSError, KeyError, tarfile.TarError):
        return False
