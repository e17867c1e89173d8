"""Each recorded step's *lane* on one rank: what the rank was doing at each instant of its step,
the material the critical path walks (:mod:`.critical_path`), made in the same read of the trace
as the rest of its record. Neighbouring stretches of one kind are one span, named by its longest.

GPU traces: over the step's GPU span, the GPU's activity by kind, one kind at a time, in the
order compute, memory, communication, other (communication under compute was hidden by it).
Where no stream had anything, the GPU was idle: ``host`` where the next activity was launched
after the GPU ran dry (it waited for the host), else ``other``. With the waits between streams
the trace ties (:mod:`.stream_waits`).

CPU traces: over the step's CPU span, the innermost operator on the step's thread (annotations
are labels, not work): ``communication`` for a collective's, ``compute`` for any other; time in
no operator is the host's, named by the Python function it was in where the trace has them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec
import numpy as np

from profiling.analysis.per_trace import intervals
from profiling.analysis.per_trace.kernels import KERNEL_TYPES, hta_kernel_type
from profiling.analysis.per_trace.stream_waits import NO_WAITS, waits_within
from profiling.analysis.reading.collectives import is_cpu_communication
from profiling.analysis.reading.trace_columns import ANALYSED, OTHER_CPU, TraceEvents

KINDS = ("compute", "communication", "memory", "host", "other")
PHASES = ("forward", "backward", "optimizer")  # of compute, where the trace says
EPSILON_US = 1e-6  # µs: times closer than this are one instant
_GPU_ORDER = ("compute", "memory", "communication", "other")  # KERNEL_TYPES, first claim first
_NO_OPERATOR = "Python, outside torch's operators"
_NAMED_HOST_US = 1000.0
_IDLE = "GPU idle: its queued work waited on another stream or event"


class Lane:
    """A rank's lane in one step: sorted, disjoint spans as parallel arrays (a dense GPU step
    has thousands; the walk reads the stretches it goes through)."""

    def __init__(
        self,
        starts: np.ndarray,
        ends: np.ndarray,
        kinds: np.ndarray,
        names: np.ndarray,
        phases: np.ndarray,
        text: Sequence[str],
        waits: np.ndarray | None = None,
    ) -> None:
        self.starts, self.ends = starts, ends
        self.kinds, self.names, self.phases, self.text = kinds, names, phases, text
        self._text: np.ndarray | None = None
        # (end of the activity waited for, start of the one that waited): .stream_waits, by end
        self.waits = np.zeros((0, 2)) if waits is None else waits

    def text_of(self, codes: np.ndarray) -> np.ndarray:
        """The names of ``codes``, as an array of str objects."""
        if self._text is None:
            self._text = np.array(self.text, dtype=object)
        return self._text[codes]

    def __len__(self) -> int:
        return len(self.starts)

    def kind_before(self, at: float) -> str | None:
        """What the lane shows just before ``at``."""
        index = int(np.searchsorted(self.ends, at - EPSILON_US, side="left"))
        if index < len(self) and self.starts[index] < at:
            return KINDS[self.kinds[index]]
        return None

    def kinds_before(self, at: np.ndarray) -> np.ndarray:
        """:meth:`kind_before` at each of ``at``, as indices in KINDS; -1 for none."""
        if not len(self):
            return np.full(len(at), -1, dtype=np.int8)
        index = self.ends.searchsorted(at - EPSILON_US, side="left")
        inside = np.minimum(index, len(self) - 1)
        shown = (index < len(self)) & (self.starts[inside] < at)
        return np.where(shown, self.kinds[inside], -1)


class StepLane(msgspec.Struct, array_like=True, frozen=True):
    """One step's lane: spans sorted and disjoint, as the bytes of parallel arrays (a dense
    GPU step has thousands of spans: as JSON lists of numbers its record took 0.05 s to decode,
    as base64 a tenth of that)."""

    step: int
    start_us: float  # the step on this lane: its GPU span on GPU traces, else its CPU span
    end_us: float
    starts: bytes  # float64
    ends: bytes  # float64
    kinds: bytes  # int8: index in KINDS
    names: bytes  # int32: index in the record's lane_names
    phases: bytes  # int8: index in PHASES; -1 where the trace does not say
    waits: bytes = b""  # float64 pairs: Lane.waits of the waits whose waiting activity is in the step

    def lane(self, shift_us: float, text: Sequence[str]) -> Lane:
        """Its spans moved by ``shift_us`` (onto the first rank's clock)."""
        return Lane(
            np.frombuffer(self.starts, dtype=np.float64) + shift_us,
            np.frombuffer(self.ends, dtype=np.float64) + shift_us,
            np.frombuffer(self.kinds, dtype=np.int8),
            np.frombuffer(self.names, dtype=np.int32),
            np.frombuffer(self.phases, dtype=np.int8),
            text,
            np.frombuffer(self.waits, dtype=np.float64).reshape(-1, 2) + shift_us,
        )


class StepPhases(Protocol):
    """A step's phases (:meth:`profiling.analysis.per_trace.breakdown._CpuOps.phases`)."""

    backward: intervals.Intervals  # time inside a backward operator
    optimizer: intervals.Intervals  # time inside Optimizer.*
    first_backward: float  # when the first backward operator started


class Names:
    """The text of the lanes' names, each kept once."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self._code: dict[str, int] = {}

    def code(self, name: str) -> int:
        found = self._code.get(name)
        if found is None:
            found = self._code[name] = len(self.text)
            self.text.append(name)
        return found

    def codes(self, text: Sequence[str], coded: np.ndarray) -> np.ndarray:
        """The codes of ``text[c]`` for each ``c`` in ``coded``: each name looked up once, not
        once per span (a dense step has thousands)."""
        distinct, each = np.unique(coded, return_inverse=True)
        return np.array([self.code(text[c]) for c in distinct.tolist()], dtype=np.int64)[each]


def gpu_lanes(
    trace: TraceEvents,
    steps: list[tuple[int, tuple[float, float]]],
    counted: np.ndarray,
    launched_at: np.ndarray,
    phase: np.ndarray,
    names: Names,
    waits: tuple[np.ndarray, np.ndarray] = NO_WAITS,
) -> list[StepLane]:
    """The lane of each step (its number, its GPU span); ``counted``: the GPU activities of the
    trace's steps, ``phase`` each one's (-1: none); ``waits``: :func:`.stream_waits.stream_waits`."""
    kind_of_name = np.array([KERNEL_TYPES.index(hta_kernel_type(n)) for n in trace.names], dtype=np.int8)
    kinds = kind_of_name[trace.gpu_name] if len(trace.names) else np.zeros(0, dtype=np.int8)
    order = np.flatnonzero(counted)
    order = order[np.argsort(trace.gpu_start[order], kind="stable")]
    return [
        msgspec.structs.replace(
            _gpu_lane(trace, number, window, counted, kinds, order, launched_at, phase, names),
            waits=waits_within(waits, window),
        )
        for number, window in steps
    ]


def _gpu_lane(
    trace: TraceEvents,
    number: int,
    window: tuple[float, float],
    counted: np.ndarray,
    kinds: np.ndarray,
    by_start: np.ndarray,
    launched_at: np.ndarray,
    phase: np.ndarray,
    names: Names,
) -> StepLane:
    low, high = window
    index = np.flatnonzero(counted & (trace.gpu_end > low) & (trace.gpu_start < high))
    start = np.maximum(trace.gpu_start[index], low)
    end = np.minimum(trace.gpu_end[index], high)
    kind = kinds[index]
    pieces: list[tuple[np.ndarray, ...]] = []
    covered = intervals.EMPTY
    for kind_name in _GPU_ORDER:
        mine = kind == KERNEL_TYPES.index(kind_name)
        groups = _groups(start[mine], end[mine], index[mine])
        if groups is None:
            continue
        group_start, group_end, longest = groups
        left = intervals.subtract((group_start, group_end), covered)
        owner = np.searchsorted(group_start, left[0], side="right") - 1
        activity = longest[owner]
        pieces.append(
            (
                left[0],
                left[1],
                np.full(len(owner), KINDS.index(kind_name)),
                names.codes(trace.names, trace.gpu_name[activity]),
                phase[activity].astype(np.int64) if kind_name == "compute" else np.full(len(owner), -1),
            )
        )
        covered = intervals.combine(covered, (group_start, group_end))
    pieces.append(_idle(trace, covered, window, by_start, launched_at, names))
    return _lane(number, window, pieces)


def cpu_lane(
    trace: TraceEvents,
    number: int,
    window: tuple[float, float],
    thread: int,
    phases: StepPhases,
    names: Names,
) -> StepLane:
    """The lane of the step ``number`` over its CPU span ``window`` on its ``thread``."""
    low, high = window
    near = (trace.span_thread == thread) & (trace.span_end > low) & (trace.span_start < high)
    operators = np.flatnonzero(near & (trace.span_kind == ANALYSED))
    order = operators[np.lexsort((-trace.span_end[operators], trace.span_start[operators]))]
    text = trace.names
    pieces: list[tuple[float, float, int, int, int]] = []
    stack: list[tuple[float, int]] = []  # (end, name) of the operators open at t, innermost last
    t = low

    def emit(until: float) -> None:  # the innermost operator's, from t to ``until``
        if until > t and stack:
            name = text[stack[-1][1]]
            kind = "communication" if is_cpu_communication(name) else "compute"
            at = _phase_at(phases, t) if kind == "compute" else -1
            pieces.append((t, until, KINDS.index(kind), names.code(name), at))

    for begin, finish, name in zip(
        np.maximum(trace.span_start[order], low).tolist(),
        np.minimum(trace.span_end[order], high).tolist(),
        trace.span_name[order].tolist(),
        strict=True,
    ):
        while stack and stack[-1][0] <= begin:
            emit(stack[-1][0])
            t = max(t, stack.pop()[0])
        emit(begin)
        t = max(t, begin)
        stack.append((finish, name))
    while stack:
        emit(stack[-1][0])
        t = max(t, stack.pop()[0])
    busy = intervals.union(trace.span_start[operators], trace.span_end[operators])
    gaps = intervals.subtract((np.array([low]), np.array([high])), busy)
    python = np.flatnonzero(near & (trace.span_kind == OTHER_CPU))
    for gap_start, gap_end in zip(*gaps, strict=True):
        name = _python_function(trace, python, gap_start, gap_end)
        pieces.append((gap_start, gap_end, KINDS.index("host"), names.code(name), -1))
    columns = [np.array(column) for column in zip(*pieces, strict=True)] if pieces else [np.empty(0)] * 5
    return _lane(number, window, [tuple(columns)])


def _python_function(trace: TraceEvents, python: np.ndarray, low: float, high: float) -> str:
    """The innermost Python function (of the spans ``python``) the thread was in all along from
    ``low`` to ``high``; looked for in stretches of 1 ms or more, the ones a person reads."""
    if high - low < _NAMED_HOST_US or not len(python):
        return _NO_OPERATOR
    around = python[(trace.span_start[python] <= low) & (trace.span_end[python] >= high)]
    if not len(around):
        return _NO_OPERATOR
    return trace.names[int(trace.span_name[around[np.argmax(trace.span_start[around])]])]


def _phase_at(phases: StepPhases, t: float) -> int:
    """The phase (index in PHASES) of the step at ``t``."""
    if intervals.contains(phases.optimizer, t):
        return PHASES.index("optimizer")
    if intervals.contains(phases.backward, t) or t >= phases.first_backward:
        return PHASES.index("backward")
    return PHASES.index("forward")


def _groups(
    start: np.ndarray, end: np.ndarray, index: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The union of these activities, and the longest activity (its index in the trace) of
    each of its intervals."""
    keep = end > start
    start, end, index = start[keep], end[keep], index[keep]
    if not len(start):
        return None
    order = np.argsort(start, kind="stable")
    start, end, index = start[order], end[order], index[order]
    reach = np.maximum.accumulate(end)
    begins = np.ones(len(start), dtype=bool)
    begins[1:] = start[1:] > reach[:-1]
    group = np.cumsum(begins) - 1
    first = np.flatnonzero(begins)
    last = np.append(first[1:] - 1, len(start) - 1)
    longest = np.lexsort((-(end - start), group))  # by group, the longest first
    heads = longest[np.searchsorted(group[longest], np.arange(len(first)))]
    return start[first], reach[last], index[heads]


def _idle(
    trace: TraceEvents,
    covered: intervals.Intervals,
    window: tuple[float, float],
    order: np.ndarray,
    launched_at: np.ndarray,
    names: Names,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The window's idle time: ``host`` where the next activity (``order``: the counted ones by
    start) was launched after the GPU ran dry, else ``other``."""
    gap_start, gap_end = intervals.subtract((np.array([window[0]]), np.array([window[1]])), covered)
    at = np.minimum(np.searchsorted(trace.gpu_start[order], gap_end - 1e-6), len(order) - 1)
    kinds, codes = np.full(len(gap_start), KINDS.index("other")), np.full(len(gap_start), names.code(_IDLE))
    if len(order):
        following = order[at]
        with np.errstate(invalid="ignore"):  # nan: the launch is not in the trace
            waited = launched_at[following] > gap_start
        kinds[waited] = KINDS.index("host")
        for gap in np.flatnonzero(waited):
            codes[gap] = names.code(f"launch of {trace.names[int(trace.gpu_name[following[gap]])]}")
    return gap_start, gap_end, kinds, codes, np.full(len(gap_start), -1)


def _lane(number: int, window: tuple[float, float], pieces: list[tuple[np.ndarray, ...]]) -> StepLane:
    """The pieces in time order, neighbours of one kind joined (named by the longest)."""
    start, end, kind, name, phase = (np.concatenate([p[k] for p in pieces]) for k in range(5))
    keep = end > start
    start, end, kind, name, phase = start[keep], end[keep], kind[keep], name[keep], phase[keep]
    order = np.argsort(start, kind="stable")
    start, end, kind, name, phase = start[order], end[order], kind[order], name[order], phase[order]
    if not len(start):
        return StepLane(number, *window, b"", b"", b"", b"", b"")
    new = np.ones(len(start), dtype=bool)
    new[1:] = (kind[1:] != kind[:-1]) | (start[1:] > end[:-1] + 1e-6)
    run = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(start) - 1)
    longest = np.lexsort((-(end - start), run))
    heads = longest[np.searchsorted(run[longest], np.arange(len(first)))]
    return StepLane(
        number,
        *window,
        start[first].astype(np.float64).tobytes(),
        end[last].astype(np.float64).tobytes(),
        kind[first].astype(np.int8).tobytes(),
        name[heads].astype(np.int32).tobytes(),
        phase[heads].astype(np.int8).tobytes(),
    )
