"""Profiling: what the ranks record, the job folder they write, and what is read from it.

- :mod:`profiling.recording`: inside the task (rank selection, the schedule, the profiler and
  the windows added while the job runs);
- :mod:`profiling.folder`: the job folder on the shared filesystem (its layout, trace files,
  the manifest, capture requests, the shared-folder check);
- :mod:`profiling.analysis`: reading traces and what is measured from them (breakdown, clock
  alignment, straggler, merged timeline);
- the commands: ``python -m profiling.report``, ``profiling.compare`` and ``profiling.hang``.

Nothing imported from this package's ``__init__`` touches torch: the submit path reads the
configs on a login node and must stay fast.
"""
