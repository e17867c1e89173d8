"""Submission and the commands: every command line (:mod:`jobs.commands`), the job spec, its
submission (:mod:`jobs.submission`), the per-task entry point (:mod:`jobs.task`), the loop's
wrapper (:mod:`jobs.profiled_run`) and the task at run time (:mod:`jobs.runtime`)."""
