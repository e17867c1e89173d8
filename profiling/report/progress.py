"""Progress of long work, on a terminal only: ``read 12/64 traces, 140 MiB/s, 8 s left``."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts what is done out of a total (and its bytes), redrawing one line at most every
    ``every_s``; silent where the stream is not a terminal (a log file, a batch job)."""

    def __init__(self, what: str, total: int, total_bytes: int = 0, *, stream: TextIO | None = None) -> None:
        self.what, self.total, self.total_bytes = what, total, total_bytes
        self.stream = stream if stream is not None else sys.stderr
        self.shown = self.stream.isatty()
        self.done = self.done_bytes = 0
        self._started = self._drawn = time.monotonic()

    def advance(self, count: int = 1, nbytes: int = 0, every_s: float = 0.5) -> None:
        self.done, self.done_bytes = self.done + count, self.done_bytes + nbytes
        now = time.monotonic()
        if self.shown and (now - self._drawn >= every_s or self.done >= self.total):
            self._drawn = now
            self.stream.write(f"\r{self.line(now - self._started)}\033[K")
            self.stream.flush()

    def line(self, elapsed_s: float) -> str:
        text = f"{self.what} {self.done}/{self.total}"
        if self.total_bytes and elapsed_s > 0:
            rate = self.done_bytes / elapsed_s
            left = (self.total_bytes - self.done_bytes) / rate if rate else float("inf")
            text += f", {rate / 2**20:.0f} MiB/s, {left:.0f} s left"
        return text

    def close(self) -> None:
        if self.shown and self.done:
            self.stream.write("\n")
            self.stream.flush()
