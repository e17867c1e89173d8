"""The job's layout: its parallel dimensions (data, pipeline, tensor...) and each rank's place
in them, from the DeviceMesh groups its traces name (:mod:`profiling.analysis.per_trace.groups`),
or, where they name none, from ``--layout dp=4,pp=4,tp=4``.

A DeviceMesh makes, for each dimension, the groups of ranks that differ in that coordinate
alone, each listing its ranks in mesh order: a rank's coordinate in a dimension is its place
in its group of that dimension. The dimensions are ordered outermost first, by the stride
between neighbours in their groups (torchtitan's order, ``pp, dp, tp``, where ranks are laid
out so). With ``--layout`` the dimensions are as given, outermost first, the last varying
fastest: rank = the coordinates read as a number in those sizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from profiling.analysis.per_trace.groups import Group
from profiling.schema import model
from slurm.common.mesh import Dims, coordinates, layout_size, layout_text


def job_layout(
    groups: Mapping[int, Sequence[Group]], ranks: Sequence[int], world_size: int | None, given: Dims | None
) -> tuple[model.Layout | None, dict[int, dict[str, int]], list[str]]:
    """The layout (None for one flat group), each rank's coordinates, and lines for what did
    not hold (a ``--layout`` whose product is not the world size, mesh groups that disagree)."""
    world = world_size or (max(ranks) + 1 if ranks else 0)
    if given:
        size = layout_size(given)
        if size != world:
            return (
                None,
                {},
                [f"--layout {layout_text(given)} makes {size} ranks, the job has {world}: not used"],
            )
        return (
            model.Layout(dims=dict(given), source="--layout", groups=[]),
            {rank: coordinates(rank, given) for rank in ranks},
            [],
        )
    return _from_groups(groups, ranks)


def _from_groups(
    groups: Mapping[int, Sequence[Group]], ranks: Sequence[int]
) -> tuple[model.Layout | None, dict[int, dict[str, int]], list[str]]:
    by_dim: dict[str, set[tuple[int, ...]]] = {}
    for found in groups.values():
        for group in found:
            if group.mesh_dim is not None:
                by_dim.setdefault(group.mesh_dim, set()).add(group.ranks)
    if not by_dim:
        return None, {}, []
    coordinates: dict[int, dict[str, int]] = {rank: {} for rank in ranks}
    sizes: dict[str, int] = {}
    strides: dict[str, int] = {}
    for dim, members in by_dim.items():
        lengths = {len(m) for m in members}
        flat = [r for m in members for r in m]
        if len(lengths) != 1 or len(flat) != len(set(flat)):
            return None, {}, [f"the traces' mesh_{dim} groups do not split the ranks evenly: no layout"]
        sizes[dim] = lengths.pop()
        strides[dim] = min((abs(m[1] - m[0]) for m in members if len(m) > 1), default=0)
        for m in members:
            for index, rank in enumerate(m):
                if rank in coordinates:
                    coordinates[rank][dim] = index
    order = sorted(sizes, key=lambda dim: -strides[dim])
    missing = [rank for rank, where in coordinates.items() if len(where) != len(order)]
    said = [f"rank(s) {missing[:8]} are in no mesh group of some dimension"] if missing else []
    layout = model.Layout(
        dims={dim: sizes[dim] for dim in order},
        source="the traces' DeviceMesh groups",
        groups=sorted(f"mesh_{dim}" for dim in order),
    )
    return (
        layout,
        {rank: {dim: where[dim] for dim in order if dim in where} for rank, where in coordinates.items()},
        said,
    )
