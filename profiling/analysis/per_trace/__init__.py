"""Stage 2: what one rank's traces measure, kept beside each trace as its analysis record
(:mod:`.record`)."""

from slurm.basics import public_names

# the stage's entry points: what the rooms above it (the report) may take from it
__all__, __getattr__ = public_names(
    __name__,
    {
        "ReportError": "record",
        "TraceRecord": "record",
        "analyse_trace": "record",
        "load_fresh": "record",
        "load_checked": "record",
        "reader_here": "record",
        "save": "record",
        "CAUSES": "idle",
        "KERNEL_GAP_US": "idle",
        "FAMILIES": "kernels",
        "KINDS": "lanes",
    },
)
