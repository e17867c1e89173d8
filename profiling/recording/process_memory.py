"""This process's memory, as the kernel counts it: the resident set now (``/proc/self/statm``)
and at its peak (``getrusage``'s ``ru_maxrss``). The one reader of both, for every step's log
line (:mod:`.step_timing`), a rank's manifest record and its out-of-memory dump."""

from __future__ import annotations

import math
import os
import resource

_STATM = "/proc/self/statm"


class ResidentMemory:
    """The resident memory in bytes, read from one descriptor kept open: a step's cost is one
    ``pread`` (NaN where there is no ``/proc``)."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE")
        try:
            self._fd: int | None = os.open(_STATM, os.O_RDONLY)
        except OSError:
            self._fd = None

    def bytes(self) -> float:
        if self._fd is None:
            return math.nan
        return float(int(os.pread(self._fd, 128, 0).split()[1]) * self._page)

    def mib(self) -> float:
        return self.bytes() / 2**20

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ResidentMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def resident_bytes() -> float:
    """The resident memory now, once (NaN where there is no ``/proc``)."""
    with ResidentMemory() as memory:
        return memory.bytes()


def peak_resident_bytes() -> int:
    """The most this process has held resident (Linux counts ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
