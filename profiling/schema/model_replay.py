"""``report.json``'s ``critical_path.replay``, typed: every followed step replayed on its
cross-rank graph (:mod:`profiling.analysis.across_ranks.critical_path.what_if` says how)."""

from __future__ import annotations

import statistics
from typing import Annotated

from profiling.schema.model_ranks import NonNegFloat, NonNegInt, Part, about


class UndecidedStep(Part):
    step: Annotated[int, about("the ProfilerStep number")]
    why: Annotated[str, about("why the walk could not follow it, or the replay replay it")]


class ReplayStep(Part):
    step: Annotated[int, about("the ProfilerStep number")]
    measured_ms: Annotated[
        NonNegFloat, about("from the first rank's start to the last rank's end, as measured")
    ]
    replayed_ms: Annotated[
        NonNegFloat,
        about(
            "the same, replayed with every rank's work as measured and every wait from the graph "
            "(never from the recorded idle)"
        ),
    ]
    ideal_ms: Annotated[
        NonNegFloat, about("replayed ideal: each kind of work (the host's gaps too) at its ranks' mean")
    ]
    error: Annotated[NonNegFloat, about("|replayed - measured| / measured")] = 0.0
    certain: Annotated[
        bool, about("false where the error exceeds fidelity.threshold: the step's what-ifs are less certain")
    ] = True


class Fidelity(Part):
    median: Annotated[NonNegFloat, about("the median over the steps of |replayed - measured| / measured")]
    worst: Annotated[NonNegFloat, about("the largest of them")]
    threshold: Annotated[NonNegFloat, about("a step replayed further off than this is less certain")] = 0.05
    uncertain: Annotated[list[int], about("the steps replayed further off than the threshold")] = []


class ReplayWhat(Part):
    what: Annotated[
        str,
        about(
            "rank like its peers, stage like the median stage, the exposed communication hidden, or "
            "no host gaps (measured or ideal, in strips)"
        ),
    ]
    rank: Annotated[NonNegInt | None, about("the rank, for a rank like its peers")]
    coordinate: Annotated[str | None, about("the mesh coordinate, for a stage: pp 3")]


class ReplayWhatIf(ReplayWhat):
    step_ms: Annotated[NonNegFloat, about("the mean step, replayed so")]
    gain_ms: Annotated[float, about("the mean replayed step as measured minus step_ms")]


class ReplayGain(ReplayWhat):
    gain_ms: Annotated[
        float,
        about(
            "how much shorter the mean step replays with this and every gain before it applied than "
            "with those before it alone: the gains add up"
        ),
    ]
    share: Annotated[float, about("gain_ms over the mean measured step")]


class ReplayMost(Part):
    dimension: Annotated[str, about("rank, or the mesh dimension (pp, dp, tp) of the part named")]
    index: Annotated[NonNegInt, about("the rank, or the coordinate along that dimension")]
    slowdown: Annotated[NonNegFloat, about("S with its durations as measured, the rest ideal")]
    kinds: Annotated[
        list[str], about("the kinds of work its ranks spend longer on than the others do, the most first")
    ]
    longer_ms: Annotated[float, about("how much longer a step its ranks spend on those kinds than others do")]
    longer_fraction: Annotated[
        NonNegFloat | None, about("longer_ms over the others' time on those kinds; null where they have none")
    ]
    excess: Annotated[
        float,
        about(
            "its S above its peers' median part's (the median rank's, or the median coordinate's "
            "of its dimension): what it holds beyond them, the slowdown's own share aside"
        ),
    ] = 0.0


class ReplayHeat(Part):
    rows: Annotated[str, about("pp (the stages) or rank")]
    columns: Annotated[str, about("dp (the replicas) or step")]
    row_labels: Annotated[list[int], about("each row's stage or rank")]
    column_labels: Annotated[list[int], about("each column's replica or step")]
    values: Annotated[
        list[list[NonNegFloat | None]],
        about(
            "S of each cell: its ranks as measured, the rest ideal (a stage x replica's, over the "
            "steps; a rank's in one step); null where no rank is"
        ),
    ]


class ReplayStrip(ReplayWhat):
    end_ms: Annotated[list[float], about("each rank's mean end, from the step's first start")]
    work_ms: Annotated[list[NonNegFloat], about("each rank's mean work: the rest of its step it waited")]


class ReplayStrips(Part):
    ranks: Annotated[list[NonNegInt], about("the ranks shown: every rank, or at many ranks those apart")]
    start_ms: Annotated[list[float], about("each rank's mean start, from the step's first start")]
    variants: Annotated[list[ReplayStrip], about("the measured step, the ideal, and each what-if, replayed")]


class Replay(Part):
    slowdown: Annotated[
        NonNegFloat,
        about(
            "S: the mean step replayed with every rank's work as measured (its host's gaps included; "
            "the GPU's unexplained idle, waiting, left out) over the mean ideal step"
        ),
    ]
    host_share: Annotated[
        NonNegFloat, about("the mean step replayed as for S over the same replayed without host gaps")
    ]
    measured_ms: Annotated[NonNegFloat, about("the mean measured step")]
    ideal_ms: Annotated[NonNegFloat, about("the mean ideal step")]
    most: Annotated[
        ReplayMost | None,
        about(
            "the rank or mesh coordinate that holds the most of S (host gaps included) beyond its peers'; "
            "null where none does"
        ),
    ]
    gains: Annotated[
        list[ReplayGain],
        about("the largest what-ifs, each replayed on top of those before it: gains that add up"),
    ]
    steps: Annotated[list[ReplayStep], about("each replayed step")]
    fidelity: Annotated[Fidelity, about("how far the steps replayed as measured are from the measured")]
    by_rank: Annotated[
        dict[int, NonNegFloat], about("rank -> S with that rank's durations as measured, the rest ideal")
    ]
    by_kind: Annotated[
        dict[str, NonNegFloat],
        about(
            "kind (forward, backward, ..., host, each collective kind) -> S with it measured, the rest ideal"
        ),
    ]
    by_mesh: Annotated[
        dict[str, dict[str, NonNegFloat]],
        about("mesh dimension -> coordinate -> S with its ranks as measured, the rest ideal"),
    ]
    heat: Annotated[
        ReplayHeat,
        about("S by stage x replica where the job has both, else by rank x step: report.png's heat map"),
    ]
    strips: Annotated[ReplayStrips, about("each rank's step in each what-if: report.html's strips")]
    what_if: Annotated[
        list[ReplayWhatIf], about("the single what-ifs, each replayed; the largest gain first")
    ]
    undecided: Annotated[list[UndecidedStep], about("the steps not replayed, and why")]
    variants: Annotated[NonNegInt, about("how many variants each step was replayed in")]

    def beyond_peers_ms(self, dimension: str, index: int) -> float:
        """What a rank (``dimension`` "rank") or a mesh coordinate holds beyond its peers' median
        part, in ms a step. A balanced job's slowest rank gains by being like its peers too (a
        step waits for the slower of each meeting's ranks, whoever it is): what names a part is
        what it holds beyond the others, never its own what-if's gain."""
        parts = (
            self.by_rank
            if dimension == "rank"
            else {int(at): value for at, value in self.by_mesh.get(dimension, {}).items()}
        )
        if index not in parts or len(parts) < 2:
            return 0.0
        return (parts[index] - statistics.median(parts.values())) * self.ideal_ms

    def most_beyond_peers_ms(self) -> float:
        """What the part that holds the most holds beyond its peers, in ms a step; 0 without one."""
        return self.most.excess * self.ideal_ms if self.most is not None else 0.0
