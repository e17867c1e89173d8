"""The events of a Chrome trace file, a chunk at a time, and its other top-level fields.

Trace files reach gigabytes, and a JSON parser that builds the whole document first needs
several times that in memory. Here the file is read in blocks of :data:`CHUNK_BYTES`; each
block is cut after the last complete event it holds and that run of events is decoded at
once by msgspec into :class:`Event` structs with only the fields of the Chrome trace format
(``args`` kept as raw JSON, decoded only where needed). A cut is found by looking back for
``},``; where that one falls inside a string (the run does not decode), the structure of the
buffer is read once (:func:`_structure`: strings skipped whole, brackets counted) to find the
last event's end, so that a cut is right whatever the events hold, and reading stays linear
in the file's size: a string full of ``},`` is not tried at each of them. A run that does not
decode though every event in it is whole is not JSON: the file is refused, naming the byte.

Torch's exporter writes ``traceEvents`` between other top-level fields (``distributedInfo``
before it, ``baseTimeNanoseconds`` after it); both sides are decoded as small documents.
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from profiling.analysis.reading.trace_errors import TraceFormatError, describe, refused

__all__ = ["CHUNK_BYTES", "CutInside", "Event", "TraceFormatError", "TraceStream", "read_header"]

# Decoded events take several times their JSON bytes: with 2 MiB chunks a report on 8 ranks
# peaked at 217 MiB against 371 MiB with 8 MiB ones, at the same speed.
CHUNK_BYTES = 2 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WHITESPACE = frozenset(b" \t\r\n")
_SEPARATOR = re.compile(rb"[ \t\r\n]*,?")
# A string (closed, or running to the end of the buffer), or a bracket: the structure of JSON
# text, read at the speed of the regex engine however long the strings
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[][{}]', re.DOTALL)
# candidates for the list's end tried from the right before the structure is read
_END_TRIES = 4
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


class CutInside(msgspec.DecodeError):
    """A decoder's word that the chunk was cut inside an event: the one at ``at`` in the chunk
    (``[`` and the events before it); the chunk is cut again before it."""

    def __init__(self, at: int) -> None:
        super().__init__(f"the chunk ends inside the event at {at}")
        self.at = at


_EVENTS = msgspec.json.Decoder(list[Event])
_OBJECT = msgspec.json.Decoder(dict[str, Any])


def open_bytes(path: Path) -> io.BufferedIOBase:
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
        """``decode``: what makes a chunk (``[`` events ``]``) into what :meth:`chunks` yields (a
        list of events, or how many it held), where not msgspec's list of ``event_type``; it
        raises msgspec's errors as msgspec would, or :class:`CutInside`."""
        self.path = path
        self.chunk_bytes = chunk_bytes
        events = _EVENTS if event_type is Event else msgspec.json.Decoder(list[event_type])  # type: ignore[valid-type]
        # msgspec's Raw args keep the buffer they were decoded from: they get a copy of the run
        self._decode: Callable[[Any], Any] = decode or (lambda run: events.decode(bytes(run)))
        self.header: dict[str, Any] = {}
        self.bytes_read = 0
        self._at_byte = 0  # where the buffer begins in the file's JSON
        self._events = 0  # events yielded so far

    def chunks(self) -> Iterator[list[Any]]:
        with open_bytes(self.path) as handle:
            window = _Window(self._read_header(handle), self.chunk_bytes)
            wanted = self.chunk_bytes
            while True:
                at_end, read = window.fill(handle, wanted)
                self.bytes_read += read
                if at_end:
                    events, tail = self._split_end(window.text())
                    if events:
                        yield events
                    self.header.update(tail)
                    return
                events, used = self._split(window)
                # no whole event in the buffer (one larger than a chunk): read on, twice as much
                # each time, so that a huge event costs its size a few times over, not squared
                wanted = self.chunk_bytes if events else 2 * window.length
                self._at_byte += used
                window.drop(used)
                if events:
                    self._events += events if isinstance(events, int) else len(events)
                    yield events

    def _read_header(self, handle: io.BufferedIOBase) -> bytes:
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
        except (msgspec.DecodeError, RecursionError) as error:
            raise TraceFormatError(
                f"{self.path}: what comes before traceEvents is not JSON's object members ({describe(error)})"
            ) from None
        self._at_byte = match.end()
        return buffer[match.end() :]

    def _split(self, window: _Window) -> tuple[list[Any], int]:
        """The complete events at the front of the window, and how many of its bytes they and
        the separators before them took. The run of events is decoded where it lies: its
        ``[`` and ``]`` are written over the separators around it for the while."""
        buffer, end = window.buffer, window.end
        separator = _SEPARATOR.match(buffer, 1, end)  # the comma after the last event, read since
        assert separator is not None  # the pattern matches an empty run too
        start = separator.end()
        cut = buffer.rfind(b"},", start, end)
        if cut < 0:
            return [], start - 1  # no complete event yet: read more
        buffer[start - 1], buffer[cut + 1] = 0x5B, 0x5D
        try:
            with memoryview(buffer) as whole, whole[start - 1 : cut + 2] as run:
                events = self._decode_run(run)
            return events, cut + 1
        except (CutInside, msgspec.DecodeError) as error:
            buffer[cut + 1] = 0x2C
            text = bytes(buffer[start:end])
            events, rest = self._split_again(text, error)
            return events, end - 1 - len(rest)
        finally:
            buffer[cut + 1] = 0x2C

    def _split_again(self, buffer: bytes, error: msgspec.DecodeError) -> tuple[list[Any], bytes]:
        """Where the run up to the last ``},`` did not decode: the events before the one the
        decoder says the cut fell in, else those before the last event's end as the structure
        of ``buffer`` has it (the ``},`` was inside a string, say)."""
        if isinstance(error, CutInside):
            before = buffer[: max(error.at - 1, 0)].rstrip()  # (the run's "[" is not in buffer)
            before = before[:-1] if before.endswith(b",") else before
            if not before:
                return [], buffer
            return self._decode_whole(before), _after_comma(buffer[len(before) :])
        last, _ = _structure(buffer)
        if not last:
            return [], buffer
        return self._decode_whole(buffer[:last]), _after_comma(buffer[last:])

    def _split_end(self, buffer: bytes) -> tuple[list[Any], dict[str, Any]]:
        """The last events and the top-level fields after the ``traceEvents`` list.

        The list's end is a ``]`` after an event's ``}`` (or the list's ``[``) and before the
        next field's ``,`` (or the document's ``}``); strings in those fields (Kineto's INFO
        lines) hold ``]`` too, so the last few candidates are checked from the right, the small
        tail before the large events, and then the structure is read.
        """
        buffer = _after_comma(buffer)
        end, tries = len(buffer), 0
        while (close := buffer.rfind(b"]", 0, end)) >= 0 and tries < _END_TRIES:
            end = close
            if not _list_end_at(buffer, close):
                continue
            tries += 1
            tail = _tail(buffer, close)
            if tail is None:
                continue
            try:
                return self._decode_run(b"[" + buffer[:close] + b"]"), tail
            except msgspec.DecodeError:
                break
        _, close = _structure(buffer)
        if close < 0:
            raise TraceFormatError(f"{self.path}: traceEvents is not closed (a partial file?)")
        tail = _tail(buffer, close)
        if tail is None:
            raise TraceFormatError(f"{self.path}: what follows traceEvents is not JSON's object members")
        return self._decode_whole(buffer[:close]), tail

    def _decode_run(self, run: bytes | memoryview) -> list[Any]:
        """The events of ``run`` (``[`` events ``]``); msgspec's decoding errors but a wrong
        type, which refuses the file."""
        try:
            return self._decode(run)
        except (msgspec.ValidationError, RecursionError) as error:
            raise self._refused(error) from None

    def _decode_whole(self, run: bytes) -> list[Any]:
        """The events of ``run``, every one of them whole: one that does not decode is not JSON."""
        try:
            return self._decode_run(b"[" + run + b"]")
        except msgspec.DecodeError as error:  # CutInside too: a decoder that cannot take it
            raise self._refused(error) from None

    def _refused(self, error: BaseException) -> TraceFormatError:
        return refused(self.path, error, first_event=self._events, first_byte=self._at_byte - 1)


class _Window:
    """The part of the list read and not yet decoded: ``[`` then the text from the next event
    on, in one buffer that is filled in place and kept, so that a chunk of events costs one
    copy (the read), not one per slicing: copies of 2 MiB to fresh memory took a third of a
    dense trace's reading."""

    def __init__(self, text: bytes, chunk_bytes: int) -> None:
        self.buffer = bytearray(max(2 * chunk_bytes, len(text) + 1))
        self.buffer[0] = 0x5B
        self.end = 1 + len(text)
        self.buffer[1 : self.end] = text
        self._chunk_bytes = chunk_bytes

    @property
    def length(self) -> int:
        """Bytes of text held."""
        return self.end - 1

    def text(self) -> bytes:
        return bytes(self.buffer[1 : self.end])

    def fill(self, handle: io.BufferedIOBase, wanted: int) -> tuple[bool, int]:
        """Read until ``wanted`` bytes of text are held: ``(at the file's end, bytes read)``."""
        read = 0
        while self.length < wanted:
            room = self.end + self._chunk_bytes
            if room > len(self.buffer):
                self.buffer.extend(bytes(room - len(self.buffer)))
            with memoryview(self.buffer) as whole, whole[self.end : room] as free:
                got = handle.readinto(free)
            if not got:
                return True, read
            self.end += got
            read += got
        return False, read

    def drop(self, used: int) -> None:
        """The first ``used`` bytes of text consumed: the rest moves to the front."""
        if used:
            rest = self.end - 1 - used
            self.buffer[1 : 1 + rest] = self.buffer[1 + used : self.end]
            self.end = 1 + rest


def _structure(buffer: bytes) -> tuple[int, int]:
    """Where the last event at the top of the list ends in ``buffer`` (the text of the list's
    events, from after its ``[``): the offset after its ``}``, 0 where none has ended; and
    where the ``]`` that closes the list is, -1 where it is not in the buffer."""
    depth, last = 0, 0
    for match in _TOKENS.finditer(buffer):
        token = buffer[match.start()]
        if token == 0x22:  # a string, whatever it holds
            continue
        if token in b"{[":
            depth += 1
            continue
        depth -= 1
        if depth == 0 and token == 0x7D:
            last = match.end()
        elif depth < 0:
            return last, match.start()
    return last, -1


def _after_comma(buffer: bytes) -> bytes:
    """``buffer`` past the comma (and spaces) that separate one event from the next."""
    rest = buffer.lstrip()
    return rest[1:] if rest.startswith(b",") else buffer


def _tail(buffer: bytes, close: int) -> dict[str, Any] | None:
    """The top-level fields after the list that ends at ``close``; None where they do not decode."""
    rest = buffer[close + 1 :].strip()
    try:
        return _OBJECT.decode(b"{" + (rest[1:] if rest.startswith(b",") else rest))
    except (msgspec.DecodeError, RecursionError):
        return None


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
