"""What one rank's trace says about its steps: step times and where each step's time went.

A step is a ``ProfilerStep#N`` span. Its time is split into forward, backward, optimizer,
communication and other by sweeping over labelled intervals with a priority (compute beats
communication): communication therefore counts only the time in which a collective was in
flight and nothing computed, i.e. the time the rank *waited*, which is what differs between a
straggler and the ranks that wait for it.

- CPU traces: backward = ``autograd::engine::evaluate_function: *`` ops (any thread);
  optimizer = ``Optimizer.*`` annotations; forward = the main thread's top-level ops before
  the step's first backward op; communication = gloo/c10d ops and DDP's bucket copies.
- GPU traces (kernels present): the same split, on the GPU: each kernel is labelled by the CPU
  op that launched it (matched by correlation id), NCCL kernels are communication, and the
  step's kernel busy time (union of kernels) is set against its idle time.
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

PHASES = ("forward", "backward", "optimizer", "communication", "other")
_PRIORITY = {"backward": 0, "forward": 1, "optimizer": 2, "communication": 3}
_COMM_PREFIXES = ("gloo:", "nccl:", "c10d::", "record_param_comms", "torch.distributed.ddp.reducer::")
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
_CPU_CATS = frozenset({"cpu_op", "user_annotation"})


@dataclasses.dataclass(frozen=True)
class StepBreakdown:
    step: int
    start_us: float
    duration_us: float
    phases_us: dict[str, float]  # PHASES -> exclusive time in this step
    gpu_busy_us: float | None  # None on a CPU-only trace


@dataclasses.dataclass(frozen=True)
class RankAnalysis:
    rank: int
    world_size: int | None
    host: str
    base_time_ns: int
    steps: list[StepBreakdown]
    comm_anchor_us: float | None  # end of the first all-reduce of the first step (trace clock)
    comm_total_us: float  # all collective time, overlapped or not

    def mean_phases_ms(self) -> dict[str, float]:
        return (
            {p: statistics.fmean(s.phases_us[p] for s in self.steps) / 1e3 for p in PHASES}
            if self.steps
            else {}
        )

    def step_ms(self) -> list[float]:
        return [s.duration_us / 1e3 for s in self.steps]


def is_comm(name: str) -> bool:
    return name.startswith(_COMM_PREFIXES) or "nccl" in name.lower()


def analyse(trace: dict[str, Any]) -> RankAnalysis:
    """Analyse one parsed Chrome trace written by torch.profiler."""
    info = trace.get("distributedInfo") or {}
    steps: list[tuple[int, float, float, Any]] = []  # (number, start, end, tid)
    cpu: list[tuple[float, float, Any, str]] = []  # (start, end, tid, name) of cpu ops and annotations
    kernels: list[tuple[float, float, Any, str]] = []  # (start, end, correlation, name)
    launches: dict[Any, tuple[float, Any]] = {}  # correlation -> (ts, tid) of the launching runtime call
    for event in trace.get("traceEvents", ()):
        if event.get("ph") != "X":
            continue
        cat, name = event.get("cat"), event.get("name", "")
        start = event["ts"]
        end = start + event.get("dur", 0)
        if cat in _CPU_CATS:
            if name.startswith("ProfilerStep#"):
                steps.append((int(name[13:]), start, end, event.get("tid")))
            else:
                cpu.append((start, end, event.get("tid"), name))
        elif cat in _GPU_CATS:
            kernels.append((start, end, (event.get("args") or {}).get("correlation"), name))
        elif cat in _LAUNCH_CATS:
            correlation = (event.get("args") or {}).get("correlation")
            if correlation is not None:
                launches[correlation] = (start, event.get("tid"))
    steps.sort(key=lambda step: step[0])
    # By start, enclosing spans before the spans they enclose.
    cpu.sort(key=lambda op: (op[0], -op[1]))
    kernels.sort(key=lambda kernel: (kernel[0], -kernel[1]))
    main_tid = steps[0][3] if steps else None
    breakdowns = [
        _step_breakdown(number, start, end, main_tid, cpu, kernels, launches)
        for number, start, end, _ in steps
    ]
    return RankAnalysis(
        rank=int(info.get("rank", 0)),
        world_size=info.get("world_size"),
        host=str(trace.get("host_name", "")),
        base_time_ns=int(trace.get("baseTimeNanoseconds", 0)),
        steps=breakdowns,
        comm_anchor_us=_comm_anchor(steps[0] if steps else None, cpu, kernels),
        comm_total_us=_comm_total(cpu, kernels),
    )


def _within(items: Sequence[tuple[float, float, Any, str]], start: float, end: float) -> Iterable[tuple]:
    """Items (sorted by start) that start inside [start, end)."""
    for index in range(bisect.bisect_left(items, (start,)), len(items)):
        item = items[index]
        if item[0] >= end:
            break
        yield item


def _step_breakdown(
    number: int,
    start: float,
    end: float,
    main_tid: Any,
    cpu: Sequence[tuple[float, float, Any, str]],
    kernels: Sequence[tuple[float, float, Any, str]],
    launches: dict[Any, tuple[float, Any]],
) -> StepBreakdown:
    ops = list(_within(cpu, start, end))
    backward = [(s, e) for s, e, _, n in ops if n.startswith("autograd::engine::evaluate_function")]
    optimizer = [(s, e) for s, e, _, n in ops if n.startswith("Optimizer.")]
    first_backward = min((s for s, _ in backward), default=end)
    forward = [
        (s, e)
        for s, e, tid, n in _top_level(op for op in ops if op[2] == main_tid)
        if s < first_backward and not n.startswith("Optimizer.") and not is_comm(n)
    ]
    if kernels:
        labelled = _label_kernels(start, end, kernels, launches, backward, optimizer, first_backward)
        busy = _union_length([(s, e) for s, e, _ in labelled])
        phases = _exclusive(labelled)
        # On the GPU, "other" is whatever part of the step no kernel covered.
        phases["other"] = max(0.0, (end - start) - busy)
        return StepBreakdown(number, start, end - start, phases, busy)
    comm = [(s, e) for s, e, _, n in _within(cpu, start - (end - start), end) if is_comm(n) and e > start]
    labelled = (
        [(s, e, "backward") for s, e in backward]
        + [(s, e, "forward") for s, e in forward]
        + [(s, e, "optimizer") for s, e in optimizer]
        + [(max(s, start), min(e, end), "communication") for s, e in comm]
    )
    phases = _exclusive(labelled)
    phases["other"] = max(0.0, (end - start) - sum(phases.values()))
    return StepBreakdown(number, start, end - start, phases, None)


def _label_kernels(
    start, end, kernels, launches, backward, optimizer, first_backward
) -> list[tuple[float, float, str]]:
    labelled = []
    for k_start, k_end, correlation, name in kernels:
        launch = launches.get(correlation)
        if launch is None or not start <= launch[0] < end:
            continue
        at = launch[0]
        if "nccl" in name.lower():
            label = "communication"
        elif any(s <= at < e for s, e in optimizer):
            label = "optimizer"
        elif any(s <= at < e for s, e in backward) or at >= first_backward:
            label = "backward"
        else:
            label = "forward"
        labelled.append((k_start, k_end, label))
    return labelled


def _top_level(ops: Iterable[tuple[float, float, Any, str]]) -> list[tuple[float, float, Any, str]]:
    """Ops (sorted by start, enclosing first) not nested inside an earlier one."""
    top, reach = [], float("-inf")
    for op in ops:
        if op[0] >= reach:
            top.append(op)
            reach = op[1]
        elif op[1] > reach:  # overlaps without nesting (another thread's clock skew): extend
            reach = op[1]
    return top


def _exclusive(labelled: Sequence[tuple[float, float, str]]) -> dict[str, float]:
    """Time covered by each label, where overlaps go to the label of highest priority."""
    totals = {phase: 0.0 for phase in _PRIORITY}
    points = sorted(
        [(s, 1, label) for s, e, label in labelled if e > s]
        + [(e, -1, label) for s, e, label in labelled if e > s]
    )
    active = {phase: 0 for phase in _PRIORITY}
    previous = None
    for time, change, label in points:
        if previous is not None and time > previous:
            winner = min((p for p, n in active.items() if n), key=_PRIORITY.__getitem__, default=None)
            if winner:
                totals[winner] += time - previous
        active[label] += change
        previous = time
    return totals


def _union_length(intervals: Sequence[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= reach:
            continue
        total += e - max(s, reach)
        reach = e
    return total


def _comm_anchor(first_step, cpu, kernels) -> float | None:
    """End of the step's first all-reduce: every rank leaves it at nearly the same instant."""
    if first_step is None:
        return None
    _, start, end, _ = first_step
    candidates = [
        (s, e, n) for s, e, _, n in _within(kernels, start, end + (end - start)) if "nccl" in n.lower()
    ]
    if not candidates:
        candidates = [
            (s, e, n) for s, e, _, n in _within(cpu, start, end) if n.startswith(("gloo:", "nccl:"))
        ]
    reduces = [c for c in candidates if "reduce" in c[2].lower()] or candidates
    return min(reduces, key=lambda c: c[0])[1] if reduces else None


def _comm_total(cpu, kernels) -> float:
    if kernels:
        return sum(e - s for s, e, _, n in kernels if "nccl" in n.lower())
    return _union_length([(s, e) for s, e, _, n in cpu if n.startswith(("gloo:", "nccl:"))])
