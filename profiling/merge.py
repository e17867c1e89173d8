"""All ranks' traces as one Chrome trace: one process lane per rank, clocks aligned.

Each trace is turned into a chunk of events on its own (:func:`merged_events`), so traces can
be read one at a time, by several processes, and appended in rank order.

Clock alignment (:data:`ALIGNMENT_METHOD`): each trace's ``ts`` is relative to its own
``baseTimeNanoseconds``; adding the difference to the first rank's base puts every rank on one
wall clock. Hosts' wall clocks still disagree by up to milliseconds, but every rank leaves the
same all-reduce at nearly the same instant (nobody finishes before the last rank's data is
in), so each trace is then shifted so that the end of its first all-reduce in its first step
coincides with the first rank's in the same window. The residual error is that all-reduce's
own skew between ranks: microseconds with NCCL, up to a few hundred microseconds with gloo on
CPU. A trace without an all-reduce keeps its wall-clock placement.
"""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path
from typing import IO, Any

from orjson import dumps

from profiling.analysis import RankAnalysis

ALIGNMENT_METHOD = (
    "Each rank's ts is moved onto the first rank's clock: by the difference of the traces' "
    "baseTimeNanoseconds, then so that the end of the rank's first all-reduce of the window's "
    "first step coincides with the first rank's (every rank leaves an all-reduce at nearly the "
    "same instant); the residual error is that all-reduce's skew between ranks."
)

_METADATA_DROPPED = frozenset({"process_name", "process_labels", "process_sort_index"})
_OTHER_LANE_TID = 1 << 32  # tids for lanes that were other processes (GPUs, profiler spans)
_FLOW_ID_STRIDE = 1 << 40


@dataclasses.dataclass(frozen=True)
class Reference:
    """The first rank's clock: its base, and its all-reduce anchor in each window (by first step)."""

    base_time_ns: int
    anchors_us: dict[int, float]


def shift_us(analysis: RankAnalysis, reference: Reference) -> float:
    """What to add to this trace's ts to put it on the reference clock."""
    first_step = analysis.steps[0].step if analysis.steps else None
    anchor = reference.anchors_us.get(first_step) if first_step is not None else None
    if anchor is not None and analysis.comm_anchor_us is not None:
        return anchor - analysis.comm_anchor_us
    return (analysis.base_time_ns - reference.base_time_ns) / 1e3


def merged_events(trace: dict[str, Any], rank: int, shift: float) -> bytes:
    """The trace's events in the merged trace's terms (pid = rank, shifted ts), serialised.

    Mutates ``trace``, which is read once and dropped.
    """
    main_pid = _main_pid(trace)
    lanes: dict[tuple[Any, Any], int] = {}
    kept = []
    for event in trace.get("traceEvents", ()):
        pid, tid = event.get("pid"), event.get("tid")
        if event.get("ph") == "M":
            if event.get("name") in _METADATA_DROPPED:
                continue
            if event.get("name") == "thread_name" and pid != main_pid:
                event["args"] = {"name": f"{pid} {(event.get('args') or {}).get('name', '')}".strip()}
        lane = lanes.get((pid, tid))
        if lane is None:
            lane = tid if pid == main_pid and isinstance(tid, int) else _OTHER_LANE_TID + len(lanes)
            lanes[(pid, tid)] = lane
        event["pid"], event["tid"] = rank, lane
        if "ts" in event:
            event["ts"] += shift
        if isinstance(event.get("id"), int):
            event["id"] += rank * _FLOW_ID_STRIDE
        kept.append(event)
    return dumps(kept)[1:-1]  # without the list's brackets


def lane_metadata(rank: int, host: str) -> bytes:
    name = {
        "ph": "M",
        "name": "process_name",
        "pid": rank,
        "tid": 0,
        "args": {"name": f"rank {rank} ({host})"},
    }
    order = {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}}
    return dumps(name) + b",\n" + dumps(order)


class MergedTraceWriter:
    """Writes chunks of events into one Chrome trace file, gzipped or not."""

    def __init__(self, path: Path, *, gzipped: bool, base_time_ns: int) -> None:
        # Level 1: the merged file is the size of all traces together, and level 1 already
        # shrinks trace JSON about tenfold at a fraction of the default level's time.
        # Open until close(): chunks arrive one trace at a time.
        self._file: IO[bytes] = gzip.open(path, "wb", compresslevel=1) if gzipped else open(path, "wb")  # noqa: SIM115
        self._base_time_ns = base_time_ns
        self._empty = True
        self._file.write(b'{"displayTimeUnit":"ms","traceEvents":[')

    def write(self, chunk: bytes) -> None:
        if not chunk:
            return
        if not self._empty:
            self._file.write(b",\n")
        self._empty = False
        self._file.write(chunk)

    def close(self, other_data: dict[str, Any]) -> None:
        self._file.write(
            b'],"baseTimeNanoseconds":%d,"otherData":' % self._base_time_ns + dumps(other_data) + b"}"
        )
        self._file.close()


def _main_pid(trace: dict[str, Any]) -> Any:
    """The pid of the profiled process itself (its CPU threads), as opposed to device lanes."""
    for event in trace.get("traceEvents", ()):
        if event.get("ph") == "X" and str(event.get("name", "")).startswith("ProfilerStep#"):
            return event.get("pid")
    return None
