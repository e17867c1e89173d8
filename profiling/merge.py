"""All ranks' traces as one Chrome trace: one process lane per rank, clocks aligned.

Written as the traces are read, one at a time, so that only one trace's events are in memory.

Clock alignment, in two steps:

1. Each trace's ``ts`` is relative to its own ``baseTimeNanoseconds``; adding the difference
   to the first rank's base puts every rank on the same wall clock.
2. Wall clocks of different hosts disagree by up to milliseconds. Every rank leaves the same
   all-reduce at nearly the same instant (nobody finishes before the last rank's data is in),
   so each rank is shifted so that the end of its first all-reduce in the first recorded step
   coincides with the first rank's. The residual error is the all-reduce's own skew between
   ranks: microseconds with NCCL, up to a few hundred microseconds with gloo on CPU.
   A rank without such an all-reduce keeps its wall-clock placement (step 1 only).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import IO, Any

from profiling.analysis import RankAnalysis

try:  # several times faster than json on large traces; optional
    import orjson

    def _dumps(value: Any) -> bytes:
        return orjson.dumps(value)

except ImportError:  # pragma: no cover - exercised where orjson is absent

    def _dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()


_METADATA_DROPPED = frozenset({"process_name", "process_labels", "process_sort_index"})
_DEVICE_TID_BASE = 1 << 32  # tids for lanes that were other processes (GPUs, profiler spans)
_FLOW_ID_STRIDE = 1 << 40


ALIGNMENT_METHOD = (
    "Each rank's ts is moved onto the first rank's clock: by the difference of the traces' "
    "baseTimeNanoseconds, then so that the end of the rank's first all-reduce of the first "
    "recorded step coincides with the first rank's (every rank leaves an all-reduce at nearly "
    "the same instant); the residual error is that all-reduce's skew between ranks."
)


class MergedTraceWriter:
    """Appends ranks' traces to one Chrome trace file, gzipped or not."""

    def __init__(self, path: Path, *, gzipped: bool) -> None:
        self.path = path
        # Level 1: the merged file is several times the size of one trace, and level 1 already
        # shrinks trace JSON about tenfold at a fraction of the default level's time.
        self._file: IO[bytes] = gzip.open(path, "wb", compresslevel=1) if gzipped else open(path, "wb")
        self._first_event = True
        self._reference: tuple[int, float | None] | None = None  # (base ns, anchor) of the first rank
        self.shifts_us: dict[int, float] = {}
        self._file.write(b'{"displayTimeUnit":"ms","traceEvents":[')

    def add(self, trace: dict[str, Any], analysis: RankAnalysis) -> None:
        """Append one trace of one rank (several traces of a rank share its alignment)."""
        rank = analysis.rank
        if self._reference is None:
            self._reference = (analysis.base_time_ns, analysis.comm_anchor_us)
        base, anchor = self._reference
        if rank not in self.shifts_us:
            # ts + shift is the time on the first rank's clock: the wall-clock difference of the
            # bases, or, with anchors on both sides, what makes the anchors coincide.
            shift = (analysis.base_time_ns - base) / 1e3
            if anchor is not None and analysis.comm_anchor_us is not None:
                shift = anchor - analysis.comm_anchor_us
            self.shifts_us[rank] = shift
            self._emit({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                        "args": {"name": f"rank {rank} ({analysis.host})"}})
            self._emit({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        shift = self.shifts_us[rank]

        main_pid = _main_pid(trace)
        lanes: dict[tuple[Any, Any], int] = {}

        def lane(pid: Any, tid: Any) -> int:
            key = (pid, tid)
            if key not in lanes:
                lanes[key] = tid if pid == main_pid and isinstance(tid, int) else _DEVICE_TID_BASE + len(lanes)
            return lanes[key]

        for event in trace.get("traceEvents", ()):
            if event.get("ph") == "M":
                if event.get("name") in _METADATA_DROPPED:
                    continue
                if event.get("name") == "thread_name" and event.get("pid") != main_pid:
                    event["args"] = {"name": f"{event.get('pid')} {(event.get('args') or {}).get('name', '')}".strip()}
            event["tid"] = lane(event.get("pid"), event.get("tid"))
            event["pid"] = rank
            if "ts" in event:
                event["ts"] = event["ts"] + shift
            if "id" in event and isinstance(event["id"], int):
                event["id"] = rank * _FLOW_ID_STRIDE + event["id"]
            self._emit(event)

    def _emit(self, event: dict[str, Any]) -> None:
        if not self._first_event:
            self._file.write(b",\n")
        self._first_event = False
        self._file.write(_dumps(event))

    def close(self, other: dict[str, Any]) -> None:
        base = self._reference[0] if self._reference else 0
        self._file.write(b'],"baseTimeNanoseconds":' + str(base).encode() + b',"otherData":' + _dumps(other) + b"}")
        self._file.close()


def _main_pid(trace: dict[str, Any]) -> Any:
    """The pid of the profiled process itself (its CPU threads), as opposed to device lanes."""
    for event in trace.get("traceEvents", ()):
        if event.get("ph") == "X" and str(event.get("name", "")).startswith("ProfilerStep#"):
            return event.get("pid")
    return None
