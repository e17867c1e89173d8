"""The compiled reader of a trace: :mod:`profiling.analysis.reading.trace_events`' columns, from a scan
of each chunk in C (``_scan.c``), where the Python reader decodes a struct per event and then
makes columns of them.

The scanner keeps only complete events (``ph == "X"`` with a ``ts``) and gives each its
category, name and lane as codes of their JSON text, ``ts``, ``dur``, where its ``args`` lie and
``args.correlation`` and ``args.stream``; this module turns those into the same
:class:`~profiling.analysis.reading.trace_columns.TraceEvents` as the Python reader, column for column
(tests/test_trace_scan.py holds them equal). A trace it does not take exactly as msgspec
would (an escaped name, a pid that is not an int) raises :class:`NotScannable`, and
:func:`~profiling.analysis.reading.trace_events.read` reads it the Python way. Half the CPU time of the
Python reader on a dense trace: what a report on many large traces waits for.

Not compiled (no C compiler where the toolkit was installed): :data:`AVAILABLE` is False and
every trace is read the Python way.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from profiling.analysis.reading.collectives import is_collective
from profiling.analysis.reading.instant_args import add_memory, add_stream_waits
from profiling.analysis.reading.json_stream import CHUNK_BYTES, CutInside, TraceStream
from profiling.analysis.reading.op_flops import COUNTED, CountedOp, counted_ops
from profiling.analysis.reading.trace_columns import (
    ANALYSED,
    ANALYSED_KINDS,
    ANNOTATION,
    ARGS,
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
from profiling.analysis.reading.trace_errors import Unfit

try:
    from profiling.analysis.reading import _scan  # type: ignore[attr-defined]  # C, no stub
except ImportError:  # built without a C compiler
    _scan = None

AVAILABLE = _scan is not None
_LANE_VALUE = msgspec.json.Decoder(int | str | None)


class NotScannable(ValueError):
    """A trace the scanner does not take as msgspec would: read it the Python way."""


class _Scanned:
    """Columns of one trace, a chunk at a time (as :class:`.trace_events.TraceBuilder` makes them)."""

    def __init__(self) -> None:
        self.categories: dict[bytes, int] = {}
        self.names: dict[bytes, int] = {}
        self.lanes: dict[bytes, int] = {}
        self._kinds = np.zeros(0, dtype=np.int8)  # by category code
        self._kernel_code = -1
        self._sync_code = -1  # cuda_sync's category code
        self._name_text: list[str] = []
        self._collective_name = np.zeros(0, dtype=bool)  # by name code
        self._columns: dict[str, list[np.ndarray]] = collections.defaultdict(list)
        # (name code, start, end, lane code, on the GPU, raw args) of each collective's event
        self._found: list[tuple[int, float, float, int, bool, bytes]] = []
        self._counted_name = np.zeros(0, dtype=bool)  # by name code: an op whose FLOPs are counted
        self._counted: list[CountedOp] = []
        self.event_count = 0

    def decode(self, chunk: bytes) -> int:
        """Scan ``chunk`` (``[`` events ``]``) into the columns; returns how many events it held."""
        assert _scan is not None
        found = _scan.scan(chunk, self.categories, self.names, self.lanes)
        if len(found) == 2:
            cut, at = found
            if cut:
                raise CutInside(at)
            raise NotScannable(f"an event at {at} of a chunk is not what the scanner takes")
        self._add(chunk, *found)
        return found[0]

    def _add(self, chunk: bytes, events: int, kept: int, *columns: bytes) -> None:
        """A scanned chunk's columns added, and its collectives' events (their args decoded
        once the trace is read: :func:`.trace_columns.kept_collectives`)."""
        if not kept:
            self.event_count += events
            return
        category, name, lane = (np.frombuffer(c, dtype=np.int32) for c in columns[:3])
        start, duration = (np.frombuffer(c, dtype=np.float64) for c in columns[3:5])
        args_at, args_length, correlation, stream = (np.frombuffer(c, dtype=np.int64) for c in columns[5:])
        self._learn_codes()
        kind = self._kinds[category]
        end = start + duration
        gpu = kind == GPU
        found = []
        candidates = self._collective_name[name] & ((kind == ANALYSED) | (kind == ANNOTATION) | gpu)
        for i in np.flatnonzero(candidates).tolist():
            # NCCL kernels, not their memcpys
            if kind[i] in ANALYSED_KINDS or category[i] == self._kernel_code:
                at, length = int(args_at[i]), int(args_length[i])
                args = bytes(chunk[at : at + length]) if at >= 0 else b""
                found.append((int(name[i]), float(start[i]), float(end[i]), int(lane[i]), bool(gpu[i]), args))
        self._found += found
        counted = np.flatnonzero(self._counted_name[name] & (kind == ANALYSED) & (args_at >= 0)).tolist()
        if counted:
            texts = self._name_text
            self._counted += counted_ops(
                [
                    (texts[name[i]], float(start[i]), bytes(chunk[args_at[i] : args_at[i] + args_length[i]]))
                    for i in counted
                ]
            )
        self.event_count += events
        ordinal = np.zeros(kept, dtype=np.int32 if self.event_count < 2**31 else np.int64)
        columns_of = self._columns
        add_parts(columns_of, gpu, gpu_start=start, gpu_end=end, gpu_name=name, gpu_ordinal=ordinal)
        add_parts(columns_of, gpu, gpu_corr=correlation, gpu_stream=stream)
        memory = np.flatnonzero(kind == MEMORY)
        if len(memory):
            raws = [
                bytes(chunk[a : a + n]) if a >= 0 else b""
                for a, n in zip(args_at[memory].tolist(), args_length[memory].tolist(), strict=True)
            ]
            add_memory(columns_of, start[memory], raws)
        waits = [
            i
            for i in np.flatnonzero(category == self._sync_code).tolist()
            if self._name_text[name[i]] == STREAM_WAIT
        ]
        if waits:
            raws = [
                bytes(chunk[args_at[i] : args_at[i] + args_length[i]]) if args_at[i] >= 0 else b""
                for i in waits
            ]
            add_stream_waits(columns_of, start[waits], raws)
        cpu = (kind != GPU) & (kind != IGNORED) & (kind != MEMORY)
        add_parts(columns_of, cpu, start=start, end=end, name=name, kind=kind, ordinal=ordinal, lane=lane)
        launch = kind == LAUNCH
        linked = correlation[launch] >= 0  # a launch without a correlation id cannot be tied to a kernel
        columns_of["launch_corr"].append(correlation[launch][linked])
        columns_of["launch_ts"].append(start[launch][linked])

    def _learn_codes(self) -> None:
        """Kinds of the new categories, text and collective flags of the new names."""
        try:
            if len(self._kinds) < len(self.categories):
                new = list(self.categories)[len(self._kinds) :]
                kinds = [KIND_OF_CATEGORY.get(c.decode(), OTHER_CPU) for c in new]
                self._kinds = np.concatenate([self._kinds, np.array(kinds, dtype=np.int8)])
                self._kernel_code = self.categories.get(b"kernel", -1)
                self._sync_code = self.categories.get(SYNC_CATEGORY.encode(), -1)
            if len(self._name_text) < len(self.names):
                new_names = [n.decode() for n in list(self.names)[len(self._name_text) :]]
                self._name_text += new_names
                flags = np.array([is_collective(n) for n in new_names], dtype=bool)
                self._collective_name = np.concatenate([self._collective_name, flags])
                counted = np.array([n in COUNTED for n in new_names], dtype=bool)
                self._counted_name = np.concatenate([self._counted_name, counted])
        except UnicodeDecodeError as error:
            raise NotScannable(f"a category or name is not UTF-8 ({error})") from None

    def build(self, header: dict[str, Any]) -> TraceEvents:
        lanes = self._columns.pop("lane", [])
        lane = np.concatenate(lanes) if lanes else np.zeros(0, dtype=np.int32)
        lanes_decoded = self._decoded_lanes()
        threads, thread_of_lane = self._threads(lane, lanes_decoded)
        self._columns["thread"] = [thread_of_lane[lane]]
        found = [
            (self._name_text[name], start, end, lanes_decoded[lane][1], gpu, args)
            for name, start, end, lane, gpu, args in self._found
        ]
        collectives = kept_collectives(found, _decoded_args)
        return from_chunks(
            header,
            self._columns,
            list(self._name_text),
            threads,
            collectives,
            self._counted,
            self.event_count,
        )

    def _decoded_lanes(self) -> list[tuple[Any, Any]]:
        """Each lane code's (pid, tid), decoded as msgspec decodes them."""
        decoded = []
        for key in self.lanes:
            pid, tid = key.split(b"\0", 1)
            try:
                decoded.append((_lane_value(pid), _lane_value(tid)))
            except msgspec.DecodeError as error:
                raise NotScannable(f"a pid or tid is not one ({error})") from None
        return decoded

    @staticmethod
    def _threads(
        lanes: np.ndarray, decoded: list[tuple[Any, Any]]
    ) -> tuple[list[tuple[Any, Any]], np.ndarray]:
        """The CPU spans' threads, coded by first appearance as the Python reader codes them,
        and each lane code's thread code (lanes whose texts decode alike are one thread)."""
        thread_of_lane = np.full(max(1, len(decoded)), -1, dtype=np.int32)
        threads: dict[tuple[Any, Any], int] = {}
        if len(lanes):
            distinct, first_at = np.unique(lanes, return_index=True)
            for lane in distinct[np.argsort(first_at)].tolist():
                thread_of_lane[lane] = threads.setdefault(decoded[lane], len(threads))
        return list(threads), thread_of_lane


def _decoded_args(raw: bytes) -> dict[str, Any]:
    """A collective's ``args``, decoded whole (as the Python reader decodes them); where they
    do not decode, the Python reader says why."""
    try:
        return ARGS.decode(raw)
    except (msgspec.DecodeError, RecursionError) as error:
        raise NotScannable(f"a collective's args do not decode ({error})") from None


def _lane_value(text: bytes) -> Any:
    """A pid's or tid's JSON text as msgspec's reader has it (absent: None)."""
    return _LANE_VALUE.decode(text) if text else None


def read_scanned(path: Path, chunk_bytes: int = CHUNK_BYTES) -> TraceEvents:
    """The columns of the trace at ``path``, scanned in C a chunk of ``chunk_bytes`` at a time;
    :class:`NotScannable` where the scanner does not take it (the caller reads it the Python way)."""
    if _scan is None:
        raise NotScannable("the scanner is not built")
    scanned = _Scanned()
    stream = TraceStream(path, chunk_bytes=chunk_bytes, decode=scanned.decode)
    for _ in stream.chunks():
        pass
    try:
        return scanned.build(stream.header)
    except Unfit as error:
        raise NotScannable(str(error)) from None
