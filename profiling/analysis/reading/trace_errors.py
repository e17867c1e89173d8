"""What is wrong with a trace file, in a person's words: :class:`TraceFormatError`, the one
error both trace readers refuse a file with, and :func:`describe`, which puts msgspec's and
Python's words for a decoding failure into the trace's terms (which event, which field, which
byte), so that a report on many traces names the bad one in a line and reads the others."""

from __future__ import annotations

import re

import msgspec

# msgspec's "Expected `int`, got `str` - at `$[3].ts`", "Expected `int` <= 9 - at `$[3]`"
_WRONG_TYPE = re.compile(r"Expected `(?P<expected>[^`]+)`, got `(?P<got>[^`]+)`$")
_OUT_OF_BOUNDS = re.compile(r"Expected `[^`]+` (?P<bound>[<>]=? ?\S+)$")
_AT = re.compile(r" - at `(?P<at>[^`]+)`$")
_MALFORMED = re.compile(r"JSON is malformed: (?P<why>.+) \(byte (?P<byte>\d+)\)")
_INDEX = re.compile(r"^\$\[(?P<index>\d+)\](?P<path>.*)$")
_TYPE_WORDS = {
    "object": "an object",
    "array": "a list",
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "null": "null",
    "bool": "true or false",
}


class TraceFormatError(ValueError):
    """A file that is not a Chrome trace with a ``traceEvents`` list, or one whose events do not
    fit the trace format: its message names the file and what is wrong."""


class Unfit(ValueError):
    """What is wrong with a trace's content, said where the file's name is not known (building
    its columns): the reader adds the name (:func:`refused`)."""


def _type_words(name: str) -> str:
    words = [_TYPE_WORDS.get(part.strip(), f"`{part.strip()}`") for part in name.split("|")]
    return " or ".join(dict.fromkeys(words))


def _where(at: str | None, first_event: int | None) -> str:
    """``$[3].args.correlation`` as "event 1203's `args.correlation`" (events counted from the
    file's first, where ``first_event`` is where the decoded list began)."""
    if not at:
        return "a value"
    match = _INDEX.match(at)
    if not match:
        return f"`{at.removeprefix('$').lstrip('.')}`" if at != "$" else "the value"
    event = "an event" if first_event is None else f"event {first_event + int(match['index'])}"
    path = match["path"].lstrip(".")
    return f"{event}'s `{path}`" if path else event


def describe(error: BaseException, *, first_event: int | None = None, first_byte: int = 0) -> str:
    """What ``error`` (from decoding a run of events that began at event ``first_event`` and at
    byte ``first_byte`` of the file's JSON) says is wrong, in the trace's terms."""
    if isinstance(error, Unfit):
        return str(error)
    if isinstance(error, RecursionError):
        return "values nested deeper than a trace's (thousands of levels): not a trace torch wrote"
    text = str(error)
    if isinstance(error, msgspec.ValidationError):
        at = _AT.search(text)
        where = _where(at["at"] if at else None, first_event)
        said = text[: at.start()] if at else text
        if match := _WRONG_TYPE.match(said):
            got, expected = _type_words(match["got"]), _type_words(match["expected"])
            return f"{where} is {got} where the trace format has {expected}"
        if match := _OUT_OF_BOUNDS.match(said):
            return f"{where} is out of range (it must be {match['bound']})"
        if said.startswith("Number out of range"):
            return f"{where} holds a number out of range"
        return f"{where} does not fit the trace format ({said.lower()})"
    if match := _MALFORMED.match(text):
        return f"not valid JSON at byte {first_byte + int(match['byte'])} ({match['why']})"
    if "truncated" in text:
        return "its JSON ends inside a value (a file cut short, or a broken escape)"
    if "UTF-8" in text:
        return "a string is not valid UTF-8 (a binary or mis-encoded file)"
    return f"not valid JSON ({text})"


def refused(
    path: object, error: BaseException, *, first_event: int | None = None, first_byte: int = 0
) -> TraceFormatError:
    """The :class:`TraceFormatError` for ``error``, met in the file at ``path``."""
    return TraceFormatError(f"{path}: {describe(error, first_event=first_event, first_byte=first_byte)}")
