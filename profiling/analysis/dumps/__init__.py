"""Stage 6: what ranks leave behind when they fail: hang dumps and out-of-memory dumps."""

# the stage's entry points: what the rooms above it (the report) may take from it
from profiling.analysis.dumps.hang import HangError, analyse_dumps, read_dumps
from profiling.analysis.dumps.oom_section import out_of_memory

__all__ = [
    "HangError",
    "analyse_dumps",
    "out_of_memory",
    "read_dumps",
]
