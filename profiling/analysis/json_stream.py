"""The events of a Chrome trace file, a chunk at a time, and its other top-level fields.

Trace files reach gigabytes, and a JSON parser that builds the whole document first needs
several times that in memory. Here the file is read in blocks of :data:`CHUNK_BYTES`; each
block is cut after the last complete event it holds and that run of events is decoded at
once by msgspec into :class:`Event` structs with only the fields of the Chrome trace format
(``args`` kept as raw JSON, decoded only where needed). A cut is found by looking back for
``},``; one that falls inside a string cannot decode (the string would not close), and the
previous ``},`` is tried instead, so a cut is right whatever the events contain.

Torch's exporter writes ``traceEvents`` between other top-level fields (``distributedInfo``
before it, ``baseTimeNanoseconds`` after it); both sides are decoded as small documents.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

# Decoded events take several times their JSON bytes: with 2 MiB chunks a report on 8 ranks
# peaked at 217 MiB against 371 MiB with 8 MiB ones, at the same speed.
CHUNK_BYTES = 2 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WHITESPACE = frozenset(b" \t\r\n")
_Unset = msgspec.UnsetType
UNSET = msgspec.UNSET


class Event(msgspec.Struct, omit_defaults=True):
    """One trace event: the fields the Trace Event Format defines, absent ones left unset."""

    ph: str | _Unset = UNSET
    cat: str | _Unset = UNSET
    name: str | _Unset = UNSET
    pid: int | str | _Unset = UNSET
    tid: int | str | _Unset = UNSET
    ts: float | _Unset = UNSET
    dur: float | _Unset = UNSET
    id: int | str | _Unset = UNSET
    bp: str | _Unset = UNSET
    s: str | _Unset = UNSET
    cname: str | _Unset = UNSET
    args: msgspec.Raw | _Unset = UNSET


class TraceFormatError(ValueError):
    """A file that is not a Chrome trace with a ``traceEvents`` list."""


class CutInside(msgspec.DecodeError):
    """A decoder's word that the chunk was cut inside an event: the one at ``at`` in the chunk
    (``[`` and the events before it); the chunk is cut again before it."""

    def __init__(self, at: int) -> None:
        super().__init__(f"the chunk ends inside the event at {at}")
        self.at = at


_EVENTS = msgspec.json.Decoder(list[Event])
_OBJECT = msgspec.json.Decoder(dict[str, Any])


def open_bytes(path: Path) -> BinaryIO:
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")  # noqa: SIM115


class TraceStream:
    """Iterate :meth:`chunks` (lists of ``event_type`` structs) once; :attr:`header` is set
    before the first chunk, and holds the fields after ``traceEvents`` too once the iteration
    ended."""

    def __init__(
        self,
        path: Path,
        event_type: type = Event,
        chunk_bytes: int = CHUNK_BYTES,
        decode: Callable[[bytes], Any] | None = None,
    ) -> None:
        """``decode``: what makes a chunk (``[`` events ``]``) into what :meth:`chunks` yields,
        where not msgspec's list of ``event_type``; it raises msgspec's errors as msgspec would,
        or :class:`CutInside`."""
        self.path = path
        self.chunk_bytes = chunk_bytes
        events = _EVENTS if event_type is Event else msgspec.json.Decoder(list[event_type])
        self._decode = decode or events.decode
        self.header: dict[str, Any] = {}
        self.bytes_read = 0

    def chunks(self) -> Iterator[list[Any]]:
        with open_bytes(self.path) as handle:
            buffer = self._read_header(handle)
            at_end = False
            wanted = self.chunk_bytes
            while True:
                while not at_end and len(buffer) < wanted:
                    block = handle.read(self.chunk_bytes)
                    at_end = not block
                    buffer += block
                    self.bytes_read += len(block)
                if at_end:
                    events, tail = self._split_end(buffer)
                    if events:
                        yield events
                    self.header.update(tail)
                    return
                events, buffer = self._split(buffer)
                # no whole event in the buffer (one larger than a chunk): read on, or this loops
                wanted = self.chunk_bytes if events else len(buffer) + 1
                if events:
                    yield events

    def _read_header(self, handle: BinaryIO) -> bytes:
        buffer = b""
        while True:
            block = handle.read(1 << 20)
            self.bytes_read += len(block)
            buffer += block
            match = _EVENTS_KEY.search(buffer)
            if match:
                break
            if not block or len(buffer) > 64 << 20:
                raise TraceFormatError(f"{self.path}: no traceEvents list. HINT: pass a torch.profiler trace")
        before = buffer[: match.start()].rstrip().rstrip(b",")
        try:
            self.header = _OBJECT.decode(before + b"}")
        except msgspec.DecodeError as error:
            raise TraceFormatError(f"{self.path}: not a JSON object before traceEvents ({error})") from None
        return buffer[match.end() :]

    def _split(self, buffer: bytes) -> tuple[list[Any], bytes]:
        """The complete events at the front of ``buffer``, and what is left after them."""
        end = len(buffer)
        while True:
            cut = buffer.rfind(b"},", 0, end)
            if cut < 0:
                return [], buffer  # no complete event yet: read more
            try:
                return self._decode(b"[" + buffer[: cut + 1] + b"]"), buffer[cut + 2 :]
            except msgspec.ValidationError as error:
                raise self._unfit(error) from None
            except CutInside as inside:
                end = min(cut, inside.at - 1)  # before that event (the chunk's "[" is not in buffer)
            except msgspec.DecodeError:
                end = cut  # the cut fell inside a string or an event: look further back

    def _split_end(self, buffer: bytes) -> tuple[list[Any], dict[str, Any]]:
        """The last events and the top-level fields after the ``traceEvents`` list.

        The list's end is a ``]`` after an event's ``}`` (or the list's ``[``) and before the
        next field's ``,`` (or the document's ``}``); strings in those fields (Kineto's INFO
        lines) hold ``]`` too, so each candidate is checked from the right, the small tail
        before the large events.
        """
        end = len(buffer)
        while (close := buffer.rfind(b"]", 0, end)) >= 0:
            end = close
            if not _list_end_at(buffer, close):
                continue
            rest = buffer[close + 1 :].strip()
            try:
                tail = _OBJECT.decode(b"{" + (rest[1:] if rest.startswith(b",") else rest))
            except msgspec.DecodeError:
                continue
            try:
                return self._decode(b"[" + buffer[:close] + b"]"), tail
            except msgspec.ValidationError as error:
                raise self._unfit(error) from None
            except msgspec.DecodeError:
                continue
        raise TraceFormatError(f"{self.path}: traceEvents is not closed (a partial file?)")

    def _unfit(self, error: msgspec.ValidationError) -> TraceFormatError:
        return TraceFormatError(f"{self.path}: an event does not fit the trace format ({error})")


def _list_end_at(buffer: bytes, close: int) -> bool:
    """Whether the ``]`` at ``close`` can end a list of events: ``}`` or ``[`` before it, ``,`` or
    ``}`` after it, whitespace aside."""
    before, after = close - 1, close + 1
    while before >= 0 and buffer[before] in _WHITESPACE:
        before -= 1
    while after < len(buffer) and buffer[after] in _WHITESPACE:
        after += 1
    return before >= 0 and buffer[before] in b"}[" and after < len(buffer) and buffer[after] in b",}"


def read_header(path: Path) -> dict[str, Any]:
    """Every top-level field of a trace but ``traceEvents`` (streams through the file)."""
    stream = TraceStream(path)
    for _ in stream.chunks():
        pass
    return stream.header
