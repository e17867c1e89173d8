"""Steps with a known graph, as the critical path and the replay read them (each rank's step
and lane, the meetings between them), made span by span as the schedule runs: a 1F1B pipeline
and a data-parallel step."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profiling.analysis.across_ranks.critical_path.walk import Meeting, RankStep
from profiling.analysis.per_trace.lanes import KINDS, PHASES, Lane


def lane_of(
    spans: list[tuple[float, float, str, str, int]], waits: Sequence[tuple[float, float]] = ()
) -> Lane:
    """A lane of ``(start, end, kind, name, phase)`` spans (phase: index in PHASES, -1: none),
    with the waits between its streams its trace ties ((end waited for, start that waited))."""
    text = [name for *_, name, _ in spans]
    return Lane(
        np.array([a for a, *_ in spans], dtype=float), np.array([b for _, b, *_ in spans], dtype=float),
        np.array([KINDS.index(k) for _, _, k, _, _ in spans], dtype=np.int8),
        np.arange(len(text), dtype=np.int32), np.array([p for *_, p in spans], dtype=np.int8), text,
        np.array(sorted(waits), dtype=float).reshape(-1, 2),
    )  # fmt: skip


def one_f_one_b(
    stages: int, microbatches: int, forward: float | Sequence[float], backward: float | Sequence[float]
) -> tuple[dict[int, RankStep], list[Meeting]]:
    """A rank a stage, running 1F1B (stage s: ``stages - 1 - s`` forwards first, then one
    forward and one backward in turn, then the backwards left), each microbatch's forward and
    backward ``forward`` and ``backward`` µs (or each stage's); a transfer takes no time, each
    receive waits where its input is not there yet. Returns each rank's step, its lane (the work
    with its phase, the waits in a receive) and, as ``meetings``, each receive with its send."""
    forwards = [forward] * stages if isinstance(forward, float | int) else list(forward)
    backwards = [backward] * stages if isinstance(backward, float | int) else list(backward)
    order = []
    for s in range(stages):
        warm = min(stages - 1 - s, microbatches)
        mine = [("F", i) for i in range(warm)]
        for i in range(microbatches - warm):
            mine += [("F", warm + i), ("B", i)]
        order.append(mine + [("B", i) for i in range(microbatches - warm, microbatches)])
    done: dict[tuple[int, str, int], float] = {}
    free, spans = [0.0] * stages, [[] for _ in range(stages)]
    meetings: list[Meeting] = []
    pending = [list(o) for o in order]
    while any(pending):
        for s in range(stages):
            while pending[s]:
                what, i = pending[s][0]
                source = (
                    (s - 1, "F", i) if what == "F" else ((s + 1, "B", i) if s < stages - 1 else (s, "F", i))
                )
                if what == "F" and s == 0:
                    ready = 0.0
                elif source not in done:
                    break
                else:
                    ready = done[source]
                if ready > free[s]:  # waits in the receive
                    spans[s].append((free[s], ready, "communication", f"recv {what}{i}", -1))
                if source[0] != s and (what != "F" or s > 0):
                    meetings.append(
                        Meeting(f"p2p {what}{i} to {s}", {source[0]: ready, s: free[s]}, {s: ready})
                    )
                start = max(free[s], ready)
                length = forwards[s] if what == "F" else backwards[s]
                spans[s].append(
                    (
                        start,
                        start + length,
                        "compute",
                        f"{what}{i}",
                        PHASES.index("forward" if what == "F" else "backward"),
                    )
                )
                free[s] = done[(s, what, i)] = start + length
                pending[s].pop(0)
    ranks = {s: RankStep(s, 0.0, free[s], lane_of(spans[s])) for s in range(stages)}
    return ranks, sorted(meetings, key=lambda m: min(m.ends.values()))


def data_parallel(
    forward: Sequence[float],
    backward: Sequence[float],
    transfer: float,
    optimizer: float,
    host: float | Sequence[float] = 0.0,
) -> tuple[dict[int, RankStep], list[Meeting]]:
    """A rank per entry of ``forward``: its forward and backward (µs), then an all-reduce of
    every rank (``transfer`` µs after the last arrives; each waits in it), then its optimizer;
    ``host``: a gap of the host's before each rank's forward (or each rank's own)."""
    hosts = [host] * len(forward) if isinstance(host, float | int) else list(host)
    done = [h + f + b for h, f, b in zip(hosts, forward, backward, strict=True)]
    end = max(done) + transfer
    ranks = {}
    for rank, (h, f) in enumerate(zip(hosts, forward, strict=True)):
        spans = [
            (0.0, h, "host", "Python", -1),
            (h, h + f, "compute", "forward", PHASES.index("forward")),
            (h + f, done[rank], "compute", "backward", PHASES.index("backward")),
            (done[rank], end, "communication", "allreduce", -1),
            (end, end + optimizer, "compute", "optimizer", PHASES.index("optimizer")),
        ]
        ranks[rank] = RankStep(rank, 0.0, end + optimizer, lane_of([s for s in spans if s[1] > s[0]]))
    meeting = Meeting("allreduce #0", dict(enumerate(done)), dict.fromkeys(range(len(done)), end))
    return ranks, [meeting]


def gpu_pipelines(
    stages: int,
    replicas: int,
    microbatches: int,
    forward: Sequence[float],
    backward: Sequence[float],
    optimizer: float = 10.0,
    late_end: float = 0.05,
    tied: bool = False,
) -> tuple[dict[int, RankStep], list[Meeting], float]:
    """``replicas`` 1F1B pipelines of ``stages`` (rank = replica + replicas x stage, as Megatron
    numbers them) on GPU lanes, each rank's forward and backward µs its own (``forward[rank]``),
    then each stage's all-reduce among its replicas (no transfer time) and the optimizer. A rank
    waiting for its input shows its receive's kernel (communication) on its lane, and each
    receive's end is recorded ``late_end`` µs after the compute it gates began, as two streams'
    recorded ends disagree; ``tied``: the trace ties the compute's wait to the receive (a Stream
    Wait Event). Returns the ranks' steps, the meetings and the step's length: an
    event simulation of its own, the replay's answer worked out another way."""
    ranks: dict[int, RankStep] = {}
    meetings: list[Meeting] = []
    ends: dict[int, float] = {}
    spans: dict[int, list[tuple[float, float, str, str, int]]] = {}
    waits: dict[int, list[tuple[float, float]]] = {}
    for replica in range(replicas):
        rank_of = [replica + replicas * s for s in range(stages)]
        built, transfers = one_f_one_b(
            stages, microbatches, [forward[r] for r in rank_of], [backward[r] for r in rank_of]
        )
        for s, rank in enumerate(rank_of):
            lane = built[s].lane
            assert lane is not None
            spans[rank] = list(zip(lane.starts.tolist(), lane.ends.tolist(), [KINDS[k] for k in lane.kinds],
                                   lane.text, lane.phases.tolist(), strict=True))  # fmt: skip
            ends[rank] = built[s].end
        for meeting in transfers:
            ((receiver, end),) = meeting.ends.items()
            meetings.append(
                Meeting(
                    meeting.label.replace("to ", f"to {replica}:"),
                    {rank_of[s]: at for s, at in meeting.arrivals.items()},
                    {rank_of[receiver]: end + late_end},
                )
            )
            if tied:  # the compute it gates: the receiver's first from the data's arrival on
                gated = min(
                    a for a, _, kind, *_ in spans[rank_of[receiver]] if kind == "compute" and a >= end
                )
                waits.setdefault(rank_of[receiver], []).append((end + late_end, gated))
    step = 0.0
    for s in range(stages):
        members = [replica + replicas * s for replica in range(replicas)]
        reduced = max(ends[r] for r in members)
        meetings.append(
            Meeting(f"allreduce stage {s}", {r: ends[r] for r in members}, dict.fromkeys(members, reduced))
        )
        for r in members:
            if reduced > ends[r]:
                spans[r].append((ends[r], reduced, "communication", "allreduce", -1))
            spans[r].append((reduced, reduced + optimizer, "compute", "optimizer", PHASES.index("optimizer")))
            ranks[r] = RankStep(r, 0.0, reduced + optimizer, lane_of(spans[r], waits.get(r, [])))
            step = max(step, reduced + optimizer)
    return ranks, sorted(meetings, key=lambda m: min(m.ends.values())), step
