"""The report's clocks, kept: a warm report (every trace's record fresh) on the same traces
finds the same alignment, so the last one is kept beside report.json and taken again.

Aligning is most of a warm report: 0.35 s of 0.7 on 8 dense traces (an FFT per rank pair).
What the clocks are computed from is every record's trace (name, size, modification time),
each trace's window and each rank's node, and the analysis version
(:data:`~profiling.analysis.per_trace.record.ANALYSIS_VERSION`, bumped when the analysis or the
alignment changes); the same of all of them gives the same clocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from profiling.analysis.clocks.alignment import Alignment
from profiling.analysis.clocks.group_inference import inferred_groups
from profiling.analysis.clocks.rank_clocks import Aligned, align_ranks, by_rank
from profiling.analysis.per_trace.record import ANALYSIS_VERSION, TraceRecord
from profiling.folder.fingerprint import fingerprint
from profiling.folder.traces import TraceFile
from slurm.common.files import LARGE_FILE_BYTES, atomic_path, read_regular


class _Kept(msgspec.Struct):
    key: str
    clocks: list[Alignment]  # in the order of the traces


_DECODER = msgspec.json.Decoder(_Kept)


def kept_alignment(
    path: Path, traces: Sequence[TraceFile], records: Sequence[TraceRecord], nodes: Mapping[int, str]
) -> dict[int, list[Aligned]]:
    """:func:`~profiling.analysis.clocks.rank_clocks.align_ranks`, or the clocks kept at ``path`` where they
    were computed from the same inputs; the clocks computed are kept there (where it can be
    written)."""
    records = inferred_groups(traces, records)
    key = _key(traces, records, nodes)
    try:
        kept = _DECODER.decode(read_regular(path, LARGE_FILE_BYTES))
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        kept = None
    if kept is not None and kept.key == key and len(kept.clocks) == len(traces):
        return by_rank(traces, records, kept.clocks)
    per_rank = align_ranks(traces, records, nodes)
    clocks = {(a.trace.rank, a.trace.first_step): a.clock for aligned in per_rank.values() for a in aligned}
    kept = _Kept(key, [clocks[(t.rank, t.first_step)] for t in traces])
    try:
        with atomic_path(path, durable=False) as temp:
            temp.write_bytes(msgspec.json.encode(kept))
    except OSError:
        pass  # a folder that cannot be written: aligned again next time
    return per_rank


def _key(traces: Sequence[TraceFile], records: Sequence[TraceRecord], nodes: Mapping[int, str]) -> str:
    inputs = (
        ANALYSIS_VERSION,
        [(t.rank, t.first_step, r.trace, r.size, r.mtime_ns) for t, r in zip(traces, records, strict=True)],
        sorted(nodes.items()),
    )
    return fingerprint(inputs)
