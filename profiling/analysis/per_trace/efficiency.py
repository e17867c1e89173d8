"""Each rank's peak memory (report.json's ``ranks[].memory``, from its records' steps:
:mod:`profiling.analysis.per_trace.memory`), and its FLOPs, TFLOP/s and MFU (``ranks[].flops``), from the
FLOPs its records counted (:mod:`profiling.analysis.per_trace.flops`) and the peak of its device
(:mod:`profiling.analysis.per_trace.peaks`, or ``--peak-tflops``)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from profiling.analysis.per_trace.breakdown import StepBreakdown
from profiling.analysis.per_trace.peaks import FASTEST_TFLOPS, peak_of
from profiling.analysis.per_trace.record import TraceRecord
from profiling.schema import model_ranks


def rank_flops(
    records: Sequence[TraceRecord], steps: Sequence[StepBreakdown], peak_tflops: float | None = None
) -> tuple[model_ranks.RankFlops | None, list[str]]:
    """The rank's FLOPs per step and what they make of its device; None where no record
    counted an op (a trace without shapes, or of ops the count does not know), or where the
    rate is beyond any device (twice its peak): then a line says so."""
    counts = [r.flops for r in records if r.flops is not None]
    if not counts or not steps:
        return None, []
    per_step = {step: flops for count in counts for step, flops in count.per_step.items()}
    flops = [float(per_step.get(s.step, 0)) for s in steps]
    seconds = [(s.gpu.duration_us if s.gpu else s.duration_us) / 1e6 for s in steps]
    rates = [f / t / 1e12 for f, t in zip(flops, seconds, strict=True) if t > 0]
    tflops = statistics.fmean(rates) if rates else 0.0
    totals: dict[str, list[float]] = {}
    for count in counts:
        for op in count.ops:
            found = totals.setdefault(op.name, [0.0, 0.0])
            found[0] += op.flops
            found[1] += op.calls
    dtype = counts[0].dtype
    device = next((c.device_name for c in counts if c.device_name), None)
    peak, source, missing = _peak(device, dtype, peak_tflops, gpu=any(r.device == "gpu" for r in records))
    beyond = _beyond_device(tflops, peak, source)
    if beyond:
        return None, [beyond]
    mfu = tflops / peak if peak else None
    if mfu is not None and mfu > 1:  # the FLOPs are counted from shapes: the peak or the clock is off
        missing = (
            f"{tflops:.1f} TFLOP/s is {mfu:.2f}x the {peak:g} TFLOP/s peak ({source}): the peak or the "
            "steps' clock is wrong, not the FLOPs. HINT: check --peak-tflops against the device"
        )
        mfu = None
    return model_ranks.RankFlops(
        per_step=statistics.fmean(flops),
        steps=flops,
        tflops_per_s=tflops,
        mfu=mfu,
        mfu_missing=missing,
        peak_tflops=peak,
        peak_source=source,
        dtype=dtype,
        device_name=device,
        ops=[
            model_ranks.OpFlops(
                name=name, gflops_per_step=f / len(steps) / 1e9, calls_per_step=calls / len(steps)
            )
            for name, (f, calls) in sorted(totals.items(), key=lambda item: (-item[1][0], item[0]))
        ],
    ), []


def _beyond_device(tflops: float, peak: float | None, source: str | None) -> str | None:
    """A rate no device reaches: twice its peak (or, with none known, twice the fastest in the
    table), in a line; None for a rate a device can have."""
    bound = 2 * (peak if peak else FASTEST_TFLOPS)
    if tflops <= bound:
        return None
    against = f"twice the {peak:g} TFLOP/s peak ({source})" if peak else "twice any device's peak"
    return (
        f"its counted FLOPs make {tflops:.3g} TFLOP/s, beyond {against}: the traces' shapes or step "
        "times are wrong, and the FLOPs are left out"
    )


def rank_memory(
    records: Sequence[TraceRecord], steps: Sequence[StepBreakdown]
) -> model_ranks.RankMemory | None:
    """The rank's peak memory: on its GPU where its traces recorded one, else on the CPU."""
    found = [m for r in records for m in r.memory]
    if not found or not steps:
        return None
    gpus = sorted({m.device for m in found if m.device != "cpu"})
    device = gpus[0] if gpus else "cpu"
    mine = {m.step: m for m in found if m.device == device}
    top = max(mine.values(), key=lambda m: (m.peak_allocated, -m.step))
    reserved = [m.peak_reserved for m in mine.values() if m.peak_reserved is not None]
    return model_ranks.RankMemory(
        device=device,
        peak_allocated_bytes=top.peak_allocated,
        peak_reserved_bytes=max(reserved) if reserved else None,
        peak_step=top.step,
        peak_op=top.peak_op,
        steps_peak_bytes=[mine[s.step].peak_allocated if s.step in mine else None for s in steps],
        total_bytes=next((r.device_memory_bytes for r in records if r.device_memory_bytes), None)
        if device != "cpu"
        else None,
    )


def _peak(
    device: str | None, dtype: str, given: float | None, *, gpu: bool
) -> tuple[float | None, str | None, str | None]:
    """(peak TFLOP/s, its source, why there is none)."""
    if given is not None:
        return given, "--peak-tflops", None
    if device is None and gpu:
        return None, None, "the trace names no GPU (it has kernels, no deviceProperties): pass --peak-tflops"
    if device is None:
        return None, None, "no GPU in the trace (a CPU's peak is not in the table): pass --peak-tflops"
    row = peak_of(device)
    if row is None:
        return (
            None,
            None,
            f"{device} is not in the peaks table (profiling/analysis/per_trace/peaks.py): pass --peak-tflops",
        )
    if dtype not in row.tflops:
        return None, None, f"the table has no {dtype} peak for the {row.device}: pass --peak-tflops"
    return row.tflops[dtype], row.source, None
