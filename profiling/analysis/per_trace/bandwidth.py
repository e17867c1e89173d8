"""What the network delivers: each collective kind and message size, with its durations and its
algorithm and bus bandwidth as nccl-tests defines them (``doc/PERFORMANCE.md``).

A collective of ``S`` bytes that takes ``t`` moves ``algbw = S / t``; the bus bandwidth scales
it by what each rank's link carries, so that it compares with the link's speed whatever the
collective and the number of ranks ``n``:

| collective | busbw / algbw |
|---|---|
| all_reduce | 2 (n - 1) / n |
| all_gather, reduce_scatter, all_to_all | (n - 1) / n |
| broadcast, reduce, send/recv | 1 |

``S`` is the larger of the kernel's ``In msg nelems`` and ``Out msg nelems`` (all_gather's
output, reduce_scatter's input) times its ``dtype``'s size; ``n`` its ``Group size`` or the
length of its ``Process Group Ranks``. A trace without them (torch before 2.4, gloo, other
producers) gets durations alone, and says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from profiling.analysis.per_trace.groups import Group
from profiling.analysis.reading.collectives import Collective, Instance, collective_kind, is_group_label

# torch's dtype names in the trace (c10's ScalarType), in bytes
DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "ComplexFloat": 8, "ComplexDouble": 16,
    "Byte": 1, "Char": 1, "Bool": 1, "Short": 2, "Int": 4, "Long": 8, "UInt16": 2, "UInt32": 4,
    "UInt64": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
}  # fmt: skip


class CollectiveRow(msgspec.Struct, frozen=True):
    kind: str  # "allreduce", "allgather"... as the trace names it
    bytes: int | None  # S; None where the trace records no size
    group_size: int | None
    count: int
    p50_us: float
    p90_us: float
    max_us: float
    total_us: float
    algbw_gbps: float | None  # S / p50 duration, in GB/s (10^9 bytes per second)
    busbw_gbps: float | None
    group: str | None = None  # its group's description (mesh_tp, default_pg); None: not named


def bus_factor(kind: str, ranks: int) -> float:
    """busbw / algbw for a collective of ``kind`` among ``ranks`` (nccl-tests)."""
    letters = re.sub(r"[^a-z]", "", kind.lower())
    if letters.startswith("allreduce"):
        return 2 * (ranks - 1) / ranks
    if letters.startswith(("allgather", "reducescatter", "alltoall")):
        return (ranks - 1) / ranks
    return 1.0


def bandwidths(
    kind: str, size: int | None, ranks: int | None, seconds_us: float
) -> tuple[float | None, float | None]:
    """(algbw, busbw) in GB/s of ``size`` bytes moved in ``seconds_us``; None where unknown."""
    if size is None or not seconds_us > 0:
        return None, None
    algbw = size / (seconds_us * 1e3)  # bytes per µs / 1e3 = GB/s
    return algbw, algbw * bus_factor(kind, ranks) if ranks else None


def message_bytes(collective: Collective) -> int | None:
    """``S``: the larger of the in and out element counts, times the dtype's size."""
    counts = [collective.arg(key) for key in ("In msg nelems", "Out msg nelems")]
    size = DTYPE_BYTES.get(str(collective.arg("dtype")))
    known = [int(count) for count in counts if isinstance(count, int | float) and count >= 0]
    return max(known) * size if known and size else None


def group_size(collective: Collective) -> int | None:
    size = collective.arg("Group size")
    if isinstance(size, int) and size > 0:
        return size
    ranks = collective.arg("Process Group Ranks")
    try:
        listed = json.loads(ranks) if isinstance(ranks, str) else ranks
    except ValueError:
        return None
    return len(listed) if isinstance(listed, list) and listed else None


def summarise_collectives(
    collectives: Sequence[Collective], instances: Sequence[Instance] = (), groups: Sequence[Group] = ()
) -> list[CollectiveRow]:
    """One row per group, collective kind, message size and group size, the most time first (GPU
    kernels; a CPU trace's gloo operators by kind alone, or, where the toolkit labelled them with
    their groups, its ``instances``, from arrival to end as a kernel is)."""
    described = {g.name: g.description for g in groups}
    by_ranks = {tuple(g.ranks): g.description for g in groups}
    durations: dict[tuple[str, int | None, int | None, str | None], list[float]] = {}
    kernels = [c for c in collectives if c.gpu]
    if not kernels and any(i.group is not None for i in instances):
        for instance in instances:
            kind = instance.label.split(" ")[0]
            group = by_ranks.get(instance.group) if instance.group else None
            size = len(instance.group) if instance.group and instance.peer is None else None
            durations.setdefault((kind, None, size, group), []).append(instance.end - instance.arrival)
        return _rows(durations)
    rows_of: dict[
        tuple[str, tuple[tuple[str, Any], ...]], tuple[str, int | None, int | None, str | None]
    ] = {}
    for c in kernels or [c for c in collectives if not is_group_label(c.name)]:
        row = rows_of.get((c.name, c.args))  # a dense trace's thousand alike collectives: once
        if row is None:
            kind = str(c.arg("Collective name") or collective_kind(c.name))
            group = described.get(str(c.arg("Process Group Name"))) if c.gpu else None
            row = rows_of[c.name, c.args] = (kind, message_bytes(c), group_size(c), group)
        durations.setdefault(row, []).append(c.end - c.start)
    return _rows(durations)


def _rows(
    durations: dict[tuple[str, int | None, int | None, str | None], list[float]],
) -> list[CollectiveRow]:
    rows = []
    for (kind, size, ranks, group), found in durations.items():
        times = np.array(found)
        p50 = float(np.percentile(times, 50))
        algbw, busbw = bandwidths(kind, size, ranks, p50)
        rows.append(
            CollectiveRow(
                kind=kind,
                bytes=size,
                group_size=ranks,
                count=len(times),
                p50_us=p50,
                p90_us=float(np.percentile(times, 90)),
                max_us=float(times.max()),
                total_us=float(times.sum()),
                algbw_gbps=algbw,
                busbw_gbps=busbw,
                group=group,
            )
        )
    rows.sort(key=lambda row: (-row.total_us, row.kind, row.bytes or 0))
    return rows
