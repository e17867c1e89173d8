"""Robust statistics every stage and the history share."""

from __future__ import annotations

# a normal distribution's standard deviation over its median absolute deviation: a robust sigma
MAD_TO_SIGMA = 1.4826
# a median of n normal draws errs by this times sigma over sqrt(n) (sqrt(pi / 2))
MEDIAN_ERROR_PER_SIGMA = 1.2533
