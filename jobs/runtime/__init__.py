"""One task at run time, on its node: the attempt (:mod:`.attempt`), the process group and
device (:mod:`.distributed`), the progress watchdog (:mod:`.watchdog`), preemption
(:mod:`.preemption`) and the step the ranks agree to stop at (:mod:`.agreed_stop`). Imported by
the task only: :mod:`jobs.task` stays torch-free (it imports :mod:`.preemption` alone)."""
