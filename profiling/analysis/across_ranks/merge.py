"""All ranks' traces as one Chrome trace: one process lane per rank, clocks aligned, size bounded.

Each rank's events are streamed from its file again (:func:`write_part`), moved by the shift
:mod:`profiling.analysis.clocks.alignment` found for it, re-encoded and deflate-compressed by a worker process
into a part of its own; the parts are then joined into one gzip member
(:class:`MergedTraceWriter`), so the merged file is compressed on every core and opens in any
gzip reader (Perfetto reads one member only).

Perfetto gives up on JSON traces near 1 GB, and ``--profile-ranks all`` on a big job writes
far more. Unless told otherwise, the merged trace keeps within
:data:`~profiling.folder.budgets.MERGE_BUDGET_BYTES` of JSON (:func:`plan_depth`, each event
weighing its own size): it always keeps every rank's
steps, collectives (NCCL kernels, gloo and c10d operators), top-level CPU operators and
metadata, and drops the deepest levels of CPU operators first (Python frames, they nest
deepest; flows go with the first level), then GPU activity, until the rest fits; the report
says which depth it kept.
"""

from __future__ import annotations

import dataclasses
import struct
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from profiling.analysis.reading.collectives import is_collective
from profiling.analysis.reading.json_stream import UNSET, Event, TraceStream
from profiling.analysis.reading.trace_columns import STEP_PREFIX, TraceEvents

_METADATA_DROPPED = frozenset({"process_name", "process_labels", "process_sort_index"})
_OTHER_LANE_TID = 1 << 32  # tids for lanes that were other processes (GPUs, profiler spans)
_FLOW_ID_STRIDE = 1 << 40
# What decides whether the merged trace keeps an event: it keeps those whose level is at most
# the planned depth. CPU spans nested d deep are level d (flows go with level 1), GPU activity
# other than NCCL kernels is GPU_LEVEL (dropped after every CPU level), and the rest ALWAYS.
ALWAYS = -2
GPU_LEVEL = -1
_ENCODE = msgspec.json.Encoder()


@dataclasses.dataclass(frozen=True)
class MergeStats:
    """What one trace would put into the merged trace, by level (bytes)."""

    always_bytes: float
    gpu_bytes: float
    bytes_by_depth: tuple[float, ...]  # index d: CPU spans nested d deep (index 0 is empty)


def keep_levels(trace: TraceEvents) -> np.ndarray:
    """Every event's level (see ALWAYS), by its position in the file."""
    levels = np.full(trace.event_count, ALWAYS, dtype=np.int16)
    kept = np.array([name.startswith(STEP_PREFIX) or is_collective(name) for name in trace.names], bool)
    span_depth = trace.depths()
    prunable = (span_depth > 0) & ~kept[trace.span_name] if len(trace.names) else span_depth > 0
    levels[trace.span_ordinal[prunable]] = span_depth[prunable]
    levels[trace.flow_ordinal] = 1
    gpu_prunable = ~kept[trace.gpu_name] if len(trace.names) else np.zeros(0, bool)
    levels[trace.gpu_ordinal[gpu_prunable]] = GPU_LEVEL
    return levels


def merge_stats(trace: TraceEvents, levels: np.ndarray) -> MergeStats:
    """Bytes per level, each event weighing its own estimated size (a kernel's args are several
    times a CPU operator's: a mean per event would let the GPU level overrun the budget)."""
    sizes = trace.event_bytes
    nested = levels >= 0
    by_depth = np.bincount(levels[nested], weights=sizes[nested]) if nested.any() else np.zeros(0)
    return MergeStats(
        always_bytes=float(sizes[levels == ALWAYS].sum(dtype=np.int64)),
        gpu_bytes=float(sizes[levels == GPU_LEVEL].sum(dtype=np.int64)),
        bytes_by_depth=tuple(float(b) for b in by_depth),
    )


def plan_depth(stats: Iterable[MergeStats], budget_bytes: float | None) -> int | None:
    """The highest level every rank keeps so that the whole fits ``budget_bytes``.

    None: keep everything (no budget, or all of it fits). Otherwise CPU levels are dropped
    deepest first (d: keep CPU spans nested up to d deep; 0: top-level operators only), then
    GPU activity other than NCCL kernels (:data:`ALWAYS`), and that is as small as it gets.
    """
    stats = list(stats)
    deepest = max((len(s.bytes_by_depth) for s in stats), default=0)
    size = sum(s.always_bytes + s.gpu_bytes + sum(s.bytes_by_depth) for s in stats)
    if budget_bytes is None or size <= budget_bytes:
        return None
    for depth in range(deepest - 1, 0, -1):
        size -= sum(s.bytes_by_depth[depth] for s in stats if depth < len(s.bytes_by_depth))
        if size <= budget_bytes:
            return depth - 1
    return ALWAYS


@dataclasses.dataclass(frozen=True)
class Part:
    """One rank's events in the merged trace: a raw deflate stream ending in a sync flush."""

    path: Path
    crc: int  # of the uncompressed bytes
    length: int  # uncompressed bytes
    kept: int  # events kept
    dropped: int  # events left out by the depth limit


def write_part(
    trace_path: Path,
    out: Path,
    rank: int,
    shift_us: float,
    main_pid: Any,
    depths: Path | None,
    max_depth: int | None,
) -> Part:
    """Stream one trace into ``out`` in the merged trace's terms: pid = rank, one lane per
    thread, ts moved by ``shift_us``, flow ids made unique, events above level ``max_depth``
    left out (``depths``: the file of :func:`keep_levels` saved for this trace). Every chunk
    starts with a comma: the writer puts the lane metadata first."""
    depth_of = np.load(depths, mmap_mode="r") if depths is not None and max_depth is not None else None
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
    lanes: dict[tuple[Any, Any], int] = {}
    flow_offset = rank * _FLOW_ID_STRIDE
    crc, length, kept, dropped, position = 0, 0, 0, 0, 0
    with open(out, "wb") as sink:
        for chunk in TraceStream(trace_path).chunks():
            if depth_of is not None:
                keep = depth_of[position : position + len(chunk)] <= max_depth
                dropped += len(chunk) - int(keep.sum())
                position += len(chunk)
                chunk = [event for event, wanted in zip(chunk, keep, strict=True) if wanted]
            events = []
            for event in chunk:  # the hot loop of the merge: kept flat on purpose
                if event.ph == "M" and not _keep_metadata(event, main_pid):
                    continue
                lane = lanes.get((event.pid, event.tid))
                if lane is None:
                    lane = lanes[(event.pid, event.tid)] = _lane(event, main_pid, len(lanes))
                event.pid, event.tid = rank, lane
                if event.ts is not UNSET:
                    event.ts += shift_us
                if type(event.id) is int:
                    event.id += flow_offset
                events.append(event)
            if not events:
                continue
            kept += len(events)
            data = b"," + _ENCODE.encode(events)[1:-1]
            crc, length = zlib.crc32(data, crc), length + len(data)
            sink.write(compressor.compress(data))
        sink.write(compressor.flush(zlib.Z_SYNC_FLUSH))
    return Part(out, crc, length, kept, dropped)


def _keep_metadata(event: Event, main_pid: Any) -> bool:
    """Process names and orders are the merged trace's own; other processes' threads get their pid."""
    if event.name in _METADATA_DROPPED:
        return False
    if event.name == "thread_name" and event.pid != main_pid and event.args is not UNSET:
        label = msgspec.json.decode(event.args).get("name", "")
        event.args = msgspec.Raw(_ENCODE.encode({"name": f"{event.pid} {label}".strip()}))
    return True


def _lane(event: Event, main_pid: Any, taken: int) -> int:
    """The profiled process keeps its thread ids; other processes (GPUs, spans) get lanes apart."""
    return event.tid if event.pid == main_pid and isinstance(event.tid, int) else _OTHER_LANE_TID + taken


def lane_metadata(rank: int, host: str) -> bytes:
    name = {
        "ph": "M",
        "name": "process_name",
        "pid": rank,
        "tid": 0,
        "args": {"name": f"rank {rank} ({host})"},
    }
    order = {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}}
    return _ENCODE.encode(name) + b",\n" + _ENCODE.encode(order)


class MergedTraceWriter:
    """One gzip file made of raw deflate parts: ``write`` compresses here, ``append`` copies a
    worker's :class:`Part` as it is. Every piece ends in a flush to a byte boundary and starts
    with a compressor of its own, so the pieces join into one deflate stream, and their CRCs
    combine into the file's."""

    def __init__(self, path: Path, *, base_time_ns: int) -> None:
        self._file: IO[bytes] = open(path, "wb")  # noqa: SIM115 - open until close()
        self._compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
        self._crc, self._length = 0, 0
        self._base_time_ns = base_time_ns
        # gzip header: magic, deflate, no flags, mtime, no extra flags, unknown OS
        self._file.write(struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, 0, int(time.time()), 0, 255))
        self.write(b'{"displayTimeUnit":"ms","traceEvents":[')

    def write(self, data: bytes) -> None:
        # a full flush: what comes next must not refer back to this, as a part may come in between
        self._file.write(self._compressor.compress(data) + self._compressor.flush(zlib.Z_FULL_FLUSH))
        self._crc, self._length = zlib.crc32(data, self._crc), self._length + len(data)

    def append(self, part: Part) -> None:
        with open(part.path, "rb") as source:
            while block := source.read(1 << 20):
                self._file.write(block)
        self._crc = crc32_combine(self._crc, part.crc, part.length)
        self._length += part.length

    def close(self, other_data: Mapping[str, Any]) -> int:
        """Finish the file; returns its uncompressed size."""
        self.write(
            b'],"baseTimeNanoseconds":%d,"otherData":' % self._base_time_ns
            + _ENCODE.encode(other_data)
            + b"}"
        )
        self._file.write(self._compressor.flush(zlib.Z_FINISH))
        self._file.write(struct.pack("<II", self._crc, self._length & 0xFFFFFFFF))
        self._file.close()
        return self._length


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of A + B from those of A and B and B's length (zlib's crc32_combine): crc1
    is run through ``length2`` zero bytes by squaring the operator for one zero byte."""
    operator = [0xEDB88320] + [1 << n for n in range(31)]  # one zero bit
    for _ in range(3):  # 2, 4, 8 zero bits
        operator = _gf2_square(operator)
    while length2 > 0:
        if length2 & 1:
            crc1 = _gf2_times(operator, crc1)
        length2 >>= 1
        if length2:
            operator = _gf2_square(operator)
    return crc1 ^ crc2


def _gf2_times(matrix: Sequence[int], vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _gf2_square(matrix: Sequence[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[n]) for n in range(32)]
