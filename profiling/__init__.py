"""Rank selection, the profiler, trace naming and writing, and the cross-rank report.

Nothing imported from this package's ``__init__`` touches torch: the submit path reads the
configs below on a login node and must stay fast.
"""
