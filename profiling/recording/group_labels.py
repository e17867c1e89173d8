"""Each collective's process group, written into the trace where torch writes none.

NCCL traces name a collective's group (``Process Group Name``, ``Process Group Ranks``); gloo's
do not: torch 2.14 on CPU writes ``c10d::allreduce_`` and ``gloo:all_reduce`` with no group and
no peer. While a window records, :class:`GroupLabels` (a ``TorchDispatchMode``) sees every c10d
operator as it is issued, with its group (``c10d::*`` carry the ``ProcessGroup``, torch's
functional collectives, ``_c10d_functional::*``, its name) and wraps it in a user annotation
naming the group and, for a send or receive, its peer (:mod:`profiling.folder.group_label`).

The annotation encloses the c10d operator on the issuing thread, so the reader
(:mod:`profiling.analysis.reading.collectives`) gives the collective the group of the label
around it; the group's ranks are in the trace's ``distributedInfo.pg_config``. Entered only
while a window records and only where the job has more groups than the default one: a flat
job's traces are unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from profiling.folder.group_label import group_label

_NAMESPACES = ("c10d", "_c10d_functional")
# operators whose group-relative rank argument (by position) is the other side of a transfer
_PEER_ARGUMENT = {"send": 2, "recv_": 2}
_NOT_ISSUED = ("wait_tensor", "_wrap_tensor_autograd")  # waits and bookkeeping, not collectives


def needs_labels() -> bool:
    """Whether the job made process groups beyond the default one (a DeviceMesh, new_group)
    on a backend whose traces name none (NCCL's kernels carry their group)."""
    if not dist.is_available() or not dist.is_initialized():
        return False
    return dist.get_backend() != "nccl" and len(dist.distributed_c10d._world.pg_map) > 1


class GroupLabels(TorchDispatchMode):
    """Wraps each c10d operator in a user annotation naming its group (and peer)."""

    def __init__(self) -> None:
        super().__init__()
        # every operator passes through here: whether it is a collective is worked out once
        self._collective: dict[Any, bool] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        collective = self._collective.get(func)
        if collective is None:
            collective = self._collective[func] = (
                func.namespace in _NAMESPACES and func._opname not in _NOT_ISSUED
            )
        if not collective:
            return func(*args, **kwargs)
        group = _group(args)
        if group is None:
            return func(*args, **kwargs)
        with torch.profiler.record_function(
            group_label(group.group_name, group.group_desc, _peer(func, args, group))
        ):
            return func(*args, **kwargs)


def _group(args: tuple) -> dist.ProcessGroup | None:
    for value in args:
        if isinstance(value, torch.ScriptObject):
            try:
                return dist.ProcessGroup.unbox(value)
            except RuntimeError:
                continue
        if isinstance(value, dist.ProcessGroup):
            return value
    for value in args:  # the functional collectives name their group
        if isinstance(value, str):
            try:
                return dist.distributed_c10d._resolve_process_group(value)
            except (KeyError, ValueError, RuntimeError):
                continue
    return None


def _peer(func: Any, args: tuple, group: dist.ProcessGroup) -> int | None:
    position = _PEER_ARGUMENT.get(func._opname)
    if position is None or position < 0 or position >= len(args) or not isinstance(args[position], int):
        return None
    return dist.get_global_rank(group, args[position])
