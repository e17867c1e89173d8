"""Process group and device for one rank, from its :class:`~slurm.env.DistributedIdentity`."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
from typing import Iterator

import torch
import torch.distributed as dist

from slurm.env import DistributedIdentity


@dataclasses.dataclass(frozen=True)
class DistributedContext:
    identity: DistributedIdentity
    device: torch.device
    backend: str
    threads: int


@contextlib.contextmanager
def distributed(
    identity: DistributedIdentity, *, timeout_s: float, threads: int | None = None
) -> Iterator[DistributedContext]:
    """Join the job's process group for the duration of the block, then leave it.

    GPU: NCCL on ``cuda:<local rank>`` (by *local* rank: the global rank is out of range on
    every node but the first). CPU: gloo, with this rank's share of the node's CPUs as threads.
    A single process still gets a (one-member, in-memory) group, so its traces carry
    ``distributedInfo`` like everyone else's.
    """
    if torch.cuda.is_available():
        device, backend = torch.device("cuda", identity.local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    threads = threads or _cpu_share(identity)
    torch.set_num_threads(threads)

    timeout = datetime.timedelta(seconds=timeout_s)
    if identity.is_distributed:
        dist.init_process_group(
            backend,
            init_method=f"tcp://{_bracket_ipv6(identity.master_addr)}:{identity.master_port}",
            rank=identity.rank,
            world_size=identity.world_size,
            timeout=timeout,
            device_id=device if backend == "nccl" else None,
        )
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    try:
        yield DistributedContext(identity=identity, device=device, backend=backend, threads=threads)
    finally:
        dist.destroy_process_group()


def _cpu_share(identity: DistributedIdentity) -> int:
    if identity.cpus_per_task:
        return identity.cpus_per_task
    return max(1, len(os.sched_getaffinity(0)) // identity.local_world_size)


def _bracket_ipv6(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address
