"""What a failing rank leaves in ``meta/``, typed: its out-of-memory dump (``oom/rank<r>.json``,
written by :mod:`jobs.runtime.oom`), its hang dump (``hang/rank<r>.json``, written by
:mod:`jobs.runtime.watchdog`), and the hang verdict made from the hang dumps
(``hang/hang.json``, :mod:`profiling.analysis.dumps.hang`). Read and written through
:mod:`profiling.schema.files` alone."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from profiling.schema.files import NonNegative, Versioned

# a byte count a device could hold: a dump saying more (1e300, 10^400) is damaged
Bytes = Annotated[int, msgspec.Meta(ge=0, le=1 << 60)]
Mib = Annotated[float, msgspec.Meta(ge=0, le=float(1 << 40))]


class MemoryGrowth(msgspec.Struct, frozen=True):
    """The rank's memory growing step after step, as its step log measured it."""

    since_step: NonNegative
    last_step: NonNegative
    mib_per_step: Annotated[float, msgspec.Meta(ge=-float(1 << 40), le=float(1 << 40))]
    from_mib: Mib
    to_mib: Mib


class OomDump(Versioned):
    """A rank that ran out of memory: where, what it held, how its memory went before."""

    rank: NonNegative
    node: str
    step: NonNegative
    device: str  # "cuda:3", "cpu"
    error: str  # the error's first line
    written_at: Annotated[float, msgspec.Meta(ge=0)]  # s since the epoch: orders the ranks
    pid: int
    allocated_bytes: Bytes | None  # CUDA: allocated; a CPU: the resident memory
    reserved_bytes: Bytes | None  # CUDA's allocator: reserved; none on a CPU
    peak_bytes: Bytes | None
    total_bytes: Bytes | None  # the device's memory, or the limit the process ran under
    memory_summary: str | None = None  # CUDA's memory_summary(abbreviated=True)
    limit: str | None = None  # a CPU: "RLIMIT_AS" or "physical memory"
    last_steps: list[tuple[NonNegative, Mib]] = []  # (step, MiB) of the last steps
    growth: MemoryGrowth | None = None
    snapshot: str | None = None  # the allocator's history, for pytorch.org/memory_viz


class HangDump(Versioned):
    """A rank that made no progress: its step, node and every thread's stack."""

    rank: NonNegative
    node: str | None
    step: int | None
    reason: str
    host: str | None = None
    pid: int | None = None
    written_at: float | None = None
    stacks: dict[str, list[str]] = {}  # thread -> frames, outermost first
    # torch's flight recorder as torch dumps it (its form is torch's, read for the keys the
    # verdict needs: ``entries``, each with ``collective_seq_id``, ``process_group``, ...)
    flight_recorder: dict[str, Any] | None = None
    # the job's parallel dimensions as its mesh has them, outermost first (--parallel): the
    # verdict names a process group by them
    layout: list[tuple[str, int]] | None = None


class MissedCollective(msgspec.Struct, frozen=True):
    rank: int  # the rank that never queued it
    process_group: str
    collective_seq_id: int
    op: str | None
    input_sizes: Any
    waiting_ranks: list[int]
    group_ranks: list[int] = []  # the group's ranks
    group: str | None = None  # the group in words: "the dp group at pp 1", "the whole job"


class HungRank(msgspec.Struct, frozen=True):
    node: str | None
    step: int | None
    reason: str
    stuck_at: str | None  # the main thread's innermost frame


class HangVerdict(Versioned):
    """``hang.json``: who the others waited for, and every rank's state."""

    culprits: list[int]
    missed: list[MissedCollective]
    ranks: dict[int, HungRank]
    ranks_without_dump: list[int]
    verdict: list[str]  # two or three lines, for people
