"""Stage 3: every rank's traces on one clock, from the collectives they took part in."""

# the stage's entry points: what the rooms above it (the report) may take from it
from profiling.analysis.clocks.kept import kept_alignment
from profiling.analysis.clocks.rank_clocks import Aligned

__all__ = [
    "Aligned",
    "kept_alignment",
]
