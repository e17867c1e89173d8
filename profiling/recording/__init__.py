"""What a rank records, inside the task: which ranks (:mod:`.ranks`), when (:mod:`.schedule`),
the profiler and its windows (:mod:`.profiler`), and the windows added while the job runs: the
slowest rank's (:mod:`.slowest`) and live captures (:mod:`.capture`). The configs
(:mod:`.config`, :mod:`.ranks`, :mod:`.schedule`) are torch-free: the submit path checks them."""
