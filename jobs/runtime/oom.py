"""A rank out of memory: recognised (CUDA's ``torch.OutOfMemoryError``, the CPU allocator's
RuntimeError), and what it held written to ``meta/oom/rank<r>.json`` before the error goes on
(:mod:`profiling.analysis.dumps.oom` says it in one line). With ``--memory-history N`` on CUDA, the
allocator records its last N allocations and the rank dumps them beside the JSON, for
pytorch.org/memory_viz."""

from __future__ import annotations

import dataclasses
import math
import os
import resource
import socket
import time
from typing import Any

import msgspec
import torch

from profiling.analysis.dumps.oom import oom_line
from profiling.analysis.run.memory_growth import series_growth
from profiling.folder.layout import JobFolder
from profiling.recording.process_memory import peak_resident_bytes, resident_bytes
from profiling.schema.dumps import MemoryGrowth, OomDump
from profiling.schema.files import write_file

# what the CPU allocator raises: "DefaultCPUAllocator: can't allocate memory: you tried to
# allocate 67108864 bytes. Error code 12 (Cannot allocate memory)"
_CPU_OUT_OF_MEMORY = ("can't allocate memory", "Cannot allocate memory", "not enough memory")


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(error, RuntimeError) and any(text in str(error) for text in _CPU_OUT_OF_MEMORY)


@dataclasses.dataclass(frozen=True)
class RankMemory:
    device: torch.device
    history: bool  # the CUDA allocator is recording its allocations


def watch_memory(device: torch.device, history_entries: int) -> RankMemory:
    """The rank's memory as a dump will read it: on CUDA with ``history_entries``, the
    allocator's last allocations recorded from here on (no history on a CPU)."""
    history = history_entries > 0 and device.type == "cuda"
    if history:
        torch.cuda.memory._record_memory_history(max_entries=history_entries)
    return RankMemory(device, history)


@dataclasses.dataclass(frozen=True)
class MemorySeries:
    """The rank's memory in each step so far, as its step log holds it (MiB)."""

    steps: list[int]
    mib: list[float]


def dump_out_of_memory(
    folder: JobFolder, rank: int, step: int, error: BaseException, memory: RankMemory, series: MemorySeries
) -> str:
    """Write the rank's dump (its allocations' history too where one is recorded); returns its
    one line."""
    return oom_line(write_oom_dump(folder, rank, step, error, memory.device, memory.history, series))


def write_oom_dump(
    folder: JobFolder,
    rank: int,
    step: int,
    error: BaseException,
    device: torch.device,
    history: bool,
    series: MemorySeries | None = None,
) -> OomDump:
    """What the rank held when it ran out, its last steps' memory and how it grew, and its
    allocations' history if recorded; returns the dump as written."""
    growth = series_growth(series.steps, series.mib) if series and series.steps else None
    snapshot = None
    if history and device.type == "cuda":
        snapshot = folder.oom_snapshot(rank)
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(snapshot))
    last = list(zip(series.steps[-20:], series.mib[-20:], strict=True)) if series else []
    dump = OomDump(
        rank=rank,
        node=socket.gethostname(),
        step=step,
        device=str(device),
        error=str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__,
        written_at=time.time(),
        pid=os.getpid(),
        last_steps=[(s, round(m, 1)) for s, m in last if math.isfinite(m)],
        growth=msgspec.convert(dataclasses.asdict(growth), MemoryGrowth) if growth else None,
        snapshot=str(snapshot) if snapshot else None,
        **(_cuda_memory(device) if device.type == "cuda" else _cpu_memory()),
    )
    write_file(folder.oom_dump(rank), dump)
    return dump


def _cuda_memory(device: torch.device) -> dict[str, Any]:
    return {
        "allocated_bytes": torch.cuda.memory_allocated(device),
        "reserved_bytes": torch.cuda.memory_reserved(device),
        "peak_bytes": torch.cuda.max_memory_allocated(device),
        "total_bytes": torch.cuda.get_device_properties(device).total_memory,
        "memory_summary": torch.cuda.memory_summary(device, abbreviated=True),
    }


def _cpu_memory() -> dict[str, Any]:
    """The process's resident memory, its peak, and what bounds it: the address-space limit it
    runs under, else the machine's memory (a CPU has no allocator statistics of torch's)."""
    resident = resident_bytes()
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    total = (
        limit if limit != resource.RLIM_INFINITY else os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    )
    return {
        "allocated_bytes": int(resident) if math.isfinite(resident) else None,
        "reserved_bytes": None,
        "peak_bytes": peak_resident_bytes(),
        "total_bytes": total,
        "limit": "RLIMIT_AS" if limit != resource.RLIM_INFINITY else "physical memory",
    }
