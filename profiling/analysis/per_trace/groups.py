"""The process groups one trace names: ``distributedInfo.pg_config``, as torch's profiler writes it
(``torch/profiler/profiler.py`` ``_get_distributed_info``: each group's ``pg_name``, ``pg_desc``,
``pg_size`` and ``ranks``, from ``distributed_c10d._get_all_pg_configs``). A DeviceMesh names
the groups of each of its dimensions ``mesh_<dim>`` (``torch/distributed/device_mesh.py``):
``mesh_dp``, ``mesh_pp``, ``mesh_tp``; the job's layout is made of those
(:mod:`profiling.analysis.across_ranks.mesh_from_groups`)."""

from __future__ import annotations

from typing import Any

import msgspec

MESH_PREFIX = "mesh_"
_MAX_RANKS = 1 << 24  # more ranks than any job has: a group of more is a damaged trace


class Group(msgspec.Struct, frozen=True, array_like=True):
    name: str  # pg_name: "0" for the default group, then its own
    description: str  # pg_desc: "default_pg", "mesh_tp", ...
    ranks: tuple[int, ...]  # global ranks, in the group's own order

    @property
    def mesh_dim(self) -> str | None:
        """The DeviceMesh dimension this group is one of, where its description names one."""
        if self.description.startswith(MESH_PREFIX) and len(self.description) > len(MESH_PREFIX):
            dim = self.description[len(MESH_PREFIX) :]
            return dim if dim != "default" else None
        return None


def trace_groups(distributed_info: dict[str, Any]) -> tuple[list[Group], list[str]]:
    """The groups a trace's ``distributedInfo`` lists but the whole job's (every rank, in order:
    the default group, which a collective of no known group is taken to be; kept, at thousands
    of ranks every record would carry the job's every rank), and a line for each it lists that
    is no group (ranks that are not distinct whole numbers, a size they do not have)."""
    configs = distributed_info.get("pg_config")
    if isinstance(configs, dict):  # torch 2.1-2.3 wrote them keyed by name
        configs = [{"pg_name": name, **c} for name, c in configs.items() if isinstance(c, dict)]
    if not isinstance(configs, list):
        return [], []
    world = distributed_info.get("world_size")
    found, said = [], []
    for config in configs:
        group = _group(config)
        if group is None:
            said.append(f"a process group of distributedInfo.pg_config is none: {str(config)[:120]}")
        elif not _whole(group.ranks, world):
            found.append(group)
    return found, said


def _whole(ranks: tuple[int, ...], world: Any) -> bool:
    return isinstance(world, int) and len(ranks) == world and ranks == tuple(range(world))


def _group(config: Any) -> Group | None:
    if not isinstance(config, dict):
        return None
    ranks = config.get("ranks")
    if not isinstance(ranks, list) or not ranks:
        return None
    if not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < _MAX_RANKS for r in ranks):
        return None
    size = config.get("pg_size", len(ranks))
    if len(set(ranks)) != len(ranks) or size != len(ranks):
        return None
    return Group(str(config.get("pg_name", "")), str(config.get("pg_desc", "")), tuple(ranks))
