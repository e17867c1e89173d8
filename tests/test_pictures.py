"""The report's pictures in the plot's process: a first part drawn ahead reaches the rest of its
picture there, through a file beside the picture, never through the report's process."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from profiling.report.pictures import Pictures, prepare_drawing
from profiling.report.workers import Ahead


def rows(count: int) -> np.ndarray:
    return np.arange(count, dtype=np.int64)


def finish(data: str, path: Path, first: np.ndarray) -> None:
    path.write_text(f"{data} {int(first.sum())} drawn by {os.getpid()}")


def test_a_part_drawn_ahead_reaches_its_picture_in_the_plot_process(tmp_path: Path) -> None:
    path = tmp_path / "report.png"
    with Ahead(prepare_drawing) as plotter:
        pictures = Pictures(plotter, previous={})
        pictures.ahead(rows, 5, path)
        pictures.draw(finish, "rest", path)
        pictures.wait()
    text, total, _, _, pid = path.read_text().split()
    assert (text, total) == ("rest", "10") and int(pid) != os.getpid()  # drawn there, 0 + ... + 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.png"]  # the part let go of
