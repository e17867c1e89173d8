"""Stage 4: what the ranks measure together, on the common clock: who the others wait for,
the critical path, the job's summary (``report.json``'s measures) and the merged timeline."""

# the stage's entry points: what the rooms above it (the report) may take from it
from profiling.analysis.across_ranks.combine import mean, summarise
from profiling.analysis.across_ranks.critical_path.verdict import decided_with_logs
from profiling.analysis.across_ranks.critical_path.walk import PATH_KINDS
from profiling.analysis.across_ranks.gpu_sections import LINK_SHARE, SHOWN_KERNELS
from profiling.analysis.across_ranks.merge import (
    DEFAULT_BUDGET_BYTES,
    MergedTraceWriter,
    MergeStats,
    keep_levels,
    lane_metadata,
    merge_stats,
    plan_depth,
    write_part,
)

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "LINK_SHARE",
    "MergeStats",
    "MergedTraceWriter",
    "PATH_KINDS",
    "SHOWN_KERNELS",
    "decided_with_logs",
    "keep_levels",
    "lane_metadata",
    "mean",
    "merge_stats",
    "plan_depth",
    "summarise",
    "write_part",
]
