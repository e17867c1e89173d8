"""Process group and device for one rank, from its :class:`~slurm.identity.DistributedIdentity`."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
from collections.abc import Iterator, MutableMapping
from pathlib import Path

import torch
import torch.distributed as dist

from profiling.folder.layout import FLIGHT_RECORDER_PREFIX
from slurm.identity import DistributedIdentity


@dataclasses.dataclass(frozen=True)
class DistributedContext:
    identity: DistributedIdentity
    device: torch.device
    backend: str
    threads: int


# Flight recorder entries kept per process group: far more than the collectives of a step.
FLIGHT_RECORDER_ENTRIES = 2000


def enable_flight_recorder(dump_dir: Path, env: MutableMapping[str, str] = os.environ) -> None:
    """Have torch record every rank's last collectives (read by :mod:`jobs.runtime.watchdog`), and
    with NCCL dump them itself when a collective times out, into ``dump_dir`` under the names the
    watchdog's own dumps of them have (``rank_<r>``). Must run before the process group is made;
    the one place this project writes the environment."""
    # torch reads the older names (TORCH_NCCL_TRACE_BUFFER_SIZE...) too, and warns when they are set
    env.setdefault("TORCH_FR_BUFFER_SIZE", str(FLIGHT_RECORDER_ENTRIES))
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    env.setdefault("TORCH_FR_DUMP_TEMP_FILE", str(dump_dir / FLIGHT_RECORDER_PREFIX))


@contextlib.contextmanager
def distributed(
    identity: DistributedIdentity, *, timeout_s: float, threads: int | None = None, device: str = "auto"
) -> Iterator[DistributedContext]:
    """Join the job's process group for the duration of the block, then leave it.

    GPU (see :func:`uses_gpu`): NCCL on ``cuda:<local rank>`` (by *local* rank: the global rank
    is out of range on every node but the first). CPU: gloo, with this rank's share of the
    node's CPUs as threads. A single process still gets a (one-member, in-memory) group, so its
    traces carry ``distributedInfo`` like everyone else's.
    """
    if uses_gpu(identity, device):
        device, backend = (
            torch.device("cuda", _gpu_index(identity.local_rank, torch.cuda.device_count())),
            "nccl",
        )
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    threads = threads or _cpu_share(identity)
    torch.set_num_threads(threads)

    timeout = datetime.timedelta(seconds=timeout_s)
    if identity.is_distributed:
        _join(identity, backend, timeout, device)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    try:
        yield DistributedContext(identity=identity, device=device, backend=backend, threads=threads)
    finally:
        dist.destroy_process_group()


def uses_gpu(identity: DistributedIdentity, device: str) -> bool:
    """``device`` "cuda" or "cpu" as asked; "auto": CUDA if torch sees a GPU and, under SLURM,
    the job was given some (a task of a CPU job on a GPU node sees GPUs it was not given)."""
    if device == "cpu":
        return False
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda but torch sees no GPU. HINT: use --device auto or cpu")
        return True
    given = not identity.launcher.queued or bool(identity.gpus_on_node)
    return given and torch.cuda.is_available()


class RendezvousError(RuntimeError):
    """A rank could not meet the others at MASTER_ADDR:MASTER_PORT within the timeout."""


def _join(
    identity: DistributedIdentity, backend: str, timeout: datetime.timedelta, device: torch.device
) -> None:
    address = f"{identity.master_addr}:{identity.master_port}"
    try:
        # An explicit store, rather than a tcp:// init method, so that one timeout bounds the
        # connection attempts and the error can name the address.
        store = dist.TCPStore(
            identity.master_addr,
            identity.master_port,
            identity.world_size,
            is_master=identity.is_main,
            timeout=timeout,
        )
        dist.init_process_group(
            backend,
            store=store,
            rank=identity.rank,
            world_size=identity.world_size,
            timeout=timeout,
            device_id=device if backend == "nccl" else None,
        )
    except dist.DistError as error:
        reason = str(error).strip().splitlines()[0]
        raise RendezvousError(
            f"rank {identity.rank} could not join the job's rendezvous at {address} "
            f"(MASTER_ADDR:MASTER_PORT) within {timeout.total_seconds():g}s: {reason}. HINT: check that "
            "MASTER_ADDR resolves and is reachable from every node, that MASTER_PORT is free (set "
            "MASTER_PORT to pick another), and that every rank started"
        ) from None


def _gpu_index(local_rank: int, visible: int) -> int:
    """The GPU of this rank among those it sees.

    Normally every task of a node sees all of its GPUs and takes the one of its local rank.
    Where the scheduler binds one GPU per task (``--gpus-per-task=1``, ``--gpu-bind``), that
    GPU is the only one visible, as cuda:0.
    """
    if visible == 1:
        return 0
    if local_rank >= visible:
        raise RuntimeError(
            f"LOCAL_RANK={local_rank} but this task sees {visible} GPUs (CUDA_VISIBLE_DEVICES). "
            "HINT: ask SLURM for as many GPUs per node as tasks per node (submit.py --gpus G; plain "
            "sbatch: --gpus-per-node=G with --ntasks-per-node=G)"
        )
    return local_rank


def _cpu_share(identity: DistributedIdentity) -> int:
    if identity.cpus_per_task:
        return identity.cpus_per_task
    return max(1, len(os.sched_getaffinity(0)) // identity.local_world_size)
