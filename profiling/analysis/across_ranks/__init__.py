"""Stage 4: what the ranks measure together, on the common clock: who the others wait for,
the critical path, the job's summary (``report.json``'s measures) and the merged timeline."""
