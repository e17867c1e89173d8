"""Slurm hostlist expressions (``gpu-[01-03,07],login5``) to host names, and task counts per node.

Parsing is delegated to python-hostlist, a maintained implementation of the full Slurm
grammar (several bracket groups per name, zero padding, nested commas, ``2(x3),1``), instead
of a regex that would get one of those wrong.
"""

from __future__ import annotations

import math
import re

import hostlist

# More nodes than any Slurm cluster has: an expression naming more is a mistake, and expanding
# it (a few lines can name millions of hosts) would take seconds and gigabytes.
MAX_HOSTS = 50_000
_GROUP = re.compile(r"\[([^\]]*)\]")
_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


class HostlistError(ValueError):
    """A hostlist expression that Slurm itself would reject."""


def expand(expression: str) -> list[str]:
    """All host names of ``expression``, in Slurm's order, zero padding kept."""
    if not expression.strip():
        raise HostlistError("empty hostlist")
    if (count := _count(expression)) > MAX_HOSTS:
        shown = expression if len(expression) <= 80 else expression[:77] + "..."
        raise HostlistError(f"{shown!r} names {count} hosts, more than the {MAX_HOSTS} any cluster has")
    try:
        hosts = hostlist.expand_hostlist(expression)
    except hostlist.BadHostlist as error:
        raise HostlistError(f"{expression!r} is not a valid Slurm hostlist ({error})") from error
    if not hosts:
        raise HostlistError(f"{expression!r} names no host")
    return hosts


def _count(expression: str) -> int:
    """An upper bound of the hosts ``expression`` names, without naming them."""
    total, depth, start = 0, 0, 0
    for index, char in enumerate(expression + ","):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            total += _count_part(expression[start:index])
            start = index + 1
    return total


def _count_part(part: str) -> int:
    return math.prod(
        sum(
            max(1, int(m[2]) - int(m[1]) + 1) if (m := _RANGE.match(item)) else 1 for item in group.split(",")
        )
        for group in _GROUP.findall(part)
    )


def expand_tasks_per_node(expression: str) -> list[int]:
    """Expand Slurm's ``SLURM_TASKS_PER_NODE`` format: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    try:
        return hostlist.parse_slurm_tasks_per_node(expression.strip())
    except hostlist.BadHostlist as error:
        raise HostlistError(
            f"{expression!r} is not in Slurm's tasks-per-node format, e.g. '2(x3),1' ({error})"
        ) from None
