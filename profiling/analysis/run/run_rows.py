"""The run map's rows grouped by pipeline stage, then data-parallel replica, where the job has a
layout: a slow stage is a band of rows, not stripes scattered over the map.

The layout is known before any trace is read (the map is drawn while they are): the report's
``--layout``, else the toolkit's own ``--parallel`` job as its manifest records it, laid out as
the job built its DeviceMesh (:func:`slurm.common.mesh.mesh_dims`). Without either the rows stay in
rank order. Only the drawing is reordered: the run's analysis (segments, slow nodes) reads the
map in rank order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from profiling.analysis.run.run_map import RunMap
from profiling.schema.manifest import Manifest
from slurm.common.mesh import DATA, PIPELINE, Dims, coordinates, layout_size, mesh_dims

STAGE, REPLICA = PIPELINE, DATA  # the bands: stages, and within each, its data-parallel replicas
Mesh = Mapping[int, Mapping[str, int]]  # rank -> its coordinates


@dataclasses.dataclass(frozen=True)
class Band:
    """Rows ``first`` to ``end`` (exclusive) of the drawn map: one stage, or one replica in it."""

    dim: str  # STAGE or REPLICA
    index: int  # the coordinate the band's ranks share
    first: int
    end: int

    @property
    def is_stage(self) -> bool:
        return self.dim == STAGE

    @property
    def label(self) -> str:
        return f"stage {self.index}" if self.dim == STAGE else f"dp {self.index}"


def manifest_layout(value: object) -> Dims | None:
    """The manifest's ``workload.parallel`` as dimensions: a list of [name, size] pairs, each
    name an identifier and each size from 1 to 2**31; None for anything else (untyped JSON: a
    damaged or hand-written manifest's ``5`` or ``"dp=2"``)."""
    if not isinstance(value, list) or not value:
        return None
    dims = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2):
            return None
        name, size = pair
        if not (isinstance(name, str) and name.isidentifier() and type(size) is int and 1 <= size < 1 << 31):
            return None
        dims.append((name, size))
    return tuple(dims) if len(dict(dims)) == len(dims) else None


def run_mesh(layout: Dims | None, manifest: Manifest | None) -> dict[int, dict[str, int]]:
    """Each rank's coordinates as the map can know them before the traces are read; empty where
    the job has no layout, or one that does not make its world size."""
    parallel = manifest_layout(manifest.workload.get("parallel")) if manifest else None
    dims = layout or (mesh_dims(parallel) if parallel else None)
    world = (manifest.world_size or len(manifest.ranks) or None) if manifest else None
    # a layout must make the world it is of: one of 20 million ranks in a 2-rank job is damage
    # (its coordinates took 5.7 GB); a manifest's with no world to check it against is not used
    if not dims or (world is None and not layout) or (world is not None and layout_size(dims) != world):
        return {}
    return {rank: coordinates(rank, dims) for rank in range(layout_size(dims))}


def grouped(run: RunMap, mesh: Mesh) -> tuple[RunMap, list[Band]]:
    """The map with its rows by stage, replica and the other coordinates (each rank after the
    ones it shares them with), and the bands of stages and replicas; ``run`` itself, no bands,
    where no rank of it has a stage or a replica."""
    keys = [_key(mesh.get(int(rank)) or {}) for rank in run.ranks]
    if not any(key[0] >= 0 or key[1] >= 0 for key in keys):
        return run, []
    order = np.array(sorted(range(len(keys)), key=lambda row: (keys[row], int(run.ranks[row]))), dtype=int)
    memory = run.memory
    drawn = dataclasses.replace(
        run,
        ranks=run.ranks[order],
        nodes=[run.nodes[row] for row in order],
        values=run.values[order],
        row_medians={name: medians[order] for name, medians in run.row_medians.items()},
        last_step=run.last_step[order],
        memory=dataclasses.replace(
            memory, peak=memory.peak[order], growth=[memory.growth[row] for row in order]
        )
        if memory is not None
        else None,
    )
    stages = [keys[row][0] for row in order]
    replicas = [keys[row][1] for row in order]
    return drawn, [
        *_bands(STAGE, stages, stages),
        *_bands(REPLICA, [keys[row][:2] for row in order], replicas),
    ]


def node_bands(bands: list[Band], nodes: list[str], names: list[str]) -> list[Band]:
    """The stage bands of a map drawn a row per node (``names``, in the order drawn; ``nodes``:
    each rank row's node): where every node holds one stage's ranks, else none."""
    stage_of: dict[str, set[int]] = {}
    for band in (b for b in bands if b.dim == STAGE):
        for node in nodes[band.first : band.end]:
            stage_of.setdefault(node, set()).add(band.index)
    if not stage_of or any(len(stage_of.get(name, ())) != 1 for name in names):
        return []
    stages = [next(iter(stage_of[name])) for name in names]
    return _bands(STAGE, stages, stages)


def _key(where: Mapping[str, int]) -> tuple[int, ...]:
    """(stage, replica, the other coordinates in their order); -1 where the job has none."""
    rest = tuple(index for dim, index in where.items() if dim not in (STAGE, REPLICA))
    return (where.get(STAGE, -1), where.get(REPLICA, -1), *rest)


def _bands(dim: str, runs: Sequence[Hashable], indexes: Sequence[int]) -> list[Band]:
    """A band per run of rows with equal ``runs``, named by the row's ``indexes``, where there
    are two runs or more and each has a coordinate."""
    bands: list[Band] = []
    for row, run in enumerate(runs):
        if bands and runs[bands[-1].first] == run:
            bands[-1] = dataclasses.replace(bands[-1], end=row + 1)
        else:
            bands.append(Band(dim, indexes[row], row, row + 1))
    return bands if len(bands) > 1 and all(b.index >= 0 for b in bands) else []
