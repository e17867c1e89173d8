"""One Chrome trace written by torch.profiler, reduced to what the analysis reads, as columns.

Only complete events (``ph == "X"``) matter, kept as numpy columns in three tables:

- *spans*: every CPU-side event (operators, annotations, ``ProfilerStep#N`` steps, Python
  frames, runtime calls), with its thread, its name and, for the merged timeline, its position
  in the file and its nesting depth on its thread;
- *launches* (``cuda_runtime``, ``cuda_driver``; HIP's calls use the same categories): the CPU
  side of a kernel, tied to it by ``args.correlation``;
- *GPU activity* (``kernel``, ``gpu_memcpy``, ``gpu_memset``);

and the few events that say what a collective was (NCCL kernels, gloo and c10d operators),
with the ``args`` that identify it, as :class:`Collective` objects.

Events are streamed from the file (:mod:`profiling.analysis.reading.json_stream`): memory holds the columns
(tens of bytes per event) and one chunk of events, never the whole document.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import operator
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np

from profiling.analysis.reading import trace_scan
from profiling.analysis.reading.collectives import is_collective
from profiling.analysis.reading.instant_args import add_memory, add_stream_waits
from profiling.analysis.reading.json_stream import CHUNK_BYTES, TraceFormatError, TraceStream
from profiling.analysis.reading.op_flops import COUNTED, CountedOp, counted_ops
from profiling.analysis.reading.plausible import plausible
from profiling.analysis.reading.trace_columns import (
    ANALYSED,
    ANALYSED_KINDS,
    ANNOTATION,
    ARGS,
    ENCODED_FIELD_BYTES,
    FLOW_PHASES,
    GPU,
    IGNORED,
    KIND_OF_CATEGORY,
    LAUNCH,
    MEMORY,
    OTHER_CPU,
    STREAM_WAIT,
    SYNC_CATEGORY,
    TraceEvents,
    add_parts,
    from_chunks,
    kept_collectives,
)
from profiling.analysis.reading.trace_errors import Unfit, refused

# the columns are int64: a larger id is no id torch wrote
_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _LinkArgs(msgspec.Struct):
    correlation: _Int64 = -1
    stream: _Int64 | str = -1  # the activity's CUDA/HIP stream (-1: none said)


class ReadEvent(msgspec.Struct, gc=False):
    """An event as the analysis reads it (the merged trace re-reads the file whole).

    ``gc=False``: the garbage collector need not track a chunk's thousands of events (strings
    and numbers, never a cycle): 5 % of decoding."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float = 0.0
    args: msgspec.Raw = msgspec.Raw()  # decoded only where needed; empty where absent


_LINK_ARGS = msgspec.json.Decoder(list[_LinkArgs])
_CAT = operator.attrgetter("cat")


class TraceBuilder:
    """Collects events, a chunk at a time, into :class:`TraceEvents` columns."""

    def __init__(self, *, merge: bool = False) -> None:
        self.merge = merge  # also what the merged JSON needs: each event's size, the flows' positions
        self._names: dict[str, int] = {}
        self._threads: dict[tuple[Any, Any], int] = {}
        self._columns: dict[str, list[np.ndarray]] = collections.defaultdict(list)
        self._collective_name: list[bool] = []  # by name code: is it a collective's
        # each collective's (name, start, end, tid, on the GPU, raw args): kept_collectives
        self._found: list[tuple[str, float, float, Any, bool, bytes]] = []
        self._counted: list[CountedOp] = []  # the ops whose FLOPs are counted
        self.event_count = 0

    def add(self, events: Sequence[ReadEvent]) -> None:
        """The next events of ``traceEvents``, in file order.

        Column by column rather than event by event: a list comprehension per field, then
        numpy masks, costs a fraction of a Python loop with branches per event.
        """
        first = self.event_count
        self.event_count += len(events)
        # positions in the file: 4 bytes each while they fit (a trace of 2**31 events is 600 GB)
        position_type = np.int32 if self.event_count < 2**31 else np.int64
        if self.merge:
            # what the merged trace will write: the args as they are, the rest re-encoded compactly
            sizes = [len(e.name) + len(e.cat) + len(e.args) for e in events]
            self._columns["event_bytes"].append(np.array(sizes, dtype=np.int32) + ENCODED_FIELD_BYTES)
            flows = np.flatnonzero(np.isin([e.ph for e in events], FLOW_PHASES)) + first
            self._columns["flow_ordinal"].append(flows.astype(position_type))
        if self.merge:
            complete = [_kept(e) for e in events]
            ordinal = (np.flatnonzero(complete) + first).astype(position_type)
            events = list(itertools.compress(events, complete))
        else:  # positions are for the merged JSON only
            events = [e for e in events if _kept(e)]
            ordinal = np.zeros(len(events), dtype=position_type)
        if not events:
            return
        names, threads, columns, count = self._names, self._threads, self._columns, len(events)
        # map over C callables, not a generator: 59 against 97 ns an event
        kind = np.fromiter(
            map(KIND_OF_CATEGORY.get, map(_CAT, events), itertools.repeat(OTHER_CPU)), np.int8, count
        )
        start = np.fromiter((e.ts for e in events), np.float64, count)
        end = start + np.fromiter((e.dur for e in events), np.float64, count)
        name = np.fromiter((names.setdefault(e.name, len(names)) for e in events), np.int32, count)

        def where(mask: np.ndarray) -> Iterator[ReadEvent]:
            return itertools.compress(events, mask.tolist())

        gpu = kind == GPU
        add_parts(columns, gpu, gpu_start=start, gpu_end=end, gpu_name=name, gpu_ordinal=ordinal)
        correlation, stream = _link_args([e.args for e in where(gpu)])
        columns["gpu_corr"].append(correlation)
        columns["gpu_stream"].append(stream)
        memory = kind == MEMORY
        if memory.any():
            add_memory(columns, start[memory], [bytes(e.args) for e in where(memory)])
        waits = [i for i, e in enumerate(events) if e.name == STREAM_WAIT and e.cat == SYNC_CATEGORY]
        if waits:
            add_stream_waits(columns, start[waits], [bytes(events[i].args) for i in waits])
        cpu = (kind != GPU) & (kind != IGNORED) & (kind != MEMORY)
        add_parts(columns, cpu, start=start, end=end, name=name, kind=kind, ordinal=ordinal)
        thread = (threads.setdefault((e.pid, e.tid), len(threads)) for e in where(cpu))
        columns["thread"].append(np.fromiter(thread, np.int32, int(cpu.sum())))
        launch = kind == LAUNCH
        correlation, _ = _link_args([e.args for e in where(launch)])
        found = correlation >= 0  # a launch without a correlation id cannot be tied to a kernel
        columns["launch_corr"].append(correlation[found])
        columns["launch_ts"].append(start[launch][found])

        counted = [
            i
            for i in np.flatnonzero(kind == ANALYSED).tolist()
            if events[i].name in COUNTED and events[i].args
        ]
        if counted:
            self._counted += counted_ops(
                [(events[i].name, float(start[i]), bytes(events[i].args)) for i in counted]
            )
        flags = self._collective_name
        flags.extend(is_collective(n) for n in itertools.islice(names, len(flags), None))
        candidates = np.array(flags, dtype=bool)[name] & ((kind == ANALYSED) | (kind == ANNOTATION) | gpu)
        for i in np.flatnonzero(candidates).tolist():
            event = events[i]
            if kind[i] in ANALYSED_KINDS or event.cat == "kernel":  # NCCL kernels, not their memcpys
                self._add_collective(event, float(start[i]), float(end[i]), gpu=bool(gpu[i]))

    def _add_collective(self, event: ReadEvent, start: float, end: float, gpu: bool) -> None:
        # a copy: msgspec's Raw would keep the whole chunk it was read from
        self._found.append((event.name, start, end, event.tid, gpu, bytes(event.args or b"")))

    def build(self, header: dict[str, Any]) -> TraceEvents:
        """The columns, with the trace's top-level fields (all but ``traceEvents``)."""
        return from_chunks(
            header,
            self._columns,
            list(self._names),
            list(self._threads),
            kept_collectives(self._found, ARGS.decode),
            self._counted,
            self.event_count,
        )


def _link_args(raw_args: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``args.correlation`` and ``args.stream`` of each event (-1 where none; a stream named
    otherwise than by a number: -2), decoded in one go."""
    if not raw_args:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    decoded = _LINK_ARGS.decode(b"[" + b",".join(raw or b"{}" for raw in raw_args) + b"]")
    return (
        np.fromiter((args.correlation for args in decoded), np.int64, len(decoded)),
        np.fromiter((a.stream if isinstance(a.stream, int) else -2 for a in decoded), np.int64, len(decoded)),
    )


def read(path: Path, *, merge: bool = False) -> TraceEvents:
    """The columns of the trace file at ``path`` (``.json`` or ``.json.gz``), streamed; ``merge``:
    with what the merged JSON needs too (each event's size, the flows' positions). Scanned in C
    where the scanner is built and takes the trace (:mod:`profiling.analysis.reading.trace_scan`), else
    read in Python: the same columns; then without what no run can have
    (:mod:`profiling.analysis.reading.plausible`), said in :attr:`TraceEvents.problems`."""
    # the merged JSON's positions and sizes come from the Python reader alone
    if merge:
        return read_in_python(path, merge=True)
    events = None
    if trace_scan.AVAILABLE:
        try:
            events = trace_scan.read_scanned(path)
        except (trace_scan.NotScannable, TraceFormatError):
            pass  # read the Python way, which takes it, or says why not as it always has
    kept, problems = plausible(events if events is not None else read_in_python(path))
    return dataclasses.replace(kept, problems=problems) if problems else kept


def _kept(event: ReadEvent) -> bool:
    """A complete event, or an allocator's instant (profile_memory): what the columns hold."""
    return (event.ph == "X" or (event.ph == "i" and event.name == "[memory]")) and event.ts is not None


def read_in_python(path: Path, *, merge: bool = False, chunk_bytes: int = CHUNK_BYTES) -> TraceEvents:
    """:func:`read` by msgspec's structs, a chunk of ``chunk_bytes`` at a time."""
    stream = TraceStream(path, ReadEvent, chunk_bytes)
    builder = TraceBuilder(merge=merge)
    try:
        for chunk in stream.chunks():
            builder.add(chunk)  # decodes args: a collective's whole, a kernel's ids
        return builder.build(stream.header)
    except (msgspec.DecodeError, RecursionError, Unfit) as error:
        raise refused(path, error) from None


def from_document(trace: dict[str, Any], *, merge: bool = False) -> TraceEvents:
    """A trace already in memory (``json.load`` of a file), as columns: for tests and tools."""
    builder = TraceBuilder(merge=merge)
    builder.add(msgspec.json.decode(msgspec.json.encode(trace.get("traceEvents", [])), type=list[ReadEvent]))
    return builder.build({key: value for key, value in trace.items() if key != "traceEvents"})
