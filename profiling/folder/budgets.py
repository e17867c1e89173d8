"""How large the report's merged files may grow unless told otherwise: read here by the code
that keeps to each budget and by the settings that change it (``--archive-budget-mb``,
``--merge-budget-mb``), which the command's ``--help`` shows without importing that code."""

ARCHIVE_BUDGET_BYTES = 1000 * 10**6  # the Perfetto archive: the default ranks' traces, copied
MERGE_BUDGET_BYTES = 500 * 10**6  # the merged JSON timeline: the deepest levels dropped beyond
