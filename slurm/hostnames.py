"""Slurm hostlist expressions (``gpu-[01-03,07],login5``) to host names, and task counts per node.

Parsing is delegated to python-hostlist, a maintained implementation of the full Slurm
grammar (several bracket groups per name, zero padding, nested commas, ``2(x3),1``), instead
of a regex that would get one of those wrong.
"""

from __future__ import annotations

import hostlist


class HostlistError(ValueError):
    """A hostlist expression that Slurm itself would reject."""


def expand(expression: str) -> list[str]:
    """All host names of ``expression``, in Slurm's order, zero padding kept."""
    if not expression.strip():
        raise HostlistError("empty hostlist")
    try:
        hosts = hostlist.expand_hostlist(expression)
    except hostlist.BadHostlist as error:
        raise HostlistError(f"{expression!r} is not a valid Slurm hostlist ({error})") from error
    if not hosts:
        raise HostlistError(f"{expression!r} names no host")
    return hosts


def expand_tasks_per_node(expression: str) -> list[int]:
    """Expand Slurm's ``SLURM_TASKS_PER_NODE`` format: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    try:
        return hostlist.parse_slurm_tasks_per_node(expression.strip())
    except hostlist.BadHostlist as error:
        raise HostlistError(
            f"{expression!r} is not in Slurm's tasks-per-node format, e.g. '2(x3),1' ({error})"
        ) from None
