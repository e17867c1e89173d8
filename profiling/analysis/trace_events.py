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

Events are streamed from the file (:mod:`profiling.analysis.json_stream`): memory holds the columns
(tens of bytes per event) and one chunk of events, never the whole document.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import operator
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from profiling.analysis.collectives import Collective, is_collective
from profiling.analysis.json_stream import CHUNK_BYTES, TraceFormatError, TraceStream

STEP_PREFIX = "ProfilerStep#"
FLOW_PHASES = ("s", "t", "f")
ANALYSED_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
GPU_ACTIVITY = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
# What identifies a collective, where the trace records it (NCCL kernels and record_param_comms
# since torch 2.1; "Seq" since 2.4) and, for gloo, the operator's input shapes.
COLLECTIVE_ARGS = (
    "Collective name",
    "Process Group Name",
    "Seq",
    "In msg nelems",
    "Out msg nelems",
    "Input Dims",
    "dtype",  # with the element counts: the message's bytes (profiling.analysis.bandwidth)
    "Group size",
    "Process Group Ranks",
)
# An event's bytes in the merged trace besides its name, category and args: the keys, ph, pid,
# tid, ts and dur compactly encoded (``{"ph":"X","cat":"","name":"","pid":0,"tid":281473065648800,
# "ts":1718000000000000.000,"dur":12.345,"args":}`` is 100)
ENCODED_FIELD_BYTES = 100
# span kinds (and what becomes no span: GPU activity, GPU-side annotations)
ANALYSED, LAUNCH, OTHER_CPU, GPU, IGNORED = 0, 1, 2, 3, 4
_KIND_OF_CATEGORY = {
    **dict.fromkeys(ANALYSED_CATEGORIES, ANALYSED),
    **dict.fromkeys(LAUNCH_CATEGORIES, LAUNCH),
    **dict.fromkeys(GPU_ACTIVITY, GPU),
    "gpu_user_annotation": IGNORED,
}


class _LinkArgs(msgspec.Struct):
    correlation: int = -1
    stream: int | str = -1  # the activity's CUDA/HIP stream (-1: none said)


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
_ARGS = msgspec.json.Decoder(dict[str, Any])
_CAT = operator.attrgetter("cat")


@dataclasses.dataclass
class TraceEvents:
    """The columns of one trace (see the module docstring); built by :class:`TraceBuilder`."""

    distributed_info: dict[str, Any]
    host: str
    base_time_ns: int | None
    names: list[str]
    threads: list[tuple[Any, Any]]  # (pid, tid) of each thread code
    span_start: np.ndarray
    span_end: np.ndarray
    span_thread: np.ndarray  # thread codes: threads[span_thread[i]]
    span_name: np.ndarray  # name codes: names[span_name[i]]
    span_kind: np.ndarray  # ANALYSED, LAUNCH or OTHER_CPU
    span_ordinal: np.ndarray  # the event's position among all events of the file
    flow_ordinal: np.ndarray  # the positions of flow events (arrows from a launch to its kernel...)
    gpu_ordinal: np.ndarray  # the positions of the GPU activities
    launch_corr: np.ndarray
    launch_ts: np.ndarray
    gpu_start: np.ndarray
    gpu_end: np.ndarray
    gpu_corr: np.ndarray
    gpu_stream: np.ndarray  # args.stream, -1 where the trace gives none
    gpu_name: np.ndarray
    collectives: list[Collective]
    event_bytes: np.ndarray  # each event's size in the merged trace (estimated), by position
    event_count: int  # every event of the trace, of any kind

    def _analysed(self) -> np.ndarray:
        return self.span_kind == ANALYSED

    @property
    def cpu_start(self) -> np.ndarray:
        return self.span_start[self._analysed()]

    @property
    def cpu_end(self) -> np.ndarray:
        return self.span_end[self._analysed()]

    @property
    def cpu_tid(self) -> np.ndarray:
        return self.span_thread[self._analysed()]

    @property
    def cpu_name(self) -> np.ndarray:
        return self.span_name[self._analysed()]

    def steps(self) -> list[tuple[int, float, float, int]]:
        """``(number, start, end, thread code)`` of each ``ProfilerStep#N`` CPU span, by number."""
        codes = {code: name for code, name in enumerate(self.names) if name.startswith(STEP_PREFIX)}
        found = []
        analysed = self._analysed()
        for index in np.flatnonzero(analysed & np.isin(self.span_name, list(codes))):
            number = codes[int(self.span_name[index])][len(STEP_PREFIX) :]
            if number.isdigit():
                found.append(
                    (
                        int(number),
                        float(self.span_start[index]),
                        float(self.span_end[index]),
                        int(self.span_thread[index]),
                    )
                )
        return sorted(found)

    def main_pid(self) -> Any:
        """The pid of the profiled process itself (its CPU threads), as opposed to device lanes."""
        steps = self.steps()
        return self.threads[steps[0][3]][0] if steps else None

    def depths(self) -> np.ndarray:
        """Each span's nesting depth on its thread: 0 for a span inside no other."""
        depth = np.zeros(len(self.span_start), dtype=np.int16)
        for thread in np.unique(self.span_thread):
            members = np.flatnonzero(self.span_thread == thread)
            order = members[np.lexsort((-self.span_end[members], self.span_start[members]))]
            starts, ends = self.span_start[order], self.span_end[order]
            # spans open when this one starts: those started before it that have not ended
            ended = np.searchsorted(np.sort(ends), starts, side="right")
            # (a zero-length span starting with this one could count as ended: never below 0)
            depth[order] = np.maximum(np.arange(len(order)) - ended, 0)
        return depth


class TraceBuilder:
    """Collects events, a chunk at a time, into :class:`TraceEvents` columns."""

    def __init__(self, *, merge: bool = False) -> None:
        self.merge = merge  # also what the merged JSON needs: each event's size, the flows' positions
        self._names: dict[str, int] = {}
        self._threads: dict[tuple[Any, Any], int] = {}
        self._columns: dict[str, list[np.ndarray]] = collections.defaultdict(list)
        self._collective_name: list[bool] = []  # by name code: is it a collective's
        self.collectives: list[Collective] = []
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
            complete = [e.ph == "X" and e.ts is not None for e in events]
            ordinal = (np.flatnonzero(complete) + first).astype(position_type)
            events = list(itertools.compress(events, complete))
        else:  # positions are for the merged JSON only
            events = [e for e in events if e.ph == "X" and e.ts is not None]
            ordinal = np.zeros(len(events), dtype=position_type)
        if not events:
            return
        names, threads, columns, count = self._names, self._threads, self._columns, len(events)
        # map over C callables, not a generator: 59 against 97 ns an event
        kind = np.fromiter(
            map(_KIND_OF_CATEGORY.get, map(_CAT, events), itertools.repeat(OTHER_CPU)), np.int8, count
        )
        start = np.fromiter((e.ts for e in events), np.float64, count)
        end = start + np.fromiter((e.dur for e in events), np.float64, count)
        name = np.fromiter((names.setdefault(e.name, len(names)) for e in events), np.int32, count)

        def where(mask: np.ndarray) -> Iterator[ReadEvent]:
            return itertools.compress(events, mask.tolist())

        gpu = kind == GPU
        for key, values in (
            ("gpu_start", start),
            ("gpu_end", end),
            ("gpu_name", name),
            ("gpu_ordinal", ordinal),
        ):
            columns[key].append(values[gpu])
        correlation, stream = _link_args([e.args for e in where(gpu)])
        columns["gpu_corr"].append(correlation)
        columns["gpu_stream"].append(stream)
        cpu = (kind != GPU) & (kind != IGNORED)
        for key, values in (
            ("start", start),
            ("end", end),
            ("name", name),
            ("kind", kind),
            ("ordinal", ordinal),
        ):
            columns[key].append(values[cpu])
        thread = (threads.setdefault((e.pid, e.tid), len(threads)) for e in where(cpu))
        columns["thread"].append(np.fromiter(thread, np.int32, int(cpu.sum())))
        launch = kind == LAUNCH
        correlation, _ = _link_args([e.args for e in where(launch)])
        found = correlation >= 0  # a launch without a correlation id cannot be tied to a kernel
        columns["launch_corr"].append(correlation[found])
        columns["launch_ts"].append(start[launch][found])

        flags = self._collective_name
        flags.extend(is_collective(n) for n in itertools.islice(names, len(flags), None))
        candidates = np.array(flags, dtype=bool)[name] & ((kind == ANALYSED) | gpu)
        for i in np.flatnonzero(candidates).tolist():
            event = events[i]
            if kind[i] == ANALYSED or event.cat == "kernel":  # NCCL kernels, not their memcpys
                self._add_collective(event, float(start[i]), float(end[i]), gpu=bool(gpu[i]))

    def _add_collective(self, event: ReadEvent, start: float, end: float, gpu: bool) -> None:
        args = _ARGS.decode(event.args) if event.args else {}
        kept = tuple((key, _hashable(args[key])) for key in COLLECTIVE_ARGS if key in args)
        correlation = args.get("correlation") if gpu else None
        self.collectives.append(Collective(event.name, start, end, event.tid, gpu, kept, correlation))

    def build(self, header: dict[str, Any]) -> TraceEvents:
        """The columns, with the trace's top-level fields (all but ``traceEvents``)."""

        def column(key: str, dtype: Any) -> np.ndarray:
            """``dtype`` None: the chunks' own (positions are int64 once they no longer fit int32)."""
            chunks = self._columns.get(key)
            if not chunks:
                return np.zeros(0, dtype=dtype or np.int32)
            return np.concatenate(chunks).astype(dtype or chunks[-1].dtype, copy=False)

        base = header.get("baseTimeNanoseconds")
        return TraceEvents(
            distributed_info=dict(header.get("distributedInfo") or {}),
            host=str(header.get("host_name", "")),
            base_time_ns=int(base) if base is not None else None,
            names=list(self._names),
            threads=list(self._threads),
            span_start=column("start", np.float64),
            span_end=column("end", np.float64),
            span_thread=column("thread", np.int32),
            span_name=column("name", np.int32),
            span_kind=column("kind", np.int8),
            span_ordinal=column("ordinal", None),
            flow_ordinal=column("flow_ordinal", None),
            gpu_ordinal=column("gpu_ordinal", None),
            launch_corr=column("launch_corr", np.int64),
            launch_ts=column("launch_ts", np.float64),
            gpu_start=column("gpu_start", np.float64),
            gpu_end=column("gpu_end", np.float64),
            gpu_corr=column("gpu_corr", np.int64),
            gpu_stream=column("gpu_stream", np.int64),
            gpu_name=column("gpu_name", np.int32),
            collectives=sorted(self.collectives, key=lambda c: (c.start, c.end)),
            event_bytes=column("event_bytes", np.int32),
            event_count=self.event_count,
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
    where the scanner is built and takes the trace (:mod:`profiling.analysis.trace_scan`), else
    read in Python: the same columns."""
    if not merge:  # the merged JSON's positions and sizes come from the Python reader alone
        from profiling.analysis import trace_scan  # (it builds on this module)

        if trace_scan.AVAILABLE:
            try:
                return trace_scan.read_scanned(path)
            except (trace_scan.NotScannable, TraceFormatError):
                pass  # read the Python way, which takes it, or says why not as it always has
    return read_in_python(path, merge=merge)


def read_in_python(path: Path, *, merge: bool = False, chunk_bytes: int = CHUNK_BYTES) -> TraceEvents:
    """:func:`read` by msgspec's structs, a chunk of ``chunk_bytes`` at a time."""
    stream = TraceStream(path, ReadEvent, chunk_bytes)
    builder = TraceBuilder(merge=merge)
    for chunk in stream.chunks():
        builder.add(chunk)
    return builder.build(stream.header)


def from_document(trace: dict[str, Any], *, merge: bool = False) -> TraceEvents:
    """A trace already in memory (``json.load`` of a file), as columns: for tests and tools."""
    builder = TraceBuilder(merge=merge)
    builder.add(msgspec.json.decode(msgspec.json.encode(trace.get("traceEvents", [])), type=list[ReadEvent]))
    return builder.build({key: value for key, value in trace.items() if key != "traceEvents"})


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, dict):
        return tuple(sorted((key, _hashable(item)) for key, item in value.items()))
    return value
