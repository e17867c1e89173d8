"""A rank that ran out of memory, as its dump in ``meta/oom/rank<r>.json`` says (written by
:mod:`jobs.runtime.oom`), in one line a person reads first: what ``--wait``, ``list``, the
failure's tail and report.md say. Torch-free: read on the login node."""

from __future__ import annotations

from profiling.analysis.run.memory_growth import format_mib
from profiling.folder.layout import JobFolder
from profiling.schema.dumps import OomDump
from profiling.schema.files import FileRefused, read_file

MEMORY_VIZ = "https://pytorch.org/memory_viz"


def read_oom_dumps(folder: JobFolder) -> tuple[list[OomDump], list[str]]:
    """Every rank's out-of-memory dump, first the rank that ran out first, and a line for each
    dump that does not read."""
    found, refused = [], []
    for path in folder.oom_dumps():
        try:
            found.append(read_file(path, OomDump))
        except (FileRefused, FileNotFoundError) as error:
            refused.append(f"an out-of-memory dump was not read: {error}")
    return sorted(found, key=lambda dump: (dump.written_at, dump.rank)), refused


def oom_line(dump: OomDump) -> str:
    """``rank 3 ran out of memory at step 57: 78.2 of 79.6 GiB allocated (cuda:3)``."""
    allocated, total = dump.allocated_bytes, dump.total_bytes
    held = f"{_gib(allocated)}" + (f" of {_gib(total)}" if total else "") + " GiB allocated"
    on_cpu = dump.device.startswith("cpu")
    if on_cpu:
        held = f"{_gib(allocated)} GiB resident" + (f" of a {_gib(total)} GiB limit" if total else "")
    line = f"rank {dump.rank} ran out of memory at step {dump.step}: {held} ({dump.device})"
    if dump.peak_bytes:
        line += f", its peak {_gib(dump.peak_bytes)} GiB"
    if dump.growth is not None:
        what, growth = "memory" if on_cpu else "peak", dump.growth
        line += f"; its {what} grew {format_mib(growth.mib_per_step)} a step from step {growth.since_step}"
    if dump.snapshot:
        line += f"; its allocations: {dump.snapshot}, open it at {MEMORY_VIZ}"
    return line


def oom_verdict_lines(folder: JobFolder) -> list[str]:
    """One line per rank that ran out of memory, first the one that ran out first; then a line
    for each dump that does not read."""
    dumps, refused = read_oom_dumps(folder)
    return [*(oom_line(dump) for dump in dumps), *refused]


def _gib(value: int | None) -> str:
    return f"{value / 2**30:.1f}" if value is not None else "?"
