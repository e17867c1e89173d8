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
from profiling.schema.model_run import (  # re-exported: report.json's parts, all under model
    Captured as Captured,
)
from profiling.schema.model_run import (
    Ends as Ends,
)
from profiling.schema.model_run import (
    Interval as Interval,
)
from profiling.schema.model_run import (
    MemoryGrowth as MemoryGrowth,
)
from profiling.schema.model_run import (
    Run as Run,
)
from profiling.schema.model_run import (
    RunRank as RunRank,
)
from profiling.schema.model_run import (
    Segment as Segment,
)
from profiling.schema.model_run import (
    ShortLog as ShortLog,
)
from profiling.schema.model_run import (
    SlowNode as SlowNode,
)
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
