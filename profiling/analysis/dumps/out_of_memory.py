"""report.json's ``oom``: the ranks that ran out of memory, from their dumps in ``meta/oom/``."""

from __future__ import annotations

import dataclasses
from typing import Any

from profiling.analysis.dumps.oom import oom_line, read_oom_dumps
from profiling.analysis.run.memory_growth import Growth
from profiling.analysis.run.run_section import memory_growth_part
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
            last_steps=[model.StepMemory(step=int(s), mib=float(m)) for s, m in _pairs(d.get("last_steps"))],
            growth=_growth(d),
            **{key: d.get(key) if isinstance(d.get(key), int | str) else None for key in fields},
        )
        for d in read_oom_dumps(folder)
    ]


def _pairs(value: Any) -> list[tuple[Any, Any]]:
    if not isinstance(value, list):
        return []
    return [(p[0], p[1]) for p in value if isinstance(p, list) and len(p) == 2 and all(_number(x) for x in p)]


def _growth(dump: dict[str, Any]) -> model.MemoryGrowth | None:
    """The growth the dump's rank measured, if it has one as written (a dump of another version
    is read without it)."""
    try:
        growth = Growth(**dump["growth"])
    except (KeyError, TypeError):
        return None
    if not all(_number(getattr(growth, f.name)) for f in dataclasses.fields(growth)):
        return None
    return memory_growth_part(dump["rank"], str(dump.get("node", "")), growth)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
