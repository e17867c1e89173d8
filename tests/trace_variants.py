"""Traces generated from the real GPU traces of ``tests/data/gpu_traces/``: copies claiming other
ranks with their clocks moved, collectives as older torch records them, dense all-reduces,
jitter, lost collectives and a rank that arrives late. Each function returns a new document
and leaves its input as it was.

The dense case imitates tensor-parallel or many-bucket jobs: hundreds of all-reduces per step
of one kind and one size. It is made from a real trace by turning every ``every``-th compute
kernel into an NCCL all-reduce kernel, so that the collectives keep the real, irregular timing
of a GPU stream.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).parent / "data" / "gpu_traces"
ALLREDUCE_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
# What torch 2.4 and later add to a collective's kernel; older traces (and other producers) lack it.
COLLECTIVE_ARGS = (
    "Collective name",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "Seq",
    "In msg nelems",
    "Out msg nelems",
    "In split size",
    "Out split size",
    "Group size",
    "dtype",
)

Document = dict[str, Any]


def load(name: str) -> Document:
    with gzip.open(DATA / name) as handle:
        return json.load(handle)


def _is_nccl(event: dict[str, Any]) -> bool:
    return event.get("cat") == "kernel" and str(event.get("name", "")).startswith("nccl")


def nccl_kernels(trace: Document) -> list[dict[str, Any]]:
    """The trace's NCCL kernel events (the same objects, in file order)."""
    return [e for e in trace["traceEvents"] if _is_nccl(e)]


def as_older_torch(trace: Document) -> Document:
    """The trace as torch before 2.4 records it: collectives without sequence numbers, process
    groups or message sizes."""
    trace = copy.deepcopy(trace)
    for event in nccl_kernels(trace):
        event["args"] = {k: v for k, v in event.get("args", {}).items() if k not in COLLECTIVE_ARGS}
    return trace


def dense_allreduces(trace: Document, every: int) -> Document:
    """Every ``every``-th compute kernel (and every NCCL kernel) made an all-reduce of one kind,
    without the arguments that tell collectives apart."""
    trace = as_older_torch(trace)
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and "ts" in e]
    compute = [e for e in kernels if not _is_nccl(e)]
    for event in compute[::every] + [e for e in kernels if _is_nccl(e)]:
        event["name"] = ALLREDUCE_KERNEL
    return trace


def repeated_steps(trace: Document, times: int) -> Document:
    """The trace's steps ``times`` over, one copy after the other, ids kept apart."""
    events = trace["traceEvents"]
    timed_events = [e for e in events if "ts" in e]
    span = max(e["ts"] + e.get("dur", 0) for e in timed_events) - min(e["ts"] for e in timed_events)
    steps = [int(e["name"][13:]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    count = max(steps) - min(steps) + 1
    out = [e for e in events if e.get("ph") == "M"]
    for copy_index in range(times):
        for event in events:
            if event.get("ph") == "M":
                continue
            event = dict(event, ts=event["ts"] + copy_index * span) if "ts" in event else dict(event)
            if copy_index and str(event.get("name", "")).startswith("ProfilerStep#"):
                event["name"] = f"ProfilerStep#{int(event['name'][13:]) + copy_index * count}"
            if copy_index and isinstance(event.get("id"), int):
                event["id"] += copy_index << 32
            args = event.get("args")
            if copy_index and isinstance(args, dict) and "correlation" in args:
                event["args"] = dict(args, correlation=args["correlation"] + copy_index * (1 << 32))
            out.append(event)
    return {**trace, "traceEvents": out}


def as_rank(trace: Document, rank: int, world_size: int, shift_us: float = 0.0) -> Document:
    """A copy claiming ``rank``, every ``ts`` moved by ``shift_us`` (its base time unchanged)."""
    moved = dict(trace)
    moved["distributedInfo"] = {**trace.get("distributedInfo", {}), "rank": rank, "world_size": world_size}
    moved["traceEvents"] = [
        dict(e, ts=e["ts"] + shift_us) if "ts" in e else dict(e) for e in trace["traceEvents"]
    ]
    return moved


def one_step(trace: Document, step: int) -> Document:
    """Only ``ProfilerStep#<step>`` and the timed events that start within it (metadata kept)."""
    events = trace["traceEvents"]
    span = next(e for e in events if e.get("name") == f"ProfilerStep#{step}" and e.get("ph") == "X")
    start, end = span["ts"], span["ts"] + span["dur"]

    def kept(e: dict[str, Any]) -> bool:
        if "ts" not in e:
            return True
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            return e is span
        # the GPU work a step launched runs after its CPU span: kept to a step's length later
        gpu = e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        return start <= e["ts"] < (end + span["dur"] if gpu else end)

    return {**trace, "traceEvents": [e for e in events if kept(e)]}


def integer_us(trace: Document) -> Document:
    """Every ``ts`` and ``dur`` a whole number of microseconds, as some producers write them."""
    return {
        **trace,
        "traceEvents": [
            {k: (round(v) if k in ("ts", "dur") and isinstance(v, float) else v) for k, v in e.items()}
            for e in trace["traceEvents"]
        ],
    }


def _edit_nccl(trace: Document, edit: Callable[[int, dict[str, Any]], dict[str, Any] | None]) -> Document:
    """``edit(index among NCCL kernels, event)`` returns the event to keep (None drops it)."""
    events, index = [], 0
    for event in trace["traceEvents"]:
        if _is_nccl(event):
            event = edit(index, dict(event))
            index += 1
            if event is None:
                continue
        events.append(event)
    return {**trace, "traceEvents": events}


def jitter_ends(trace: Document, jitter_us: float, seed: int) -> Document:
    """Every collective's end moved by up to ±``jitter_us``."""
    rng = random.Random(seed)

    def edit(_: int, event: dict[str, Any]) -> dict[str, Any]:
        end = event["ts"] + event["dur"] + rng.uniform(-jitter_us, jitter_us)
        event["ts"] = min(event["ts"], end - 0.1)  # a short kernel moves whole
        event["dur"] = end - event["ts"]
        return event

    return _edit_nccl(trace, edit)


def drop_collectives(trace: Document, share: float, seed: int, first: int = 0) -> Document:
    """A random ``share`` of the collectives lost, and the first ``first`` of them."""
    rng = random.Random(seed)
    return _edit_nccl(trace, lambda i, e: None if i < first or rng.random() < share else e)


def random_ends(trace: Document, seed: int) -> Document:
    """Every collective placed at random within the trace: no clock offset explains them."""
    kernels = nccl_kernels(trace)
    low, high = min(e["ts"] for e in kernels), max(e["ts"] for e in kernels)
    rng = random.Random(seed)

    def edit(_: int, event: dict[str, Any]) -> dict[str, Any]:
        event["ts"] = rng.uniform(low, high)
        return event

    return _edit_nccl(trace, edit)


def late_at_every_allreduce(traces: list[Document], late_rank: int, late_us: float) -> list[Document]:
    """The ranks' traces as if ``late_rank`` reached every all-reduce ``late_us`` after the others:
    its kernels before each all-reduce ran that much longer, so it starts the all-reduce later
    while the others wait in theirs; everyone leaves it together, and everything after it is
    later by as much on every rank."""
    reference = traces[0]
    ends = np.sort([e["ts"] + e["dur"] for e in nccl_kernels(reference)])
    starts = np.sort([e["ts"] for e in nccl_kernels(reference)])
    out = []
    for rank, trace in enumerate(traces):
        offset = _ts_offset(trace, reference)
        events = []
        for event in trace["traceEvents"]:
            if "ts" not in event:
                events.append(event)
                continue
            ts = event["ts"] - offset  # on the reference's clock
            if _is_nccl(event):
                before = int(np.searchsorted(starts, ts, side="left"))  # all-reduces before this one
                start_delay = late_us * (before + (rank == late_rank))
                end = ts + event["dur"] + late_us * (before + 1)
                event = dict(event, ts=ts + start_delay + offset, dur=end - ts - start_delay)
            else:
                event = dict(event, ts=ts + late_us * int(np.searchsorted(ends, ts, side="right")) + offset)
            events.append(event)
        out.append({**trace, "traceEvents": events})
    return out


def _ts_offset(trace: Document, reference: Document) -> float:
    """How far ``trace``'s events were moved from ``reference``'s (copies of one trace)."""
    return _first_ts(trace) - _first_ts(reference)


def _first_ts(trace: Document) -> float:
    return next(e["ts"] for e in trace["traceEvents"] if "ts" in e)


def write(folder: Path, traces: list[Document]) -> Path:
    """The traces as a job folder would hold them, named by each one's rank and steps."""
    folder.mkdir(parents=True, exist_ok=True)
    for trace in traces:
        steps = sorted(
            int(e["name"][13:])
            for e in trace["traceEvents"]
            if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
        )
        rank = trace["distributedInfo"]["rank"]
        (folder / f"rank{rank}_iter{steps[0]}_{steps[-1]}.json").write_text(json.dumps(trace))
    return folder


def launched_before_the_recording(trace: Document, share: float) -> Document:
    """The launches (``cuda_runtime``/``cuda_driver``) in the first ``share`` of the first
    step's CPU span gone: their kernels ran in the window, launched before it began."""
    events = trace["traceEvents"]
    first = min(
        (e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"),
        key=lambda e: e["ts"],
    )
    cut = first["ts"] + share * first["dur"]
    gone = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["ts"] < cut]
    assert any("correlation" in e.get("args", {}) for e in gone), "no launch to remove"
    return {
        **trace,
        "traceEvents": [
            e for e in events if not (e.get("cat") in ("cuda_runtime", "cuda_driver") and e["ts"] < cut)
        ],
    }


def with_issuing_operators(trace: Document) -> Document:
    """Each NCCL kernel with the CPU operators torch 2.0-2.3 record around the runtime call that
    launched it: ``c10d::allreduce_``, ``record_param_comms`` and ``nccl:all_reduce``."""
    events = trace["traceEvents"]
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    added = []
    for kernel in nccl_kernels(trace):
        launch = launches.get(kernel.get("args", {}).get("correlation"))
        if launch is None:
            continue
        for name, pad in (("c10d::allreduce_", 6), ("record_param_comms", 4), ("nccl:all_reduce", 2)):
            added.append({
                "ph": "X", "cat": "cpu_op", "name": name, "pid": launch["pid"], "tid": launch["tid"],
                "ts": launch["ts"] - pad, "dur": launch["dur"] + 2 * pad,
                "args": {"External id": len(added), "Input Dims": [[1048576]], "Input type": ["float"]},
            })  # fmt: skip
    timed = sorted([e for e in events if "ts" in e] + added, key=lambda e: e["ts"])
    return {**trace, "traceEvents": [e for e in events if "ts" not in e] + timed}


def without_shapes(trace: Document) -> Document:
    """Every event's args cut to the ids that tie events together, as a trace recorded without
    ``record_shapes``: the same events in fewer bytes."""
    kept = {"External id", "correlation", "stream", "device", "Trace name", "Trace iteration"}
    return {
        **trace,
        "traceEvents": [
            dict(e, args={k: v for k, v in e["args"].items() if k in kept})
            if isinstance(e.get("args"), dict)
            else e
            for e in trace["traceEvents"]
        ],
    }


def kineto_layout(trace: Document) -> bytes:
    """The trace as torch's exporter lays it out: an event over several lines, its args
    indented (where :func:`json.dumps` writes one line)."""

    def event(e: dict[str, Any]) -> str:
        head = "  {\n    " + json.dumps({k: v for k, v in e.items() if k != "args"})[1:-1]
        args = f',\n    "args": {{\n      {json.dumps(e["args"])[1:-1]}\n    }}' if "args" in e else ""
        return head + args + "\n  }"

    fields = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"})[1:-1]
    events = ",\n".join(event(e) for e in trace["traceEvents"])
    return f'{{\n  {fields},\n  "traceEvents": [\n{events}\n]}}\n'.encode()
