"""``report.json``'s per-rank part, typed: :class:`RankReport` and what it holds. See
:mod:`profiling.schema.model` for the whole report and how the model is used."""

from __future__ import annotations

from typing import Annotated

import msgspec

# what a measure can be: a duration, size or count is never negative (a report that would hold
# one fails its check as it is written: the analysis leaves such inputs out, with a line)
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
MemoryBytes = Annotated[int, msgspec.Meta(ge=0, le=1 << 50)]  # no device holds more than 1 PiB


def about(text: str) -> msgspec.Meta:
    """A field's documentation, carried into the report's JSON Schema (docs/report.schema.json)."""
    return msgspec.Meta(description=text)


class Part(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A part of the report: every field declared (a field the report writes and the model lacks
    is an error, not a silent extra)."""


class StepTime(Part):
    mean: Annotated[NonNegFloat, about("mean of the recorded steps' CPU spans (ms)")]
    min: Annotated[NonNegFloat, about("the shortest step (ms)")]
    max: Annotated[NonNegFloat, about("the longest step (ms)")]


class GpuTime(Part):
    span_ms: Annotated[NonNegFloat, about("the step's GPU span, mean per step (ms)")]
    busy_ms: Annotated[NonNegFloat, about("span_ms - idle, mean per step (ms)")]
    idle_ms: Annotated[NonNegFloat, about("no kernel, copy or set on any stream, mean per step (ms)")]
    communication_overlapped_ms: Annotated[
        NonNegFloat, about("communication hidden under compute, per step (ms)")
    ]
    compute_by_phase_ms: Annotated[
        dict[str, NonNegFloat], about("compute per step by phase: forward, backward, optimizer")
    ]
    idle_causes_ms: Annotated[
        dict[str, NonNegFloat],
        about("the streams' idle per step by cause: host_wait, kernel_wait, other"),
    ]
    unlaunched: Annotated[int, about("GPU activities whose launch the traces do not hold")]


class KernelRow(Part):
    name: Annotated[str, about("the kernel's name, as the trace has it")]
    family: Annotated[str, about("gemm/conv, communication, memcpy/memset, reduction, elementwise, other")]
    count: Annotated[NonNegInt, about("launches in the recorded steps")]
    total_us: Annotated[NonNegFloat, about("its time over the recorded steps")]
    per_step_us: Annotated[NonNegFloat, about("total_us per recorded step")]
    mean_us: Annotated[NonNegFloat, about("a launch's mean duration")]
    p50_us: Annotated[NonNegFloat, about("a launch's median duration")]
    p99_us: Annotated[NonNegFloat, about("a launch's 99th percentile duration")]


class Kernels(Part):
    total_us: Annotated[NonNegFloat, about("every kernel's time over the recorded steps (µs)")]
    per_step_us: Annotated[NonNegFloat, about("total_us per recorded step")]
    by_family_us: Annotated[dict[str, NonNegFloat], about("kernel time by family (µs)")]
    top: Annotated[list[KernelRow], about("the kernels with the most time")]


class CollectiveRow(Part):
    kind: Annotated[str, about("the collective, as the trace names it")]
    bytes: Annotated[NonNegInt | None, about("the message's size, where the trace records it")]
    group_size: Annotated[NonNegInt | None, about("ranks in its group, where recorded")]
    count: Annotated[NonNegInt, about("how many in the recorded steps")]
    p50_us: Annotated[NonNegFloat, about("median duration")]
    p90_us: Annotated[NonNegFloat, about("90th percentile duration")]
    max_us: Annotated[NonNegFloat, about("the longest")]
    total_us: Annotated[NonNegFloat, about("their time over the recorded steps")]
    algbw_gbps: Annotated[NonNegFloat | None, about("bytes / p50 (GB/s); null without sizes")]
    busbw_gbps: Annotated[
        NonNegFloat | None, about("the bus bandwidth nccl-tests defines, at p50; null without sizes")
    ]
    group: Annotated[
        str | None, about("its process group's description (mesh_tp, default_pg); null where not named")
    ] = None


class Clock(Part):
    method: Annotated[
        str,
        about("reference, one host, sequence numbers, matched collectives, sends and receives or base time"),
    ]
    shift_us: Annotated[float, about("added to the trace's ts to put it on the first rank's clock")]
    pairs: Annotated[NonNegInt, about("all-reduce-like collectives paired to set the clock")]
    residual_us: Annotated[float | None, about("median absolute deviation of the pairs' offsets")]
    max_residual_us: Annotated[
        NonNegFloat | None, about("the largest deviation of a pair's offset from the shift")
    ]
    paired_share: Annotated[
        NonNegFloat | None, about("pairs / all-reduce-like collectives of the shorter trace")
    ]
    uncertainty_us: Annotated[NonNegFloat | None, about("what the shift may be off by (docs/report.md)")]
    note: Annotated[str, about("why a rank kept its base time, or whose clock it shares")]


class TraceClock(Clock):
    trace: Annotated[str, about("the trace this clock is of")]


class CollectiveWait(Part):
    collectives: Annotated[NonNegInt, about("collectives every compared rank reached")]
    wait_ms: Annotated[NonNegFloat, about("waiting for the last rank, per step (ms)")]
    transfer_ms: Annotated[NonNegFloat, about("after the last rank arrived, per step (ms)")]
    waiting_share: Annotated[float | None, about("wait_ms / (wait_ms + transfer_ms); null where both are 0")]
    last_arrivals: Annotated[int, about("in how many this rank arrived last")]


class OpFlops(Part):
    name: Annotated[str, about("the op: aten::mm, aten::addmm, aten::bmm, aten::convolution, ...")]
    gflops_per_step: Annotated[NonNegFloat, about("its FLOPs per step (GFLOP), every call of it")]
    calls_per_step: Annotated[NonNegFloat, about("its calls per step")]


class RankFlops(Part):
    per_step: Annotated[NonNegFloat, about("FLOPs per step of the counted ops, mean over the recorded steps")]
    steps: Annotated[list[NonNegFloat], about("the same for each step of `steps`")]
    tflops_per_s: Annotated[
        NonNegFloat,
        about("each step's FLOPs over its time (GPU span on a GPU, else CPU span), mean (TFLOP/s)"),
    ]
    mfu: Annotated[
        Annotated[float, msgspec.Meta(ge=0, le=1)] | None,
        about("tflops_per_s / peak_tflops; null where no peak is known, or it would pass 1"),
    ]
    mfu_missing: Annotated[str | None, about("why mfu is null (no device in the table, a CPU...)")]
    peak_tflops: Annotated[
        NonNegFloat | None, about("the device's dense peak for dtype (TFLOP/s), or --peak-tflops")
    ]
    peak_source: Annotated[str | None, about("where peak_tflops comes from")]
    dtype: Annotated[str, about("the element type of most FLOPs: fp32, bf16, fp16, fp8...")]
    device_name: Annotated[str | None, about("the GPU's name, as the trace's deviceProperties gives it")]
    ops: Annotated[list[OpFlops], about("by op, the most FLOPs first")]


class RankMemory(Part):
    device: Annotated[str, about('the device of these peaks: "cuda:0" where the traces have one, else "cpu"')]
    peak_allocated_bytes: Annotated[MemoryBytes, about("the most allocated in any recorded step")]
    peak_reserved_bytes: Annotated[
        MemoryBytes | None, about("the most the caching allocator held (null on a CPU)")
    ]
    peak_step: Annotated[NonNegInt, about("the step of peak_allocated_bytes")]
    peak_op: Annotated[str | None, about("the innermost operator running at that peak")]
    steps_peak_bytes: Annotated[list[MemoryBytes | None], about("each step of `steps`: its peak allocated")]
    total_bytes: Annotated[
        MemoryBytes | None, about("the GPU's memory, as the trace's deviceProperties says")
    ]


class RankReport(Part):
    rank: Annotated[NonNegInt, about("the global rank")]
    host: Annotated[str, about("the host its trace names")]
    device: Annotated[str, about('"gpu" if the trace has GPU activity, else "cpu"')]
    trace_files: Annotated[list[str], about("its traces in the folder")]
    steps: Annotated[list[int], about("the ProfilerStep numbers recorded")]
    step_ms: Annotated[list[NonNegFloat], about("each step's CPU span (ms)")]
    step_time_ms: Annotated[StepTime, about("of step_ms")]
    breakdown_ms: Annotated[
        dict[str, float],
        about(
            "mean per step of each part. GPU: compute + communication + memory + other + idle = "
            "gpu.span_ms. CPU: forward + backward + optimizer + communication + other = step_time_ms.mean"
        ),
    ]
    breakdown_steps_ms: Annotated[dict[str, list[float]], about("the same parts for each step")]
    accounted_ms: Annotated[NonNegFloat, about("what the parts add up to")]
    compute_ms: Annotated[NonNegFloat, about("mean of the steps' compute")]
    communication_total_ms: Annotated[NonNegFloat, about("mean of the steps' time in collectives")]
    gpu: Annotated[GpuTime | None, about("null on CPU")]
    kernels: Annotated[Kernels | None, about("null on CPU")]
    collectives: Annotated[list[CollectiveRow], about("by kind, bytes and group size")]
    clock: Annotated[Clock, about("how the rank's (first) trace was put on the first rank's clock")]
    trace_clocks: Annotated[list[TraceClock], about("the same for each of its traces")]
    analysed_by: Annotated[dict[str, str], about('trace -> who read it: "rank 3 on node2 (pid 4242)"')]
    warnings: Annotated[list[str], about("what the analysis of its traces noticed")]
    collective_wait: Annotated[
        CollectiveWait | None, about("null for a rank whose clock could not be paired")
    ]
    memory: Annotated[
        RankMemory | None, about("its peak memory per step; null where its traces hold no [memory] instant")
    ] = None
    flops: Annotated[
        RankFlops | None,
        about("its FLOPs, TFLOP/s and MFU; null where its traces hold no counted op with shapes"),
    ] = None
    mesh: Annotated[
        dict[str, NonNegInt] | None,
        about('its coordinates in the job\'s layout, outermost first: {"dp": 1, "pp": 3, "tp": 0}'),
    ] = None
