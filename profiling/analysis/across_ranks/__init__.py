"""Stage 4: what the ranks measure together, on the common clock: who the others wait for,
the critical path, the job's summary (``report.json``'s measures) and the merged timeline.

Its entry points, what the rooms above it (the report) may take from it, are imported when
first asked for (:mod:`slurm.common.lazy`): the critical path's modules are a fifth of a
second, which the report's settings and ``--help`` do without."""

from typing import TYPE_CHECKING

from slurm.common.lazy import entry_points

__all__, __getattr__ = entry_points(
    __name__,
    {
        "combine": ("mean", "summarise"),
        "critical_path.verdict": ("decided_with_logs",),
        "critical_path.walk": ("PATH_KINDS",),
        "gpu_sections": ("LINK_SHARE", "SHOWN_KERNELS"),
        "merge": (
            "MergedTraceWriter",
            "MergeStats",
            "keep_levels",
            "lane_metadata",
            "merge_stats",
            "plan_depth",
            "write_part",
        ),
    },
)

if TYPE_CHECKING:  # what mypy reads (`x as x`: a name given on, as __all__ is made above)
    from profiling.analysis.across_ranks.combine import mean as mean
    from profiling.analysis.across_ranks.combine import summarise as summarise
    from profiling.analysis.across_ranks.critical_path.verdict import decided_with_logs as decided_with_logs
    from profiling.analysis.across_ranks.critical_path.walk import PATH_KINDS as PATH_KINDS
    from profiling.analysis.across_ranks.gpu_sections import LINK_SHARE as LINK_SHARE
    from profiling.analysis.across_ranks.gpu_sections import SHOWN_KERNELS as SHOWN_KERNELS
    from profiling.analysis.across_ranks.merge import MergedTraceWriter as MergedTraceWriter
    from profiling.analysis.across_ranks.merge import MergeStats as MergeStats
    from profiling.analysis.across_ranks.merge import keep_levels as keep_levels
    from profiling.analysis.across_ranks.merge import lane_metadata as lane_metadata
    from profiling.analysis.across_ranks.merge import merge_stats as merge_stats
    from profiling.analysis.across_ranks.merge import plan_depth as plan_depth
    from profiling.analysis.across_ranks.merge import write_part as write_part
