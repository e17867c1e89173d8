"""Stage 5: the whole run from every rank's step log: the run map, slow nodes, memory growth."""

# the stage's entry points: what the rooms above it (the report) may take from it
from profiling.analysis.run.run_logs import read_run
from profiling.analysis.run.run_map import RunMap
from profiling.analysis.run.run_rows import run_mesh
from profiling.analysis.run.run_view import MapLevel, RunPicture, RunPictureMemory, RunView
from profiling.analysis.run.section import run_section

__all__ = [
    "MapLevel",
    "RunMap",
    "RunPicture",
    "RunPictureMemory",
    "RunView",
    "read_run",
    "run_mesh",
    "run_section",
]
