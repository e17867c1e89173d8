"""Stage 6: what ranks leave behind when they fail: hang dumps and out-of-memory dumps."""

from slurm.basics import public_names

# the stage's entry points: what the rooms above it (the report) may take from it
__all__, __getattr__ = public_names(
    __name__,
    {
        "HangError": "hang",
        "analyse_dumps": "hang",
        "read_dumps": "hang",
        "out_of_memory": "oom_section",
    },
)
