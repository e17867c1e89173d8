"""Stage 3: every rank's traces on one clock, from the collectives they took part in."""

from slurm.basics import public_names

# the stage's entry points: what the rooms above it (the report) may take from it
__all__, __getattr__ = public_names(
    __name__,
    {
        "kept_alignment": "kept",
        "Aligned": "rank_clocks",
    },
)
