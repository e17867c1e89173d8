"""What a workload is to the toolkit: a factory, named ``MODULE:FACTORY`` (``--workload``), that
the toolkit calls once per rank with a :class:`WorkloadContext`, and that returns a
:class:`Workload`, whose ``step`` the toolkit calls once per training step.

The tutorial's ResNet18 (:mod:`workload.resnet18`) is the default, written against this same
contract. The module must be importable where the tasks start: they start in the folder
``submit.py`` (or ``sbatch``) was run from, which Python puts first on the path of
``python -m``, and they inherit ``PYTHONPATH``. Before anything is submitted,
:func:`check_factory` finds the module on that path and the factory in its source without
importing either (the login node stays fast and torch-free); each rank then imports it
(:func:`load_factory`). Torch-free.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from workload.config import WorkloadConfig, WorkloadError, split

if TYPE_CHECKING:
    import torch

    from slurm.identity import DistributedIdentity

_NOT_CALLABLE = (
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.Set,
    ast.JoinedStr,
    ast.ListComp,
    ast.DictComp,
)


@dataclasses.dataclass(frozen=True)
class WorkloadContext:
    """What a factory is given, on every rank, once the job's process group is up."""

    device: torch.device  # cuda:<local rank> under NCCL, else the CPU
    dtype: str  # "bf16", "fp16" or "fp32": --dtype, chosen for the device
    identity: DistributedIdentity  # rank, local rank, world size, node: from SLURM's variables
    process_group: Any  # the job's default group (torch.distributed), already made
    args: Mapping[str, str]  # --workload-arg KEY=VALUE
    settings: WorkloadConfig  # the run's settings: steps, batch size, image size, seed...
    log: Callable[[str], None]  # a line to the job's output (rank 0's is shown by --wait)


@runtime_checkable
class Workload(Protocol):
    """One rank's training. ``step`` runs training step ``step`` (the toolkit times and profiles
    it, and marks its end) and may return its loss; ``state_dict`` / ``load_state_dict`` are
    what a requeued job resumes from, as torch's modules and optimizers spell them.

    Optional: ``replicated = True`` where every rank holds the same state (DDP's weights): rank
    0 alone saves it, and every rank loads that. Otherwise every rank saves and loads its own.
    """

    def step(self, step: int) -> float | None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def check_factory(spec: str, search: list[str] | None = None) -> None:
    """Refuse a factory the tasks could not import, without importing it: its module must be on
    ``search`` (default: this folder, then ``sys.path``, which holds ``PYTHONPATH``), and bind the
    factory's name at its top level to something callable."""
    module, factory = split(spec)
    found = _find(module, search if search is not None else [os.getcwd(), *sys.path])
    if found is None:
        raise WorkloadError(
            f"{{factory}} {spec!r}: no module {module} in {os.getcwd()} (where the tasks start) or on "
            f"PYTHONPATH. HINT: run submit.py from the folder that holds {module.split('.')[0]}, or add "
            "the folder above it to PYTHONPATH"
        )
    if found.suffix != ".py":  # compiled, or a namespace: only importing it can tell
        return
    binding = _top_level(ast.parse(found.read_text(), str(found)), factory)
    if binding is None:
        raise WorkloadError(
            f"{{factory}} {spec!r}: {found} defines no {factory}. HINT: name a function of {module} "
            "that returns the workload"
        )
    if isinstance(binding, _NOT_CALLABLE):
        raise WorkloadError(
            f"{{factory}} {spec!r}: {module}.{factory} is a {type(binding).__name__.lower()}, not a "
            "function. HINT: name a function that returns the workload"
        )


def load_factory(spec: str) -> Callable[[WorkloadContext], Workload]:
    """Import the factory, on a rank; one line naming what is wrong where it cannot be."""
    module_name, factory = split(spec)
    folder = os.getcwd()
    if folder not in sys.path:  # python -m puts it there; other launchers may not
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise WorkloadError(
            f"{{factory}} {spec!r}: cannot import {module_name} in {folder} ({error}). HINT: start the "
            "job from the folder that holds it, or add its parent folder to PYTHONPATH"
        ) from None
    built = getattr(module, factory, None)
    if not callable(built):
        raise WorkloadError(
            f"{{factory}} {spec!r}: {module_name}.{factory} is "
            f"{'missing' if built is None else 'not callable'}. "
            "HINT: name a function that returns the workload"
        )
    return built


def make_workload(spec: str, context: WorkloadContext) -> Workload:
    """The rank's workload, checked against the contract."""
    workload = load_factory(spec)(context)
    missing = [
        name
        for name in ("step", "state_dict", "load_state_dict")
        if not callable(getattr(workload, name, None))
    ]
    if missing:
        raise WorkloadError(
            f"{{factory}} {spec!r} returned a {type(workload).__name__} without {', '.join(missing)}. "
            "HINT: return an object with step(step), state_dict() and load_state_dict(state)"
        )
    return workload


def _find(module: str, search: list[str]) -> Path | None:
    """The file ``module`` would be imported from, looking in ``search`` (and, for a package,
    its own path), importing nothing but its parent packages."""
    saved = sys.path
    try:
        sys.path = list(dict.fromkeys(search))
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    finally:
        sys.path = saved
    if spec is None:
        return None
    return Path(spec.origin) if spec.origin and spec.origin not in ("built-in", "frozen") else Path(module)


def _top_level(tree: ast.Module, name: str) -> ast.AST | None:
    """What the module's top level binds ``name`` to: a def or class, an assigned value, an import."""
    found: ast.AST | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            found = node
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            found = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            found = node.value or node
        elif isinstance(node, ast.Import | ast.ImportFrom) and any(
            (alias.asname or alias.name.split(".")[0]) == name for alias in node.names
        ):
            found = node
    return found
