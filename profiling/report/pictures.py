"""The report's pictures, drawn in the plot's process, and drawn again only when what they
show has changed: a warm report (every record fresh) is done in about a second, and drawing
report.png (matplotlib's import, then the figure) took two and a half of its four.

What a picture shows is known by a fingerprint of the data it is drawn from, kept in
``report.json`` (``drawn``: file name -> fingerprint); the time a report took, when it was
made, and how its traces were read are not drawn and do not count.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgspec

from profiling.folder.fingerprint import fingerprint
from profiling.report.workers import Ahead
from profiling.schema import model
from slurm.common.files import LARGE_FILE_BYTES, read_regular

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
        return msgspec.json.decode(read_regular(report_json, LARGE_FILE_BYTES), type=_Drawn).drawn
    except (OSError, ValueError):
        return {}


class Pictures:
    """Draws each picture through ``plotter`` unless the one on disk shows the same data."""

    def __init__(self, plotter: Ahead, previous: dict[str, str]) -> None:
        self._plotter, self._previous = plotter, previous
        self.drawn: dict[str, str] = {}
        self._drawing: dict[str, Future] = {}
        self._first: dict[str, Future] = {}  # a picture's first part, drawn ahead

    def warm(self) -> None:
        """Ready the plot's process for pictures to come: where none was drawn before (a cold
        report); a warm one likely draws nothing, and imports only if it does."""
        if not self._previous:
            self._plotter.warm()

    def ahead(self, function: Callable[[Any], Any], data: Any, path: Path) -> None:
        """``function(data)``, a first part of ``path``'s picture, begun in the plot's process
        before the rest of its data is known, where the report is cold (a warm one likely draws
        nothing); its result is the last argument of the picture's :meth:`draw`."""
        if not self._previous:
            self._first[path.name] = self._plotter.submit(_kept_aside, function, data, _part(path))

    def draw(self, function: Callable[..., Any], data: Any, path: Path) -> None:
        """``function(data, path)`` in the plot's process (and the first part's result, where
        one was drawn :meth:`ahead`), unless ``path`` is current; it is waited for by
        :meth:`wait` (the report goes on meanwhile)."""
        shown = msgspec.structs.replace(data, **_NOT_DRAWN) if isinstance(data, model.Report) else data
        key = fingerprint(shown)
        self.drawn[path.name] = key
        first = self._first.pop(path.name, None)
        if self._previous.get(path.name) != key or not path.exists():
            begun = () if first is None else (first.result(),)
            self._drawing[path.name] = self._plotter.submit(_draw, function, data, path, *begun)

    def wait(self, name: str | None = None) -> None:
        """Until the picture ``name`` (None: every picture) is on disk; a drawing's error is
        raised here."""
        for drawn, drawing in self._drawing.items():
            if name is None or drawn == name:
                drawing.result()

    def inline(self, paths: Iterable[Path]) -> Mapping[str, Path]:
        """``paths`` by name, each given once its drawing is done: report.html is made while
        report.png is drawn, and takes the picture last."""
        return _WhenDrawn(self, {path.name: path for path in paths})


class _WhenDrawn(Mapping[str, Path]):
    def __init__(self, pictures: Pictures, paths: dict[str, Path]) -> None:
        self._pictures, self._paths = pictures, paths

    def __getitem__(self, name: str) -> Path:
        path = self._paths[name]
        self._pictures.wait(name)
        return path

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def prepare_drawing() -> None:
    """Import what drawing needs (0.7 s here), so that the plot's process can do it ahead of the
    report; here, not beside the drawing, so that starting that process imports no picture's code."""
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401


def _part(path: Path) -> Path:
    """Where the first part of ``path``'s picture waits for the rest: beside it, hidden."""
    return path.with_name(f".{path.name}.first")


def _kept_aside(function: Callable[[Any], Any], data: Any, part: Path) -> Path:
    """``function(data)``, left in ``part`` for the rest of the picture (:func:`_draw`), not sent
    back through the report's process: the ranks' rows' pixels, 10 MB, were pickled both ways
    and held by the report's process at its peak."""
    with part.open("wb") as file:
        pickle.dump(function(data), file, protocol=pickle.HIGHEST_PROTOCOL)
    return part


def _draw(function: Callable[..., Any], data: Any, path: Path, *parts: Path) -> None:
    """``function(data, path, *begun)``, ``begun`` what :func:`_kept_aside` left in ``parts``;
    its result dropped here: a Figure sent back to the report's process took 0.3 s to pickle,
    for nothing (the picture is on disk)."""
    begun = []
    for part in parts:
        with part.open("rb") as file:
            begun.append(pickle.load(file))
        part.unlink()
    function(data, path, *begun)
