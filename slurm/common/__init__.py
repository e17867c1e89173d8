"""The foundation every room of the toolkit stands on, importing no other room: the error a
setting raises with its HINT (:mod:`.errors`), files written so that a reader on NFS never sees
half of them and read back bounded (:mod:`.files`), the time stamp files carry (:mod:`.clock`),
settings declared once with their options (:mod:`.settings`) and the command line built from
them (:mod:`.command_line`), the parallel mesh, dp x pp x tp (:mod:`.mesh`), where the job
folders go (:mod:`.traces_root`), and work split among forked processes (:mod:`.forked`).

Torch-free, as the login node's path must be. It lives under ``slurm/``, the bottom floor, so
that every arrow between rooms points one way (``jobs`` -> ``workload`` -> ``profiling`` ->
``slurm``); the SLURM modules beside it (the environment, hostlists, the scheduler, resources,
the batch script, the test cluster) use it as every other room does.
"""
