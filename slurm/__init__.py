"""The bottom floor: the foundation every room shares (:mod:`slurm.common`: errors, files,
settings, the command line, the parallel mesh, the traces root), and SLURM's own: the task's
distributed identity from its environment (:mod:`slurm.identity`), hostlists, the scheduler and
its cached queue view, resources, submitit's executors, the plain batch script and the local
test cluster."""
