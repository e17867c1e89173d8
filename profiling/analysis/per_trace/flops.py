"""A trace's FLOPs by step and by operator, from the counted operators its reader kept
(:mod:`profiling.analysis.reading.op_flops`, which says what is counted and how)."""

from __future__ import annotations

import bisect

import msgspec

from profiling.analysis.reading.op_flops import CountedOp


class OpFlops(msgspec.Struct, frozen=True):
    name: str
    flops: int  # over the trace's steps
    calls: int


class FlopCount(msgspec.Struct, frozen=True):
    """What a trace's counted ops did in its steps."""

    per_step: dict[int, int]  # step -> FLOPs of the counted ops that started in its CPU span
    ops: list[OpFlops]  # by op, the most FLOPs first
    dtype: str  # the element type of most of the FLOPs: fp32, bf16, fp16, fp8, ...
    device_name: str | None  # the GPU's, as the trace's deviceProperties names it


def count_flops(
    ops: list[CountedOp], steps: list[tuple[int, float, float]], device_name: str | None
) -> FlopCount | None:
    """The counted ``ops`` (sorted by start) by the step (number, start, end) whose span holds
    their start; None where no step holds one."""
    per_step: dict[int, int] = {}
    by_op: dict[str, list[int]] = {}
    by_dtype: dict[str, int] = {}
    starts = [op.start for op in ops]
    for number, start, end in steps:
        first, last = bisect.bisect_left(starts, start), bisect.bisect_left(starts, end)
        per_step[number] = sum(op.flops for op in ops[first:last])
        for op in ops[first:last]:
            found = by_op.setdefault(op.name, [0, 0])
            found[0] += op.flops
            found[1] += 1
            by_dtype[op.dtype] = by_dtype.get(op.dtype, 0) + op.flops
    if not by_op:
        return None
    return FlopCount(
        per_step=per_step,
        ops=sorted(
            (OpFlops(name, f, calls) for name, (f, calls) in by_op.items()), key=lambda o: (-o.flops, o.name)
        ),
        dtype=max(by_dtype, key=lambda t: (by_dtype[t], t)),
        device_name=device_name,
    )
