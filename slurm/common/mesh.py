"""A job's parallel layout as people write it, ``dp=2,pp=2,tp=2``: its dimensions, outermost
first, the last varying fastest, and each rank's coordinates in them. The job's own
``--parallel`` and the report's ``--layout`` both read it here. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from slurm.common.errors import SettingError

Dims = tuple[tuple[str, int], ...]  # (dimension, size), outermost first
PIPELINE, DATA, TENSOR = "pp", "dp", "tp"  # the dimensions as DeviceMesh names them (mesh_pp, ...)
MESH_ORDER = (PIPELINE, DATA, TENSOR)  # the toolkit's --parallel mesh, outermost first (torchtitan's)


class LayoutError(SettingError):
    """A layout that is not ``DIM=SIZE,...``, or is none of the job's; the message says why."""


def parse_layout(text: str, option: str = "--layout") -> Dims:
    """``"dp=4,pp=4,tp=4"`` as its dimensions; raises :class:`LayoutError` naming the mistake."""
    dims: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",")):
        name, _, size = part.partition("=")
        if not name.isidentifier() or not size.strip().isdigit() or int(size) < 1:
            raise LayoutError(
                f"{option} {text!r}: {part!r} is not DIM=SIZE. HINT: {option} dp=4,pp=4,tp=4 (sizes >= 1)"
            )
        if name in dict(dims):
            raise LayoutError(f"{option} {text!r} names {name} twice. HINT: each dimension once")
        dims.append((name, int(size)))
    return tuple(dims)


def layout_text(dims: Dims) -> str:
    return ",".join(f"{name}={size}" for name, size in dims)


def layout_size(dims: Dims) -> int:
    return math.prod(size for _, size in dims)


def mesh_dims(dims: Dims) -> Dims:
    """The DeviceMesh the toolkit's ``--parallel`` job builds of ``dims``, however they were
    written: :data:`MESH_ORDER`, dimensions of size 1 left out (``dp`` kept where all are)."""
    sizes = dict(dims)
    kept = tuple((name, sizes[name]) for name in MESH_ORDER if sizes.get(name, 1) > 1)
    return kept or (("dp", sizes.get("dp", 1)),)


def coordinates(rank: int, dims: Dims) -> dict[str, int]:
    """``rank``'s place in ``dims``: the rank read as a number whose digits are the coordinates."""
    found: dict[str, int] = {}
    for name, size in reversed(dims):
        rank, found[name] = divmod(rank, size)
    return {name: found[name] for name, _ in dims}


def rank_at(where: Mapping[str, int], dims: Dims) -> int:
    """The rank at coordinates ``where``: the inverse of :func:`coordinates`."""
    rank = 0
    for name, size in dims:
        rank = rank * size + where[name]
    return rank


def stages_of(mesh: Mapping[int, Mapping[str, int]]) -> dict[int, int]:
    """Each rank's pipeline stage, for the ranks of ``mesh`` that have one."""
    return {rank: where[PIPELINE] for rank, where in mesh.items() if PIPELINE in where}


def named(rank: int, mesh: Mapping[str, int] | None) -> str:
    """``rank 13 (dp 1, pp 3, tp 1)``, or ``rank 13`` without a layout."""
    return f"rank {rank} ({', '.join(f'{d} {i}' for d, i in mesh.items())})" if mesh else f"rank {rank}"
