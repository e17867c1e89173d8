"""One task at run time, on its node: the attempt (:mod:`.attempt`), the process group and
device (:mod:`.distributed`), the progress watchdog (:mod:`.watchdog`) and preemption
(:mod:`.preemption`). Imported by the task only: :mod:`jobs.task` stays torch-free."""
