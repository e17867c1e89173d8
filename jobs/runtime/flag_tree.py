"""The largest of one small integer over every rank, with a bounded number of connections per rank.

A process group of its own would be a second full mesh: n - 1 sockets per rank (4095 at 4096
ranks, beyond the usual limit of 1024 open files), on top of the job's own group. Instead the
ranks form a binary tree (rank r's parent is (r - 1) // 2, its children 2r + 1 and 2r + 2);
each value goes up to rank 0 and the answer comes back down, in point-to-point messages on a
gloo backend whose connections are made lazily, on first use: each rank connects to at most
three others, whatever the world size, and an answer takes 2 log2(n) hops (24 at 4096 ranks).
The backend is not a process group: torch knows nothing of it, the job's collectives and
``torch.distributed`` calls are unaffected, and the profiler records none of it.
"""

from __future__ import annotations

import datetime
import os

import torch
from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo

_UP, _DOWN = 1, 2  # message tags: a child's value, a parent's answer


def tree_links(rank: int, world_size: int) -> tuple[int | None, list[int]]:
    """Rank ``rank``'s parent (None for rank 0) and children."""
    parent = (rank - 1) // 2 if rank else None
    return parent, [child for child in (2 * rank + 1, 2 * rank + 2) if child < world_size]


class FlagTree:
    """:meth:`max` over every rank (each rank must call it, the same number of times)."""

    def __init__(
        self, store: torch.distributed.Store, rank: int, world_size: int, *, timeout_s: float, name: str
    ) -> None:
        # gloo's own process group, its options and point-to-point calls: absent from torch's stubs
        options = ProcessGroupGloo._Options()  # type: ignore[attr-defined]
        interface = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]  # as the job's own gloo
        device = (
            ProcessGroupGloo.create_device(interface=interface, lazy_init=True)
            if interface
            else ProcessGroupGloo.create_default_device(lazy_init=True)
        )
        options._devices = [device]
        options._timeout = datetime.timedelta(seconds=timeout_s)
        options._threads = 1
        self._backend = ProcessGroupGloo(
            PrefixStore(f"slurm-profiling/{name}/", store), rank, world_size, options
        )
        self.parent, self.children = tree_links(rank, world_size)

    def max(self, value: int) -> int:
        """The largest ``value`` any rank passed, on every rank."""
        received = torch.zeros(1, dtype=torch.int64)
        for child in self.children:
            self._backend.recv([received], child, _UP).wait()  # type: ignore[attr-defined]
            value = max(value, int(received.item()))
        if self.parent is not None:
            self._backend.send([torch.tensor([value], dtype=torch.int64)], self.parent, _UP).wait()  # type: ignore[attr-defined]
            self._backend.recv([received], self.parent, _DOWN).wait()  # type: ignore[attr-defined]
            value = int(received.item())
        for child in self.children:
            self._backend.send([torch.tensor([value], dtype=torch.int64)], child, _DOWN).wait()  # type: ignore[attr-defined]
        return value

    def close(self) -> None:
        """Close its connections (every rank is done with it)."""
        self._backend.shutdown()
