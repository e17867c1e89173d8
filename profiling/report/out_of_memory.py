"""report.json's ``oom``: the ranks that ran out of memory, from their dumps in ``meta/oom/``."""

from __future__ import annotations

from profiling.analysis.oom import oom_line, read_oom_dumps
from profiling.folder.layout import JobFolder
from profiling.schema import model


def out_of_memory(folder: JobFolder) -> list[model.OutOfMemory]:
    """report.json's ``oom``: each dump, first the rank that ran out first."""
    fields = ("step", "allocated_bytes", "reserved_bytes", "peak_bytes", "total_bytes", "snapshot")
    return [
        model.OutOfMemory(
            rank=d["rank"],
            device=str(d.get("device", "")),
            line=oom_line(d),
            **{key: d.get(key) if isinstance(d.get(key), int | str) else None for key in fields},
        )
        for d in read_oom_dumps(folder)
    ]
