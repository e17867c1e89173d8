"""What limits the step, one question across ranks: each recorded step's critical path walked
across the ranks (:mod:`.walk`, the job's in :mod:`.path`), its dependency graph (:mod:`.graph`)
replayed as measured and with durations changed (:mod:`.replay`, the OSDI 2025 what-if
analysis: :mod:`.what_if`, the gains that add up :mod:`.gains`, what it shows :mod:`.views`, the
ideal step as a trace :mod:`.ideal_trace`), the pipeline's stages weighed (:mod:`.stages`), and
the straggler and stage verdicts made to follow the replay (:mod:`.verdict`).

A room of :mod:`profiling.analysis.across_ranks`, below the rest of it: it reads the lanes and
the aligned clocks, never the straggler's arrival test, whose verdict it is given.
"""

# the room's entry points: what the rooms above it may take from it
from profiling.analysis.across_ranks.critical_path.path import critical_path
from profiling.analysis.across_ranks.critical_path.stages import stage_balance
from profiling.analysis.across_ranks.critical_path.verdict import (
    decided_with_logs,
    follows_replay,
    stages_follow_replay,
)
from profiling.analysis.across_ranks.critical_path.walk import PATH_KINDS

__all__ = [
    "PATH_KINDS",
    "critical_path",
    "decided_with_logs",
    "follows_replay",
    "stage_balance",
    "stages_follow_replay",
]
