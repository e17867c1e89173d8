"""A rank that ran out of memory, as its dump in ``meta/oom/rank<r>.json`` says (written by
:mod:`jobs.runtime.oom`), in one line a person reads first: what ``--wait``, ``list``, the
failure's tail and report.md say. Torch-free: read on the login node."""

from __future__ import annotations

import json
from typing import Any

from profiling.analysis.run.memory_growth import format_mib
from profiling.folder.layout import JobFolder

MEMORY_VIZ = "https://pytorch.org/memory_viz"


def read_oom_dumps(folder: JobFolder) -> list[dict[str, Any]]:
    """Every rank's out-of-memory dump, first the rank that ran out first; those that do not
    read are left out."""
    found = []
    for path in folder.oom_dumps():
        try:
            dump = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(dump, dict) and isinstance(dump.get("rank"), int):
            found.append(dump)
    return sorted(found, key=lambda dump: (dump.get("written_at") or 0, dump["rank"]))


def oom_line(dump: dict[str, Any]) -> str:
    """``rank 3 ran out of memory at step 57: 78.2 of 79.6 GiB allocated (cuda:3)``."""
    allocated, total = dump.get("allocated_bytes"), dump.get("total_bytes")
    held = f"{_gib(allocated)}" + (f" of {_gib(total)}" if total else "") + " GiB allocated"
    if dump.get("device", "").startswith("cpu"):
        held = f"{_gib(allocated)} GiB resident" + (f" of a {_gib(total)} GiB limit" if total else "")
    line = f"rank {dump['rank']} ran out of memory at step {dump.get('step')}: {held} ({dump.get('device')})"
    if dump.get("peak_bytes"):
        line += f", its peak {_gib(dump['peak_bytes'])} GiB"
    growth = dump.get("growth")
    if isinstance(growth, dict) and isinstance(growth.get("mib_per_step"), int | float):
        what = "memory" if dump.get("device", "").startswith("cpu") else "peak"
        rate = format_mib(growth["mib_per_step"])
        line += f"; its {what} grew {rate} a step from step {growth.get('since_step')}"
    if dump.get("snapshot"):
        line += f"; its allocations: {dump['snapshot']}, open it at {MEMORY_VIZ}"
    return line


def oom_verdict_lines(folder: JobFolder) -> list[str]:
    """One line per rank that ran out of memory, first the one that ran out first."""
    return [oom_line(dump) for dump in read_oom_dumps(folder)]


def _gib(value: Any) -> str:
    return f"{value / 2**30:.1f}" if isinstance(value, int | float) else "?"
