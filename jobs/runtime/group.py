"""The job's process group as the toolkit uses it: small agreements beside the training's own
collectives, on whatever group the job already has (the toolkit's, or the user's own)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import torch.distributed as dist

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class JobGroup:
    """The default process group, or a single process that has none."""

    world_size: int
    backend: str  # "nccl", "gloo", or "none" for a process without a group
    store: Any  # the group's key-value store (None without a group)

    @classmethod
    def current(cls) -> JobGroup:
        """The group this process has joined (``torch.distributed.init_process_group``), if any.
        It never makes one: a second default group is the user's to make, never ours."""
        if not (dist.is_available() and dist.is_initialized()):
            return cls(world_size=1, backend="none", store=None)
        store = dist.distributed_c10d._get_default_store()
        return cls(world_size=dist.get_world_size(), backend=str(dist.get_backend()), store=store)

    @property
    def distributed(self) -> bool:
        return self.store is not None and self.world_size > 1

    def agree(self, key: str, proposal: int) -> int:
        """The first proposal any rank made for ``key``: the same answer on every rank, from the
        store (one round trip), with no collective."""
        if self.store is None:
            return proposal
        return int(self.store.compare_set(key, "", str(proposal)))

    def gather(self, value: T) -> list[T] | None:
        """Every rank's ``value`` (picklable) on rank 0, in rank order; None on the other ranks
        (a collective: every rank must call it). To rank 0 only: an all-gather would hand every
        rank every rank's value, n times the bytes (a manifest's records at 4096 ranks: 4096
        copies of a few MB)."""
        if not self.distributed:
            return [value]
        main = dist.get_rank() == 0
        values: list[Any] | None = [None] * self.world_size if main else None
        dist.gather_object(value, values, dst=0)
        return values

    def all_gather(self, value: T) -> list[T]:
        """Every rank's ``value`` (picklable) on every rank, in rank order (a collective): for a
        choice every rank makes alike from every rank's figure (the slowest rank)."""
        if not self.distributed:
            return [value]
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    def broadcast(self, value: T) -> T:
        """Rank 0's ``value`` on every rank (a collective)."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()
