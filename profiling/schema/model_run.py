"""``report.json``'s ``run``, typed: the whole run from every rank's step log (see
:mod:`profiling.schema.model` for the whole report; :mod:`profiling.analysis.run.section` for how it is
made)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from profiling.schema.model_ranks import NonNegFloat, NonNegInt, Part, about


class Interval(Part):
    first: Annotated[NonNegInt, about("its first step")]
    last: Annotated[NonNegInt, about("its last step")]
    median_ms: Annotated[NonNegFloat, about("the rank's median CPU time per step in it")]
    relative: Annotated[NonNegFloat, about("as the rank's relative score, in it")]
    individual: Annotated[NonNegFloat, about("as the rank's individual score, in it")]


class RunRank(Part):
    rank: Annotated[NonNegInt, about("the global rank")]
    node: Annotated[str, about("its node")]
    median_ms: Annotated[NonNegFloat | None, about("its median CPU time per step (null: no step's is known)")]
    wall_median_ms: Annotated[NonNegFloat | None, about("its median wall time per step")]
    gpu_median_ms: Annotated[NonNegFloat | None, about("its median GPU time per step, where measured")]
    relative: Annotated[
        NonNegFloat | None,
        about("the fastest rank's median over this rank's (1: the fastest; null: no time)"),
    ]
    individual: Annotated[
        NonNegFloat | None,
        about("its best interval over its median (1: as fast as it ever was; null: no time)"),
    ]
    last_step: Annotated[NonNegInt, about("the last step its log holds")]
    intervals: Annotated[list[Interval], about("the same scores per tenth of the run")]
    memory_median_mib: Annotated[
        NonNegFloat | None, about("its median memory a step, as `run.memory` says (null: not recorded)")
    ] = None
    memory_max_mib: Annotated[NonNegFloat | None, about("its most memory in a step")] = None


class Segment(Part):
    rank: Annotated[NonNegInt, about("the slow rank")]
    node: Annotated[str, about("its node")]
    first: Annotated[NonNegInt, about("the segment's first step")]
    last: Annotated[NonNegInt, about("its last step")]
    slow_steps: Annotated[int, about("steps in it above the threshold")]
    excess_ms: Annotated[float, about("median time per step above the others' median")]
    ratio: Annotated[float, about("median ratio to the others' median")]
    traces: Annotated[list[str], about("the traces that cover it")]
    hint: Annotated[str | None, about("where none does: the commands that would have")]


class Captured(Part):
    id: Annotated[NonNegInt, about("the capture's number in the job (meta/capture/request-<id>.json)")]
    first: Annotated[int, about("its first recorded step")]
    last: Annotated[int, about("its last")]
    ranks: Annotated[list[int], about("the ranks that recorded it")]
    automatic: Annotated[bool, about("asked for by --auto-capture; false: by jobs.commands.capture")]
    rank: Annotated[
        int | None, about("--auto-capture: the rank it found slow (the others: its reference, neighbours)")
    ] = None
    why: Annotated[str | None, about("--auto-capture: its decision, as rank 0's log says it")] = None
    traces: Annotated[list[str], about("the traces it wrote")] = msgspec.field(default_factory=list)


class SlowNode(Part):
    node: Annotated[str, about("the node")]
    ranks: Annotated[list[int], about("its ranks")]
    slow_ranks: Annotated[list[int], about("those slow in these steps")]
    first: Annotated[NonNegInt, about("the first step")]
    last: Annotated[NonNegInt, about("the last step")]
    slow_steps: Annotated[int, about("steps in which its ranks were slow")]
    excess_ms: Annotated[float, about("median time per step above the other ranks' median")]
    ratio: Annotated[float, about("median ratio to the other ranks' median")]
    hint: Annotated[str, about("the command that resubmits without it")]


class MemoryGrowth(Part):
    rank: Annotated[NonNegInt, about("the rank whose memory grew")]
    node: Annotated[str, about("its node")]
    since_step: Annotated[int, about("the step from which it grew steadily")]
    last_step: Annotated[NonNegInt, about("the last step of its log")]
    mib_per_step: Annotated[float, about("how much it grew a step (MiB), a line fitted from since_step")]
    from_mib: Annotated[float, about("the line at since_step (MiB)")]
    to_mib: Annotated[float, about("the line at last_step (MiB)")]
    line: Annotated[str, about('"rank 3: +38 MiB a step since step 120 (1.2 to 4.9 GiB)"')]


class ShortLog(Part):
    rank: Annotated[NonNegInt, about("the rank")]
    last_step: Annotated[NonNegInt, about("its log's last step")]


class Ends(Part):
    expected_last_step: Annotated[int | None, about("the run's last step, from the manifest (null: none)")]
    last_step: Annotated[NonNegInt, about("the last step any log holds")]
    short: Annotated[list[ShortLog], about("the ranks whose log ends before the run's")]
    note: Annotated[str | None, about("what the logs' ends say, where they end early")]


class Run(Part):
    metric: Annotated[str, about("what is compared: cpu")]
    measures: Annotated[str, about("what that metric is, in words")]
    steps: Annotated[list[int], about("first and last step")]
    columns: Annotated[NonNegInt, about("steps in the map")]
    gpu: Annotated[bool, about("GPU times were measured")]
    slow_above: Annotated[NonNegFloat, about("the ratio to the others' median above which a step is slow")]
    min_steps: Annotated[NonNegInt, about("the shortest slow stretch that is a segment")]
    noise: Annotated[NonNegFloat, about("the run's step-to-step noise, as a ratio")]
    ranks: Annotated[list[RunRank], about("each rank's scores")]
    segments: Annotated[list[Segment], about("persistently slow stretches")]
    slow_nodes: Annotated[list[SlowNode], about("nodes whose ranks were slow together")]
    ends: Annotated[Ends, about("where the step logs end, against the run's steps")]
    unreadable: Annotated[list[str], about("step logs that could not be read")]
    memory: Annotated[
        str | None,
        about(
            "what the step logs' memory is: 'cuda', the allocator's peak allocated in each step; "
            "'rss', the process's resident memory at each step's end; null: not recorded"
        ),
    ] = None
    memory_growth: Annotated[
        list[MemoryGrowth], about("ranks whose memory grew steadily to the end of their log: leaks")
    ] = msgspec.field(default_factory=list)
    captures: Annotated[
        list[Captured], about("the steps captured while the job ran, by a person or by --auto-capture")
    ] = msgspec.field(default_factory=list)
