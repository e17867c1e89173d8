"""report.json's ``oom``: the ranks that ran out of memory, from their dumps in ``meta/oom/``."""

from __future__ import annotations

from profiling.analysis.dumps.oom import oom_line, read_oom_dumps
from profiling.analysis.run.memory_growth import Growth
from profiling.analysis.run.section import memory_growth_part
from profiling.folder.layout import JobFolder
from profiling.schema import model
from profiling.schema.dumps import OomDump


def out_of_memory(folder: JobFolder) -> tuple[list[model.OutOfMemory], list[str]]:
    """report.json's ``oom``: each dump, first the rank that ran out first; and a line for each
    dump that does not read (the report's warnings)."""
    dumps, refused = read_oom_dumps(folder)
    return [
        model.OutOfMemory(
            rank=d.rank,
            device=d.device,
            line=oom_line(d),
            last_steps=[model.StepMemory(step=s, mib=m) for s, m in d.last_steps],
            growth=_growth(d),
            step=d.step,
            allocated_bytes=d.allocated_bytes,
            reserved_bytes=d.reserved_bytes,
            peak_bytes=d.peak_bytes,
            total_bytes=d.total_bytes,
            snapshot=d.snapshot,
        )
        for d in dumps
    ], refused


def _growth(dump: OomDump) -> model.MemoryGrowth | None:
    """The growth the dump's rank measured, if it measured one."""
    if dump.growth is None:
        return None
    g = dump.growth
    growth = Growth(g.since_step, g.last_step, g.mib_per_step, g.from_mib, g.to_mib)
    return memory_growth_part(dump.rank, dump.node, growth)
