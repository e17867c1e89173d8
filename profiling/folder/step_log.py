"""A rank's step log: its time for every step of the run, in a small binary file under ``meta/``.

Every rank writes one per attempt (:meth:`profiling.folder.layout.JobFolder.step_log`), whether
it records traces or not; the report draws the run from them (:mod:`profiling.analysis.run.run_map`)
and ``jobs.list --ranks`` reads them while the job runs. Each step has three times, in ms, and
its memory:

- ``wall``: the step's wall time, start to start;
- ``cpu``: the training thread's CPU time in the step (waiting in a collective takes none, so it
  is the rank's own work);
- ``gpu``: where CUDA runs, the GPU time between the events recorded at the step's ends (NaN
  elsewhere, and where the events were not read);
- ``mem``: the step's memory in MiB: where CUDA runs, the allocator's peak allocated in the step
  (``torch.cuda.max_memory_allocated``, its peak reset at each step's end); elsewhere the
  process's resident memory at the step's end (:attr:`StepLogHeader.memory` says which).

The file: a header of :data:`HEADER_BYTES`, then the first :data:`EXACT_STEPS` steps as rows of
:data:`EXACT` (20 bytes: the step and its four values), then a row of :data:`BUCKET` (56 bytes:
first step, step count, min/median/max of each value) per :data:`BUCKET_STEPS` steps. 100 000
steps take 96 + 10 000 × 20 + 900 × 56 = 250 496 bytes; 1024 ranks, 245 MiB. Rows are appended
at each flush, so a killed job keeps every row up to its last flush (a row cut by the kill is
ignored); the steps of an unfinished bucket are lost with it. Logs of the first format
(``SLPSTEP1``, before ``mem``) are read as they are, their ``mem`` NaN.
"""

from __future__ import annotations

import dataclasses
import math
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from slurm.common.files import LARGE_FILE_BYTES, read_regular

MAGIC = b"SLPSTEP2"
_MAGIC_1 = b"SLPSTEP1"  # without ``mem``: still read
EXACT_STEPS = 10_000
BUCKET_STEPS = 100
TIMES = ("wall", "cpu", "gpu")
COLUMNS = (*TIMES, "mem")
# magic, rank, world size, restart count, exact steps, bucket steps, flags, node
_HEADER = struct.Struct("<8siiiiii64s")
HEADER_BYTES = 96
_FLAG_GPU = 1  # GPU times are measured
_FLAG_MEMORY = 2  # memory is recorded...
_FLAG_CUDA_MEMORY = 4  # ...and it is the CUDA allocator's peak
# what no run writes: a header or value beyond these is a damaged file, not a figure
_MAX_EXACT_STEPS, _MAX_BUCKET_STEPS = 10**8, 10**6
_MAX_MS = 1e9  # a step of 11 days
_MAX_MIB = float(1 << 30)  # 1 PiB


def _rows(columns: Sequence[str]) -> tuple[np.dtype, np.dtype]:
    exact = np.dtype([("step", "<i4"), *((name, "<f4") for name in columns)])
    bucket = np.dtype([("first", "<i4"), ("steps", "<i4"), *((name, "<f4", 3) for name in columns)])
    return exact, bucket


EXACT, BUCKET = _rows(COLUMNS)
_EXACT_1, _BUCKET_1 = _rows(TIMES)


class StepLogError(ValueError):
    """A file that is not a step log."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepLogHeader:
    rank: int
    world_size: int
    restart: int  # the attempt (SLURM_RESTART_COUNT) that wrote it
    node: str
    gpu: bool  # GPU times are measured
    # what ``mem`` holds: "cuda" (the allocator's peak in the step), "rss" (the resident memory
    # at its end), "" (nothing: a log of the first format)
    memory: str = "rss"
    exact_steps: int = EXACT_STEPS
    bucket_steps: int = BUCKET_STEPS

    def __post_init__(self) -> None:
        if self.exact_steps < 0 or self.bucket_steps < 1:
            raise ValueError(f"exact_steps {self.exact_steps} and bucket_steps {self.bucket_steps}")

    def encode(self) -> bytes:
        node = self.node.encode()[:64]
        flags = (_FLAG_GPU if self.gpu else 0) | {"": 0, "rss": _FLAG_MEMORY}.get(
            self.memory, _FLAG_MEMORY | _FLAG_CUDA_MEMORY
        )
        fields = (MAGIC, self.rank, self.world_size, self.restart, self.exact_steps, self.bucket_steps)
        return _HEADER.pack(*fields, flags, node).ljust(HEADER_BYTES, b"\0")

    @classmethod
    def decode(cls, data: bytes, path: Path) -> StepLogHeader:
        if len(data) < HEADER_BYTES or not data.startswith((MAGIC, _MAGIC_1)):
            raise StepLogError(f"{path} is not a step log (no {MAGIC.decode()} header)")
        _, rank, world, restart, exact, bucket, flags, node = _HEADER.unpack_from(data)
        memory = "" if not flags & _FLAG_MEMORY else "cuda" if flags & _FLAG_CUDA_MEMORY else "rss"
        wrong = [
            f"{name} {value}"
            for name, value, fine in (
                ("rank", rank, 0 <= rank < max(world, 1)),
                ("world size", world, world >= 1),
                ("restart", restart, restart >= 0),
                ("exact steps", exact, 0 <= exact <= _MAX_EXACT_STEPS),
                ("bucket steps", bucket, 1 <= bucket <= _MAX_BUCKET_STEPS),
            )
            if not fine
        ]
        if wrong:
            raise StepLogError(f"its header is damaged ({', '.join(wrong)}): the log is left out")
        return cls(
            rank=rank,
            world_size=world,
            restart=restart,
            node=node.rstrip(b"\0").decode(errors="replace"),
            gpu=bool(flags & _FLAG_GPU),
            memory=memory,
            exact_steps=exact,
            bucket_steps=bucket,
        )


class StepLogWriter:
    """Rows for one step log: :meth:`add` each step, :meth:`flush` now and then, :meth:`close`.

    Torch-free, and nothing but a list append per step between flushes."""

    def __init__(self, path: Path, header: StepLogHeader) -> None:
        self.path, self.header = path, header
        path.parent.mkdir(parents=True, exist_ok=True)
        # a new attempt's file is new (a requeue gets its own, by restart count)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.write(self._fd, header.encode())
        self.rows = 0  # rows of either kind in the file or waiting for the next flush
        self.steps = 0  # steps added
        self.flushes = 0
        self._exact: list[tuple[int, float, float, float, float]] = []
        self._bucket: list[tuple[int, float, float, float, float]] = []  # the bucket being filled
        self._buckets: list[bytes] = []

    def add(
        self, step: int, wall_ms: float, cpu_ms: float, gpu_ms: float = math.nan, mem_mib: float = math.nan
    ) -> None:
        row = (step, wall_ms, cpu_ms, gpu_ms, mem_mib)
        if self.steps < self.header.exact_steps:
            self._exact.append(row)
            self.rows += 1
        else:
            self._bucket.append(row)
            if len(self._bucket) == self.header.bucket_steps:
                self._close_bucket()
        self.steps += 1

    def flush(self) -> None:
        """Append the rows completed since the last flush and make them reach the file server
        (a reader on another host sees them: NFS writes back on ``fsync``)."""
        data = np.array(self._exact, dtype=EXACT).tobytes() + b"".join(self._buckets)
        self._exact, self._buckets = [], []
        if data:
            os.write(self._fd, data)
            os.fsync(self._fd)
            self.flushes += 1

    def close(self) -> None:
        """At the end of the run: the last, partial bucket too."""
        if self._bucket:
            self._close_bucket()
        self.flush()
        os.close(self._fd)

    def _close_bucket(self) -> None:
        rows = np.array(self._bucket, dtype=np.float64)
        bucket = np.zeros(1, dtype=BUCKET)
        bucket["first"], bucket["steps"] = int(rows[0, 0]), len(rows)
        for column, name in enumerate(COLUMNS, start=1):
            values = rows[:, column]
            # a bucket without GPU times or memory keeps NaN, quietly
            bucket[name] = (
                (np.nanmin(values), np.nanmedian(values), np.nanmax(values))
                if not np.isnan(values).all()
                else (np.nan,) * 3
            )
        self._buckets.append(bucket.tobytes())
        self._bucket = []
        self.rows += 1


@dataclasses.dataclass(frozen=True)
class StepLog:
    """One step log as read: a row per step, then per bucket of steps.

    ``first`` and ``steps``: each row's first step and how many it covers (1 for the exact
    rows); ``median``, ``low``, ``high``: per time name, each row's median, min and max (the
    same for an exact row)."""

    path: Path
    header: StepLogHeader
    first: np.ndarray
    steps: np.ndarray
    median: dict[str, np.ndarray]
    low: dict[str, np.ndarray]
    high: dict[str, np.ndarray]
    note: str | None = None  # what was wrong with the file and left out, in one line

    @property
    def last_step(self) -> int | None:
        return int(self.first[-1] + self.steps[-1] - 1) if len(self.first) else None

    def __len__(self) -> int:
        return len(self.first)


def read_step_log(path: Path, times: Sequence[str] = COLUMNS, *, spread: bool = True) -> StepLog:
    """Read ``path`` (while it is being written too: a row cut short is left out): the
    ``times`` named (of :data:`COLUMNS`), and their min and max too where ``spread`` (the run
    map reads a median)."""
    return decode_step_log(read_regular(path, LARGE_FILE_BYTES), path, times, spread=spread)


def decode_step_log(
    data: bytes, path: Path, times: Sequence[str] = COLUMNS, *, spread: bool = True
) -> StepLog:
    """:func:`read_step_log` of the bytes ``data`` read from ``path``."""
    header = StepLogHeader.decode(data, path)
    exact_row, bucket_row = (EXACT, BUCKET) if header.memory else (_EXACT_1, _BUCKET_1)
    body = memoryview(data)[HEADER_BYTES:]
    exact_bytes = min(len(body), header.exact_steps * exact_row.itemsize)
    exact = np.frombuffer(body[: exact_bytes - exact_bytes % exact_row.itemsize], dtype=exact_row)
    rest = body[exact_bytes:] if len(exact) == header.exact_steps else body[:0]
    buckets = np.frombuffer(rest[: len(rest) - len(rest) % bucket_row.itemsize], dtype=bucket_row)
    # as stored (4-byte integers and floats): a 4096-rank run of 100 000 steps holds 4096 of these
    first = np.concatenate([exact["step"], buckets["first"]])
    steps = np.concatenate([np.ones(len(exact), np.int32), buckets["steps"]])
    kept, note = _in_order(first, steps, header.bucket_steps, len(exact))
    if kept < len(first):
        exact, buckets = exact[: min(kept, len(exact))], buckets[: max(0, kept - len(exact))]
        first, steps = first[:kept], steps[:kept]
    median, low, high = {}, {}, {}
    for name in times:
        if name not in (exact_row.names or ()):  # ``mem`` in a log of the first format
            median[name] = np.full(len(first), np.nan, np.float32)
            if spread:
                low[name] = high[name] = median[name]
            continue
        value = exact[name]
        median[name] = np.concatenate([value, buckets[name][:, 1]])
        if spread:
            low[name] = np.concatenate([value, buckets[name][:, 0]])
            high[name] = np.concatenate([value, buckets[name][:, 2]])
    wrong = 0
    for name in list(median):
        wrong += _unknown_where_impossible(name, median)
        for part in (low, high) if spread else ():
            _unknown_where_impossible(name, part)
    if wrong:
        said = f"{wrong} value(s) no step can have (negative, not finite or too large) read as unknown"
        note = f"{note}; {said}" if note else said
    return StepLog(path, header, first, steps, median, low, high, f"{path.name}: {note}" if note else None)


def _in_order(
    first: np.ndarray, steps: np.ndarray, bucket_steps: int, exact_rows: int
) -> tuple[int, str | None]:
    """How many rows, from the first, have steps in order and step counts a writer makes; and a
    line saying where the rest went wrong (the rows after a damaged one are not trusted)."""
    counts_fine = (steps >= 1) & (steps <= bucket_steps)
    counts_fine[:exact_rows] &= steps[:exact_rows] == 1
    start = np.concatenate([[0], first[:-1].astype(np.int64) + steps[:-1]])
    fine = counts_fine & (first >= start)
    bad = np.flatnonzero(~fine)
    if not len(bad):
        return len(first), None
    kept = int(bad[0])
    last = f"step {int(first[kept - 1]) + int(steps[kept - 1]) - 1}" if kept else "none"
    return kept, f"its rows from row {kept} on are out of step order or damaged; read up to {last}"


def _unknown_where_impossible(name: str, values: dict[str, np.ndarray]) -> int:
    """Set to NaN (unknown) the values of ``name`` that no step can have; how many there were."""
    column = values[name]
    limit = _MAX_MIB if name == "mem" else _MAX_MS
    floor_ok = column >= 0 if name in ("mem", "gpu") else column > 0
    impossible = np.isfinite(column) & ~(floor_ok & (column <= limit)) | np.isinf(column)
    if not impossible.any():
        return 0
    column = column.copy()
    column[impossible] = np.nan
    values[name] = column
    return int(impossible.sum())
