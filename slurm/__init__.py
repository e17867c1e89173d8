"""SLURM environment -> distributed identity, hostlists, batch scripts and the local test cluster."""
