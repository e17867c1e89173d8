"""Submission: the command line, the job spec, the executors and the per-task entry point."""
