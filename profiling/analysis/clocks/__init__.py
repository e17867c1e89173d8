"""Stage 3: every rank's traces on one clock, from the collectives they took part in."""
