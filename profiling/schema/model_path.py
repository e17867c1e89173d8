"""``report.json``'s ``critical_path``, typed (see :mod:`profiling.schema.model` for the whole
report; :mod:`profiling.analysis.across_ranks.critical_path.walk` for how the path is walked)."""

from __future__ import annotations

from typing import Annotated

from profiling.schema.model_ranks import NonNegFloat, NonNegInt, Part, about
from profiling.schema.model_replay import Replay, UndecidedStep


class PathSegment(Part):
    rank: Annotated[NonNegInt, about("the rank the path is on")]
    kind: Annotated[str, about("compute, communication, memory, host, other, or bubble (a pipeline's)")]
    start_us: Annotated[float, about("its start, on the first rank's clock (the trace's µs)")]
    end_us: Annotated[float, about("its end, on the same clock")]
    name: Annotated[str, about("the op or kernel (the longest, where it joins several)")]
    phase: Annotated[str | None, about("forward, backward or optimizer, where the trace says")]


class PathStep(Part):
    step: Annotated[int, about("the ProfilerStep number")]
    ms: Annotated[NonNegFloat, about("its length on the rank that ended it last: the segments add up to it")]
    ending_rank: Annotated[NonNegInt, about("the rank that ended it last, where the walk starts")]
    segments: Annotated[list[PathSegment], about("the path, in time order")]
    gains_ms: Annotated[dict[str, float], about("what_if -> how much shorter this step would be")]


class RankKind(Part):
    rank: Annotated[NonNegInt, about("the rank")]
    kind: Annotated[str, about("compute, communication, memory, host, other, or bubble (a pipeline's)")]
    ms_per_step: Annotated[NonNegFloat, about("its time on the path, per followed step")]
    share: Annotated[float, about("of the path's time")]
    name: Annotated[str, about("the op or kernel with the most of that time")]


class WhatIf(Part):
    what: Annotated[str, about("straggler, overlap, host, or bubble (a job with a pipeline)")]
    gain_ms: Annotated[float, about("the mean over the followed steps of how much shorter a step would be")]
    share: Annotated[float, about("gain_ms over the mean followed step")]
    assumption: Annotated[str, about("what the estimate assumes, in one line")]
    rank: Annotated[NonNegInt | None, about("the rank most of that gain is on")]
    name: Annotated[str | None, about("the op, kernel or collective most of it is in")]


class CriticalPath(Part):
    steps: Annotated[list[PathStep], about("each followed step's path; segments for segments_for's steps")]
    segments_for: Annotated[
        list[int],
        about(
            "the steps whose segments are listed: the first followed, at most 8 and 20 000 segments "
            "in all, the first step's always (the others': [])"
        ),
    ]
    by_rank_kind: Annotated[list[RankKind], about("the path's time by rank and kind, the most first")]
    what_if: Annotated[list[WhatIf], about("the gains, the largest first")]
    undecided: Annotated[list[UndecidedStep], about("the steps the walk could not follow, and why")]
    step_ms: Annotated[NonNegFloat, about("the mean followed step")]
    noise_ms: Annotated[NonNegFloat | None, about("the step-to-step noise a gain must exceed to be named")]
    replay: Annotated[
        Replay | None, about("every followed step replayed on its cross-rank graph: what stragglers cost")
    ] = None
