"""Where one rank's steps spent their time, from its trace.

A step is a ``ProfilerStep#N`` span on the CPU. What happened in it is told two ways:

**GPU traces** (any kernel, memcpy or memset, CUDA or HIP). Each GPU activity belongs to the
step whose CPU span launched it (its ``correlation`` id leads to the runtime call, whose time
falls inside ``ProfilerStep#N``). Which activities count is HTA's rule (``Trace.
_filter_irrelevant_gpu_kernels``, last step included): in a trace of several steps, those whose
launch the trace holds, up to the last step's end; in a trace of one step, all of them. One
counted whose launch lies in no step (before the first, between two; or none, in a trace of one
step) belongs to the step whose CPU span it started in, else the last begun before it, else the
first. ``RankAnalysis.unlaunched`` says how many had no launch. Kernels launched in step N run
partly after that CPU span ends, so the step's *GPU span* runs from the start of its first
activity to the start of the next step's first activity (the last step: to the end of its
last activity), and every counted activity running inside it counts, whichever step launched
it. Within the span, with HTA's meaning of the words (``hta.utils.utils.get_kernel_type``):

- ``compute``: time some compute kernel ran;
- ``communication``: time an NCCL/RCCL kernel ran and no compute kernel did (exposed);
  ``communication_overlapped`` is the time it ran alongside compute (not a part of the sum);
- ``memory``: memcpy/memset with neither of the above;
- ``other``: kernels HTA calls OTHER (``...Sync``, ...) and nothing above;
- ``idle``: nothing ran on the GPU.

These five are disjoint: they add up to the GPU span. ``compute`` is split by the CPU phase that
launched the kernel: ``optimizer`` (in ``Optimizer.*``), ``backward`` (in a backward operator,
or after the first), else ``forward``. Each step's *lane* (:mod:`.lanes`) comes too.

**CPU traces** (no GPU activity): the CPU span is split into ``forward`` (the main thread's
top-level operators before the step's first backward operator), ``backward``
(``autograd::engine::evaluate_function: *``), ``optimizer`` (``Optimizer.*``),
``communication`` (gloo/c10d operators and DDP's bucket copies, counted only while nothing
above ran: the time the rank *waited*) and ``other`` (the rest); overlaps go to the first of
that list, so the five add up to the CPU span.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from profiling.analysis.per_trace import intervals
from profiling.analysis.per_trace.gpu_steps import GpuStep, gpu_steps
from profiling.analysis.per_trace.idle import IdleCauses
from profiling.analysis.per_trace.intervals import Intervals
from profiling.analysis.per_trace.lanes import PHASES as COMPUTE_PHASES
from profiling.analysis.per_trace.lanes import Names, StepLane, cpu_lane, gpu_lanes
from profiling.analysis.per_trace.launches import idle_of_counted, launch_times, steps_of
from profiling.analysis.per_trace.stream_waits import stream_waits
from profiling.analysis.reading.collectives import Collective, is_cpu_communication
from profiling.analysis.reading.trace_columns import STEP_PREFIX, TraceEvents

CPU_PARTS = ("forward", "backward", "optimizer", "communication", "other")
GPU_PARTS = ("compute", "communication", "memory", "other", "idle")

_BACKWARD_PREFIX = "autograd::engine::evaluate_function"
_OPTIMIZER_PREFIX = "Optimizer."


@dataclasses.dataclass(frozen=True)
class StepBreakdown:
    step: int
    start_us: float  # the CPU span (trace clock)
    duration_us: float
    parts_us: dict[str, float]  # CPU_PARTS (adds up to duration_us) or GPU_PARTS (to gpu.duration_us)
    collectives_us: float  # time any collective ran in the step, overlapped or not
    gpu: GpuStep | None

    @property
    def accounted_us(self) -> float:
        """What the parts add up to: the GPU span on GPU traces, the CPU span otherwise."""
        return self.gpu.duration_us if self.gpu else self.duration_us

    @property
    def compute_us(self) -> float:
        """Time spent computing: GPU ``compute``; on the CPU, ``forward + backward + optimizer``."""
        if self.gpu:
            return self.parts_us["compute"]
        return sum(self.parts_us[phase] for phase in COMPUTE_PHASES)


@dataclasses.dataclass(frozen=True)
class RankAnalysis:
    rank: int | None  # None: the trace says none, and its name gives none
    world_size: int | None
    host: str
    base_time_ns: int | None
    device: str  # "gpu" or "cpu"
    steps: list[StepBreakdown]
    collectives: list[Collective]
    warnings: tuple[str, ...] = ()
    unlaunched: int = 0  # GPU activities whose launch the trace does not hold, counted where they ran
    idle: IdleCauses | None = None  # the GPU streams' idle time by cause (GPU traces)
    lanes: list[StepLane] = dataclasses.field(default_factory=list)  # each step's (critical path)
    lane_names: list[str] = dataclasses.field(default_factory=list)  # the lanes' names by code

    @property
    def parts(self) -> tuple[str, ...]:
        return GPU_PARTS if self.device == "gpu" else CPU_PARTS


def analyse(trace: TraceEvents, *, rank_from_name: int | None = None) -> RankAnalysis:
    """Analyse one trace; ``rank_from_name`` is the rank its file name gives (used if the trace
    has none; the rank is None where neither gives one)."""
    info = trace.distributed_info
    warnings = []
    rank: int | None = None
    if "rank" in info:
        rank = int(info["rank"])
    elif rank_from_name is not None:
        rank = rank_from_name
        warnings.append(f"the trace has no distributedInfo: rank {rank} is taken from its file name")
    steps = trace.steps()
    if not steps:
        warnings.append(f"the trace has no {STEP_PREFIX}N span: nothing to break down")
    gpu = len(trace.gpu_start) > 0
    launched_at = launch_times(trace)
    step_of = steps_of(trace, steps, launched_at)  # -1: not counted (HTA's rule)
    ops = _CpuOps(trace)
    names = Names()
    if gpu:
        phase = _compute_phase(ops, steps, launched_at, step_of)
        breakdowns = [
            StepBreakdown(number, start, end - start, parts, communication_us, gpu)
            for (number, start, end, _), (parts, communication_us, gpu) in zip(
                steps, gpu_steps(trace, steps, step_of, phase), strict=True
            )
        ]
        spans = [(b.step, (b.gpu.start_us, b.gpu.start_us + b.gpu.duration_us)) for b in breakdowns if b.gpu]
        lanes = gpu_lanes(
            trace, spans, step_of >= 0, launched_at, phase, names, stream_waits(trace, launched_at)
        )
    else:
        breakdowns = _cpu_steps(ops, steps)
        lanes = [
            cpu_lane(trace, number, (start, end), thread, ops.phases(start, end), names)
            for number, start, end, thread in steps
        ]
    return RankAnalysis(
        rank=rank,
        world_size=info.get("world_size"),
        host=trace.host,
        base_time_ns=trace.base_time_ns,
        device="gpu" if gpu else "cpu",
        steps=breakdowns,
        collectives=_with_steps(trace, steps),
        warnings=tuple(warnings),
        unlaunched=int(np.isnan(launched_at).sum()),
        idle=idle_of_counted(trace, launched_at, step_of >= 0 if steps else None) if gpu else None,
        lanes=lanes,
        lane_names=names.text,
    )


class _CpuOps:
    """The trace's CPU operators (steps excluded) sorted by start, enclosing before enclosed."""

    def __init__(self, trace: TraceEvents) -> None:
        names = trace.names
        step = np.array([n.startswith(STEP_PREFIX) for n in names], dtype=bool)
        keep = ~step[trace.cpu_name] if len(names) else np.zeros(0, dtype=bool)
        order = np.lexsort((-trace.cpu_end[keep], trace.cpu_start[keep]))
        self.start = trace.cpu_start[keep][order]
        self.end = trace.cpu_end[keep][order]
        self.tid = trace.cpu_tid[keep][order]
        name = trace.cpu_name[keep][order]
        self.backward = np.array([n.startswith(_BACKWARD_PREFIX) for n in names], dtype=bool)[name]
        self.optimizer = np.array([n.startswith(_OPTIMIZER_PREFIX) for n in names], dtype=bool)[name]
        self.comm = np.array([is_cpu_communication(n) for n in names], dtype=bool)[name]

    def starting_in(self, low: float, high: float) -> slice:
        return slice(np.searchsorted(self.start, low, "left"), np.searchsorted(self.start, high, "left"))

    def phases(self, start: float, end: float) -> _StepPhases:
        """The backward and optimizer phases of the step running from ``start`` to ``end``."""
        inside = self.starting_in(start, end)
        s, e = self.start[inside], self.end[inside]
        backward, optimizer = self.backward[inside], self.optimizer[inside]
        return _StepPhases(
            inside=inside,
            backward=intervals.union(s[backward], e[backward]),
            optimizer=intervals.union(s[optimizer], e[optimizer]),
            first_backward=float(s[backward].min()) if backward.any() else end,
        )


@dataclasses.dataclass  # not frozen: lanes.StepPhases, a protocol of plain attributes, takes it
class _StepPhases:
    inside: slice  # the step's operators, in _CpuOps' order
    backward: Intervals  # time inside a backward operator
    optimizer: Intervals  # time inside Optimizer.*
    first_backward: float  # when the first backward operator started (the step's end if none)


def _cpu_steps(ops: _CpuOps, steps: list[tuple[int, float, float, int]]) -> list[StepBreakdown]:
    main_tid = steps[0][3] if steps else -1
    found = []
    for number, start, end, _ in steps:
        phases = ops.phases(start, end)
        inside = phases.inside
        s, e, tid = ops.start[inside], ops.end[inside], ops.tid[inside]
        main = tid == main_tid
        top = _top_level(s[main], e[main])
        forward = main.copy()
        forward[main] = top
        forward &= (s < phases.first_backward) & ~ops.optimizer[inside] & ~ops.comm[inside]
        # collectives in flight during the step, also those started before it
        around = ops.starting_in(start - (end - start), end)
        comm = ops.comm[around] & (ops.end[around] > start)
        comm_set = intervals.clip(intervals.union(ops.start[around][comm], ops.end[around][comm]), start, end)
        parts = intervals.exclusive(
            [
                ("backward", phases.backward),
                ("forward", intervals.union(s[forward], e[forward])),
                ("optimizer", phases.optimizer),
                ("communication", comm_set),
            ]
        )
        parts["other"] = max(0.0, (end - start) - sum(parts.values()))
        found.append(StepBreakdown(number, start, end - start, parts, intervals.length(comm_set), None))
    return found


def _top_level(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which ops (sorted by start, enclosing first) are not nested in an earlier one."""
    if not len(starts):
        return np.zeros(0, dtype=bool)
    reach = np.maximum.accumulate(ends)
    top = np.empty(len(starts), dtype=bool)
    top[0] = True
    top[1:] = starts[1:] >= reach[:-1]
    return top


def _with_steps(trace: TraceEvents, steps: list[tuple[int, float, float, int]]) -> list[Collective]:
    """The trace's collectives, each with the step that issued it: the step whose CPU span holds
    a kernel's launch, or a CPU operator's start. Every rank issues a collective in the same
    step, so the step tells apart collectives that nothing else does."""
    collectives = trace.collectives
    if not steps or not collectives:
        return collectives
    launches = launch_times(
        trace, np.array([c.correlation if c.gpu and c.correlation is not None else -1 for c in collectives])
    )
    issued = np.where([c.gpu for c in collectives], launches, [c.start for c in collectives])
    starts, ends = np.array([s[1] for s in steps]), np.array([s[2] for s in steps])
    index = np.searchsorted(starts, issued, side="right") - 1
    inside = (index >= 0) & (issued < ends[np.maximum(index, 0)])
    return [
        c.issued_in(steps[k][0]) if ok else c
        for c, k, ok in zip(collectives, index.tolist(), inside.tolist(), strict=True)
    ]


def _compute_phase(
    ops: _CpuOps, steps: list[tuple[int, float, float, int]], launched_at: np.ndarray, step_of: np.ndarray
) -> np.ndarray:
    """The code (index in COMPUTE_PHASES) of the CPU phase that launched each GPU activity (-1: none)."""
    phase = np.full(len(launched_at), -1, dtype=np.int8)
    for index, (_, start, end, _) in enumerate(steps):
        phases = ops.phases(start, end)
        mine = step_of == index
        at = launched_at[mine]
        in_optimizer = _covered(at, phases.optimizer)
        in_backward = _covered(at, phases.backward) | (at >= phases.first_backward)
        phase[mine] = np.where(
            in_optimizer,
            COMPUTE_PHASES.index("optimizer"),
            np.where(in_backward, COMPUTE_PHASES.index("backward"), COMPUTE_PHASES.index("forward")),
        )
    return phase


def _covered(points: np.ndarray, spans: Intervals) -> np.ndarray:
    """Which points lie inside a disjoint set of spans."""
    starts, ends = spans
    if not len(starts):
        return np.zeros(len(points), dtype=bool)
    index = np.searchsorted(starts, points, side="right") - 1
    return (index >= 0) & (points < ends[np.maximum(index, 0)])
