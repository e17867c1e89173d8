"""What the report measures, in stages that follow the data; each stage imports only the ones
before it (``tests/test_structure.py`` holds the order):

1. :mod:`.reading`: a trace file into columns (the C scanner and the Python reader, their
   errors, and the names of what traces hold: collectives, counted operators);
2. :mod:`.per_trace`: what one rank's traces measure (step breakdown, lanes, kernels, idle time,
   memory, FLOPs, bandwidth; the analysis record kept beside each trace);
3. :mod:`.clocks`: every rank on one clock (offset search, alignment, the rules for one host);
4. :mod:`.across_ranks`: what the ranks measure together (straggler, waiting, the critical
   path, the job's summary, the merged timeline);
5. :mod:`.run`: the whole run from the step logs (run map, slow nodes, memory growth);
6. :mod:`.dumps`: what ranks leave when they fail (hangs, out-of-memory dumps).

A new measure of one trace goes in ``per_trace``, one that needs several ranks in
``across_ranks``, one made from step logs in ``run``.
"""
