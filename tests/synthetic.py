"""Small synthetic torch.profiler traces with known timings, for exact checks of the report."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

BASE_NS = 1_790_000_000_000_000_000


def x(
    name: str, ts: float, dur: float, tid: Any = 1, cat: str = "cpu_op", pid: Any = 100, **args: Any
) -> dict:
    """A complete ("X") event."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def cpu_job(
    steps: int,
    late: Callable[[int], dict[int, float]] = lambda step: {},
    ranks: int = 2,
    backward_us: float = 10.0,
) -> list[dict]:
    """``ranks`` ranks' traces of ``steps`` steps of one all-reduce each, in µs.

    Step k: forward 5-35, backward from 40 for ``backward_us``, then the all-reduce, which
    rank r reaches ``late(k).get(r, 0)`` µs late; every rank leaves it together, 20 µs after
    the last arrival, then the optimizer (10 µs). Rank r's base time is r ms later than rank
    0's, and its clock 7 µs per rank ahead beyond that.
    """
    traces = []
    for rank in range(ranks):
        o = rank * 7.0 - rank * 1000.0  # its ts, relative to its own later base
        events = []
        for k in range(steps):
            t, delays = k * 200.0 + o, late(k)
            wait = max(delays.values(), default=0.0)
            arrive = 40 + backward_us + delays.get(rank, 0.0)
            leave = 40 + backward_us + wait + 20
            events += [
                x(f"ProfilerStep#{10 + k}", t, leave + 10, cat="user_annotation"),
                x("aten::conv2d", t + 5, 30),
                x("autograd::engine::evaluate_function: ConvolutionBackward0", t + 40, arrive - 40),
                x("c10d::allreduce_", t + arrive, 5),
                x("gloo:all_reduce", t + arrive + 1, leave - arrive - 1, tid=2, **{"Input Dims": [[100]]}),
                x("Optimizer.step#SGD.step", t + leave, 10, cat="user_annotation"),
            ]
        traces.append(
            {
                "distributedInfo": {"rank": rank, "world_size": ranks, "backend": "gloo"},
                "host_name": f"host{rank}",
                "baseTimeNanoseconds": BASE_NS + rank * 1_000_000,
                "traceEvents": events,
            }
        )
    return traces


def write_trace(folder: Path, trace: dict, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(folder / name, "wt") as handle:
        json.dump(trace, handle)


def write_job(folder: Path, traces: list[dict], steps: int) -> Path:
    """The traces as a job folder would hold them (odd ranks gzipped)."""
    for rank, trace in enumerate(traces):
        write_trace(folder, trace, f"rank{rank}_iter10_{9 + steps}.json" + (".gz" if rank % 2 else ""))
    return folder
