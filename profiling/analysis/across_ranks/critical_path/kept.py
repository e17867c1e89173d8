"""The critical path, kept: a warm report (every trace's record fresh, the clocks kept) on the
same traces finds the same path and replay, so the last one is kept beside report.json and taken
again, as the clocks are (:mod:`profiling.analysis.clocks.kept`).

The path and its replay were most of what a warm report still computed: 0.75 s of its 1.5 on
issue 60's dense folder. They are computed from each trace's record (its trace's name, size and
modification time, and the analysis version), its clock, the straggler verdict's rank and noise,
and the job's mesh; and from the code that walks and replays them. The key holds all of it, the
code as the bytes of the analysis's modules: a toolkit changed under a kept path computes it again.
"""

from __future__ import annotations

import functools
import hashlib
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec

from profiling.analysis.clocks.rank_clocks import Aligned
from profiling.analysis.per_trace.record import ANALYSIS_VERSION
from profiling.folder.fingerprint import fingerprint
from profiling.folder.report_json import plain_scalar
from profiling.schema.model_path import CriticalPath
from slurm.common.files import LARGE_FILE_BYTES, atomic_path, read_regular


class _Kept(msgspec.Struct):
    key: str
    checksum: int  # the CRC-32 of ``path``: a byte changed in a number is no kept path
    path: bytes  # the path (or None), encoded


_DECODER = msgspec.msgpack.Decoder(_Kept)
_PATH = msgspec.msgpack.Decoder(CriticalPath | None)


def kept_path(
    kept: Path | None,
    per_rank: Mapping[int, list[Aligned]],
    straggler: tuple[int | None, float | None],
    mesh: Mapping[int, Mapping[str, int]],
    compute: Callable[[], CriticalPath | None],
) -> CriticalPath | None:
    """``compute()``, or the path kept at ``kept`` where it was computed from the same inputs
    (``straggler``: the verdict's rank and its step-to-step noise); the path computed is kept
    there (where it can be written). ``kept`` None: computed, nothing kept."""
    if kept is None:
        return compute()
    key = _key(per_rank, straggler, mesh)
    try:
        found = _DECODER.decode(read_regular(kept, LARGE_FILE_BYTES))
        if found.key == key and zlib.crc32(found.path) == found.checksum:
            return _PATH.decode(found.path)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        pass  # computed again, and kept anew
    path = compute()
    encoded = msgspec.msgpack.encode(path, enc_hook=plain_scalar)
    try:
        with atomic_path(kept, durable=False) as temp:
            temp.write_bytes(msgspec.msgpack.encode(_Kept(key, zlib.crc32(encoded), encoded)))
    except OSError:
        pass  # a folder that cannot be written: computed again next time
    return path


def _key(
    per_rank: Mapping[int, list[Aligned]],
    straggler: tuple[int | None, float | None],
    mesh: Mapping[int, Mapping[str, int]],
) -> str:
    traces = [
        (rank, a.trace.first_step, a.record.trace, a.record.size, a.record.mtime_ns, a.clock)
        for rank, aligned in sorted(per_rank.items())
        for a in aligned
    ]
    return fingerprint((ANALYSIS_VERSION, _code(), traces, straggler, sorted(mesh.items())))


@functools.cache
def _code() -> str:
    """The code the path comes from: the bytes of every module of the analysis (not this room's
    alone: the spans, the collectives' steps and groups the walk takes are made in
    ``across_ranks/combine.py``, the transfers' pairs in ``reading/instances.py``), of the schema
    the path is kept in, and of the mesh's stages."""
    toolkit = Path(__file__).parents[4]
    modules = [
        *sorted((toolkit / "profiling" / "analysis").rglob("*.py")),
        *(toolkit / "profiling" / "schema" / name for name in ("model_path.py", "model_replay.py")),
        toolkit / "slurm" / "common" / "mesh.py",
    ]
    digest = hashlib.blake2b(digest_size=16)
    for module in modules:
        digest.update(str(module.relative_to(toolkit)).encode() + b"\0" + module.read_bytes())
    return digest.hexdigest()
