"""What the report needs from one trace, kept beside it: the trace's analysis record.

Reading a trace is what a report costs; combining a job's traces (clocks, straggler, summary)
needs only a little of each. A record holds that little: the rank, host and base time, each
step's breakdown (:mod:`.breakdown`), the collectives by what identifies them across ranks
(:mod:`.collectives`), the trace's lanes and its warnings. It is written by whoever read the
trace (the rank that wrote it, at the end of a job; a worker of the report; a task of a
``--slurm`` job array) to ``meta/analysis/`` beside the traces, and read instead of the trace
while it is *fresh*: the trace has the name, size and modification time the record was made
from, and the record the analysis version of the code reading it. Change the analysis (or the
clock alignment, whose result a report keeps: :mod:`profiling.analysis.clocks.kept`) and bump
:data:`ANALYSIS_VERSION`: every trace is read again.
"""

from __future__ import annotations

import os
import socket
import time
import zlib

import msgspec

from profiling.analysis.per_trace.bandwidth import CollectiveRow, summarise_collectives
from profiling.analysis.per_trace.breakdown import CPU_PARTS, GPU_PARTS, StepBreakdown, analyse
from profiling.analysis.per_trace.flops import FlopCount, count_flops
from profiling.analysis.per_trace.groups import Group, trace_groups
from profiling.analysis.per_trace.idle import IdleCauses
from profiling.analysis.per_trace.kernels import KernelSummary, summarise_kernels
from profiling.analysis.per_trace.lane_checks import lane_problem
from profiling.analysis.per_trace.lanes import StepLane
from profiling.analysis.per_trace.memory import StepMemory, step_memory
from profiling.analysis.reading.collectives import Instance
from profiling.analysis.reading.instances import instances
from profiling.analysis.reading.trace_events import read as read_trace
from profiling.folder.layout import analysis_record, lanes_record
from profiling.folder.traces import TraceFile, TraceSource
from profiling.schema.files import first_line
from slurm.common.files import LARGE_FILE_BYTES, atomic_path, read_regular

# 2: cpu_seconds; 3: the trace named as in its folder of traces; 4: kernels, bandwidth;
# 5: idle causes, kernels without a launch counted as HTA counts them; 6: the clocks' ± covers
# an error a group of pairs shares (kept clocks are aligned again); 7: each step's lane (the
# critical path); 8: the FLOPs of its counted ops, each step's peak memory; 9: what no run can
# have left out of the columns, said in its warnings; records and lanes carry their checksum;
# the process groups its distributedInfo lists; 10: each collective's group and peer, numbered
# collectives of groups and transfers (gloo's, by the toolkit's labels); 11: the whole job's group
# not kept; 12: NCCL sends' and receives' peers (Src Rank, Dst Rank); 13: the waits between a
# GPU's streams its trace ties (Stream Wait Events), in each step's lane; 14: a lanes file's
# checksum over its bytes as written
ANALYSIS_VERSION = 14


class ReportError(ValueError):
    """A folder or trace that cannot be reported on; the message says why and what to do."""


class TraceRecord(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    trace: str  # the trace file's name, size and modification time, when it was read
    size: int
    mtime_ns: int
    rank: int
    world_size: int | None
    host: str
    base_time_ns: int | None
    device: str  # "gpu" or "cpu"
    steps: list[StepBreakdown]
    instances: list[Instance]
    kernels: KernelSummary | None  # the GPU's kernels by name and family (None: a CPU trace)
    collectives: list[CollectiveRow]  # by kind and message size: durations and bandwidth
    idle: IdleCauses | None  # the GPU streams' idle time by cause (None: a CPU trace)
    unlaunched: int  # GPU activities whose launch the trace does not hold
    main_pid: int | str | None  # the profiled process (its CPU threads), as opposed to device lanes
    lanes: int  # the (process, thread) lanes of its CPU side
    groups: list[Group]  # the process groups its distributedInfo lists
    flops: FlopCount | None  # its counted ops' FLOPs by step (None: no op with shapes counted)
    memory: list[StepMemory]  # each step's peak on each device (empty: no [memory] instants)
    device_memory_bytes: int | None  # the GPU's memory, as deviceProperties says
    # what the rank did at each instant of each step (the critical path) and the ops and kernels
    # they name; kept in their own file once saved (empty here then: see :func:`save`)
    step_lanes: list[StepLane]
    lane_names: list[str]
    warnings: list[str]
    analysed_by: str  # "rank 3 on node2", "a report worker on login1"
    seconds: float  # how long reading and analysing it took
    cpu_seconds: float  # and the reader's CPU time for it: its cost on one core, whatever ran beside it
    checksum: int | None = None  # CRC-32 of the record as saved, this field null: a changed cache is seen

    @property
    def parts(self) -> tuple[str, ...]:
        return GPU_PARTS if self.device == "gpu" else CPU_PARTS

    def is_fresh_for(self, source: TraceSource) -> bool:
        stat = source.path.stat()
        return (self.version, self.trace, self.size, self.mtime_ns) == (
            ANALYSIS_VERSION,
            source.name,
            stat.st_size,
            stat.st_mtime_ns,
        )

    def trace_file(self, source: TraceSource) -> TraceFile:
        """The trace with the steps it holds: its name's (the toolkit's), else its own."""
        named = source.named
        if named is not None:
            return named
        if not self.steps:
            raise ReportError(f"{source.name} holds no ProfilerStep#N span: it has no step to report on")
        return TraceFile(self.rank, self.steps[0].step, self.steps[-1].step, source.path, source.name)


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(TraceRecord)
# msgpack: the lanes' arrays as raw bytes (JSON would carry them as base64, a third more)
_LANES_ENCODER = msgspec.msgpack.Encoder()


def analyse_trace(source: TraceSource, analysed_by: str) -> TraceRecord:
    """Read one trace and make its record (not saved: see :func:`save`)."""
    started, started_cpu = time.perf_counter(), time.thread_time()
    stat = source.path.stat()
    events = read_trace(source.path)
    named = source.named
    analysis = analyse(events, rank_from_name=named.rank if named else source.rank_in_name)
    if analysis.rank is None:
        raise ReportError(
            f"{source.name} says no rank: no distributedInfo.rank in it, no rank<r> in its name. "
            "HINT: rename it rank<r>_<anything>.json"
        )
    if named is not None and analysis.rank != named.rank:
        raise ReportError(
            f"{source.name} says distributedInfo.rank={analysis.rank}; its name says "
            f"{named.rank}. HINT: do not rename trace files"
        )
    windows = [(s.step, s.start_us, s.start_us + s.duration_us) for s in analysis.steps]
    groups, not_groups = trace_groups(events.distributed_info)
    found = instances(analysis.collectives, analysis.rank, groups)
    return TraceRecord(
        version=ANALYSIS_VERSION,
        trace=source.name,
        size=stat.st_size,
        mtime_ns=stat.st_mtime_ns,
        rank=analysis.rank,
        world_size=analysis.world_size,
        host=analysis.host,
        base_time_ns=analysis.base_time_ns,
        device=analysis.device,
        steps=analysis.steps,
        instances=found,
        kernels=summarise_kernels(events.names, events.gpu_name, events.gpu_end - events.gpu_start)
        if len(events.gpu_start)
        else None,
        collectives=summarise_collectives(analysis.collectives, found, groups),
        idle=analysis.idle,
        unlaunched=analysis.unlaunched,
        main_pid=events.main_pid(),
        lanes=len(events.threads),
        groups=groups,
        flops=count_flops(events.counted_ops, windows, events.device_name),
        memory=step_memory(events, windows),
        device_memory_bytes=events.device_memory_bytes,
        step_lanes=analysis.lanes,
        lane_names=analysis.lane_names,
        warnings=[*events.problems, *not_groups, *analysis.warnings],
        analysed_by=analysed_by,
        seconds=round(time.perf_counter() - started, 4),
        cpu_seconds=round(time.thread_time() - started_cpu, 4),
    )


class TraceLanes(msgspec.Struct, frozen=True):
    """A trace's lanes, beside its record: the critical path walks a few ranks' lanes, and at
    4096 ranks every lane in memory at once would be 0.7 GB (a GPU step has thousands of spans)."""

    version: int
    trace: str
    size: int
    mtime_ns: int
    steps: list[StepLane]
    names: list[str]


class _CheckedLanes(msgspec.Struct, frozen=True):
    """A lanes file: the lanes' encoding and its CRC-32. Checking it is a CRC of the bytes read;
    a checksum of the decoded lanes encoded again (as the record's) cost 0.8 ms a rank, 3.2 s of
    a report of 4096 ranks."""

    lanes: msgspec.Raw
    checksum: int


_CHECKED_LANES_DECODER = msgspec.msgpack.Decoder(_CheckedLanes)
_LANES_DECODER = msgspec.msgpack.Decoder(TraceLanes)


def save(record: TraceRecord, source: TraceSource) -> TraceRecord:
    """Write the record beside its trace, its lanes in a file of their own; returns the record
    as the report keeps it: without its lanes once they are on disk, with them where that
    folder cannot be written (someone else's job, say: the trace is read again next time)."""
    path = analysis_record(source.path, source.folder)
    lanes = TraceLanes(
        record.version, record.trace, record.size, record.mtime_ns, record.step_lanes, record.lane_names
    )
    kept = msgspec.structs.replace(record, step_lanes=[], lane_names=[], checksum=None)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # not fsynced: a cache, made again from its trace if a crash loses it (the rename still
        # keeps readers from a half-written one); 8 dense records flushed took 0.1 s of a report
        with atomic_path(lanes_record(source.path, source.folder), durable=False) as temp:
            encoded = _LANES_ENCODER.encode(lanes)
            temp.write_bytes(_LANES_ENCODER.encode(_CheckedLanes(msgspec.Raw(encoded), zlib.crc32(encoded))))
        with atomic_path(path, durable=False) as temp:
            temp.write_bytes(_ENCODER.encode(_summed(kept)))
    except OSError:
        return record
    return kept


def load_fresh(source: TraceSource) -> TraceRecord | None:
    """The trace's record, if one was saved and is fresh (see the module docstring)."""
    return load_checked(source)[0]


def load_checked(source: TraceSource) -> tuple[TraceRecord | None, str | None]:
    """The trace's record if one was saved, is fresh and holds to its trace; else None, and,
    where a record was there but does not hold, the line that says it is made again: a record
    that does not decode, is not as it was written (its checksum), or names another rank than
    its trace's name says. (One of another trace, or of its trace before it changed, is not
    fresh: its name, size and modification time say so.)"""
    path = analysis_record(source.path, source.folder)
    try:
        record = _DECODER.decode(read_regular(path, LARGE_FILE_BYTES))
    except FileNotFoundError:
        return None, None
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as error:
        return None, _rebuilt(path, f"it does not read ({first_line(error)})")
    if not _sum_holds(record):
        return None, _rebuilt(path, "it is not as it was written (its checksum differs)")
    if not record.is_fresh_for(source):
        return None, None  # an older read, or an older analysis: read again, as expected
    named = source.named  # the analysis refuses a trace whose rank is not its name's: so does a record
    if named is not None and record.rank != named.rank:
        return None, _rebuilt(path, f"it holds rank {record.rank}'s analysis, not rank {named.rank}'s")
    return record, None


def load_lanes(
    record: TraceRecord, source: TraceSource
) -> tuple[tuple[list[StepLane], list[str]], str | None]:
    """The record's lanes: its own, else those saved beside it for the same read of the trace;
    where that file is missing or does not hold to the record (another trace's, cut short, an
    index out of range), the trace is read again for them, and a line says so."""
    if record.step_lanes:
        return (record.step_lanes, record.lane_names), None
    path = lanes_record(source.path, source.folder)
    try:
        checked = _CHECKED_LANES_DECODER.decode(read_regular(path, LARGE_FILE_BYTES))
        if zlib.crc32(checked.lanes) == checked.checksum:
            lanes = _LANES_DECODER.decode(checked.lanes)
            why = _lanes_wrong(lanes, record)
        else:
            why = "its checksum differs"
    except FileNotFoundError:
        why = "it is missing"
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as error:
        why = f"it does not read ({first_line(error)})"
    if why is None:
        return (lanes.steps, lanes.names), None
    again = analyse_trace(source, reader_here("the report, for its lanes"))
    save(again, source)
    return (again.step_lanes, again.lane_names), _rebuilt(path, why)


def _lanes_wrong(lanes: TraceLanes, record: TraceRecord) -> str | None:
    """What in a lanes file does not hold to its record, in words; None where all of it does."""
    if (lanes.version, lanes.trace, lanes.size, lanes.mtime_ns) != (
        record.version,
        record.trace,
        record.size,
        record.mtime_ns,
    ):
        return f"it was made from {lanes.trace} (version {lanes.version}), not this read of {record.trace}"
    for lane in lanes.steps:
        problem = lane_problem(lane, len(lanes.names))
        if problem:
            return f"step {lane.step}'s lane {problem}"
    return None


def _summed(record: TraceRecord) -> TraceRecord:
    """The record with its checksum: the CRC-32 of its encoding with none."""
    return msgspec.structs.replace(record, checksum=zlib.crc32(_ENCODER.encode(record)))


def _sum_holds(record: TraceRecord) -> bool:
    """Whether the record encodes, its checksum left out, to what the checksum says (the
    encoding is the same bytes again: fields in order, floats in their shortest form; a record
    without its lanes is small, so encoding it again is cheap)."""
    if record.checksum is None:
        return False
    return zlib.crc32(_ENCODER.encode(msgspec.structs.replace(record, checksum=None))) == record.checksum


def _rebuilt(path: os.PathLike[str], why: str) -> str:
    return f"{os.fspath(path)} was made again from its trace: {why}"


def reader_here(what: str = "a report worker") -> str:
    """Who is reading, for :attr:`TraceRecord.analysed_by`: ``"a report worker on login1 (pid 7)"``."""
    return f"{what} on {socket.gethostname()} (pid {os.getpid()})"
