"""Each collective a rank took part in, by what identifies it across ranks
(:class:`~profiling.analysis.reading.collectives.Instance`): what the clock alignment pairs and
the straggler, the waiting and the critical path compare.

Where a trace names a collective's process group (NCCL's kernels; gloo's through the toolkit's
labels, :mod:`profiling.folder.group_label`), the collective carries its group's ranks, and is
numbered among its group's collectives, a send or receive among the transfers between its two
ranks: identities as good as NCCL's sequence numbers, in a job of any number of groups.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from typing import Any

from profiling.analysis.reading.collectives import (
    C10D,
    GLOO,
    SEQUENCED,
    Collective,
    Instance,
    is_group_label,
    is_symmetric,
    kernel_identity,
    letters,
    same_kind,
    sequence_key,
    shapes_text,
    transfer_key,
    transfer_of,
)
from profiling.folder.group_label import parse_group_label

MAX_RANK = 1 << 31  # ranks are 32-bit signed in torch.distributed
_MAX_WORKERS = 24  # gloo worker threads shared out among groups by search: more is no job's


def instances(
    collectives: Sequence[Collective], rank: int | None = None, groups: Sequence[Any] = ()
) -> list[Instance]:
    """The collectives a rank took part in, in the order they started.

    GPU: NCCL kernels; a rank *arrives* when its kernel starts (it spins there until every rank
    has). CPU: gloo's operators run on worker threads in the order c10d's operators queued
    them; a rank arrives when it queues the operation (the c10d operator's start) and leaves
    when gloo's operator ends.

    ``rank``, ``groups``: the trace's rank and the process groups its ``distributedInfo`` lists
    (:class:`~profiling.analysis.per_trace.groups.Group`), which give a collective its group's
    ranks where the trace names the group: NCCL's ``Process Group Ranks`` / ``Process Group
    Name`` (and a send's or receive's peer, ``Dst Rank`` / ``Src Rank``), the toolkit's label
    on gloo's (:mod:`profiling.folder.group_label`). A collective of a known group is
    identified across ranks by its place among its group's collectives (every member issues
    them in one order), a send or receive by its place among the transfers between its two
    ranks: sequence numbers as good as NCCL's.
    """
    by_name = {g.name: tuple(g.ranks) for g in groups}
    kernels = [c for c in collectives if c.gpu]
    if kernels:
        return _kernel_instances(kernels, rank, by_name)
    labels = [c for c in collectives if is_group_label(c.name)]
    if labels and rank is not None:
        return _labelled_instances(collectives, labels, rank, by_name)
    executed = [c for c in collectives if c.name.startswith(GLOO)]
    queued = [c for c in collectives if c.name.startswith(C10D)]
    consistent = len(queued) >= len(executed) and all(
        same_kind(q.name, e.name) for q, e in zip(queued, executed, strict=False)
    )
    found = []
    for index, op in enumerate(executed):
        dims = op.arg("Input Dims")
        issued = queued[index] if consistent else op
        label = f"{op.name} {shapes_text(dims)}".strip()
        found.append(
            Instance(
                sequence_key("op", op.name, dims),
                issued.start,
                op.end,
                label,
                is_symmetric(op.name),
                issued.step,
            )
        )
    return found


def _kernel_instances(
    kernels: Sequence[Collective], rank: int | None, by_name: dict[str, tuple[int, ...]]
) -> list[Instance]:
    # a dense trace repeats one collective thousands of times: what its name and args say
    # is worked out once for each that differs
    identities: dict[
        tuple[str, tuple[tuple[str, Any], ...]], tuple[str, str, bool, tuple[int, ...] | None, int | None]
    ] = {}
    transfers: dict[tuple[int, int], int] = {}
    found = []
    for c in kernels:
        identity = identities.get((c.name, c.args))
        if identity is None:
            identity = identities[c.name, c.args] = (*kernel_identity(c), *_kernel_group(c, by_name))
        key, label, symmetric, group, peer = identity
        if peer is not None and not _valid_peer(peer, rank, group):
            peer = None  # out of range, in no group of its, or the rank itself: no tie by peer
        if peer is not None and rank is not None:
            sends = (
                True if c.arg("Dst Rank") is not None else False if c.arg("Src Rank") is not None else None
            )
            key, label = _transfer_key(transfers, rank, peer, sends, label.split(" (")[0])
        found.append(Instance(key, c.start, c.end, label, symmetric, c.step, group, peer))
    return found


def _kernel_group(
    kernel: Collective, by_name: dict[str, tuple[int, ...]]
) -> tuple[tuple[int, ...] | None, int | None]:
    """A kernel's group's ranks (its own list where whole, else its group's by name) and peer."""
    group = None
    listed = kernel.arg("Process Group Ranks")
    try:
        ranks = json.loads(listed) if isinstance(listed, str) else listed
    except ValueError:
        ranks = None
    if isinstance(ranks, list) and ranks and all(isinstance(r, int) for r in ranks):
        size = kernel.arg("Group size")
        if not isinstance(size, int) or size == len(ranks):  # torch truncates long lists
            group = tuple(ranks)
    if group is None:
        group = by_name.get(str(kernel.arg("Process Group Name")))
    peer = kernel.arg("Dst Rank") if kernel.arg("Dst Rank") is not None else kernel.arg("Src Rank")
    # a rank as the trace writes it: an int (JSON's 3, not 3.5, "3" or true)
    return group, peer if isinstance(peer, int) and not isinstance(peer, bool) else None


def _valid_peer(peer: int, rank: int | None, group: tuple[int, ...] | None) -> bool:
    """A send's or receive's peer that can be: a rank of its group (where the trace names it), a
    rank of 31 bits, not the rank itself."""
    return 0 <= peer < MAX_RANK and peer != rank and (group is None or peer in group)


def _transfer_key(
    transfers: dict[tuple[int, int], int], rank: int, peer: int, sends: bool | None, label: str
) -> tuple[str, str]:
    """A send's or receive's identity: the how-manyth transfer between its two ranks, in its
    direction (the sender's n-th send to r is r's n-th receive from it); ``sends`` None: a
    transfer whose direction is unknown, counted with both."""
    if sends is None:
        pair = (min(rank, peer), max(rank, peer))
    else:
        pair = (rank, peer) if sends else (peer, rank)
    count = transfers.get(pair, 0)
    transfers[pair] = count + 1
    return transfer_key(*pair, count), f"{label} {pair[0]}>{pair[1]} #{count}"


def _labelled_instances(
    collectives: Sequence[Collective],
    labels: Sequence[Collective],
    rank: int,
    by_name: dict[str, tuple[int, ...]],
) -> list[Instance]:
    """A gloo trace whose c10d operators the toolkit labelled with their group: each group's
    operators are paired with gloo's on that group's own worker threads, in order."""
    queued = _outermost([c for c in collectives if c.name.startswith(C10D)])
    executed = [c for c in collectives if c.name.startswith(GLOO)]
    label_of = _labels_of(queued, labels)
    parsed_of = [parse_group_label(label_of[id(op)].name) if id(op) in label_of else None for op in queued]
    group_of = [parsed[0] if parsed else None for parsed in parsed_of]
    # gloo runs a send or receive on the thread that waits for it, the others on the group's
    # worker threads
    transfer_ends = _transfer_ends(queued, [e for e in executed if _is_transfer(e.name)])
    ends = {
        **_worker_ends(queued, group_of, [e for e in executed if not _is_transfer(e.name)]),
        **transfer_ends,
    }
    transfers: dict[tuple[int, int], int] = {}
    counts: dict[str | None, int] = {}
    found = []
    for index, (op, parsed) in enumerate(zip(queued, parsed_of, strict=True)):
        name, peer = (parsed[0], parsed[2]) if parsed else (None, None)
        group = by_name.get(name) if name is not None else None
        if peer is not None and not _valid_peer(peer, rank, group):
            peer = None  # out of its group, or the rank itself: no tie by peer
        kind = op.name.split("::", 1)[-1]
        end = ends.get(index, op.end)
        if peer is not None:
            key, label = _transfer_key(transfers, rank, peer, "send" in kind, kind)
            found.append(Instance(key, op.start, end, label, False, op.step, group, peer))
            continue
        count = counts.get(name, 0)
        counts[name] = count + 1
        key = (
            sequence_key(SEQUENCED, name, count)
            if name is not None
            else sequence_key("op", op.name, op.arg("Input Dims"))
        )
        label = f"{kind} (group {name}, #{count})" if name is not None else op.name
        found.append(Instance(key, op.start, end, label, is_symmetric(kind), op.step, group))
    return found


def transfer_ranks(instance: Instance) -> tuple[int, int] | None:
    """A send's or receive's (sender, receiver), as its key says; None for a collective."""
    return transfer_of(instance.key) if instance.peer is not None else None


def _is_transfer(name: str) -> bool:
    kind = letters(name.split(":")[-1])
    return kind.startswith(("send", "recv"))


def _transfer_ends(queued: Sequence[Collective], transfers: Sequence[Collective]) -> dict[int, float]:
    """When each queued send or receive ended: gloo's n-th send (receive) on a thread is the
    n-th that thread queued; it runs when the thread waits for it, which may be long after."""
    done: dict[tuple[Any, bool], list[Collective]] = {}
    for op in sorted(transfers, key=lambda c: c.start):
        done.setdefault((op.tid, "send" in op.name), []).append(op)
    taken: dict[tuple[Any, bool], int] = {}
    ends = {}
    for index, op in enumerate(queued):
        if not _is_transfer(op.name):
            continue
        which = (op.tid, "send" in op.name)
        at = taken.get(which, 0)
        taken[which] = at + 1
        if at < len(done.get(which, [])):
            ends[index] = max(done[which][at].end, op.end)
    return ends


def _outermost(ops: list[Collective]) -> list[Collective]:
    """c10d's operators without those inside one of the same name on the same thread (torch
    records an operator twice where a dispatch mode sits between its two entries)."""
    kept: list[Collective] = []
    open_ops: dict[Any, list[Collective]] = {}
    for op in sorted(ops, key=lambda c: (c.start, -c.end)):
        stack = open_ops.setdefault(op.tid, [])
        while stack and stack[-1].end < op.start:
            stack.pop()
        if not any(outer.name == op.name and outer.end >= op.end for outer in stack):
            kept.append(op)
        stack.append(op)
    return kept


def _labels_of(queued: Sequence[Collective], labels: Sequence[Collective]) -> dict[int, Collective]:
    """Each queued operator's label: the one on its thread that overlaps it most (it holds the
    operator, or the operator it: torch records the operator on both sides of the label)."""
    by_thread: dict[Any, list[Collective]] = {}
    for label in sorted(labels, key=lambda c: c.start):
        by_thread.setdefault(label.tid, []).append(label)
    starts = {tid: [c.start for c in mine] for tid, mine in by_thread.items()}
    found: dict[int, Collective] = {}
    for op in queued:
        mine = by_thread.get(op.tid, [])
        at = bisect.bisect_left(starts.get(op.tid, []), op.end)
        near = mine[max(0, at - 3) : at]
        overlaps = [(min(op.end, c.end) - max(op.start, c.start), c) for c in near]
        best = max(overlaps, key=lambda pair: pair[0], default=None)
        if best is not None and best[0] > 0:
            found[id(op)] = best[1]
    return found


def _worker_ends(
    queued: Sequence[Collective], group_of: Sequence[str | None], workers: Sequence[Collective]
) -> dict[int, float]:
    """When each queued operator's gloo operator ended (by the operator's index in ``queued``).

    Each gloo process group has worker threads of its own, which take its operations in the
    order they were queued. So the threads are shared out among the groups so that each
    group's operations and its threads' operators agree in number and in order (none starts
    before it was queued), and then paired in order. Where no sharing agrees, none is paired
    (the c10d operator's own end stands)."""
    by_group: dict[str | None, list[int]] = {}
    for index, (op, group) in enumerate(zip(queued, group_of, strict=True)):
        if not _is_transfer(op.name):
            by_group.setdefault(group, []).append(index)
    threads: dict[Any, list[Collective]] = {}
    for op in sorted(workers, key=lambda c: c.start):
        threads.setdefault(op.tid, []).append(op)
    names = list(by_group)
    tids = sorted(threads, key=lambda t: -len(threads[t]))
    if len(tids) > _MAX_WORKERS:
        return {}
    share = _share(tids, threads, names, {g: len(v) for g, v in by_group.items()}, {}, queued, by_group)
    if share is None:
        return {}
    ends = {}
    for group, members in by_group.items():
        ops = sorted(
            (op for tid in tids if share[tid] == group for op in threads[tid]), key=lambda c: c.start
        )
        for index, op in zip(members, ops, strict=True):
            ends[index] = op.end
    return ends


def _share(
    tids: list[Any],
    threads: dict[Any, list[Collective]],
    names: list[str | None],
    left: dict[str | None, int],
    chosen: dict[Any, str | None],
    queued: Sequence[Collective],
    by_group: dict[str | None, list[int]],
) -> dict[Any, str | None] | None:
    """A sharing of the worker threads among the groups (depth first; jobs have few of each)."""
    if len(chosen) == len(tids):
        if any(left.values()):
            return None
        return chosen if all(_in_order(chosen, threads, g, queued, by_group) for g in names) else None
    tid = tids[len(chosen)]
    for group in names:
        if left[group] >= len(threads[tid]):
            left[group] -= len(threads[tid])
            found = _share(tids, threads, names, left, {**chosen, tid: group}, queued, by_group)
            left[group] += len(threads[tid])
            if found is not None:
                return found
    return None


def _in_order(
    chosen: dict[Any, str | None],
    threads: dict[Any, list[Collective]],
    group: str | None,
    queued: Sequence[Collective],
    by_group: dict[str | None, list[int]],
) -> bool:
    ops = sorted(
        (op for tid, g in chosen.items() if g == group for op in threads[tid]), key=lambda c: c.start
    )
    return all(op.start >= queued[index].start for index, op in zip(by_group[group], ops, strict=True))
