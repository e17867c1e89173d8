"""Profiling: what the ranks record, the job folder they write, and what is read from it.

- :mod:`profiling.ranks`: which ranks record (``--profile-ranks``), the vocabulary every room uses;
- :mod:`profiling.folder`: the job folder on the shared filesystem (its layout, trace files,
  step logs, the manifest, capture requests, the shared-folder check);
- :mod:`profiling.recording`: inside the task, above the folder it writes (the schedule, the
  profiler, step timing, the windows added while the job runs);
- :mod:`profiling.analysis`: what is read from the folder (traces as columns, breakdown,
  collectives, clock alignment, straggler, merged timeline, the run map, hangs);
- :mod:`profiling.report` (renders), :mod:`profiling.compare`, :mod:`profiling.archive` and
  :mod:`profiling.history`: what the commands (:mod:`jobs.commands`) call, none a command itself.

Nothing imported from this package's ``__init__`` touches torch: the submit path reads the
configs on a login node and must stay fast.
"""
