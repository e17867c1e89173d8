"""Whether every rank writes into the same job folder.

A traces root on a node-local disk (``/tmp``) gives each node a job folder of its own: the
manifest misses the other nodes' traces and the report finds a fraction of the ranks. At the
start every rank leaves a marker in ``meta/ranks/``; once all have (a collective), rank 0
opens each by name. Names, not a listing: on NFS a directory listing may be cached for tens of
seconds, while opening a name rank 0 never looked up asks the server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from profiling.folder.layout import JobFolder
from profiling.ranks import format_ranks
from slurm.common.errors import SettingError
from slurm.common.files import SMALL_FILE_BYTES, read_regular, write_json_atomically

# Rank 0 looks again for this long before it gives up on a marker: a slow shared filesystem
# may show a file a moment after it was written.
SETTLE_S = 3.0


class UnsharedFolderError(SettingError):
    """Ranks write to folders the others cannot see; the message names the nodes and the fix."""


def leave_marker(folder: JobFolder, rank: int, node: str) -> str | None:
    """Leave this rank's marker; the reason it could not (say, a read-only mount), or None."""
    try:
        folder.markers.mkdir(parents=True, exist_ok=True)
        write_json_atomically(
            _marker(folder, rank), {"rank": rank, "node": node, "job_folder": str(folder.path)}
        )
    except OSError as error:
        return f"{error.strerror or error}"
    return None


def unseen_ranks(folder: JobFolder, world_size: int, settle_s: float = SETTLE_S) -> list[int]:
    """The ranks whose marker this process cannot open, after waiting up to ``settle_s``."""
    missing = list(range(world_size))
    deadline = time.monotonic() + settle_s
    while True:
        missing = [rank for rank in missing if not _readable(_marker(folder, rank))]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.5)


def unshared_error(folder: JobFolder, missing: Sequence[int], where: Sequence[Sequence[str | None]]) -> str:
    """The one line every rank stops with. ``where[r]`` is rank r's (node, job folder, write error)."""
    by_node: dict[str, list[int]] = {}
    for rank in missing:
        by_node.setdefault(where[rank][0] or "?", []).append(rank)
    nodes = "; ".join(f"{node} ({_what(ranks, where)})" for node, ranks in by_node.items())
    return (
        f"{{traces_root}} is not shared by every node: rank 0 on {where[0][0]} sees {folder.path}, "
        f"but not what was written there from {nodes}. HINT: use a folder on the shared "
        "filesystem, the same path on every node ({traces_root}, or TRACES_ROOT)"
    )


def _what(ranks: Sequence[int], where: Sequence[Sequence[str | None]]) -> str:
    _, path, error = where[ranks[0]]
    return f"rank(s) {format_ranks(ranks)}, " + (
        f"which could not write to {path}: {error}" if error else f"writing to {path}"
    )


def _marker(folder: JobFolder, rank: int) -> Path:
    return folder.markers / f"rank{rank}.json"


def _readable(path: Path) -> bool:
    try:
        json.loads(read_regular(path, SMALL_FILE_BYTES))
    except (OSError, ValueError):
        return False
    return True
