"""``merged_trace.json.gz`` (``--merged-json``): every rank in one re-encoded Chrome trace, for
viewers that cannot open the Perfetto archive. It costs a second read of every trace (each event
decoded, moved to its lane and clock, encoded again) and keeps within a size budget by leaving
events out (:mod:`profiling.analysis.across_ranks.merge`); the archive needs neither."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from profiling.analysis.across_ranks import (
    MergedTraceWriter,
    MergeStats,
    keep_levels,
    lane_metadata,
    merge_stats,
    plan_depth,
    write_part,
)
from profiling.analysis.clocks import Aligned
from profiling.analysis.reading import read as read_trace
from profiling.report.workers import Workers
from slurm.common.files import atomic_path


def _plan(trace: Path, depths_path: Path) -> MergeStats:
    """What one trace would add to the merged trace, by nesting level; its levels saved (a worker)."""
    events = read_trace(trace, merge=True)
    depths = keep_levels(events)
    np.save(depths_path, depths)
    return merge_stats(events, depths)


def write_merged_json(
    per_rank: dict[int, list[Aligned]], path: Path, workers: Workers, budget_bytes: float | None
) -> dict[str, Any]:
    """The merged trace, written atomically; returns what ``report.json`` says of it."""
    traces = [t for _, aligned in sorted(per_rank.items()) for t in aligned]
    with tempfile.TemporaryDirectory(prefix="merged-") as scratch:
        depths = [Path(scratch) / f"{index}.npy" for index in range(len(traces))]
        stats = list(workers.map(_plan, [t.trace.path for t in traces], depths))
        max_depth = plan_depth(stats, budget_bytes)
        first = traces[0]
        kept = dropped = 0
        with atomic_path(path) as temp:
            writer = MergedTraceWriter(temp, base_time_ns=first.record.base_time_ns or 0)
            writer.write(lane_metadata(first.trace.rank, first.record.host))
            parts = workers.map(
                write_part,
                [t.trace.path for t in traces],
                [d.with_suffix(".part") for d in depths],
                [t.trace.rank for t in traces],
                [t.clock.shift_us for t in traces],
                [t.record.main_pid for t in traces],
                depths,
                [max_depth] * len(traces),
            )
            lanes_written = {first.trace.rank}
            for aligned, part in zip(traces, parts, strict=True):
                if aligned.trace.rank not in lanes_written:
                    writer.write(b"," + lane_metadata(aligned.trace.rank, aligned.record.host))
                    lanes_written.add(aligned.trace.rank)
                writer.append(part)
                part.path.unlink()
                kept, dropped = kept + part.kept, dropped + part.dropped
            size = writer.close({"ranks": sorted(per_rank), "max_cpu_depth": max_depth})
    return {
        "bytes": size,
        "budget_bytes": budget_bytes,
        "max_cpu_depth": max_depth,
        "events_kept": kept,
        "events_dropped": dropped,
    }
