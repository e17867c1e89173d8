"""Stage 4: what the ranks measure together, on the common clock: who the others wait for,
the critical path, the job's summary (``report.json``'s measures) and the merged timeline."""

from slurm.basics import public_names

# the stage's entry points: what the rooms above it (the report) may take from it
__all__, __getattr__ = public_names(
    __name__,
    {
        "summarise": "combine",
        "decided_with_logs": "verdict",
        "parse_layout": "layout",
        "LayoutError": "layout",
        "mean": "combine",
        "PATH_KINDS": "critical_path",
        "LINK_SHARE": "gpu_sections",
        "SHOWN_KERNELS": "gpu_sections",
        "DEFAULT_BUDGET_BYTES": "merge",
        "MergedTraceWriter": "merge",
        "MergeStats": "merge",
        "keep_levels": "merge",
        "lane_metadata": "merge",
        "merge_stats": "merge",
        "plan_depth": "merge",
        "write_part": "merge",
    },
)
