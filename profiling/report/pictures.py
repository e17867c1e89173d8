"""The report's pictures, drawn in the plot's process, and drawn again only when what they
show has changed: a warm report (every record fresh) is done in about a second, and drawing
report.png (matplotlib's import, then the figure) took two and a half of its four.

What a picture shows is known by a fingerprint of the data it is drawn from, kept in
``report.json`` (``drawn``: file name -> fingerprint); the time a report took, when it was
made, and how its traces were read are not drawn and do not count.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgspec

from profiling.folder.fingerprint import fingerprint
from profiling.report.workers import Ahead
from profiling.schema import model

# what no picture draws, and changes from one report to the next: left out of the fingerprint
_NOT_DRAWN = {
    "generated_at": "",
    "seconds": 0.0,
    "reading": model.Reading(traces=0, from_records=0, read_here=[], analysed_by=[], seconds=0.0),
    "archive": None,
    "merge": None,
    "merged_trace": None,
    "alignment_seconds": 0.0,
    "drawn": {},
}


class _Drawn(msgspec.Struct):
    drawn: dict[str, str] = {}


def read_drawn(report_json: Path) -> dict[str, str]:
    """The fingerprints of the pictures the last report drew (none where it cannot be read)."""
    try:
        return msgspec.json.decode(report_json.read_bytes(), type=_Drawn).drawn
    except (OSError, ValueError):
        return {}


class Pictures:
    """Draws each picture through ``plotter`` unless the one on disk shows the same data."""

    def __init__(self, plotter: Ahead, previous: dict[str, str]) -> None:
        self._plotter, self._previous = plotter, previous
        self.drawn: dict[str, str] = {}

    def warm(self) -> None:
        """Ready the plot's process for pictures to come: where none was drawn before (a cold
        report); a warm one likely draws nothing, and imports only if it does."""
        if not self._previous:
            self._plotter.warm()

    def draw(self, function: Callable[[Any, Path], Any], data: Any, path: Path) -> Future | None:
        """``function(data, path)`` in the plot's process; None where ``path`` is current."""
        shown = msgspec.structs.replace(data, **_NOT_DRAWN) if isinstance(data, model.Report) else data
        key = fingerprint(shown)
        self.drawn[path.name] = key
        if self._previous.get(path.name) == key and path.exists():
            return None
        return self._plotter.submit(_draw, function, data, path)


def _draw(function: Callable[[Any, Path], Any], data: Any, path: Path) -> None:
    """``function(data, path)``, its result dropped here: a Figure sent back to the report's
    process took 0.3 s to pickle, for nothing (the picture is on disk)."""
    function(data, path)
