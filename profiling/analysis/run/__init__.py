"""Stage 5: the whole run from every rank's step log: the run map, slow nodes, memory growth."""

from slurm.basics import public_names

# the stage's entry points: what the rooms above it (the report) may take from it
__all__, __getattr__ = public_names(
    __name__,
    {
        "read_run": "run_logs",
        "RunMap": "run_map",
        "run_section": "section",
        "RunView": "run_view",
        "MapLevel": "run_view",
        "RunPicture": "run_view",
        "RunPictureMemory": "run_view",
        "run_mesh": "run_rows",
    },
)
