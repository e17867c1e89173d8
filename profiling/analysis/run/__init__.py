"""Stage 5: the whole run from every rank's step log: the run map, slow nodes, memory growth."""
