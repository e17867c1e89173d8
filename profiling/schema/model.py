"""``report.json``, typed: one model of the report, in msgspec Structs, every field documented.

Programs read report.json; this is its contract. The report is checked against it as it is
written (:func:`checked`: a field the report writes that the model lacks, or a value of another
type, is an error), and ``docs/report.schema.json`` is the model's JSON Schema, made from it
(:func:`json_schema`; a test holds the file to the model). :data:`SCHEMA_VERSION` changes when
a field changes meaning or goes away; new fields are new fields.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from profiling.schema.model_path import CriticalPath
from profiling.schema.model_ranks import NonNegFloat, NonNegInt, Part, RankReport, about
from profiling.schema.summary import Baseline

SCHEMA_VERSION = 2  # 2: a run rank none of whose steps has a known time has null scores


class Straggler(Part):
    verdict: Annotated[str, about("straggler, none or undetermined")]
    rank: Annotated[NonNegInt | None, about("the straggler, where the verdict names one")]
    text: Annotated[str, about("the verdict and its evidence, as report.md says it")]
    ranks_compared: Annotated[list[int], about("ranks whose clocks were paired")]
    ranks_without_paired_clock: Annotated[list[int], about("left out of the verdict")]
    collectives: Annotated[NonNegInt, about("collectives paired on every rank compared")]
    steps: Annotated[NonNegInt, about("steps of those collectives")]
    step_noise_ms: Annotated[NonNegFloat | None, about("the median rank's step-to-step spread")]
    threshold_ms: Annotated[NonNegFloat | None, about("the waiting per step a straggler must cause")]
    clock_uncertainty_us: Annotated[NonNegFloat, about("the largest ± of the clocks compared")]
    min_lateness_us: Annotated[
        NonNegFloat, about("3 x the clocks' uncertainty: lateness below it is no evidence")
    ]
    compute_ms: Annotated[dict[int, NonNegFloat], about("compute per step, by rank")]
    candidate: Annotated[NonNegInt | None, about("the rank most often last")] = None
    lateness_ms: Annotated[
        float | None, about("how long after the next rank the candidate arrived, on average")
    ] = None
    last_arrivals: Annotated[
        dict[int, int] | None, about("in how many collectives each rank arrived last")
    ] = None
    steps_held_back: Annotated[
        dict[int, int] | None, about("in how many steps each rank held the others back most")
    ] = None
    charged_ms_per_step: Annotated[
        dict[int, float] | None, about("the others' waiting each rank caused, per step")
    ] = None
    p_value: Annotated[
        NonNegFloat | None, about("chance of the candidate holding back that many steps, were no rank slower")
    ] = None
    compute_over_median_pct: Annotated[
        float | None, about("the straggler's compute against the median rank's")
    ] = None


class Spread(Part):
    min: Annotated[NonNegFloat, about("the fastest rank's mean step (ms)")]
    median: Annotated[NonNegFloat, about("the median rank's (ms)")]
    max: Annotated[NonNegFloat, about("the slowest rank's (ms)")]
    max_minus_min: Annotated[NonNegFloat, about("max - min (ms)")]


class KernelDifference(Part):
    name: Annotated[str, about("the kernel")]
    family: Annotated[str, about("its family")]
    fastest_us: Annotated[NonNegFloat, about("its time per step on the fastest rank")]
    slowest_us: Annotated[NonNegFloat, about("on the slowest rank")]
    difference_us: Annotated[float, about("slowest_us - fastest_us")]


class KernelsAcross(Part):
    fastest_rank: Annotated[NonNegInt, about("the GPU rank with the least kernel time per step")]
    slowest_rank: Annotated[NonNegInt, about("the one with the most")]
    kernels: Annotated[list[KernelDifference], about("the kernels whose time per step differs most")]


class CollectiveAcross(Part):
    kind: Annotated[str, about("the collective, as the traces name it")]
    bytes: Annotated[NonNegInt | None, about("message size, where recorded")]
    group_size: Annotated[NonNegInt | None, about("ranks in its group, where recorded")]
    ranks: Annotated[int, about("ranks that ran it")]
    count: Annotated[NonNegInt, about("how many over every rank")]
    p50_us: Annotated[NonNegFloat, about("the ranks' median p50")]
    p90_us: Annotated[NonNegFloat, about("the largest p90")]
    max_us: Annotated[NonNegFloat, about("the longest on any rank")]
    busbw_gbps: Annotated[NonNegFloat | None, about("at that p50")]
    slowest_rank: Annotated[NonNegInt, about("the rank with the largest p50")]
    slowest_busbw_gbps: Annotated[NonNegFloat | None, about("its bus bandwidth")]
    below_link: Annotated[bool, about("busbw below half of --link-gbps")]
    group: Annotated[
        str | None, about("its process group's description (mesh_tp, default_pg); null where not named")
    ] = None


class Reading(Part):
    traces: Annotated[NonNegInt, about("traces reported on")]
    from_records: Annotated[NonNegInt, about("read from fresh analysis records")]
    read_here: Annotated[list[str], about("the traces this report read")]
    analysed_by: Annotated[list[str], about("how many records came from whom")]
    seconds: Annotated[NonNegFloat, about("the time reading took")]


class Archive(Part):
    file: Annotated[str, about("merged_trace.tar, in the report's folder")]
    ranks: Annotated[str, about("the ranks in it")]
    reference_rank: Annotated[int, about("the rank whose clock the others are pinned to")]
    traces: Annotated[list[str], about("the trace files in it")]
    bytes: Annotated[NonNegInt, about("the traces' bytes")]
    archive_bytes: Annotated[NonNegInt, about("the archive's size")]
    budget_bytes: Annotated[
        NonNegFloat | None, about("the budget the default ranks were chosen within (null: ranks named)")
    ]
    left_out: Annotated[str, about("ranks that mattered but did not fit the budget")]
    seconds: Annotated[NonNegFloat, about("the time packing took")]


class Merge(Part):
    bytes: Annotated[NonNegInt, about("the merged JSON's size")]
    budget_bytes: Annotated[NonNegFloat | None, about("its budget (null: --full-merge)")]
    max_cpu_depth: Annotated[int | None, about("the deepest CPU operators kept (null: all)")]
    events_kept: Annotated[NonNegInt, about("events in it")]
    events_dropped: Annotated[NonNegInt, about("events left out to keep within the budget")]


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


class StepMemory(Part):
    step: Annotated[int, about("the step")]
    mib: Annotated[
        NonNegFloat, about("its memory (MiB): CUDA, the peak allocated in it; CPU, resident at its end")
    ]


class OutOfMemory(Part):
    rank: Annotated[NonNegInt, about("the rank that ran out")]
    step: Annotated[int | None, about("the step it was in")]
    device: Annotated[str, about('"cuda:3", "cpu"')]
    allocated_bytes: Annotated[
        NonNegInt | None, about("CUDA: allocated by tensors; CPU: the process's resident memory")
    ]
    reserved_bytes: Annotated[NonNegInt | None, about("CUDA: held by the caching allocator; null on a CPU")]
    peak_bytes: Annotated[
        NonNegInt | None, about("CUDA: the most allocated since the start; CPU: the peak resident")
    ]
    total_bytes: Annotated[
        NonNegInt | None, about("the device's memory (CPU: the address-space limit, else RAM)")
    ]
    snapshot: Annotated[
        str | None, about("its allocations' history (--memory-history), for pytorch.org/memory_viz")
    ]
    line: Annotated[str, about("what report.md, --wait and list say of it")]
    last_steps: Annotated[
        list[StepMemory], about("its memory in its last steps before (its step log's, up to 20)")
    ] = msgspec.field(default_factory=list)
    growth: Annotated[
        MemoryGrowth | None, about("where its memory had grown steadily until then: since when, how fast")
    ] = None


class Layout(Part):
    dims: Annotated[dict[str, NonNegInt], about("the parallel dimensions and their sizes, outermost first")]
    source: Annotated[str, about("the traces' DeviceMesh groups, or --layout")]
    groups: Annotated[list[str], about("the mesh groups it was read from (mesh_dp, ...)")]


class StageCompute(Part):
    stage: Annotated[NonNegInt, about("the pipeline stage: the ranks' coordinate in pp")]
    ranks: Annotated[list[NonNegInt], about("its ranks")]
    compute_ms: Annotated[NonNegFloat, about("its ranks' mean compute per step")]
    spread_ms: Annotated[NonNegFloat, about("the largest minus the smallest of its ranks' compute")]


class StageBalance(Part):
    verdict: Annotated[str, about("imbalance or balanced")]
    stage: Annotated[NonNegInt | None, about("the stage that holds the others back, where imbalanced")]
    excess_pct: Annotated[float, about("the slowest stage's compute against the other stages' median, in %")]
    stages: Annotated[list[StageCompute], about("each stage's compute, in stage order")]
    text: Annotated[str, about("the finding and its evidence, as report.md says it")]


class Report(Part, kw_only=True):
    schema_version: Annotated[int, about("changes when a field changes meaning or goes away")] = (
        SCHEMA_VERSION
    )
    folder: Annotated[str, about("the folder of traces reported on")]
    generated_at: Annotated[str, about("when the report was made (UTC, ISO 8601)")]
    ranks: Annotated[list[RankReport], about("per rank, sorted")]
    straggler: Annotated[Straggler | None, about("null for one rank")] = None
    step_time_spread_ms: Annotated[Spread | None, about("of the ranks' mean step times")] = None
    critical_path: Annotated[
        CriticalPath | None, about("what set each step's length across ranks, and what fixing it would gain")
    ] = None
    communication_wait_ms: Annotated[
        dict[int, NonNegFloat], about("mean exposed communication per step, by rank")
    ] = msgspec.field(default_factory=dict)
    kernels_across: Annotated[KernelsAcross | None, about("null with fewer than two GPU ranks")] = None
    collectives_across: Annotated[list[CollectiveAcross], about("each collective over every rank")] = (
        msgspec.field(default_factory=list)
    )
    link_gbps: Annotated[NonNegFloat | None, about("--link-gbps as given")] = None
    layout: Annotated[
        Layout | None, about("the job's parallel layout (ranks[].mesh); null for one flat group")
    ] = None
    stages: Annotated[
        StageBalance | None, about("the pipeline stages' compute against each other; null without pp")
    ] = None
    oom: Annotated[list[OutOfMemory], about("the ranks that ran out of memory (meta/oom/), first first")] = (
        msgspec.field(default_factory=list)
    )
    peak_tflops: Annotated[NonNegFloat | None, about("--peak-tflops as given")] = None
    warnings: Annotated[
        list[str], about("one line each: a trace skipped and why, a rank taken from its file name...")
    ] = msgspec.field(default_factory=list)
    reading: Annotated[Reading, about("how the traces were read, and by whom")]
    archive: Annotated[Archive | None, about("the Perfetto archive; null with --no-merged-trace")] = None
    merged_trace: Annotated[str | None, about("merged_trace.json.gz with --merged-json")] = None
    merge: Annotated[Merge | None, about("the merged JSON's size, what it left out (--merged-json)")] = None
    alignment_seconds: Annotated[NonNegFloat, about("the time the clocks took to align")] = 0.0
    run: Annotated[Run | None, about("the whole run from every rank's step log; null without")] = None
    run_plot: Annotated[str | None, about("run.png, where drawn")] = None
    baseline: Annotated[Baseline | None, about("vs the last jobs of its config; null: no manifest")] = None
    drawn: Annotated[
        dict[str, str], about("each picture's file name -> a fingerprint of the data it shows")
    ] = msgspec.field(default_factory=dict)
    seconds: Annotated[NonNegFloat, about("the time this report took")] = 0.0


_DECODER = msgspec.json.Decoder(Report)


def checked(encoded: bytes) -> Report:
    """The report as programs will read it, held to the model: raises
    :class:`msgspec.ValidationError` naming the field where the report and its model differ."""
    return _DECODER.decode(encoded)


def empty(folder: str, generated_at: str) -> Report:
    """A report of no trace (a job's run alone)."""
    reading = Reading(traces=0, from_records=0, read_here=[], analysed_by=[], seconds=0.0)
    return Report(folder=folder, generated_at=generated_at, ranks=[], reading=reading)


def json_schema() -> dict[str, Any]:
    """The model's JSON Schema (docs/report.schema.json)."""
    return msgspec.json.schema(Report)
