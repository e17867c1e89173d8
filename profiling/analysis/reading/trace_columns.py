"""What both trace readers make of a trace: :class:`TraceEvents`, its columns, and the names
and kinds of events they are made from (:mod:`profiling.analysis.reading.trace_events` reads a trace in
Python, :mod:`profiling.analysis.reading.trace_scan` in C; both give these columns)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from profiling.analysis.reading.collectives import Collective
from profiling.analysis.reading.op_flops import CountedOp
from profiling.analysis.reading.trace_errors import Unfit

STEP_PREFIX = "ProfilerStep#"
MAX_STEP = (1 << 31) - 1  # the step logs' and the lanes' steps are 32-bit
FLOW_PHASES = ("s", "t", "f")
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
    "dtype",  # with the element counts: the message's bytes (profiling.analysis.per_trace.bandwidth)
    "Group size",
    "Process Group Ranks",
    "Src Rank",  # a receive's peer; a send's, below: what ties a receive to its send
    "Dst Rank",
)
# A stream's wait for an event recorded on another (``cudaStreamWaitEvent``), as Kineto records it
# on the waiting stream: what ties a kernel to the receive or collective it waits for, as HTA's
# critical path reads it (its args name the stream waited on and the record's correlation)
SYNC_CATEGORY = "cuda_sync"
STREAM_WAIT = "Stream Wait Event"
# An event's bytes in the merged trace besides its name, category and args: the keys, ph, pid,
# tid, ts and dur compactly encoded (``{"ph":"X","cat":"","name":"","pid":0,"tid":281473065648800,
# "ts":1718000000000000.000,"dur":12.345,"args":}`` is 100)
ENCODED_FIELD_BYTES = 100
# span kinds (and what becomes no span: GPU activity, GPU-side annotations); the analysis reads
# operators and annotations alike, save the critical path: an annotation is a label, not work
ANALYSED, LAUNCH, OTHER_CPU, GPU, IGNORED, ANNOTATION, MEMORY = 0, 1, 2, 3, 4, 5, 6
ANALYSED_KINDS = (ANALYSED, ANNOTATION)
KIND_OF_CATEGORY = {
    "cpu_op": ANALYSED,
    "user_annotation": ANNOTATION,
    **dict.fromkeys(LAUNCH_CATEGORIES, LAUNCH),
    **dict.fromkeys(GPU_ACTIVITY, GPU),
    "gpu_user_annotation": IGNORED,
    "cpu_instant_event": MEMORY,  # the readers keep only the allocator's instants ([memory]) of it
}


ARGS = msgspec.json.Decoder(dict[str, Any])


@dataclasses.dataclass
class TraceEvents:
    """The columns of one trace (see the module docstring); built by :class:`TraceBuilder`."""

    distributed_info: dict[str, Any]
    host: str
    base_time_ns: int | None
    device_name: str | None  # the first GPU's, as deviceProperties names it
    device_memory_bytes: int | None  # and its memory (totalGlobalMem)
    names: list[str]
    threads: list[tuple[Any, Any]]  # (pid, tid) of each thread code
    span_start: np.ndarray
    span_end: np.ndarray
    span_thread: np.ndarray  # thread codes: threads[span_thread[i]]
    span_name: np.ndarray  # name codes: names[span_name[i]]
    span_kind: np.ndarray  # ANALYSED, ANNOTATION, LAUNCH or OTHER_CPU
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
    counted_ops: list[CountedOp]  # the operators whose FLOPs are counted (profiling.analysis.per_trace.flops)
    # the allocator's totals after each of its [memory] instants (profile_memory), in file order
    memory_ts: np.ndarray
    memory_allocated: np.ndarray  # bytes, NaN where the instant does not say
    memory_reserved: np.ndarray
    memory_device: np.ndarray  # its "Device Id": -1 the CPU, else the GPU's index
    event_bytes: np.ndarray  # each event's size in the merged trace (estimated), by position
    # each Stream Wait Event: when the waiting stream reached it, that stream, the stream waited
    # on and the correlation of the cudaEventRecord it waits for (-1 where the args do not say)
    wait_ts: np.ndarray
    wait_stream: np.ndarray
    wait_on_stream: np.ndarray
    wait_record_corr: np.ndarray
    event_count: int  # every event of the trace, of any kind
    problems: list[str] = dataclasses.field(default_factory=list)  # what was left out, and why

    def _analysed(self) -> np.ndarray:
        return (self.span_kind == ANALYSED) | (self.span_kind == ANNOTATION)  # isin: 4x slower

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
            number = step_number(codes[int(self.span_name[index])])
            if number is not None:
                found.append(
                    (
                        number,
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


def step_number(name: str) -> int | None:
    """N of a ``ProfilerStep#N`` name, where N is a step a run can have; else None."""
    number = name[len(STEP_PREFIX) :]
    return int(number) if number.isdigit() and len(number) <= 10 and int(number) <= MAX_STEP else None


def hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(hashable(item) for item in value)
    if isinstance(value, dict):
        return tuple(sorted((key, hashable(item)) for key, item in value.items()))
    return value


def from_chunks(
    header: dict[str, Any],
    chunks: dict[str, list[np.ndarray]],
    names: list[str],
    threads: list[tuple[Any, Any]],
    collectives: list[Collective],
    counted_ops: list[CountedOp],
    event_count: int,
) -> TraceEvents:
    """The columns made of each chunk's parts (by :class:`TraceEvents` field, without ``span_``),
    with the trace's top-level fields (all but ``traceEvents``)."""

    def column(key: str, dtype: Any) -> np.ndarray:
        """``dtype`` None: the chunks' own (positions are int64 once they no longer fit int32)."""
        parts = chunks.get(key)
        if not parts:
            return np.zeros(0, dtype=dtype or np.int32)
        return np.concatenate(parts).astype(dtype or parts[-1].dtype, copy=False)

    base = header.get("baseTimeNanoseconds")
    if base is not None and not (isinstance(base, int) or (isinstance(base, float) and base.is_integer())):
        raise Unfit(f"`baseTimeNanoseconds` is {base!r}, not a whole number of nanoseconds")
    info = header.get("distributedInfo") or {}
    if not isinstance(info, dict):
        raise Unfit(f"`distributedInfo` is {type(info).__name__}, not an object")
    return TraceEvents(
        distributed_info=dict(info),
        host=str(header.get("host_name", "")),
        base_time_ns=int(base) if base is not None else None,
        device_name=_device_name(header.get("deviceProperties")),
        device_memory_bytes=_device_memory(header.get("deviceProperties")),
        names=names,
        threads=threads,
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
        collectives=sorted(collectives, key=lambda c: (c.start, c.end)),
        counted_ops=sorted(counted_ops),
        memory_ts=column("memory_ts", np.float64),
        memory_allocated=column("memory_allocated", np.float64),
        memory_reserved=column("memory_reserved", np.float64),
        memory_device=column("memory_device", np.int32),
        event_bytes=column("event_bytes", np.int32),
        wait_ts=column("wait_ts", np.float64),
        wait_stream=column("wait_stream", np.int64),
        wait_on_stream=column("wait_on_stream", np.int64),
        wait_record_corr=column("wait_record_corr", np.int64),
        event_count=event_count,
    )


def _first_device(properties: Any) -> dict[str, Any]:
    """The first device of a trace's ``deviceProperties`` (a list of objects); {} where none."""
    first = properties[0] if isinstance(properties, list) and properties else None
    return first if isinstance(first, dict) else {}


def _device_name(properties: Any) -> str | None:
    name = _first_device(properties).get("name")
    return name if isinstance(name, str) and name else None


def _device_memory(properties: Any) -> int | None:
    total = _first_device(properties).get("totalGlobalMem")
    return total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None


def add_parts(chunks: dict[str, list[np.ndarray]], where: np.ndarray, **columns: np.ndarray) -> None:
    """Each column's values ``where`` the mask holds, as the next part of its chunks."""
    for key, values in columns.items():
        chunks.setdefault(key, []).append(values[where])


def kept_collectives(
    found: Sequence[tuple[str, float, float, Any, bool, bytes]], decode: Callable[[bytes], dict[str, Any]]
) -> list[Collective]:
    """The collectives of a trace from what its reader found, ``(name, start, end, tid, on the
    GPU, raw args)`` each: its NCCL kernels where it has any, else its CPU operators. The
    CPU-side operators that issued a kernel (``nccl:all_reduce``, ``c10d::allreduce_``) say
    nothing the kernel does not, and decoding their args took a quarter of a dense trace's
    read."""
    kernels = [f for f in found if f[4]]
    return [
        collective_of(name, start, end, tid, gpu, decode(raw) if raw else {})
        for name, start, end, tid, gpu, raw in kernels or found
    ]


def collective_of(
    name: str, start: float, end: float, tid: Any, gpu: bool, args: dict[str, Any]
) -> Collective:
    """A collective's event, with the ``args`` that identify it (and, on the GPU, its correlation)."""
    kept = tuple((key, hashable(args[key])) for key in COLLECTIVE_ARGS if key in args)
    return Collective(name, start, end, tid, gpu, kept, args.get("correlation") if gpu else None)
