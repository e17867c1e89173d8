"""The args of the instants the readers keep, decoded in one go a chunk: the allocator's
[memory] instants (its totals after each) and the Stream Wait Events (the waits between streams
:mod:`profiling.analysis.per_trace.stream_waits` ties). Both readers (the C scanner's and
Python's) hand them here, so that they read them alike."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any

import msgspec
import numpy as np

_ANY_LIST = msgspec.json.Decoder(list[Any])


class _MemoryArgs(msgspec.Struct):
    """A [memory] instant's args as torch writes them (others' keys ignored)."""

    allocated: float | None = msgspec.field(name="Total Allocated", default=None)
    reserved: float | None = msgspec.field(name="Total Reserved", default=None)
    # a device out of range fails the typed read: the chunk is read the other way, its device -1
    device: Annotated[int, msgspec.Meta(ge=-1, lt=2**31)] | None = msgspec.field(
        name="Device Id", default=None
    )


_MEMORY_ARGS = msgspec.json.Decoder(list[_MemoryArgs])


def add_memory(chunks: dict[str, list[np.ndarray]], ts: np.ndarray, raw_args: Sequence[bytes]) -> None:
    """The [memory] instants' columns: the totals their args give, after each (NaN, and device
    -1, where an instant does not say; args of another form are not refused, as no analysis
    depends on them alone)."""
    text = b"[" + b",".join(raw or b"{}" for raw in raw_args) + b"]"
    try:  # as torch writes them, typed: a trace of an allocator's 28 000 instants read 5x faster
        typed = _MEMORY_ARGS.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        typed = None
    if typed is not None:
        chunks.setdefault("memory_ts", []).append(ts)
        nan = math.nan
        chunks.setdefault("memory_allocated", []).append(
            np.array([nan if a.allocated is None else a.allocated for a in typed], dtype=np.float64)
        )
        chunks.setdefault("memory_reserved", []).append(
            np.array([nan if a.reserved is None else a.reserved for a in typed], dtype=np.float64)
        )
        chunks.setdefault("memory_device", []).append(
            np.array([-1 if a.device is None else a.device for a in typed], dtype=np.int32)
        )
        return
    decoded = _ANY_LIST.decode(text)

    def number(args: Any, key: str) -> float:
        value = args.get(key) if isinstance(args, dict) else None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan

    def device(args: Any) -> int:
        value = args.get("Device Id") if isinstance(args, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and -1 <= value < 2**31 else -1

    chunks.setdefault("memory_ts", []).append(ts)
    chunks.setdefault("memory_allocated", []).append(
        np.array([number(a, "Total Allocated") for a in decoded])
    )
    chunks.setdefault("memory_reserved", []).append(np.array([number(a, "Total Reserved") for a in decoded]))
    chunks.setdefault("memory_device", []).append(np.array([device(a) for a in decoded], dtype=np.int32))


def add_stream_waits(chunks: dict[str, list[np.ndarray]], ts: np.ndarray, raw_args: Sequence[bytes]) -> None:
    """The Stream Wait Events' columns (a few a step: their args decoded whole); -1 where an
    id is absent or not an integer (such a wait ties nothing)."""
    decoded = _ANY_LIST.decode(b"[" + b",".join(raw or b"{}" for raw in raw_args) + b"]")

    def integer(args: Any, key: str) -> int:
        value = args.get(key) if isinstance(args, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else -1

    for column, key in (
        ("wait_stream", "stream"),
        ("wait_on_stream", "wait_on_stream"),
        ("wait_record_corr", "wait_on_cuda_event_record_corr_id"),
    ):
        chunks.setdefault(column, []).append(np.array([integer(a, key) for a in decoded], dtype=np.int64))
    chunks.setdefault("wait_ts", []).append(ts)
