"""Code as a user of the toolkit would write it, outside its package: a workload for
``--workload`` and a script that keeps its own loop and uses ``ProfiledRun``."""
