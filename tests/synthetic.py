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


def pipeline_job(
    steps: int,
    late: Callable[[int], dict[int, float]] = lambda step: {},
    cut: int | None = None,
    compute: tuple[float, ...] = (20.0, 20.0, 20.0, 20.0),
) -> list[dict]:
    """Eight ranks' traces of a pipeline of 4 stages x 2 data-parallel replicas (rank = stage x
    2 + replica), gloo labelled with its groups as the toolkit's jobs are (``pg <name> <desc>``).

    Step k starts at k x 1000 µs. Stage s has its input at F (0 for stage 0; a receive from
    stage s-1, posted at the step's start), computes ``compute[s]`` µs (20 each by default: F =
    30 s), sends (10 µs); the last stage turns round at once: stage s's backward starts at B
    (120 + 30 (3 - s) by default), computes as long, sends its gradient back (10 µs); then the
    replicas' all-reduce (group ``mesh_dp``), which rank r reaches
    ``late(k).get(r, 0)`` µs late; both leave 20 µs after the last, then the optimizer (10).
    Every rank is on its own host, its clock 13 µs per rank ahead; the base times agree.
    ``cut``: stage ``cut`` - 1 and stage ``cut`` pass nothing (no send or receive between them).
    """
    return [_pipeline_rank(rank, steps, late, cut, compute) for rank in range(8)]


def _pipeline_rank(
    rank: int,
    steps: int,
    late: Callable[[int], dict[int, float]],
    cut: int | None,
    compute: tuple[float, ...],
) -> dict:
    """One rank's trace of :func:`pipeline_job`."""
    pp_name = {d: str(1 + d) for d in range(2)}
    dp_name = {s: str(3 + s) for s in range(4)}
    stage, replica = divmod(rank, 2)
    skew = 13.0 * rank
    events: list[dict] = []

    def at(name: str, ts: float, dur: float, **kwargs: Any) -> None:
        events.append(x(name, ts + skew, dur, **kwargs))

    def transfer(kind: str, peer: int, start: float, end: float) -> None:
        at(f"pg {pp_name[replica]} mesh_pp peer {peer}", start, end - start, cat="user_annotation")
        at(f"c10d::{'send' if kind == 'send' else 'recv_'}", start, end - start)
        at(f"gloo:{kind}", start + 0.5, end - start - 1.0)

    forward = [sum(c + 10.0 for c in compute[:s]) for s in range(4)]
    turn = forward[3] + compute[3] + 10.0
    backward = [turn + sum(c + 10.0 for c in compute[s + 1 :]) for s in range(4)]
    work = compute[stage]
    for k in range(steps):
        s0 = k * 1000.0
        f = s0 + forward[stage]
        b = s0 + backward[stage]
        delays = late(k)
        arrive = b + work + 10.0 + delays.get(rank, 0.0)
        leave = b + work + 10.0 + max(delays.get(rank, 0.0), delays.get(rank ^ 1, 0.0)) + 20.0
        at(f"ProfilerStep#{10 + k}", s0, leave + 10.0 - s0, cat="user_annotation")
        if stage > 0 and stage != cut:
            transfer("recv", rank - 2, s0 + 1.0, f)
        at("aten::linear", f, work)
        if stage < 3 and stage + 1 != cut:
            transfer("send", rank + 2, f + work, f + work + 10.0)
            transfer("recv", rank + 2, f + work + 11.0, b)
        at("autograd::engine::evaluate_function: AddmmBackward0", b, work)
        if stage > 0 and stage != cut:
            transfer("send", rank - 2, b + work, b + work + 10.0)
        at(f"pg {dp_name[stage]} mesh_dp", arrive, 5.0, cat="user_annotation")
        at("c10d::allreduce_", arrive, 5.0)
        at("gloo:all_reduce", arrive + 1.0, leave - arrive - 1.0, tid=2, **{"Input Dims": [[100]]})
        at("Optimizer.step#SGD.step", leave, 10.0, cat="user_annotation")
    configs = [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 8, "ranks": list(range(8))},
        {
            "pg_name": pp_name[replica],
            "pg_desc": "mesh_pp",
            "pg_size": 4,
            "ranks": [replica + 2 * s for s in range(4)],
        },
        {"pg_name": dp_name[stage], "pg_desc": "mesh_dp", "pg_size": 2, "ranks": [2 * stage, 2 * stage + 1]},
    ]
    return {
        "distributedInfo": {"rank": rank, "world_size": 8, "backend": "gloo", "pg_config": configs},
        "host_name": f"host{rank}",
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": sorted(events, key=lambda e: e["ts"]),
    }
